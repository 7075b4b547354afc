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

}  // namespace distribute::internal
