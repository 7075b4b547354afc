// The per-thread stack of modes behind get_replica_context() and friends.
#pragma once

#include <vector>

namespace distribute {
class Strategy;
class ReplicaContext;
}  // namespace distribute

namespace distribute::internal {

// One entry of a thread's mode stack: cross-replica context of `strategy`
// when `replica` is null, else the replica context `replica`. A
// cross-replica entry with `component` >= 0 is TF's update context
// (StrategyExtended::update calling its function for local replica
// `component`): the strategy's variables read and update that component
// only.
struct ThreadMode {
  Strategy* strategy;
  ReplicaContext* replica;
  int component = -1;
};

// The top of this thread's stack; nullptr in the default state.
const ThreadMode* current_mode() noexcept;
void push_mode(ThreadMode mode);
void pop_mode() noexcept;

// Gives the calling replica a mode stack of its own for its lifetime when it
// runs on a fiber (runtime/fiber.h), whose thread's stack the thread's other
// replicas share; on a thread of its own, does nothing.
class FiberModeStack {
 public:
  FiberModeStack() noexcept;
  ~FiberModeStack();
  FiberModeStack(const FiberModeStack&) = delete;
  FiberModeStack& operator=(const FiberModeStack&) = delete;

 private:
  std::vector<ThreadMode> stack_;
  void* previous_ = nullptr;
  bool active_ = false;
};

}  // namespace distribute::internal
