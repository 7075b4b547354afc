// MirroredStrategy with ReplicaExecution::FIBERS: more replicas than cores
// run as fibers on one thread per core. The strategy matrix runs every
// behaviour test with fibers too ("Fibers5"); these are what is particular
// to them.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "distribute/distribute.h"

namespace distribute {
namespace {

std::vector<std::string> cpus(int n) {
  std::vector<std::string> devices;
  for (int i = 0; i < n; ++i) devices.push_back("CPU:" + std::to_string(i));
  return devices;
}

MirroredStrategy fibers(int n, CommunicationOptions options = {}) {
  return MirroredStrategy(cpus(n), options, ReplicaExecution::FIBERS);
}

int rid() { return get_replica_context()->replica_id_in_sync_group(); }

TEST(FiberTest, ReplicasShareOneThreadPerCore) {
  const int n = 2 * usable_cpu_count() + 1;
  MirroredStrategy strategy = fibers(n);
  auto where = strategy.run([] { return std::this_thread::get_id(); });
  std::set<std::thread::id> distinct(where.begin(), where.end());
  EXPECT_EQ(static_cast<int>(distinct.size()), usable_cpu_count());
  EXPECT_EQ(where[0], std::this_thread::get_id());
}

// Each replica keeps its own replica context across the collectives in
// which its thread-mates ran.
TEST(FiberTest, EachReplicaKeepsItsContextAcrossSwitches) {
  const int n = 2 * usable_cpu_count() + 1;
  MirroredStrategy strategy = fibers(n);
  auto wrong = strategy.run([n] {
    const int me = rid();
    ReplicaContext* mine = get_replica_context();
    int bad = 0;
    for (int i = 0; i < 200; ++i) {
      Tensor sum = get_replica_context()->all_reduce(ReduceOp::SUM, Tensor{static_cast<float>(me + i)});
      if (sum.data<float>()[0] != static_cast<float>(n * (n - 1) / 2 + n * i)) ++bad;
      if (get_replica_context() != mine || rid() != me || in_cross_replica_context()) ++bad;
    }
    return bad;
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(wrong[r], 0) << "replica " << r;
}

// The same inputs give the same bits with fibers as with threads, for packs
// reduced by each replica alone and for split ones.
TEST(FiberTest, SameBitsAsThreads) {
  const int n = 5;
  MirroredStrategy threaded(cpus(n));
  MirroredStrategy fibered = fibers(n);
  for (std::int64_t count : {std::int64_t{7}, std::int64_t{100'003}}) {
    std::vector<Tensor> inputs;
    std::mt19937 gen(static_cast<unsigned>(count));
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    for (int r = 0; r < n; ++r) {
      std::vector<float> v(static_cast<std::size_t>(count));
      for (float& x : v) x = dist(gen);
      inputs.emplace_back(std::move(v), Shape{count});
    }
    PerReplica<Tensor> values(inputs);
    auto reduce_in = [&](Strategy& s) {
      return s.run([](const Tensor& x) { return get_replica_context()->all_reduce(ReduceOp::MEAN, x); }, values);
    };
    auto a = reduce_in(threaded);
    auto b = reduce_in(fibered);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(a[r].num_elements(), count);
      EXPECT_EQ(std::memcmp(a[r].data<float>().data(), b[r].data<float>().data(), static_cast<std::size_t>(count) * sizeof(float)), 0)
          << "replica " << r << ", " << count << " elements";
    }
  }
}

// A replica that fails releases its thread-mates waiting in a collective,
// and the strategy works afterwards.
TEST(FiberTest, AFailingReplicaReleasesItsThreadMates) {
  const int n = 2 * usable_cpu_count() + 1;
  MirroredStrategy strategy = fibers(n);
  const auto start = std::chrono::steady_clock::now();
  try {
    strategy.run([n] {
      if (rid() == n - 1) throw InvalidArgumentError("bad batch");
      get_replica_context()->all_reduce(ReduceOp::SUM, Tensor{1.f});
    });
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(e.replica_id(), n - 1);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  auto sums = strategy.run([] { return get_replica_context()->all_reduce(ReduceOp::SUM, Tensor{1.f}); });
  for (int r = 0; r < n; ++r) EXPECT_EQ(sums[r], (Tensor{static_cast<float>(n)}));
}

// A replica that blocks its thread outside the library (here: sleeps) holds
// up its thread-mates, but the other threads' replicas still see their
// deadline pass, and the run fails with it instead of hanging. With a single
// core every replica shares the sleeper's thread: they all arrive once it
// wakes, and the all_reduce succeeds.
TEST(FiberTest, ADeadlineHoldsWhileAThreadMateBlocks) {
  const int n = 2 * usable_cpu_count() + 1;
  CommunicationOptions options;
  options.timeout_seconds = 0.2;
  MirroredStrategy strategy = fibers(n, options);
  const auto start = std::chrono::steady_clock::now();
  auto body = [n] {
    if (rid() == n - 1) std::this_thread::sleep_for(std::chrono::seconds(1));
    return get_replica_context()->all_reduce(ReduceOp::SUM, Tensor{1.f});
  };
  if (usable_cpu_count() >= 2) {
    EXPECT_THROW(strategy.run(body), DeadlineExceededError);
  } else {
    auto sums = strategy.run(body);
    EXPECT_EQ(sums[0], (Tensor{static_cast<float>(n)}));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// merge_call's function runs once, in cross-replica context, on replica 0's
// fiber (the caller's thread), while the thread-mates wait.
TEST(FiberTest, MergeCallRunsOnceOnTheCaller) {
  const int n = 2 * usable_cpu_count() + 1;
  MirroredStrategy strategy = fibers(n);
  std::atomic<int> calls{0};
  const auto caller = std::this_thread::get_id();
  auto out = strategy.run([&] {
    const int r = rid();
    int total = get_replica_context()->merge_call(
        [&](Strategy&, const PerReplica<int>& ids) {
          calls.fetch_add(1);
          EXPECT_TRUE(in_cross_replica_context());
          EXPECT_EQ(std::this_thread::get_id(), caller);
          int sum = 0;
          for (int q = 0; q < n; ++q) sum += ids[q];
          return sum;
        },
        r);
    EXPECT_EQ(rid(), r);  // back in its own replica context
    return total;
  });
  EXPECT_EQ(calls.load(), 1);
  for (int r = 0; r < n; ++r) EXPECT_EQ(out[r], n * (n - 1) / 2);
}

TEST(FiberTest, NoMoreReplicasThanCoresIsThreads) {
  MirroredStrategy strategy = fibers(1);
  EXPECT_EQ(strategy.run([] { return std::this_thread::get_id(); })[0], std::this_thread::get_id());
  if (usable_cpu_count() >= 2) {
    MirroredStrategy two = fibers(2);
    auto where = two.run([] { return std::this_thread::get_id(); });
    EXPECT_NE(where[0], where[1]);
  }
}

}  // namespace
}  // namespace distribute
