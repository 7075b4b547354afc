#include "runtime/replica_pool.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "distribute/errors.h"
#include "runtime/cpu_count.h"

namespace distribute::internal {
namespace {

TEST(ReplicaPool, RunsEveryReplicaExactlyOnce) {
  for (int n : {1, 2, 3, 4, 7}) {
    ReplicaPool pool(n, "test-");
    std::vector<int> hits(static_cast<std::size_t>(n), 0);  // plain ints: the pool's ordering makes them safe
    for (int round = 0; round < 100; ++round) {
      pool.run([&](int r) { hits[static_cast<std::size_t>(r)] += 1; }, [] {});
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(hits[static_cast<std::size_t>(r)], 100) << "n=" << n << " r=" << r;
  }
}

TEST(ReplicaPool, CallerWritesAreVisibleToTasksAndBack) {
  ReplicaPool pool(4, "test-");
  std::vector<long> in(4), out(4);
  for (long round = 0; round < 1000; ++round) {
    for (std::size_t r = 0; r < 4; ++r) in[r] = round * 10 + static_cast<long>(r);
    pool.run([&](int r) { out[static_cast<std::size_t>(r)] = in[static_cast<std::size_t>(r)] * 2; }, [] {});
    for (std::size_t r = 0; r < 4; ++r) ASSERT_EQ(out[r], (round * 10 + static_cast<long>(r)) * 2);
  }
}

TEST(ReplicaPool, ReplicaZeroRunsOnTheCaller) {
  ReplicaPool pool(3, "test-");
  std::vector<std::thread::id> ids(3);
  pool.run([&](int r) { ids[static_cast<std::size_t>(r)] = std::this_thread::get_id(); }, [] {});
  EXPECT_EQ(ids[0], std::this_thread::get_id());
  EXPECT_NE(ids[1], ids[0]);
  EXPECT_NE(ids[2], ids[1]);
}

TEST(ReplicaPool, WakesSleepingThreads) {
  // After a pause longer than the spin window the threads sleep; the next run
  // must still reach every one of them.
  ReplicaPool pool(3, "test-");
  std::atomic<int> count{0};
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pool.run([&](int) { count.fetch_add(1); }, [] {});
  }
  EXPECT_EQ(count.load(), 9);
}

TEST(ReplicaPool, RunsAfterGapsAroundTheAdaptedSpinWindow) {
  // Gaps shorter than IdleSpin's bound widen the idle thread's spin window
  // (spinning that yields); a longer one then sends it to sleep once the
  // window has passed. Every run must still reach the thread. Two replicas:
  // with more threads than cores the pool keeps the base window.
  if (usable_cores() < 2) GTEST_SKIP() << "needs 2 usable cores for the adapted window, got " << usable_cores();
  ReplicaPool pool(2, "test-");
  std::atomic<int> count{0};
  int runs = 0;
  for (const auto gap : {std::chrono::microseconds(200), std::chrono::microseconds(200), std::chrono::microseconds(300),
                         std::chrono::microseconds(5000), std::chrono::microseconds(100)}) {
    for (int i = 0; i < 20; ++i) {
      std::this_thread::sleep_for(gap);
      pool.run([&](int) { count.fetch_add(1); }, [] {});
      ++runs;
    }
  }
  EXPECT_EQ(count.load(), 2 * runs);
}

using std::chrono::microseconds;
using std::chrono::nanoseconds;

SpinPolicy base_policy(bool yield = false) {
  SpinPolicy base;
  base.spin_for = microseconds(50);
  base.yield = yield;
  return base;
}

TEST(IdleSpin, WithoutGapsKeepsTheBaseWindowAndNeverYields) {
  const IdleSpin idle(base_policy());
  const SpinPolicy p = idle.policy();
  EXPECT_EQ(p.spin_for, nanoseconds(microseconds(50)));
  EXPECT_FALSE(p.yield);
  EXPECT_EQ(p.may_keep_spinning, nullptr);
  const auto start = std::chrono::steady_clock::time_point{} + std::chrono::seconds(1);
  EXPECT_GE(p.yield_from(start), start + p.spin_for);  // no yielding within the window
}

TEST(IdleSpin, CoversTheLongestRecentGapWithMarginYieldingPastTheBase) {
  IdleSpin idle(base_policy());
  idle.record(microseconds(6));
  idle.record(microseconds(200));
  idle.record(microseconds(7));
  const SpinPolicy p = idle.policy();
  EXPECT_EQ(p.spin_for, nanoseconds(microseconds(300)));
  EXPECT_EQ(p.yield_after, nanoseconds(microseconds(50)));
  EXPECT_FALSE(p.yield);
  // Past the base window only while the machine has a CPU to spare.
  EXPECT_EQ(p.may_keep_spinning, &IdleSpin::runnable_threads_fit_cpus_lately);
  const auto start = std::chrono::steady_clock::time_point{} + std::chrono::seconds(1);
  EXPECT_EQ(p.yield_from(start), start + microseconds(50));
}

TEST(IdleSpin, ShortGapsKeepTheBaseWindow) {
  IdleSpin idle(base_policy());
  for (int i = 0; i < 5; ++i) idle.record(microseconds(10));
  EXPECT_EQ(idle.policy().spin_for, nanoseconds(microseconds(50)));
}

TEST(IdleSpin, IsCappedAndIgnoresGapsBeyondTheCap) {
  IdleSpin idle(base_policy());
  idle.record(microseconds(450));  // 1.5x is past the cap
  EXPECT_EQ(idle.policy().spin_for, nanoseconds(IdleSpin::kDefaultMax));
  IdleSpin sleepy(base_policy());
  sleepy.record(microseconds(100));
  sleepy.record(std::chrono::milliseconds(5));  // would not have been covered: left to sleep
  EXPECT_EQ(sleepy.policy().spin_for, nanoseconds(microseconds(150)));
  IdleSpin only_long(base_policy());
  only_long.record(std::chrono::milliseconds(2));
  EXPECT_EQ(only_long.policy().spin_for, nanoseconds(microseconds(50)));
}

TEST(IdleSpin, AZeroBoundKeepsTheBaseWindow) {
  IdleSpin idle(base_policy(), microseconds(0));
  idle.record(microseconds(200));
  EXPECT_EQ(idle.policy().spin_for, nanoseconds(microseconds(50)));
  IdleSpin wider(base_policy(), microseconds(2000));
  wider.record(microseconds(1000));
  EXPECT_EQ(wider.policy().spin_for, nanoseconds(microseconds(1500)));
}

TEST(IdleSpin, ParsesItsEnvironmentVariable) {
  EXPECT_EQ(parse_idle_spin_us(nullptr), IdleSpin::kDefaultMax);
  EXPECT_EQ(parse_idle_spin_us(""), IdleSpin::kDefaultMax);
  EXPECT_EQ(parse_idle_spin_us("0"), microseconds(0));
  EXPECT_EQ(parse_idle_spin_us("1000000"), microseconds(1000000));
  for (const char* bad : {"-1", "1000001", "99999999999999999999", "50us", " 5", "x", "1.5"}) {
    try {
      parse_idle_spin_us(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("DISTRIBUTE_IDLE_SPIN_US"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

TEST(IdleSpin, ABadEnvironmentValueRaisesFromPoolsWithThreadsOnly) {
  // Run by CTest in a process of its own with DISTRIBUTE_IDLE_SPIN_US=fast
  // (the value is kept once read, so an ordinary run cannot set it here).
  const char* value = std::getenv("DISTRIBUTE_IDLE_SPIN_US");
  if (value == nullptr || std::string(value) != "fast") GTEST_SKIP() << "needs DISTRIBUTE_IDLE_SPIN_US=fast";
  for (int attempt = 0; attempt < 2; ++attempt) {  // not cached while invalid
    try {
      ReplicaPool pool(2, "test-");
      ADD_FAILURE() << "a 2-replica pool accepted DISTRIBUTE_IDLE_SPIN_US=fast";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("DISTRIBUTE_IDLE_SPIN_US"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'fast'"), std::string::npos) << e.what();
    }
  }
  ReplicaPool one(1, "test-");  // a one-replica pool does not read it
  int calls = 0;
  one.run([&](int) { ++calls; }, [] {});
  EXPECT_EQ(calls, 1);
}

TEST(IdleSpin, ForgetsGapsOlderThanItsHistory) {
  IdleSpin idle(base_policy());
  idle.record(microseconds(300));
  for (std::size_t i = 0; i + 1 < IdleSpin::kHistory; ++i) idle.record(microseconds(5));
  EXPECT_EQ(idle.policy().spin_for, nanoseconds(microseconds(450)));  // still in the history
  idle.record(microseconds(5));
  EXPECT_EQ(idle.policy().spin_for, nanoseconds(microseconds(50)));
}

TEST(IdleSpin, MoreThreadsThanCoresKeepTheBasePolicy) {
  IdleSpin idle(base_policy(/*yield=*/true));
  idle.record(microseconds(200));
  const SpinPolicy p = idle.policy();
  EXPECT_EQ(p.spin_for, nanoseconds(microseconds(50)));
  EXPECT_TRUE(p.yield);
}

TEST(SpinPolicy, YieldsFromWhenItsYieldAfterFallsInsideTheWindow) {
  const auto start = std::chrono::steady_clock::time_point{} + std::chrono::seconds(1);
  SpinPolicy p;  // the default: pauses through the whole window
  EXPECT_EQ(p.yield_from(start), std::chrono::steady_clock::time_point::max());
  p.yield_after = microseconds(10);  // inside the 50 us window
  EXPECT_EQ(p.yield_from(start), start + microseconds(10));
  p.yield_after = microseconds(50);  // not inside it
  EXPECT_EQ(p.yield_from(start), std::chrono::steady_clock::time_point::max());
  p.yield = true;  // every round yields
  EXPECT_EQ(p.yield_from(start), start);
}

TEST(WaitWord, AWaitThatYieldsPartOfItsWindowStillSeesTheChange) {
  // A window of 2 s that yields after 1 us: a change made 20 ms in, within
  // the yielding rounds, ends the wait with the new value (liveness; which
  // rounds yield is SpinPolicy's yield_from, above).
  WaitWord word(0);
  SpinPolicy policy;
  policy.spin_for = std::chrono::seconds(2);
  policy.yield_after = microseconds(1);
  std::thread notifier([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    word.notify_value(7);
  });
  std::uint32_t value = 0;
  const auto far = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  EXPECT_TRUE(word.wait_while_equal_until(0, policy, far, &value));
  EXPECT_EQ(value, 7u);
  notifier.join();
  // And without a change, the wait ends at its deadline.
  EXPECT_FALSE(word.wait_while_equal_until(7, policy, std::chrono::steady_clock::now() + std::chrono::milliseconds(5),
                                           &value));
  EXPECT_EQ(value, 7u);
}

std::atomic<int> g_spin_questions{0};
bool refuse_to_spin() noexcept {
  g_spin_questions.fetch_add(1);
  return false;
}

TEST(WaitWord, AsksOnceWhetherToSpinPastYieldAfterAndSleepsOnNo) {
  // A 2 s window whose rounds past 1 us may go on only if the hook says so:
  // it is asked once, says no, and the wait sleeps until the change (made
  // once the hook was asked, so that the order does not depend on timing).
  WaitWord word(0);
  SpinPolicy policy;
  policy.spin_for = std::chrono::seconds(2);
  policy.yield_after = microseconds(1);
  policy.may_keep_spinning = &refuse_to_spin;
  g_spin_questions = 0;
  std::thread notifier([&] {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (g_spin_questions.load() == 0 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    word.notify_value(3);
  });
  std::uint32_t value = 0;
  std::chrono::nanoseconds waited{0};
  EXPECT_TRUE(word.wait_while_equal_until(0, policy, std::chrono::steady_clock::now() + std::chrono::seconds(30),
                                          &value, &waited));
  notifier.join();
  EXPECT_EQ(value, 3u);
  EXPECT_EQ(g_spin_questions.load(), 1);
  // Measured on waking from the sleep: at least the notifier's 20 ms after
  // the question.
  EXPECT_GE(waited, std::chrono::milliseconds(20));
  // A policy without yield_after inside its window never asks.
  g_spin_questions = 0;
  SpinPolicy plain;
  plain.may_keep_spinning = &refuse_to_spin;
  EXPECT_FALSE(word.wait_while_equal_until(3, plain, std::chrono::steady_clock::now() + std::chrono::milliseconds(2),
                                           &value));
  EXPECT_EQ(g_spin_questions.load(), 0);
}

bool keep_spinning() noexcept { return true; }

TEST(WaitWord, AYieldThatRanAnotherThreadEndsTheSpin) {
  // A 10 s window that yields after 1 us, on a CPU shared with a busy
  // thread: a yield then runs the busy thread for far longer than
  // SpinPolicy::kYieldedAway, and the wait leaves its spin for the kernel
  // (it would otherwise yield for the whole window: the hook says go on).
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) GTEST_SKIP() << "sched_getaffinity failed";
  std::size_t cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &allowed)) ++cpu;
  ASSERT_LT(cpu, std::size_t{CPU_SETSIZE});
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  std::atomic<bool> stop{false};
  std::atomic<int> pinned{0};
  auto pin_self = [&] {
    if (pthread_setaffinity_np(pthread_self(), sizeof(one), &one) == 0) pinned.fetch_add(1);
  };
  std::thread busy([&] {
    pin_self();
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  WaitWord word(0);
  SpinPolicy policy;
  policy.spin_for = std::chrono::seconds(10);
  policy.yield_after = microseconds(1);
  policy.may_keep_spinning = &keep_spinning;
  std::uint32_t value = 0;
  std::thread waiter([&] {
    pin_self();
    (void)word.wait_while_equal_until(0, policy, std::chrono::steady_clock::now() + std::chrono::seconds(30), &value);
  });
  // Within 5 s (half the window) the waiter sleeps in the kernel.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (word.sleepers() == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const std::uint32_t sleepers = word.sleepers();
  word.notify_value(1);
  waiter.join();
  stop = true;
  busy.join();
  if (pinned.load() != 2) GTEST_SKIP() << "could not pin two threads to CPU " << cpu;
  EXPECT_EQ(sleepers, 1u) << "the wait was still spinning after 5 s beside a busy thread on its CPU";
  EXPECT_EQ(value, 1u);
}

TEST(ReplicaPool, ConcurrentCallersAreSerialized) {
  ReplicaPool pool(2, "test-");
  std::atomic<int> in_flight{0}, overlap{0}, total{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        pool.run([&](int) {
          if (in_flight.fetch_add(1) >= 2) overlap.fetch_add(1);
          total.fetch_add(1);
          in_flight.fetch_sub(1);
        }, [] {});
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(total.load(), 3 * 200 * 2);
  EXPECT_EQ(overlap.load(), 0);
}

TEST(ReplicaPool, DestroyingAnIdlePoolJoinsItsThreads) {
  for (int i = 0; i < 50; ++i) {
    ReplicaPool pool(4, "test-");
    if (i % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // let them fall asleep
  }
  // Passing means every destructor returned: a thread that missed the stop
  // signal would hang the test until CTest's timeout fails it.
}

}  // namespace
}  // namespace distribute::internal
