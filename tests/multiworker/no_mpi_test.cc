// Built only without MPI: everything else works, and the multi-worker
// strategy says what is missing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "distribute/distribute.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

TEST(NoMpi, MultiWorkerStrategyRaisesUnimplemented) {
  const std::string msg = testing::message_of<UnimplementedError>([] { MultiWorkerMirroredStrategy strategy; });
  EXPECT_THAT(msg, ::testing::HasSubstr("this build of distribute has no MPI"));
  MirroredStrategy mirrored({"CPU:0", "CPU:1"});
  auto sum = mirrored.run([] { return get_replica_context()->all_reduce(ReduceOp::SUM, Tensor{1.f}); });
  EXPECT_EQ(sum[0], Tensor{2.f});
}

}  // namespace
}  // namespace distribute
