// 10,000 run() calls that throw on random replicas: every failing call raises
// the error of a replica that threw, no call hangs, no replica thread stays
// blocked, and nothing leaks (the ASan build checks leaks at exit; the TSan
// build checks the hand-offs).
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <vector>

#include "distribute/distribute.h"

namespace distribute {
namespace {

void stress(int replicas, int runs) {
  std::vector<std::string> devices;
  for (int i = 0; i < replicas; ++i) devices.push_back("CPU:" + std::to_string(i));
  MirroredStrategy strategy(devices);
  std::mt19937 rng(12345);
  std::bernoulli_distribution throws(0.3);
  std::uniform_int_distribution<int> kind(0, 2);
  int failed_runs = 0;
  for (int i = 0; i < runs; ++i) {
    // Decide up front which replicas throw, and what.
    std::vector<int> plan(static_cast<std::size_t>(replicas), -1);
    bool any = false;
    for (int& p : plan) {
      if (throws(rng)) {
        p = kind(rng);
        any = true;
      }
    }
    std::atomic<int> completed{0};
    try {
      auto out = strategy.run([&] {
        const int r = get_replica_context()->replica_id_in_sync_group();
        switch (plan[static_cast<std::size_t>(r)]) {
          case 0: throw InvalidArgumentError("planned failure");
          case 1: throw std::runtime_error("planned failure");
          case 2: throw 7;  // not even a std::exception
          default: break;
        }
        completed.fetch_add(1);
        return r;
      });
      ASSERT_FALSE(any) << "run " << i << " returned although a replica threw";
      ASSERT_EQ(out.size(), replicas);
    } catch (const InvalidArgumentError& e) {
      ASSERT_TRUE(any);
      ASSERT_TRUE(e.replica_id().has_value());
      ASSERT_EQ(plan[static_cast<std::size_t>(*e.replica_id())], 0) << "run " << i;
      ++failed_runs;
    } catch (const std::runtime_error&) {
      ASSERT_TRUE(any);
      ++failed_runs;
    } catch (int) {
      ASSERT_TRUE(any);
      ++failed_runs;
    }
    int planned_ok = 0;
    for (int p : plan) planned_ok += p < 0 ? 1 : 0;
    ASSERT_EQ(completed.load(), planned_ok) << "every non-throwing replica ran to completion in run " << i;
  }
  EXPECT_GT(failed_runs, runs / 2);
}

TEST(RunStress, TenThousandRunsWithRandomFailuresOnFourReplicas) { stress(4, 10000); }
TEST(RunStress, TenThousandRunsWithRandomFailuresOnThreeReplicas) { stress(3, 10000); }
TEST(RunStress, TenThousandRunsWithRandomFailuresOnTwoReplicas) { stress(2, 10000); }

TEST(RunStress, StrategiesCreatedAndDestroyedRepeatedly) {
  for (int i = 0; i < 200; ++i) {
    MirroredStrategy strategy({"CPU:0", "CPU:1", "CPU:2"});
    if (i % 2 == 0) {
      auto out = strategy.run([] { return 1; });
      ASSERT_EQ(out.size(), 3);
    }
  }
}

}  // namespace
}  // namespace distribute
