// Places in the transports where a test can make a process fail at an exact
// step of a collective (stop or kill itself), which a signal sent from
// outside hits only by chance (tests/multiworker/fault_main.cc). Unset, a
// fault point costs one atomic load.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>

namespace distribute::internal {

enum class FaultPoint : std::size_t {
  // Hierarchical all_reduce: a worker past its host's sum, before it joins
  // the hand-off of the leader's result (mpi_cross_worker.cc).
  kBeforeHostHandOff,
  kCount,
};

using FaultHook = void (*)();

inline std::array<std::atomic<FaultHook>, static_cast<std::size_t>(FaultPoint::kCount)> g_fault_hooks{};

// Tests only: runs `hook` (nullptr: nothing) at `point` from now on, on
// whichever thread reaches it.
inline void set_fault_hook(FaultPoint point, FaultHook hook) {
  g_fault_hooks[static_cast<std::size_t>(point)].store(hook, std::memory_order_release);
}

inline void fault_point(FaultPoint point) {
  if (FaultHook hook = g_fault_hooks[static_cast<std::size_t>(point)].load(std::memory_order_acquire)) hook();
}

}  // namespace distribute::internal
