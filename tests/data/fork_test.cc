// Iterators with background threads (prefetch, a parallel map, a
// distributed dataset's per-replica buffer) in a child forked without exec:
// the child's copy raises FailedPreconditionError instead of waiting for a
// thread that exists only in the parent, and is dropped without joining it;
// the parent's iterator goes on where it was.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distribute/distribute.h"
#include "testing/forked_child.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

using testing::ForkedChild;
using testing::ForkTest;

// Runs `next` in a forked child, which expects FailedPreconditionError
// naming the fork, then `drop`; the child must report success.
void expect_child_refuses(const std::function<void()>& next, const std::function<void()>& drop) {
  ForkedChild child([&]() -> std::string {
    try {
      next();
      return "next() in the child returned";
    } catch (const FailedPreconditionError& e) {
      if (std::string(e.what()).find("forked") == std::string::npos) return std::string("message: ") + e.what();
    }
    drop();
    return "";
  });
  const auto report = child.report();
  ASSERT_TRUE(report.has_value()) << "the child hung or died";
  EXPECT_EQ(*report, "");
}

std::int64_t value(const Element& e) { return e.tensor().item<std::int64_t>(); }
// The first row of replica `r`'s part of a step.
std::int64_t first_row(const std::vector<Element>& step, std::size_t r) {
  return step[r].tensor()[0].item<std::int64_t>();
}

TEST_F(ForkTest, PrefetchIteratorRaisesAndTheParentsGoesOn) {
  auto it = std::make_unique<Dataset::Iterator>(Dataset::range(100).prefetch(4).make_iterator());
  EXPECT_EQ(value(it->get_next()), 0);
  expect_child_refuses([&] { (void)it->get_next(); }, [&] { it.reset(); });
  EXPECT_EQ(value(it->get_next()), 1);
}

TEST_F(ForkTest, ParallelMapIteratorRaisesAndTheParentsGoesOn) {
  const Dataset mapped =
      Dataset::range(100).map([](const Element& e) { return Element(e.tensor() + Tensor(std::int64_t{10})); }, 2);
  auto it = std::make_unique<Dataset::Iterator>(mapped.make_iterator());
  EXPECT_EQ(value(it->get_next()), 10);
  expect_child_refuses([&] { (void)it->get_next(); }, [&] { it.reset(); });
  EXPECT_EQ(value(it->get_next()), 11);
}

TEST_F(ForkTest, DistributedIteratorRaisesAndTheParentsGoesOn) {
  MirroredStrategy strategy(testing::cpu_devices(2));
  auto it = std::make_unique<DistributedIterator>(
      strategy.experimental_distribute_dataset(Dataset::range(40).batch(4)).make_iterator());
  EXPECT_EQ(first_row(strategy.experimental_local_results(it->get_next()), 1), 2);
  expect_child_refuses([&] { (void)it->get_next(); }, [&] { it.reset(); });
  EXPECT_EQ(first_row(strategy.experimental_local_results(it->get_next()), 1), 6);
}

TEST_F(ForkTest, ForkedWhileTheMapFunctionRunsMakesItsOwnThreadsThenDropsTheCopy) {
  // The parent's map workers and producer are inside fn at the fork; the
  // child starts threads of its own (which may reuse the memory of the
  // parent's thread handles), then drops its copy of the iterator: nothing
  // of the copy may act on the child's threads.
  std::atomic<bool> inside{false}, release{false};
  const Dataset mapped = Dataset::range(100)
                             .map(
                                 [&](const Element& e) {
                                   if (value(e) >= 3) {
                                     inside = true;
                                     while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                                   }
                                   return e;
                                 },
                                 2)
                             .prefetch(2);
  auto it = std::make_unique<Dataset::Iterator>(mapped.make_iterator());
  EXPECT_EQ(value(it->get_next()), 0);
  while (!inside) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ForkedChild child([&]() -> std::string {
    MirroredStrategy own(testing::cpu_devices(2));
    auto ids = [&] { return own.run([] { return current_replica_context().replica_id_in_sync_group(); }); };
    if (ids().values()[1] != 1) return "the child's own strategy did not run";
    auto own_it = Dataset::range(10).prefetch(2).make_iterator();
    it.reset();
    if (ids().values()[1] != 1) return "the child's own strategy stopped after the copy was dropped";
    if (value(own_it.get_next()) != 0) return "the child's own iterator did not run";
    return "";
  });
  const auto report = child.report();
  release = true;
  ASSERT_TRUE(report.has_value()) << "the child hung or died";
  EXPECT_EQ(*report, "");
  EXPECT_EQ(value(it->get_next()), 1);
}

}  // namespace
}  // namespace distribute
