// Fibers: replicas that share a thread, for strategies with more replicas
// than cores (ReplicaExecution::FIBERS, distribute/options.h).
//
// A FiberThread runs a fixed set of replicas of a pool, one fiber each, on
// whichever thread calls run(). A fiber runs until it returns or until it
// waits for another replica (WaitWord::wait_until, runtime/spin_wait.h):
// there the wait hands the thread to the next fiber of the same thread
// (fiber_yield()) instead of spinning or sleeping, so a meeting of the
// replicas of one thread costs a few context switches (tens of
// nanoseconds) instead of the kernel's wake-ups. Switches use Boost.Context
// (Debian's libboost-context-dev); ThreadSanitizer and AddressSanitizer are
// told of every switch.
//
// What a replica function sees: it runs on one of the pool's threads, and
// the other replicas of that thread run on it too, one at a time, switching
// only inside the library's waits. A replica that blocks on another replica
// by other means (a std::barrier of its own, a mutex held across a
// collective) would block its thread-mates: with fibers, replicas meet only
// through the library's collectives. Thread-local variables are shared by
// the replicas of a thread, except the library's own replica context, which
// follows the fiber (fiber_local()). Shared too: the C++ runtime's record
// of the exceptions being handled (a collective called inside a catch
// block may switch to a thread-mate that throws and catches its own: not
// supported) and the interrupt check of distribute/interrupt.h (fibers on
// the caller's thread poll the caller's; a ScopedInterruptCheck made inside
// a replica function on a fiber is not supported).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "distribute/internal/function_ref.h"

namespace distribute::internal {

class FiberThread {
 public:
  // Fibers for `replicas`, each with a stack of `stack_bytes` (reserved
  // address space, committed as it is touched, with a guard page below).
  FiberThread(std::vector<int> replicas, std::size_t stack_bytes);
  ~FiberThread();
  FiberThread(const FiberThread&) = delete;
  FiberThread& operator=(const FiberThread&) = delete;

  // Runs task(r) for every replica r of this thread, each on its own fiber,
  // and returns when all have returned. task must not throw. Not reentrant:
  // one run() at a time, from a thread that is not itself running fibers.
  void run(FunctionRef<void(int)> task);

  // Defined in fiber.cc.
  struct Fiber;
  struct State;

 private:
  std::unique_ptr<State> state_;
};

// True when the calling code runs on a fiber.
bool on_fiber() noexcept;
// True when the calling code runs on a fiber whose thread has other fibers
// that have not returned yet (only then does fiber_yield() switch).
bool fiber_has_siblings() noexcept;
// Hands the thread to the next fiber of this thread that has not returned;
// returns when this fiber is scheduled again. Outside fibers, or alone:
// returns at once.
void fiber_yield() noexcept;
// A pointer that belongs to the running fiber (saved and restored at every
// switch); on a thread outside fibers, the thread's own. Null at first.
void*& fiber_local() noexcept;

}  // namespace distribute::internal
