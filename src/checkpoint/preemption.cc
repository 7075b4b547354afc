// PreemptionCheckpointHandler: see include/distribute/preemption.h.
#include "distribute/preemption.h"

#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <system_error>

#include "distribute/checkpoint.h"
#include "distribute/errors.h"
#include "distribute/replica_context.h"
#include "distribute/strategy.h"
#include "strategy/context.h"

namespace distribute {
namespace {

constexpr const char* kRunCallsName = "checkpointed_runs";

// The SIGTERM watch: one handler at a time owns it. The signal handler only
// stores to a lock-free atomic (async-signal-safe).
std::atomic<bool> g_watch_owned{false};
std::atomic<bool> g_sigterm{false};
static_assert(std::atomic<bool>::is_always_lock_free);
struct sigaction g_previous {};

extern "C" void on_sigterm(int) { g_sigterm.store(true, std::memory_order_relaxed); }

void require_cross_replica(const char* method) {
  const internal::ThreadMode* mode = internal::current_mode();
  if (mode != nullptr && mode->replica != nullptr) {
    throw FailedPreconditionError(std::string("PreemptionCheckpointHandler::") + method +
                                  ": expected a call in cross-replica context (the training loop), got one inside a "
                                  "replica function; call it around strategy.run, not inside it");
  }
}

// Calls fn() inside `strategy`'s scope (the default strategy has none to
// enter).
template <class F>
void in_scope(Strategy& strategy, F&& fn) {
  if (strategy.is_default()) {
    fn();
    return;
  }
  StrategyScope scope = strategy.scope();
  fn();
}

}  // namespace

PreemptionCheckpointHandler::PreemptionCheckpointHandler(Checkpoint& checkpoint, std::string checkpoint_dir,
                                                         TerminationConfig config, InitialRestore restore)
    : checkpoint_(&checkpoint), strategy_(&get_strategy()), directory_(std::move(checkpoint_dir)),
      config_(std::move(config)) {
  require_cross_replica("PreemptionCheckpointHandler");
  if (directory_.empty()) {
    throw InvalidArgumentError("PreemptionCheckpointHandler: expected a checkpoint directory, got an empty name");
  }
  for (const std::string& name : checkpoint.tracked_names()) {
    if (name == kRunCallsName) {
      throw InvalidArgumentError(std::string("PreemptionCheckpointHandler: the checkpoint already tracks \"") +
                                 kRunCallsName + "\", the name under which the handler saves its count of run() "
                                 "calls; use one handler per checkpoint and another name for your own value");
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(directory_, ec);
  if (ec) {
    throw FailedPreconditionError("PreemptionCheckpointHandler: cannot create the checkpoint directory '" +
                                  directory_ + "': " + ec.message());
  }
  if (!config_.termination_watcher_fn) {
    bool expected = false;
    if (!g_watch_owned.compare_exchange_strong(expected, true)) {
      throw FailedPreconditionError(
          "PreemptionCheckpointHandler: another handler already watches SIGTERM in this process; destroy it first "
          "(or give this one a termination_watcher_fn)");
    }
    g_sigterm.store(false);
    struct sigaction action {};
    action.sa_handler = on_sigterm;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    if (::sigaction(SIGTERM, &action, &g_previous) != 0) {
      g_watch_owned.store(false);
      throw InternalError("PreemptionCheckpointHandler: sigaction(SIGTERM) failed");
    }
    watching_signal_ = true;
  }
  try {
    checkpoint.track(kRunCallsName, &run_calls_);
    std::optional<std::string> latest;
    if (restore == InitialRestore::kLatest) latest = latest_checkpoint(directory_, *strategy_);
    if (latest) {
      in_scope(*strategy_, [&] { checkpoint.restore(*latest); });
      restored_from_ = *latest;
    }
  } catch (...) {
    checkpoint.untrack(kRunCallsName);
    if (watching_signal_) {
      ::sigaction(SIGTERM, &g_previous, nullptr);
      g_watch_owned.store(false);
    }
    throw;
  }
}

PreemptionCheckpointHandler::~PreemptionCheckpointHandler() {
  checkpoint_->untrack(kRunCallsName);
  if (watching_signal_) {
    ::sigaction(SIGTERM, &g_previous, nullptr);
    g_watch_owned.store(false);
  }
}

void PreemptionCheckpointHandler::save_checkpoint_if_preempted() {
  require_cross_replica("save_checkpoint_if_preempted");
  const bool mine = config_.termination_watcher_fn ? config_.termination_watcher_fn()
                                                   : g_sigterm.load(std::memory_order_relaxed);
  bool stop = mine;
  if (strategy_->num_workers() > 1) {
    // Every worker makes this call at the same count: whether any of them
    // was told to stop, as a sum over the workers' replicas.
    const Tensor flag(static_cast<std::int32_t>(mine ? 1 : 0));
    in_scope(*strategy_, [&] {
      PerReplica<Tensor> sums =
          strategy_->run([&flag] { return current_replica_context().all_reduce(ReduceOp::SUM, flag); });
      stop = sums.primary().data<std::int32_t>()[0] > 0;
    });
  }
  if (!stop) return;
  if (watching_signal_) g_sigterm.store(false, std::memory_order_relaxed);  // (this handler owns the watch)
  in_scope(*strategy_, [&] { checkpoint_->save(directory_); });
  if (config_.exit_fn) {
    config_.exit_fn();
    return;
  }
  std::exit(config_.exit_code);
}

}  // namespace distribute
