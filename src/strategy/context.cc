#include "strategy/context.h"

#include <cassert>
#include <new>
#include <vector>

#include "distribute/errors.h"
#include "distribute/replica_context.h"
#include "distribute/strategies.h"
#include "distribute/strategy.h"
#include "runtime/fiber.h"

namespace distribute {
namespace internal {
namespace {

std::vector<ThreadMode>& mode_stack() {
  thread_local std::vector<ThreadMode> stack;
  if (void* own = fiber_local()) return *static_cast<std::vector<ThreadMode>*>(own);
  return stack;
}

// Mode stacks of fibers that returned, kept with their capacity for the
// next run's fibers of this thread: no allocation per replica and run.
std::vector<std::vector<ThreadMode>>& spare_stacks() {
  thread_local std::vector<std::vector<ThreadMode>> spare;
  return spare;
}

}  // namespace

FiberModeStack::FiberModeStack() noexcept {
  if (on_fiber()) {
    auto& spare = spare_stacks();
    if (!spare.empty()) {
      stack_ = std::move(spare.back());
      spare.pop_back();
    }
    previous_ = fiber_local();
    fiber_local() = &stack_;
    active_ = true;
  }
}

FiberModeStack::~FiberModeStack() {
  if (!active_) return;
  fiber_local() = previous_;
  stack_.clear();
  try {
    spare_stacks().push_back(std::move(stack_));
  } catch (const std::bad_alloc&) {
    // Not kept: the next fiber allocates its own.
  }
}

const ThreadMode* current_mode() noexcept {
  auto& stack = mode_stack();
  return stack.empty() ? nullptr : &stack.back();
}

void push_mode(ThreadMode mode) {
  auto& stack = mode_stack();
  if (stack.capacity() == stack.size()) stack.reserve(stack.size() * 2 + 8);
  stack.push_back(mode);
}

void pop_mode() noexcept {
  auto& stack = mode_stack();
  assert(!stack.empty());
  stack.pop_back();
}

}  // namespace internal

ReplicaContext* get_replica_context() {
  const internal::ThreadMode* top = internal::current_mode();
  if (top == nullptr) return &get_default_strategy().replica_context(0);
  return top->replica;
}

ReplicaContext& current_replica_context() {
  ReplicaContext* context = get_replica_context();
  if (context == nullptr) {
    throw FailedPreconditionError("not in a replica context: call this inside strategy.run (this thread is in the "
                                  "cross-replica context of " + get_strategy().to_string() +
                                  ", e.g. inside strategy.scope() or a merge_call function)");
  }
  return *context;
}

bool in_cross_replica_context() {
  const internal::ThreadMode* top = internal::current_mode();
  return top != nullptr && top->replica == nullptr;
}

Strategy* get_cross_replica_context() {
  const internal::ThreadMode* top = internal::current_mode();
  return top != nullptr && top->replica == nullptr ? top->strategy : nullptr;
}

Strategy& get_strategy() {
  const internal::ThreadMode* top = internal::current_mode();
  return top != nullptr ? *top->strategy : get_default_strategy();
}

bool has_strategy() { return !get_strategy().is_default(); }

StrategyScope::StrategyScope(Strategy& strategy, std::string_view method) : strategy_(&strategy) {
  if (strategy.is_default()) {
    if (has_strategy()) {
      throw FailedPreconditionError("cannot enter the default strategy's scope inside the scope of " +
                                    get_strategy().to_string() + ": tf.distribute.Strategy scopes must not nest");
    }
  } else if (has_strategy()) {
    // Re-entering the current strategy is allowed in cross-replica context;
    // anything else raises the error that names the fix.
    strategy.require_cross_replica_or_default_context(method);
  }
  internal::push_mode({strategy_, nullptr});
}

StrategyScope::~StrategyScope() {
  assert(internal::current_mode() != nullptr && internal::current_mode()->strategy == strategy_ &&
         internal::current_mode()->replica == nullptr);
  internal::pop_mode();
}

}  // namespace distribute
