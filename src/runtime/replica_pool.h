// ReplicaPool: the persistent threads that execute a strategy's replicas.
//
// Replica 0 runs on the thread that calls run(); replicas 1..N-1 each have a
// thread of their own, started when the pool is built and joined when it is
// destroyed (no thread is created per call). A call publishes the task by
// bumping a generation word; each replica thread spins on it, then sleeps
// (see spin_wait.h), spinning for as long as the recent gaps between runs
// lasted, up to 500 us (see IdleSpin below; DISTRIBUTE_IDLE_SPIN_US sets the
// bound). Completion is a countdown the caller waits on the same way, with
// the base window. A child forked without exec must not destroy a pool of
// its parent's: the strategy that owns it leaves it there (Strategy's
// destructor; distribute/internal/owner_process.h).
//
// With fibers (ReplicaExecution::FIBERS) and more replicas than cores, the
// pool runs one thread per core instead, the caller's among them, and
// replica r runs as a fiber on thread r % threads (runtime/fiber.h).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distribute/internal/function_ref.h"
#include "runtime/fiber.h"
#include "runtime/spin_wait.h"

namespace distribute::internal {

// How long an idle replica thread spins for the next run before it sleeps.
// Waking a sleeping thread costs 20-25 us here (and milliseconds when the
// virtual machine has descheduled the idle core), so a training loop whose
// caller works between runs for longer than the ordinary spin window (an
// epoch's evaluation, the Python code of a step) would pay a wake-up at the
// start of the next run, while its replica 0 waits for the others at the
// first collective. The window covers the longest of the last kHistory idle
// gaps that were not longer than `max`, with half of it again as margin, and
// is itself at most `max`. The part beyond the base window yields the core
// on every round (SpinPolicy::yield_after), and runs only if, when the base
// window ends, every runnable thread of the machine has a CPU (otherwise the
// spin would keep one from a thread that waits for it: another process, or
// the caller queued behind one; the answer is at most kRecheckEvery old);
// it ends as soon as one yield kept the thread off its core for more than
// SpinPolicy::kYieldedAway. A longer gap sleeps once the window has passed
// (a whole window when shorter gaps came before it). A pool whose threads
// outnumber the cores (base.yield) keeps the base window, as does a `max`
// no longer than the base window (0, say).
class IdleSpin {
 public:
  static constexpr std::chrono::microseconds kDefaultMax{500};
  static constexpr std::size_t kHistory = 16;

  explicit IdleSpin(SpinPolicy base, std::chrono::microseconds max = kDefaultMax) : base_(base), max_(max) {}

  // The policy of the next idle wait.
  SpinPolicy policy() const noexcept;
  // The hook of the windows past the base one (SpinPolicy::may_keep_spinning):
  // runnable_threads_fit_cpus() (runtime/cpu_count.h), read at most every
  // kRecheckEvery per thread: the read costs about 10 us of system calls,
  // and a busy machine stays busy for longer than that.
  static bool runnable_threads_fit_cpus_lately() noexcept;
  static constexpr std::chrono::milliseconds kRecheckEvery{10};
  // Records how long an idle wait lasted.
  void record(std::chrono::nanoseconds gap) noexcept;

 private:
  SpinPolicy base_;
  std::chrono::nanoseconds max_;
  std::array<std::chrono::nanoseconds, kHistory> gaps_{};  // a gap not seen yet is 0: adds nothing to the max
  std::size_t next_ = 0;
};

// The bound of IdleSpin's window: DISTRIBUTE_IDLE_SPIN_US (microseconds, 0 to
// 1000000; up to 50 keeps every idle wait at the base window; unset or
// empty: IdleSpin::kDefaultMax). Read by every pool with more than one
// replica and by MultiWorkerMirroredStrategy(options) before its start-up
// exchange; once valid it is kept. Another value raises InvalidArgumentError
// naming the variable (parse_idle_spin_us: the value, or nullptr when unset)
// at each of those reads.
std::chrono::microseconds idle_spin_max();
std::chrono::microseconds parse_idle_spin_us(const char* env);

class ReplicaPool {
 public:
  // Starts num_replicas - 1 threads, named "<name_prefix><r>"; with
  // `fibers` and more replicas than usable cores, one thread per core
  // (fewer, named by their first replica) running the replicas as fibers.
  ReplicaPool(int num_replicas, const std::string& name_prefix, bool fibers = false);
  ~ReplicaPool();
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  int num_replicas() const noexcept { return num_replicas_; }
  // The threads that run replicas, the caller's included.
  int num_threads() const noexcept { return static_cast<int>(threads_.size()) + 1; }
  bool uses_fibers() const noexcept { return !fiber_threads_.empty(); }

  // Calls task(r) for every r in [0, num_replicas) concurrently (with
  // fibers: the replicas of a thread one at a time, switching in waits) and returns
  // when all calls have returned. task must not throw (callers catch inside
  // it). Calls from several threads are serialized. A task may call run() on
  // its own pool only when the pool has one replica (it then runs inline);
  // callers reject the other nested cases before they get here. Everything the
  // caller did before run() is visible to every task(r); everything each
  // task(r) did is visible to the caller after run() returns.
  // `prologue` runs first and `epilogue` after every task(r) returned, both
  // under the same serialization (e.g. to reset per-run state that replicas
  // share, and to read it before the next run can reset it).
  // While the caller waits for the other replicas, the calling thread's
  // interrupt check (distribute/interrupt.h) is polled; when it throws,
  // `interrupted` gets the exception (e.g. to abort the replicas'
  // collectives) and the wait goes on, without checks, until every task(r)
  // returned. `interrupted` must not throw.
  void run(FunctionRef<void(int)> task, FunctionRef<void()> prologue, FunctionRef<void()> epilogue,
           FunctionRef<void(std::exception_ptr)> interrupted);
  void run(FunctionRef<void(int)> task, FunctionRef<void()> prologue) {
    run(task, prologue, [] {}, [](std::exception_ptr) {});
  }

 private:
  void worker_loop(int thread);
  void wait_for_replicas(FunctionRef<void(std::exception_ptr)> interrupted);

  const int num_replicas_;
  const std::chrono::microseconds idle_max_;  // IdleSpin's bound
  SpinPolicy policy_;
  std::mutex run_mutex_;  // one run() at a time
  // The thread inside run() (holding run_mutex_), for nested calls of a
  // one-replica pool.
  std::atomic<std::thread::id> owner_{};
  // Written by the caller before bumping generation_, read by workers after
  // seeing the bump.
  FunctionRef<void(int)>* task_ = nullptr;
  bool stopping_ = false;
  alignas(64) WaitWord generation_;
  alignas(64) WaitWord remaining_;
  std::vector<std::thread> threads_;
  // With fibers: the replicas of thread t (0: the caller's), else empty.
  std::vector<std::unique_ptr<FiberThread>> fiber_threads_;
};

}  // namespace distribute::internal
