// The per-thread stack of modes behind get_replica_context() and friends.
#pragma once

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

}  // namespace distribute::internal
