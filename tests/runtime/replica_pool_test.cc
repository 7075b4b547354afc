#include "runtime/replica_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

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
