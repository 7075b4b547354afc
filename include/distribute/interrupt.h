// Interrupting the library's waits: Ctrl-C, a signal, a user's stop button.
//
// A thread that installs a ScopedInterruptCheck makes its long waits in the
// library interruptible. While it waits (run() waiting for the replicas, a
// collective of the replica it runs, get_next() on a dataset or distributed
// iterator, a cross-worker exchange), the check is called about every
// `interval` of waiting. A check that returns lets the wait go on; an
// exception it throws ends the wait:
//   - in run(): the run's collectives are aborted with it (the other
//     replicas' waits raise CancelledError naming it, the other workers are
//     told, as when a replica fails), run() waits for the replica functions
//     to return (a replica busy computing is not stopped; it is cancelled at
//     its next collective) and rethrows the exception;
//   - in a collective: the collective raises it and aborts the group with it
//     (the same as a failure of that replica);
//   - in get_next(): it is raised with the iterator unchanged (the next call
//     goes on where this one stopped) when the wait is for the pipeline's
//     last transformation, a prefetch or a parallel map, or for a
//     distributed iterator's buffered steps; other waits inside a pipeline
//     (a prefetch followed by a batch, a distributed dataset with
//     experimental_per_replica_buffer_size 0) are not interrupted;
//   - in a cross-worker exchange: it is raised and the exchange is broken,
//     as at its deadline (the other workers' waits raise UnavailableError
//     or DeadlineExceededError). This includes a multi-worker
//     get_next()'s agreement on the step, which then loses the step (the
//     strategy cannot go on anyway).
// Once a check has thrown, the rest of that wait does not call it again
// (run() then waits for its replicas without further checks).
// Waits that do not return to the caller (the replica threads' own waits,
// a pipeline's background threads) do not call it. The check runs on the
// waiting thread. Checks nest (the innermost one applies) and belong to the
// thread that made them; a wait in progress when one is made is not
// affected.
//
// Example: stop a training step on SIGINT.
//   std::atomic<bool> stop{false};   // set by a signal handler
//   distribute::ScopedInterruptCheck interruptible([&] {
//     if (stop) throw distribute::CancelledError("interrupted by SIGINT");
//   });
//   strategy.run(step);  // raises CancelledError within about 50 ms of the signal
#pragma once

#include <chrono>
#include <functional>

namespace distribute {

class ScopedInterruptCheck {
 public:
  explicit ScopedInterruptCheck(std::function<void()> check,
                                std::chrono::milliseconds interval = std::chrono::milliseconds(50));
  ~ScopedInterruptCheck();
  ScopedInterruptCheck(const ScopedInterruptCheck&) = delete;
  ScopedInterruptCheck& operator=(const ScopedInterruptCheck&) = delete;

  // Calls the check (throws what it throws).
  void check() const { check_(); }
  std::chrono::milliseconds interval() const noexcept { return interval_; }

 private:
  std::function<void()> check_;
  std::chrono::milliseconds interval_;
  ScopedInterruptCheck* previous_;
};

}  // namespace distribute
