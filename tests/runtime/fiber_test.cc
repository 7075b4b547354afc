// FiberThread (runtime/fiber.h) and the replica pool with fibers: replicas
// that share a thread meet in the library's waits by switching fibers.
#include "runtime/fiber.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "runtime/cpu_count.h"
#include "runtime/replica_pool.h"
#include "runtime/spin_wait.h"

namespace distribute::internal {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kStack = 1u << 20;

TEST(FiberThread, RunsEveryReplicaOnceOnTheCallingThread) {
  FiberThread fibers({2, 5, 7}, kStack);
  std::vector<int> hits(8, 0);
  std::vector<std::thread::id> where(8);
  for (int round = 0; round < 50; ++round) {
    fibers.run([&](int r) {
      hits[static_cast<std::size_t>(r)] += 1;
      where[static_cast<std::size_t>(r)] = std::this_thread::get_id();
      EXPECT_TRUE(on_fiber());
    });
  }
  EXPECT_FALSE(on_fiber());
  for (int r : {2, 5, 7}) {
    EXPECT_EQ(hits[static_cast<std::size_t>(r)], 50) << r;
    EXPECT_EQ(where[static_cast<std::size_t>(r)], std::this_thread::get_id()) << r;
  }
  EXPECT_EQ(hits[0] + hits[1] + hits[3] + hits[4] + hits[6], 0);
}

// Fiber 0 waits for what fiber 1 does after it: on one thread, without a
// switch inside the wait, fiber 1 would never run (the deadline ends the
// test instead of a hang).
TEST(FiberThread, AWaitHandsTheThreadToTheFiberItWaitsFor) {
  FiberThread fibers({0, 1}, kStack);
  for (int round = 0; round < 100; ++round) {
    WaitWord word;
    std::atomic<int> flag{0};
    std::vector<int> order;
    auto result = WaitWord::WaitResult::kTimedOut;
    fibers.run([&](int r) {
      if (r == 0) {
        order.push_back(0);
        result = word.wait_until(SpinPolicy{}, Clock::now() + std::chrono::seconds(10),
                                 [&] { return flag.load() == 1; }, [] { return false; });
        order.push_back(2);
      } else {
        order.push_back(1);
        flag.store(1);
        word.notify_if_sleeping();
      }
    });
    ASSERT_EQ(result, WaitWord::WaitResult::kReady);
    ASSERT_EQ(order, (std::vector<int>{0, 1, 2}));
  }
}

TEST(FiberThread, AWaitWithoutThreadMatesIsAnOrdinaryWait) {
  FiberThread fibers({0}, kStack);
  WaitWord word;
  std::atomic<int> flag{0};
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    flag.store(1);
    word.notify_if_sleeping();
  });
  auto result = WaitWord::WaitResult::kTimedOut;
  fibers.run([&](int) {
    EXPECT_FALSE(fiber_has_siblings());
    result = word.wait_until(SpinPolicy{}, Clock::now() + std::chrono::seconds(10),
                             [&] { return flag.load() == 1; }, [] { return false; });
  });
  other.join();
  EXPECT_EQ(result, WaitWord::WaitResult::kReady);
}

// Two fibers of one thread wait on different words, set by another thread
// long after the spin window: each fiber naps on its own word for a bounded
// time, so the one whose word is not the napping one is still seen, long
// before the other word is set.
TEST(FiberThread, ThreadMatesWaitingOnDifferentWordsBothWakeUp) {
  FiberThread fibers({0, 1}, kStack);
  SpinPolicy policy;
  policy.spin_for = std::chrono::microseconds(100);
  WaitWord words[2];
  std::atomic<int> flags[2] = {0, 0};
  std::atomic<bool> one_returned{false};
  bool one_returned_first = false;
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    flags[1].store(1);
    words[1].notify_if_sleeping();
    // Fiber 1 must not wait for word 0: its thread-mate's naps are short.
    const auto until = Clock::now() + std::chrono::seconds(2);
    while (!one_returned.load() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    one_returned_first = one_returned.load();
    flags[0].store(1);
    words[0].notify_if_sleeping();
  });
  WaitWord::WaitResult results[2] = {WaitWord::WaitResult::kTimedOut, WaitWord::WaitResult::kTimedOut};
  fibers.run([&](int r) {
    const auto i = static_cast<std::size_t>(r);
    results[i] = words[i].wait_until(policy, Clock::now() + std::chrono::seconds(10),
                                     [&] { return flags[i].load() == 1; }, [] { return false; });
    if (r == 1) one_returned.store(true);
  });
  other.join();
  EXPECT_TRUE(one_returned_first);
  EXPECT_EQ(results[0], WaitWord::WaitResult::kReady);
  EXPECT_EQ(results[1], WaitWord::WaitResult::kReady);
}

TEST(FiberThread, AWaitOnAFiberKeepsItsDeadline) {
  FiberThread fibers({0, 1}, kStack);
  WaitWord word;
  WaitWord::WaitResult results[2] = {WaitWord::WaitResult::kReady, WaitWord::WaitResult::kReady};
  const auto start = Clock::now();
  fibers.run([&](int r) {
    results[static_cast<std::size_t>(r)] = word.wait_until(SpinPolicy{}, Clock::now() + std::chrono::milliseconds(30), [] { return false; },
                                 [] { return false; });
  });
  const auto took = Clock::now() - start;
  EXPECT_EQ(results[0], WaitWord::WaitResult::kTimedOut);
  EXPECT_EQ(results[1], WaitWord::WaitResult::kTimedOut);
  EXPECT_GE(took, std::chrono::milliseconds(30));
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST(FiberThread, FiberLocalFollowsTheFiber) {
  FiberThread fibers({0, 1, 2}, kStack);
  int values[3] = {10, 11, 12};
  void* const outside = &values[0];
  fiber_local() = outside;
  std::atomic<int> wrong{0};
  std::atomic<int> arrived{0};
  WaitWord word;
  fibers.run([&](int r) {
    if (fiber_local() != nullptr) wrong.fetch_add(1);  // a fiber starts with its own, null
    fiber_local() = &values[r];
    arrived.fetch_add(1);
    // Every fiber waits until all have set theirs: the others ran meanwhile.
    word.wait_until(SpinPolicy{}, Clock::now() + std::chrono::seconds(10), [&] { return arrived.load() == 3; },
                    [] { return false; });
    if (fiber_local() != &values[r]) wrong.fetch_add(1);
    fiber_local() = nullptr;
  });
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(fiber_local(), outside);  // the thread's own, untouched
  fiber_local() = nullptr;
}

TEST(ReplicaPoolFibers, OneThreadPerCoreAndEveryReplicaOncePerRun) {
  const int cores = static_cast<int>(std::max(1u, usable_cores()));
  for (int n : {1, 2, cores + 1, 2 * cores + 1}) {
    ReplicaPool pool(n, "fiber-", /*fibers=*/true);
    EXPECT_EQ(pool.num_threads(), std::min(n, cores)) << n;
    EXPECT_EQ(pool.uses_fibers(), n > cores) << n;
    std::vector<int> hits(static_cast<std::size_t>(n), 0);
    std::vector<std::thread::id> where(static_cast<std::size_t>(n));
    for (int round = 0; round < 100; ++round) {
      pool.run(
          [&](int r) {
            hits[static_cast<std::size_t>(r)] += 1;
            where[static_cast<std::size_t>(r)] = std::this_thread::get_id();
          },
          [] {});
    }
    const int threads = pool.num_threads();
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(hits[static_cast<std::size_t>(r)], 100) << "n=" << n << " r=" << r;
      EXPECT_EQ(where[static_cast<std::size_t>(r)], where[static_cast<std::size_t>(r % threads)]) << r;
    }
    EXPECT_EQ(where[0], std::this_thread::get_id());
  }
}

}  // namespace
}  // namespace distribute::internal
