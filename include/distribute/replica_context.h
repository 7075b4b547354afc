// Replica context and the per-thread context queries of tf.distribute.
//
// Every thread has a stack of modes. Its top decides what the queries below
// return:
//   - nothing entered (the default state): the default strategy is current,
//     get_replica_context() returns the default replica context (replica 0 of
//     1) and in_cross_replica_context() is false;
//   - inside strategy.scope(): cross-replica context; get_replica_context()
//     is nullptr and in_cross_replica_context() is true;
//   - inside a function run by strategy.run(): replica context;
//     get_replica_context() returns that replica's context.
// The stack is thread_local: a thread you start yourself begins in the
// default state.
#pragma once

namespace distribute {

class Strategy;

// What a replica knows about itself while Strategy::run executes it. Owned by
// its strategy; valid while the strategy lives. Safe to call from the
// replica's own thread.
class ReplicaContext {
 public:
  ReplicaContext(const ReplicaContext&) = delete;
  ReplicaContext& operator=(const ReplicaContext&) = delete;

  // This replica's index among all replicas in sync, in [0, num_replicas_in_sync()).
  int replica_id_in_sync_group() const noexcept { return replica_id_; }
  int num_replicas_in_sync() const noexcept;
  Strategy& strategy() const noexcept { return *strategy_; }

 private:
  friend class Strategy;
  ReplicaContext(Strategy& strategy, int replica_id) : strategy_(&strategy), replica_id_(replica_id) {}

  Strategy* strategy_;
  int replica_id_;
};

// The current replica context: the running replica's inside Strategy::run,
// the default replica context in the default state, nullptr in cross-replica
// context (inside a scope).
ReplicaContext* get_replica_context();

// True inside a strategy's scope() (and not inside a replica function).
bool in_cross_replica_context();

// The strategy in cross-replica context, else nullptr. Exactly one of
// get_replica_context() and get_cross_replica_context() is nullptr.
Strategy* get_cross_replica_context();

// The current strategy: the one whose scope or replica function this thread
// is in, else the default strategy.
Strategy& get_strategy();

// True when the current strategy is not the default strategy.
bool has_strategy();

}  // namespace distribute
