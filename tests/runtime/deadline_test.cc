// deadline_after: a timeout in seconds becomes a time point, and one too large
// for the clock means no deadline instead of an overflowed (past) one.
#include "runtime/deadline.h"

#include <gtest/gtest.h>

#include <chrono>
#include <limits>

#include "distribute/distribute.h"

namespace distribute {
namespace {

using internal::Clock;
using internal::deadline_after;

TEST(DeadlineAfter, IsThatFarFromNow) {
  const Clock::time_point before = Clock::now();
  const Clock::time_point d = deadline_after(2.5);
  const Clock::time_point after = Clock::now();
  EXPECT_GE(d, before + std::chrono::milliseconds(2500));
  EXPECT_LE(d, after + std::chrono::milliseconds(2500));
}

TEST(DeadlineAfter, TooLargeForTheClockMeansNoDeadline) {
  EXPECT_EQ(deadline_after(1e30), Clock::time_point::max());
  EXPECT_EQ(deadline_after(std::numeric_limits<double>::infinity()), Clock::time_point::max());
  EXPECT_EQ(deadline_after(std::numeric_limits<double>::max()), Clock::time_point::max());
  // About 292 years of nanoseconds fit: 100 years still is a real deadline.
  const double century = 100.0 * 365 * 24 * 3600;
  EXPECT_LT(deadline_after(century), Clock::time_point::max());
  EXPECT_GT(deadline_after(century), Clock::now() + std::chrono::hours(24 * 365 * 99));
}

// End to end: a collective whose timeout is infinite completes (an overflowed
// conversion would have put its deadline in the past).
TEST(DeadlineAfter, AnInfiniteCollectiveTimeoutWaitsAsLongAsNeeded) {
  MirroredStrategy s({"CPU:0", "CPU:1"}, CommunicationOptions{0, std::numeric_limits<double>::infinity()});
  auto out = s.run([] {
    ReplicaContext* ctx = get_replica_context();
    const float mine = static_cast<float>(ctx->replica_id_in_sync_group() + 1);
    return ctx->all_reduce(ReduceOp::SUM, Tensor(std::vector<float>{mine}, Shape{1})).data<float>()[0];
  });
  EXPECT_EQ(out[0], 3.0f);
  EXPECT_EQ(out[1], 3.0f);
}

}  // namespace
}  // namespace distribute
