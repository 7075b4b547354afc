// Saving on preemption (TF's tf.distribute.experimental.PreemptionCheckpointHandler).
//
// Cluster schedulers (Slurm, Kubernetes, cloud spot instances) announce a
// preemption with SIGTERM and kill the process some seconds later. A
// PreemptionCheckpointHandler turns that SIGTERM, sent to any one worker,
// into one checkpoint that every worker saves at the same step, and then an
// exit with a restart code (42 by default, as TF's), so that rerunning the
// same command resumes from that step:
//
//   MultiWorkerMirroredStrategy strategy;
//   StrategyScope scope = strategy.scope();
//   ... variables, a distributed iterator `it` ...
//   Checkpoint ckpt;
//   ckpt.track("model/w", w);
//   ckpt.track("iterator", it);
//   PreemptionCheckpointHandler handler(ckpt, "/ckpt");   // restores the latest checkpoint there, if any
//   for (std::int64_t step = handler.total_run_calls(); step < steps; ++step) {
//     handler.run([&] { return strategy.run(train_step, it.get_next()); });
//   }
//
// - Construction restores the latest checkpoint of `checkpoint_dir`, if there
//   is one (the directory is created when missing), and from then on watches
//   for SIGTERM (the previous SIGTERM disposition comes back when the handler
//   is destroyed; one handler at a time watches the signal).
// - run(fn, args...) calls fn(args...) -- a whole distributed step, which
//   itself calls strategy.run, not a replica function -- counts the call
//   (total_run_calls(), saved in the checkpoint as "checkpointed_runs") and
//   then does what save_checkpoint_if_preempted() does.
// - save_checkpoint_if_preempted(): the workers agree whether any of them was
//   told to stop (with several workers, a one-element all_reduce among them,
//   at the same call on every worker: every worker must make the same
//   sequence of calls); if one was, every worker saves the checkpoint (a
//   collective save: the chief writes the file atomically, so a kill during
//   it leaves the previous checkpoint) and calls the exit function. Call it
//   at a point where everything the checkpoint tracks is consistent.
// - The bound: a SIGTERM received while a step runs takes effect after that
//   step, plus one small collective and one checkpoint save; one received
//   between calls, at the next call. SIGTERM no longer ends the process
//   while the handler lives: a program that stops calling run() (and
//   save_checkpoint_if_preempted()) is ended by the scheduler's SIGKILL.
// - The checkpoint directory must be the same directory on every worker (a
//   shared file system): the chief writes there, and every worker restores
//   from there.
// - The exit function (TerminationConfig::exit_fn) defaults to
//   std::exit(exit_code), as TF's sys.exit(42): static destructors run (MPI
//   is finalized) but the stack is not unwound. A C++ program that prefers
//   to unwind sets exit_fn to throw its own exception and returns the code
//   from main (tools/train does).
//
// Errors: InvalidArgumentError when the checkpoint already tracks
// "checkpointed_runs" or the directory name is empty; FailedPreconditionError
// when another handler watches SIGTERM, when the directory cannot be created,
// or when the handler is used inside a replica function; the errors of
// Checkpoint::restore and Checkpoint::save otherwise.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>

namespace distribute {

class Checkpoint;
class Strategy;

// TF's tf.distribute.experimental.TerminationConfig.
struct TerminationConfig {
  // Returns true once this worker is to stop. Called on the thread that
  // calls run(), once per call; must be cheap and must not block. Empty:
  // "a SIGTERM has been received" (the handler installs a SIGTERM handler).
  std::function<bool()> termination_watcher_fn;
  // Called on every worker after the checkpoint is saved. Empty:
  // std::exit(exit_code). An exit function that returns lets the training
  // go on (the SIGTERM is then forgotten: another one saves again).
  std::function<void()> exit_fn;
  // The default exit function's status (TF's restart code).
  int exit_code = 42;
};

// What construction restores: the latest checkpoint of the directory (TF's
// behaviour), or nothing (a program that restores by its own rule, e.g. only
// when asked to resume; it then restores after constructing the handler, so
// that the handler's count is restored with the rest).
enum class InitialRestore { kLatest, kNone };

class PreemptionCheckpointHandler {
 public:
  // Uses the current strategy (get_strategy(): construct it inside the
  // strategy's scope), which must outlive the handler, as must `checkpoint`.
  PreemptionCheckpointHandler(Checkpoint& checkpoint, std::string checkpoint_dir, TerminationConfig config = {},
                              InitialRestore restore = InitialRestore::kLatest);
  ~PreemptionCheckpointHandler();
  PreemptionCheckpointHandler(const PreemptionCheckpointHandler&) = delete;
  PreemptionCheckpointHandler& operator=(const PreemptionCheckpointHandler&) = delete;

  // Calls fn(args...), counts the call, then save_checkpoint_if_preempted().
  // Returns fn's result. An exception from fn propagates (the call is not
  // counted and nothing is saved).
  template <class F, class... Args>
  decltype(auto) run(F&& fn, Args&&... args) {
    if constexpr (std::is_void_v<std::invoke_result_t<F, Args...>>) {
      std::invoke(std::forward<F>(fn), std::forward<Args>(args)...);
      ++run_calls_;
      save_checkpoint_if_preempted();
    } else {
      auto result = std::invoke(std::forward<F>(fn), std::forward<Args>(args)...);
      ++run_calls_;
      save_checkpoint_if_preempted();
      return result;
    }
  }

  // See the header comment. Returns when no worker was told to stop.
  void save_checkpoint_if_preempted();

  // Calls of run() so far, counting those of the run that saved the restored
  // checkpoint (TF's total_run_calls).
  std::int64_t total_run_calls() const noexcept { return run_calls_; }

  // The checkpoint restored at construction ("" when none was found).
  const std::string& restored_from() const noexcept { return restored_from_; }

 private:
  Checkpoint* checkpoint_;
  Strategy* strategy_;
  std::string directory_;
  TerminationConfig config_;
  std::int64_t run_calls_ = 0;
  std::string restored_from_;
  bool watching_signal_ = false;
};

}  // namespace distribute
