// Deadlines of the waits on other replicas and workers.
#pragma once

#include <chrono>

namespace distribute::internal {

using Clock = std::chrono::steady_clock;

// The time point `seconds` from now. Timeouts come from users as doubles: one
// too large for the clock (1e30, infinity) means "no deadline" and gives
// Clock::time_point::max() instead of overflowing the conversion. Callers
// validate `seconds > 0` themselves, naming their own option.
inline Clock::time_point deadline_after(double seconds) {
  const Clock::time_point now = Clock::now();
  const std::chrono::duration<double> wanted(seconds);
  const std::chrono::duration<double> room = Clock::time_point::max() - now;
  if (!(wanted < room)) return Clock::time_point::max();
  return now + std::chrono::duration_cast<Clock::duration>(wanted);
}

// `deadline` moved `later` on (later >= 0), saturating: "no deadline"
// (time_point::max()) stays so instead of overflowing.
inline Clock::time_point extended(Clock::time_point deadline, Clock::duration later) {
  if (deadline > Clock::time_point::max() - later) return Clock::time_point::max();
  return deadline + later;
}

// The latest deadline the calling thread's cross-worker calls made in
// cross-replica context may have (Clock::time_point::max(): none). A
// merge_call's leader runs its function under a cap a quarter of the time
// left before the merge_call's own deadline: a worker that does not answer
// its reduce is then named by the leader's error before the other local
// replicas, waiting for the leader until that deadline, give up naming
// the leader (the hierarchical mode's graces may add a fifth of the time
// left to a call's deadline: 0.75 + 0.15 < 1).
inline thread_local Clock::time_point t_deadline_cap = Clock::time_point::max();

class ScopedDeadlineCap {
 public:
  // Caps this thread's cross-worker deadlines at a quarter of the time left
  // before `deadline` (no cap for no deadline); the previous cap is kept
  // if earlier.
  explicit ScopedDeadlineCap(Clock::time_point deadline) : previous_(t_deadline_cap) {
    if (deadline == Clock::time_point::max()) return;
    const Clock::time_point now = Clock::now();
    const Clock::time_point cap = deadline > now ? deadline - (deadline - now) / 4 : deadline;
    if (cap < t_deadline_cap) t_deadline_cap = cap;
  }
  ~ScopedDeadlineCap() { t_deadline_cap = previous_; }
  ScopedDeadlineCap(const ScopedDeadlineCap&) = delete;
  ScopedDeadlineCap& operator=(const ScopedDeadlineCap&) = delete;

 private:
  Clock::time_point previous_;
};

}  // namespace distribute::internal
