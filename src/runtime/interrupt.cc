#include "runtime/interrupt.h"

#include <utility>

#include "distribute/errors.h"

namespace distribute {
namespace {
thread_local ScopedInterruptCheck* g_current_check = nullptr;
}  // namespace

ScopedInterruptCheck::ScopedInterruptCheck(std::function<void()> check, std::chrono::milliseconds interval)
    : check_(std::move(check)),
      interval_(interval.count() > 0 ? interval : std::chrono::milliseconds(1)),
      previous_(g_current_check) {
  if (!check_) throw InvalidArgumentError("ScopedInterruptCheck: expected a check function, got an empty one");
  g_current_check = this;
}

ScopedInterruptCheck::~ScopedInterruptCheck() { g_current_check = previous_; }

namespace internal {
const ScopedInterruptCheck* current_interrupt_check() noexcept { return g_current_check; }
}  // namespace internal

}  // namespace distribute
