// A child forked without exec (Python's os.fork and multiprocessing, a data
// loader's workers) from a process with a live strategy: its copy runs
// nothing (FailedPreconditionError, not a wait for replica threads that do
// not exist in it) and ends without touching its parent's threads or locks;
// the parent's strategy goes on unharmed.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>

#include "distribute/distribute.h"
#include "testing/forked_child.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

using testing::ForkedChild;
using testing::ForkTest;

// A 1 MiB all_reduce: its results come from the collectives' buffer pool.
PerReplica<Tensor> reduce_big(MirroredStrategy& strategy) {
  return strategy.run(
      [] { return current_replica_context().all_reduce(ReduceOp::SUM, Tensor::zeros(DType::kFloat32, {256 * 1024})); });
}

TEST_F(ForkTest, CannotRunItsParentsStrategyAndDropsItWithoutWaiting) {
  auto strategy = std::make_unique<MirroredStrategy>(testing::cpu_devices(2));
  std::optional<PerReplica<Tensor>> pooled = reduce_big(*strategy);
  ForkedChild child([&]() -> std::string {
    try {
      strategy->run([] { return 1; });
      return "run in the child returned";
    } catch (const FailedPreconditionError& e) {
      const std::string what = e.what();
      if (what.find("forked") == std::string::npos) return "unexpected message: " + what;
    }
    pooled.reset();  // the pool's buffers, freed in the child
    strategy.reset();
    return "";
  });
  const auto report = child.report();
  ASSERT_TRUE(report.has_value()) << "the child hung or died";
  EXPECT_EQ(*report, "");
  const auto status = child.exit_status();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
  // The parent's strategy, pool and results are untouched.
  EXPECT_EQ(pooled->values().size(), 2u);
  const auto ids = strategy->run([] { return current_replica_context().replica_id_in_sync_group(); });
  EXPECT_EQ(ids.values()[1], 1);
  EXPECT_EQ(reduce_big(*strategy).values()[0].num_elements(), 256 * 1024);
}

TEST_F(ForkTest, ForkedWhileTheReplicasRunDropsItsCopyAndRunsANewStrategy) {
  // Forks while another thread keeps the replicas in collectives: every
  // child drops its copy of the strategy, builds its own and runs it.
  // (glibc lets a child "join" its parent's threads, so dropping the copy
  // without the fork checks seldom fails here; the first test is the one
  // that fails without them. This one holds the forking user's story.)
  MirroredStrategy strategy(testing::cpu_devices(2));
  std::atomic<bool> stop{false};
  std::thread driver([&] {
    while (!stop.load()) (void)reduce_big(strategy);
  });
  std::string failures;
  for (int i = 0; i < 10; ++i) {
    // (The driver's copy in the child is never destroyed: the child _exits.)
    ForkedChild child([&]() -> std::string {
      strategy.~MirroredStrategy();
      new (&strategy) MirroredStrategy(testing::cpu_devices(1));  // and a new one works in the child
      const auto one = strategy.run([] { return current_replica_context().num_replicas_in_sync(); });
      return one.values()[0] == 1 ? "" : "a new strategy in the child did not run";
    });
    const auto report = child.report(std::chrono::seconds(10));
    if (!report.has_value()) {
      failures += "child " + std::to_string(i) + " hung; ";
    } else if (!report->empty()) {
      failures += "child " + std::to_string(i) + ": " + *report + "; ";
    }
  }
  stop = true;
  driver.join();
  EXPECT_EQ(failures, "");
}

TEST_F(ForkTest, GetsADefaultStrategyOfItsOwn) {
  Strategy& parents = get_default_strategy();
  EXPECT_EQ(parents.run([] { return 7; }).values()[0], 7);
  ForkedChild child([&]() -> std::string {
    Strategy& mine = get_default_strategy();
    if (&mine == &parents) return "the child's default strategy is its parent's copy";
    if (&get_default_strategy() != &mine) return "a second call gave another default strategy";
    return mine.run([] { return 7; }).values()[0] == 7 ? "" : "the child's default strategy did not run";
  });
  const auto report = child.report();
  ASSERT_TRUE(report.has_value()) << "the child hung or died";
  EXPECT_EQ(*report, "");
  EXPECT_EQ(&get_default_strategy(), &parents);
}

}  // namespace
}  // namespace distribute
