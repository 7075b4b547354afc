// ScopedInterruptCheck (distribute/interrupt.h): the waits of the thread
// that made one call it, and what it throws ends the wait without a hang
// and without losing data. Python's Ctrl-C is built on it
// (tests/python/test_interrupt.py).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "distribute/distribute.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

using ::testing::HasSubstr;
using testing::cpu_devices;
using testing::message_of;
using namespace std::chrono_literals;

// What the tests' checks throw: not a distribute::Error, so that the type
// seen by the caller proves it is the check's own exception.
struct Stop : std::runtime_error {
  Stop() : std::runtime_error("stopped by the test") {}
};

// Waits (sleeping) until `flag` is set, for at most 20 s (a test that
// failed to set it then fails instead of hanging).
void wait_for(const std::atomic<bool>& flag) {
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (!flag.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(flag.load()) << "the flag was never set";
}

TEST(ScopedInterruptCheck, RejectsAnEmptyCheck) {
  EXPECT_THAT(message_of<InvalidArgumentError>([] { ScopedInterruptCheck c{std::function<void()>()}; }),
              HasSubstr("expected a check function"));
}

TEST(ScopedInterruptCheck, ACollectiveOfTheCallersReplicaRaisesTheChecksException) {
  MirroredStrategy strategy(cpu_devices(2));
  std::atomic<bool> caught_in_replica0{false};
  std::atomic<std::thread::id> checked_on{};
  std::string replica1_error;
  ScopedInterruptCheck check(
      [&] {
        checked_on = std::this_thread::get_id();
        throw Stop();
      },
      10ms);
  EXPECT_THROW(strategy.run([&] {
    if (current_replica_context().replica_id_in_sync_group() == 0) {
      try {
        current_replica_context().all_reduce(ReduceOp::SUM, Tensor{1.f});
      } catch (const Stop&) {
        caught_in_replica0 = true;  // raised by the collective itself, after it aborted the group
        throw;
      }
      return;
    }
    // Replica 1 reaches the collective only after the interrupt.
    wait_for(caught_in_replica0);
    try {
      current_replica_context().all_reduce(ReduceOp::SUM, Tensor{1.f});
      replica1_error = "no exception";
    } catch (const CancelledError& e) {
      replica1_error = e.what();
    } catch (const std::exception& e) {
      replica1_error = std::string("unexpected: ") + e.what();
    }
  }),
               Stop);
  EXPECT_TRUE(caught_in_replica0.load());
  EXPECT_EQ(checked_on.load(), std::this_thread::get_id());
  EXPECT_THAT(replica1_error, HasSubstr("replica 0 failed: stopped by the test"));
  // The strategy is usable afterwards.
  const auto sums = strategy.run([] { return current_replica_context().all_reduce(ReduceOp::SUM, Tensor{2.f}); });
  EXPECT_EQ(sums[1], Tensor{4.f});
}

TEST(ScopedInterruptCheck, RunWaitingForABusyReplicaRaisesTheChecksExceptionOnceItReturns) {
  MirroredStrategy strategy(cpu_devices(2));
  std::atomic<bool> stopped{false};
  std::atomic<bool> replica1_returned{false};
  ScopedInterruptCheck check(
      [&] {
        stopped = true;
        throw Stop();
      },
      10ms);
  // Replica 0 returns at once and the caller waits for replica 1, which
  // computes (no collective) until the interrupt: run() waits for it to
  // return, then raises the check's exception although no replica failed.
  EXPECT_THROW(strategy.run([&] {
    if (current_replica_context().replica_id_in_sync_group() == 0) return;
    wait_for(stopped);
    replica1_returned = true;
  }),
               Stop);
  EXPECT_TRUE(replica1_returned.load()) << "run() returned before its replicas";
}

TEST(ScopedInterruptCheck, ACheckThatReturnsLetsTheWaitGoOn) {
  MirroredStrategy strategy(cpu_devices(2));
  std::atomic<int> calls{0};
  ScopedInterruptCheck check([&] { ++calls; }, 5ms);
  const auto sums = strategy.run([&] {
    if (current_replica_context().replica_id_in_sync_group() == 1) {
      // Until the caller's replica has polled a few times in the collective.
      const auto until = std::chrono::steady_clock::now() + 20s;
      while (calls.load() < 3 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
    }
    return current_replica_context().all_reduce(ReduceOp::SUM, Tensor{1.f});
  });
  EXPECT_GE(calls.load(), 3);
  EXPECT_EQ(sums[0], Tensor{2.f});
  EXPECT_EQ(sums[1], Tensor{2.f});
}

TEST(ScopedInterruptCheck, OnlyTheThreadThatMadeItAndTheInnermostApply) {
  std::atomic<int> outer{0}, inner{0};
  ScopedInterruptCheck a([&] { ++outer; }, 1ms);
  {
    ScopedInterruptCheck b([&] { ++inner; }, 1ms);
    MirroredStrategy strategy(cpu_devices(2));
    strategy.run([&] {
      if (current_replica_context().replica_id_in_sync_group() == 1) std::this_thread::sleep_for(50ms);
    });
    EXPECT_GT(inner.load(), 0);
    EXPECT_EQ(outer.load(), 0);
  }
  // Another thread's waits do not call this thread's check.
  std::thread other([] {
    MirroredStrategy strategy(cpu_devices(2));
    strategy.run([&] {
      if (current_replica_context().replica_id_in_sync_group() == 1) std::this_thread::sleep_for(50ms);
    });
  });
  other.join();
  EXPECT_EQ(outer.load(), 0);
}

// get_next waiting for a slow element: interrupted, then resumed with
// nothing lost (every element once, in order).
void expect_interrupted_then_complete(const Dataset& dataset, std::atomic<bool>& slow_done) {
  auto it = dataset.make_iterator();
  int interrupts = 0;
  std::vector<std::int64_t> seen;
  {
    std::atomic<bool> first{true};
    ScopedInterruptCheck check(
        [&] {
          if (first.exchange(false)) throw Stop();
        },
        10ms);
    try {
      it.get_next();
      ADD_FAILURE() << "get_next was not interrupted";
    } catch (const Stop&) {
      ++interrupts;
    }
  }
  slow_done = true;
  while (auto e = it.get_next_as_optional()) seen.push_back(e->tensor().data<std::int64_t>()[0]);
  EXPECT_EQ(interrupts, 1);
  EXPECT_EQ(seen, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5}));
}

Dataset slow_first_element(std::atomic<bool>& release) {
  return Dataset::range(6).map([&release](const Element& e) {
    if (e.tensor().data<std::int64_t>()[0] == 0) wait_for(release);
    return e;
  });
}

TEST(ScopedInterruptCheck, GetNextOfAPrefetchLosesNothing) {
  std::atomic<bool> release{false};
  expect_interrupted_then_complete(slow_first_element(release).prefetch(2), release);
}

TEST(ScopedInterruptCheck, GetNextOfAParallelMapLosesNothing) {
  std::atomic<bool> release{false};
  const Dataset d = Dataset::range(6).map(
      [&release](const Element& e) {
        if (e.tensor().data<std::int64_t>()[0] == 0) wait_for(release);
        return e;
      },
      3);
  expect_interrupted_then_complete(d, release);
}

TEST(ScopedInterruptCheck, DistributedGetNextLosesNoStep) {
  MirroredStrategy strategy(cpu_devices(2));
  std::atomic<bool> release{false};
  auto it = strategy.experimental_distribute_dataset(slow_first_element(release).batch(2)).make_iterator();
  {
    ScopedInterruptCheck check([] { throw Stop(); }, 10ms);
    EXPECT_THROW(it.get_next(), Stop);
  }
  release = true;
  std::vector<std::int64_t> seen;
  while (auto step = it.get_next_as_optional()) {
    for (const Element& e : *step) {
      for (std::int64_t v : e.tensor().data<std::int64_t>()) seen.push_back(v);
    }
  }
  EXPECT_EQ(seen, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5}));
}

}  // namespace
}  // namespace distribute
