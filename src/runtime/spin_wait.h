// Waiting on another thread: spin briefly, then sleep.
//
// On these machines waking a sleeping thread costs ~20 us while a spinning
// thread notices a change in ~0.2 us, so every wait first spins (for a bounded
// time) and only then sleeps in the kernel (std::atomic::wait, a futex). When
// there are more waiting threads than cores, spinning would steal the core
// from the thread that has the work to do, so the spin phase yields the core
// on every round instead of pausing.
//
// Memory ordering: a waiter that returns because it saw the value written by
// notify_value() sees everything the notifying thread did before it (the
// store and the load are sequentially consistent).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace distribute::internal {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

struct SpinPolicy {
  // How long a wait spins before it sleeps.
  std::chrono::nanoseconds spin_for{std::chrono::microseconds(50)};
  // Yield the core on each spin round (set when threads outnumber cores).
  bool yield = false;
};

// A 32-bit word that threads wait on, with a count of sleepers so that
// notify_value() makes a system call only when somebody sleeps.
class WaitWord {
 public:
  explicit WaitWord(std::uint32_t initial = 0) : word_(initial) {}

  std::uint32_t load() const noexcept { return word_.load(std::memory_order_acquire); }

  // Stores `value` and wakes every sleeping waiter.
  void notify_value(std::uint32_t value) noexcept {
    word_.store(value, std::memory_order_seq_cst);
    wake();
  }
  // Adds `delta` and wakes every sleeping waiter; returns the new value.
  std::uint32_t notify_add(std::uint32_t delta) noexcept {
    const std::uint32_t v = word_.fetch_add(delta, std::memory_order_seq_cst) + delta;
    wake();
    return v;
  }
  // Subtracts one; wakes the sleepers only when the result is zero.
  std::uint32_t decrement() noexcept {
    const std::uint32_t v = word_.fetch_sub(1, std::memory_order_seq_cst) - 1;
    if (v == 0) wake();
    return v;
  }

  // Returns the first value different from `old`.
  std::uint32_t wait_while_equal(std::uint32_t old, const SpinPolicy& policy) noexcept {
    std::uint32_t v = word_.load(std::memory_order_acquire);
    if (v != old) return v;
    const auto deadline = std::chrono::steady_clock::now() + policy.spin_for;
    // One pause per check: a pause costs up to ~140 cycles on recent x86,
    // so a batch of them would add that much latency to every hand-off. The
    // clock is read only every 64 rounds.
    for (unsigned round = 1;; ++round) {
      if (policy.yield) {
        std::this_thread::yield();
      } else {
        cpu_relax();
      }
      v = word_.load(std::memory_order_acquire);
      if (v != old) return v;
      if ((round % 64) == 0 && std::chrono::steady_clock::now() >= deadline) break;
    }
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    while ((v = word_.load(std::memory_order_seq_cst)) == old) word_.wait(old, std::memory_order_seq_cst);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    return v;
  }

 private:
  void wake() noexcept {
    if (sleepers_.load(std::memory_order_seq_cst) != 0) word_.notify_all();
  }

  std::atomic<std::uint32_t> word_;
  std::atomic<std::uint32_t> sleepers_{0};
};

}  // namespace distribute::internal
