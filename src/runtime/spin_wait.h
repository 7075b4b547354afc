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
// store and the load are sequentially consistent). Sleeping uses the Linux
// futex directly (std::atomic::wait has no timeout); the word is a
// std::atomic<uint32_t>, which has the layout of a uint32_t.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>
#include <thread>

#include "runtime/fiber.h"

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
  // wait_while_equal[_until] only (wait_until ignores it), and not with
  // `yield` (whose rounds all yield, threads outnumbering cores): spin
  // rounds after this much of spin_for yield the core too, so that a long
  // window (ReplicaPool's idle wait, adapted to the gaps between runs) gives
  // way to any other thread that wants the core while still noticing the
  // change within a round; and once a yield kept this thread off its core
  // for more than kYieldedAway, another thread wants it: the wait stops
  // spinning and sleeps.
  std::chrono::nanoseconds yield_after = std::chrono::nanoseconds::max();
  static constexpr std::chrono::microseconds kYieldedAway{20};
  // Asked once, as the rounds past yield_after begin (so never with
  // `yield`): false makes the wait sleep at once instead. E.g.
  // runnable_threads_fit_cpus (runtime/cpu_count.h): a yield gives the core
  // only to threads queued on it, so a spinning thread alone on its core
  // would keep the other threads of a busy machine crowded on the rest.
  // Null: keep spinning.
  bool (*may_keep_spinning)() noexcept = nullptr;

  // When the spin rounds of a wait that started at `start` yield.
  std::chrono::steady_clock::time_point yield_from(std::chrono::steady_clock::time_point start) const noexcept {
    if (yield) return start;
    return yield_after < spin_for ? start + yield_after : std::chrono::steady_clock::time_point::max();
  }
};

// A 32-bit word that threads wait on, with a count of sleepers so that
// notify_value() makes a system call only when somebody sleeps.
class WaitWord {
 public:
  explicit WaitWord(std::uint32_t initial = 0) : word_(initial) {}

  std::uint32_t load() const noexcept { return word_.load(std::memory_order_acquire); }
  // Threads sleeping in the kernel on the word now (for tests: whether a
  // wait has left its spin).
  std::uint32_t sleepers() const noexcept { return sleepers_.load(std::memory_order_seq_cst); }

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

  // Wakes the sleepers of wait_until() after the caller made their
  // condition true with a sequentially consistent store. Costs one read of a
  // mostly-shared line when nobody sleeps: no write to a shared line.
  void notify_if_sleeping() noexcept {
    if (sleepers_.load(std::memory_order_seq_cst) != 0) {
      word_.fetch_add(1, std::memory_order_seq_cst);
      futex_wake();
    }
  }

  enum class WaitResult { kReady, kStopped, kTimedOut };

  // Waits until `ready()` (kReady) or `stop()` (kStopped) holds, or
  // `deadline` passes (kTimedOut). The spin phase polls the conditions
  // themselves, so a waiter reads only the lines its condition needs; the
  // sleep phase sleeps on this word. Whoever makes ready() or stop() true
  // must do so with a sequentially consistent store, then call
  // notify_if_sleeping() (or notify_add); ready() and stop() must read with
  // sequentially consistent loads. ready() is checked before stop(): a wait
  // whose condition already holds succeeds.
  template <class Ready, class Stop>
  WaitResult wait_until(const SpinPolicy& policy, std::chrono::steady_clock::time_point deadline, Ready ready,
                        Stop stop) noexcept(noexcept(ready()) && noexcept(stop())) {
    if (ready()) return WaitResult::kReady;
    if (stop()) return WaitResult::kStopped;
    if (fiber_has_siblings()) return fiber_wait_until(policy, deadline, ready, stop);
    // The clock is first read after 64 rounds: most waits end before that,
    // and a clock read costs more than a round on a virtual machine.
    std::chrono::steady_clock::time_point spin_end{};
    for (unsigned round = 1;; ++round) {
      if (policy.yield) {
        std::this_thread::yield();
      } else {
        cpu_relax();
      }
      if (ready()) return WaitResult::kReady;
      if ((round % 64) == 0) {
        if (stop()) return WaitResult::kStopped;
        const auto now = std::chrono::steady_clock::now();
        if (round == 64) {
          spin_end = now + policy.spin_for < deadline ? now + policy.spin_for : deadline;
        } else if (now >= spin_end) {
          break;
        }
      }
    }
    // Dekker with notify_if_sleeping() (all four accesses sequentially
    // consistent): either the notifier sees this sleeper, or this waiter's
    // next check of ready() sees the notifier's store.
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    WaitResult result = WaitResult::kTimedOut;
    while (true) {
      const std::uint32_t seen = word_.load(std::memory_order_seq_cst);
      if (ready()) {
        result = WaitResult::kReady;
        break;
      }
      if (stop()) {
        result = WaitResult::kStopped;
        break;
      }
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::nanoseconds::zero()) break;
      futex_wait(seen, left);
    }
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    return result;
  }

  // wait_until() on a fiber with thread-mates (runtime/fiber.h): the spin
  // phase hands the thread to the next fiber instead of pausing, so the
  // replica being waited for, when it is a thread-mate, runs at once. Once
  // the spin window has passed, the fiber naps on this word between rounds
  // (its thread-mates have had their turns in every round, so they are most
  // likely waiting too): for at most kFiberNap, because a thread-mate's
  // condition may come true meanwhile and only its own word would tell.
  static constexpr std::chrono::microseconds kFiberNap{100};
  template <class Ready, class Stop>
  WaitResult fiber_wait_until(const SpinPolicy& policy, std::chrono::steady_clock::time_point deadline, Ready ready,
                              Stop stop) noexcept(noexcept(ready()) && noexcept(stop())) {
    std::chrono::steady_clock::time_point spin_end{};
    for (unsigned round = 1;; ++round) {
      fiber_yield();
      if (ready()) return WaitResult::kReady;
      if ((round % 16) != 0) continue;
      if (stop()) return WaitResult::kStopped;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return WaitResult::kTimedOut;
      if (round == 16) {
        spin_end = now + policy.spin_for < deadline ? now + policy.spin_for : deadline;
        continue;
      }
      if (now < spin_end) continue;
      // Alone on the thread now: the ordinary wait, spin then sleep.
      if (!fiber_has_siblings()) return wait_until(policy, deadline, ready, stop);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      const std::uint32_t seen = word_.load(std::memory_order_seq_cst);
      if (!ready() && !stop()) {
        const auto left = deadline - now;
        futex_wait(seen, left < kFiberNap ? left : std::chrono::steady_clock::duration(kFiberNap));
      }
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  // Returns the first value different from `old`. `waited`, when given,
  // receives how long the wait lasted, as wait_while_equal_until() says.
  std::uint32_t wait_while_equal(std::uint32_t old, const SpinPolicy& policy,
                                 std::chrono::nanoseconds* waited = nullptr) noexcept {
    std::uint32_t v = 0;
    wait_while_equal_until(old, policy, std::chrono::steady_clock::time_point::max(), &v, waited);
    return v;
  }

  // Waits until the value differs from `old` (returns true, the new value in
  // *value) or `deadline` passes (returns false). `waited`, when given,
  // receives how long the wait lasted without a clock read after the change
  // was seen (that would delay whatever the waiter does next): 0 when the
  // value had already changed, else the time to the spin phase's last clock
  // read (up to 64 rounds short, or one round past yield_after), or, after a
  // sleep, to a clock read made on waking.
  bool wait_while_equal_until(std::uint32_t old, const SpinPolicy& policy,
                              std::chrono::steady_clock::time_point deadline, std::uint32_t* value,
                              std::chrono::nanoseconds* waited = nullptr) noexcept {
    std::uint32_t v = word_.load(std::memory_order_acquire);
    if (v != old) {
      *value = v;
      if (waited != nullptr) *waited = std::chrono::nanoseconds(0);
      return true;
    }
    const auto now = std::chrono::steady_clock::now();
    auto last_read = now;
    const auto spin_end = now + policy.spin_for < deadline ? now + policy.spin_for : deadline;
    const auto yield_from = policy.yield_from(now);
    bool yielding = policy.yield;
    bool extended = false;  // in the rounds past yield_after (never with policy.yield)
    // One pause per check: a pause costs up to ~140 cycles on recent x86,
    // so a batch of them would add that much latency to every hand-off. The
    // clock is read every 64 rounds, and on every round past yield_after (a
    // system call already costs more than the read).
    for (unsigned round = 1;; ++round) {
      if (yielding) {
        std::this_thread::yield();
      } else {
        cpu_relax();
      }
      v = word_.load(std::memory_order_acquire);
      if (v != old) {
        *value = v;
        if (waited != nullptr) *waited = last_read - now;
        return true;
      }
      if (extended || (round % 64) == 0) {
        const auto t = std::chrono::steady_clock::now();
        // Past yield_after, a yield that took long ran another thread, which
        // this spin would keep slowing.
        const bool yielded_away = extended && t - last_read > SpinPolicy::kYieldedAway;
        last_read = t;
        if (t >= spin_end || yielded_away) break;
        if (!yielding && t >= yield_from) {
          if (policy.may_keep_spinning != nullptr) {
            if (!policy.may_keep_spinning()) break;
            last_read = std::chrono::steady_clock::now();  // the question's own time is no yield's
          }
          yielding = extended = true;
        }
      }
    }
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    bool changed = true;
    while ((v = word_.load(std::memory_order_seq_cst)) == old) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::nanoseconds::zero()) {
        changed = false;
        break;
      }
      futex_wait(old, left);
    }
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    *value = v;
    if (waited != nullptr) *waited = std::chrono::steady_clock::now() - now;
    return changed;
  }

 private:
  void wake() noexcept {
    if (sleepers_.load(std::memory_order_seq_cst) != 0) futex_wake();
  }
  void futex_wake() noexcept {
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
  }

  // Sleeps while the word equals `old`, for at most `left` (at most a second
  // a call, so a very distant deadline does not overflow the timespec).
  void futex_wait(std::uint32_t old, std::chrono::steady_clock::duration left) noexcept {
    const auto capped = left < std::chrono::seconds(1) ? left : std::chrono::steady_clock::duration(std::chrono::seconds(1));
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(capped).count();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word_), FUTEX_WAIT_PRIVATE, old, &ts, nullptr, 0);
  }

  std::atomic<std::uint32_t> word_;
  std::atomic<std::uint32_t> sleepers_{0};
};

}  // namespace distribute::internal
