// The waits' side of ScopedInterruptCheck (distribute/interrupt.h).
//
// A wait makes an InterruptPoll on entry (one thread-local read when the
// thread has no check), sleeps until slice_end(deadline) instead of the
// deadline, and calls poll() when a slice ends before the deadline; poll()
// calls the check when its interval has passed and throws what it throws.
#pragma once

#include <chrono>

#include "distribute/interrupt.h"

namespace distribute::internal {

// The innermost check of the calling thread, or nullptr.
const ScopedInterruptCheck* current_interrupt_check() noexcept;

class InterruptPoll {
 public:
  using Clock = std::chrono::steady_clock;

  // A poll of the thread's check (none when `enabled` is false).
  explicit InterruptPoll(bool enabled = true) : check_(enabled ? current_interrupt_check() : nullptr) {
    if (check_ != nullptr) next_ = Clock::now() + check_->interval();
  }

  bool active() const noexcept { return check_ != nullptr; }
  // When the current slice of a wait until `deadline` ends.
  Clock::time_point slice_end(Clock::time_point deadline) const noexcept {
    return next_ < deadline ? next_ : deadline;
  }
  // Calls the check if its time came (throws what it throws).
  void poll() {
    if (check_ == nullptr) return;
    const auto now = Clock::now();
    if (now < next_) return;
    next_ = now + check_->interval();
    check_->check();
  }
  // No more checks in this wait (after the check threw once).
  void disable() noexcept {
    check_ = nullptr;
    next_ = Clock::time_point::max();
  }

 private:
  const ScopedInterruptCheck* check_;
  Clock::time_point next_ = Clock::time_point::max();
};

}  // namespace distribute::internal
