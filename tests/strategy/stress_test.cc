// 10,000 run() calls that throw on random replicas: every failing call raises
// the error of a replica that threw, no call hangs, no replica thread stays
// blocked, and nothing leaks (the ASan build checks leaks at exit; the TSan
// build checks the hand-offs).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include "distribute/distribute.h"

namespace distribute {
namespace {

using ::testing::HasSubstr;

// Whether some replica of the run planned to throw `kind`.
bool planned(const std::vector<int>& plan, int kind) { return std::find(plan.begin(), plan.end(), kind) != plan.end(); }

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
      // The library's own error carries the replica that threw it.
      ASSERT_TRUE(any) << "run " << i;
      EXPECT_THAT(e.what(), HasSubstr("planned failure")) << "run " << i;
      ASSERT_TRUE(e.replica_id().has_value()) << "run " << i;
      ASSERT_EQ(plan[static_cast<std::size_t>(*e.replica_id())], 0) << "run " << i;
      ++failed_runs;
    } catch (const std::runtime_error& e) {
      // A foreign exception comes back as itself: same type, same message.
      ASSERT_TRUE(planned(plan, 1)) << "run " << i << " threw a runtime_error no replica planned: " << e.what();
      EXPECT_EQ(typeid(e), typeid(std::runtime_error)) << "run " << i << ": " << typeid(e).name();
      EXPECT_STREQ(e.what(), "planned failure") << "run " << i;
      ++failed_runs;
    } catch (int thrown) {
      ASSERT_TRUE(planned(plan, 2)) << "run " << i << " threw an int no replica planned";
      EXPECT_EQ(thrown, 7) << "run " << i;
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
