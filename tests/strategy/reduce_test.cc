// Strategy::reduce and experimental_local_results over the strategy matrix.
#include <gtest/gtest.h>

#include <vector>

#include "distribute/distribute.h"
#include "testing/strategy_matrix.h"

namespace distribute {
namespace {

using testing::message_of;
using testing::StrategyTest;
using ::testing::HasSubstr;

class ReduceTest : public StrategyTest {
 protected:
  // Replica r holds [r + 1, 2 (r + 1)].
  PerReplica<Tensor> ramp() {
    std::vector<Tensor> v;
    for (int r = 0; r < n(); ++r) v.push_back(Tensor{static_cast<float>(r + 1), static_cast<float>(2 * (r + 1))});
    return PerReplica<Tensor>(v);
  }
  float triangle() { return static_cast<float>(n() * (n() + 1) / 2); }
};
DISTRIBUTE_INSTANTIATE_STRATEGY_MATRIX(ReduceTest);

TEST_P(ReduceTest, SumAndMeanAcrossReplicas) {
  EXPECT_EQ(strategy().reduce(ReduceOp::SUM, ramp()), (Tensor{triangle(), 2 * triangle()}));
  EXPECT_TRUE(allclose(strategy().reduce(ReduceOp::MEAN, ramp()),
                       Tensor{triangle() / static_cast<float>(n()), 2 * triangle() / static_cast<float>(n())}));
}

TEST_P(ReduceTest, SumAndMeanAlongAnAxis) {
  const Tensor sum = strategy().reduce(ReduceOp::SUM, ramp(), 0);
  EXPECT_EQ(sum, Tensor(3 * triangle()));
  const Tensor mean = strategy().reduce(ReduceOp::MEAN, ramp(), 0);
  EXPECT_TRUE(allclose(mean, Tensor(3 * triangle() / static_cast<float>(2 * n()))));
  EXPECT_EQ(strategy().reduce(ReduceOp::SUM, ramp(), -1), sum);  // negative axes count from the end
}

TEST_P(ReduceTest, TwoDimensionalValuesReduceAlongEitherAxis) {
  std::vector<Tensor> v;
  for (int r = 0; r < n(); ++r) v.push_back(Tensor{{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}} * static_cast<double>(r + 1));
  PerReplica<Tensor> values(v);
  const double t = static_cast<double>(triangle());
  EXPECT_EQ(strategy().reduce(ReduceOp::SUM, values, 0), (Tensor{5.0 * t, 7.0 * t, 9.0 * t}));
  EXPECT_EQ(strategy().reduce(ReduceOp::SUM, values, 1), (Tensor{6.0 * t, 15.0 * t}));
  EXPECT_TRUE(allclose(strategy().reduce(ReduceOp::MEAN, values, 1), Tensor{2.0 * t / n(), 5.0 * t / n()}));
}

TEST_P(ReduceTest, IntegerMeanIsTrueDivisionInFloat64) {
  std::vector<Tensor> v;
  for (int r = 0; r < n(); ++r) v.push_back(Tensor{r, 1});
  const Tensor mean = strategy().reduce(ReduceOp::MEAN, PerReplica<Tensor>(v), 0);
  EXPECT_EQ(mean.dtype(), DType::kFloat64);
  // sum over replicas of (r + 1) = n (n + 1) / 2, over 2n elements.
  EXPECT_TRUE(allclose(mean, Tensor(static_cast<double>(triangle()) / (2.0 * n()))));
  if (n() > 1) {
    const Tensor across = strategy().reduce(ReduceOp::MEAN, PerReplica<Tensor>(v));
    EXPECT_EQ(across.dtype(), DType::kFloat64);
    EXPECT_EQ(across, (Tensor{static_cast<double>(n() - 1) / 2.0, 1.0}));
  }
}

TEST_P(ReduceTest, WrongNumberOfValuesIsRejected) {
  std::vector<Tensor> v(static_cast<std::size_t>(n() + 1), Tensor(1.f));
  const std::string msg =
      message_of<InvalidArgumentError>([&] { strategy().reduce(ReduceOp::SUM, PerReplica<Tensor>(v)); });
  EXPECT_THAT(msg, HasSubstr("one value per replica"));
}

TEST_P(ReduceTest, AxisOutOfRangeNamesTheReplica) {
  const std::string msg = message_of<InvalidArgumentError>([&] { strategy().reduce(ReduceOp::SUM, ramp(), 1); });
  EXPECT_THAT(msg, HasSubstr("replica 0"));
  EXPECT_THAT(msg, HasSubstr("axis 1"));
}

TEST_P(ReduceTest, PlainValuesFollowTf) {
  const Tensor t{1.f, 2.f, 3.f};
  if (strategy().is_default() || n() == 1) {
    EXPECT_EQ(strategy().reduce(ReduceOp::SUM, t), t);
  } else {
    const std::string msg = message_of<InvalidArgumentError>([&] { strategy().reduce(ReduceOp::SUM, t); });
    EXPECT_THAT(msg, HasSubstr("A non-DistributedValues value"));
    EXPECT_THAT(msg, HasSubstr("ReduceOp.SUM"));
  }
  EXPECT_EQ(strategy().reduce(ReduceOp::MEAN, t), t);
  // With an axis every replica reduces the value, so SUM counts it N times on
  // MirroredStrategy (TF's behaviour) and MEAN is the plain mean.
  const int copies = strategy().is_default() || strategy().to_string().rfind("OneDevice", 0) == 0 ? 1 : n();
  EXPECT_EQ(strategy().reduce(ReduceOp::SUM, t, 0), Tensor(6.f * static_cast<float>(copies)));
  EXPECT_EQ(strategy().reduce(ReduceOp::MEAN, t, 0), Tensor(2.f));
}

TEST_P(ReduceTest, MirroredValues) {
  Mirrored<Tensor> m(std::vector<Tensor>(static_cast<std::size_t>(n()), Tensor{4.f, 8.f}));
  EXPECT_EQ(strategy().reduce(ReduceOp::MEAN, m), (Tensor{4.f, 8.f}));
  // SUM adds the copies, as TF's MirroredStrategy does (mirrored_strategy.py
  // returns a Mirrored value only for MEAN).
  const float copies = static_cast<float>(n());
  EXPECT_EQ(strategy().reduce(ReduceOp::SUM, m), (Tensor{4.f * copies, 8.f * copies}));
  EXPECT_EQ(strategy().reduce(ReduceOp::SUM, m, 0), Tensor(12.f * static_cast<float>(n())));
}

TEST_P(ReduceTest, NumbersReturnedByRunReduceAsScalars) {
  auto losses = strategy().run([] { return static_cast<float>(get_replica_context()->replica_id_in_sync_group() + 1); });
  EXPECT_EQ(strategy().reduce(ReduceOp::SUM, losses), Tensor(triangle()));
}

TEST_P(ReduceTest, SumIsBitwiseDeterministic) {
  std::vector<Tensor> v;
  for (int r = 0; r < n(); ++r) v.push_back(Tensor{0.1f * static_cast<float>(r + 1), 1e-7f, 3.3f});
  PerReplica<Tensor> values(v);
  const Tensor first = strategy().reduce(ReduceOp::SUM, values);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(strategy().reduce(ReduceOp::SUM, values), first);
}

TEST_P(ReduceTest, LocalResultsAreInReplicaOrder) {
  auto values = ramp();
  auto local = strategy().experimental_local_results(values);
  ASSERT_EQ(static_cast<int>(local.size()), n());
  for (int r = 0; r < n(); ++r) EXPECT_TRUE(local[static_cast<std::size_t>(r)].shares_buffer_with(values[r]));
  auto plain = strategy().experimental_local_results(Tensor(3.f));
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0], Tensor(3.f));
}

// The seed's examples 4 and 5 and the partial-batch cases, on 2 and 3 replicas.
TEST(ReduceSeed, ExampleFourSumsTheFirstGlobalBatch) {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  PerReplica<Tensor> batch({Tensor{5.f}, Tensor{6.f}});
  EXPECT_EQ(strategy.reduce(ReduceOp::SUM, batch, 0).to_string(), "Tensor(11.0, shape=(), dtype=float32)");
}

TEST(ReduceSeed, ExampleFiveListsTheLocalResults) {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  PerReplica<Tensor> batch({Tensor{5.f}, Tensor{6.f}});
  auto local = strategy.experimental_local_results(batch);
  ASSERT_EQ(local.size(), 2u);
  EXPECT_EQ(local[0].to_string(), "Tensor([5.], shape=(1,), dtype=float32)");
  EXPECT_EQ(local[1].to_string(), "Tensor([6.], shape=(1,), dtype=float32)");
}

TEST(ReduceSeed, MeanWithAxisWeighsPartialBatchesByElementCount) {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  PerReplica<Tensor> partial({Tensor{5.f, 6.f}, Tensor{7.f}});
  EXPECT_EQ(strategy.reduce(ReduceOp::MEAN, partial, 0), Tensor(6.f));  // not 6.25
  EXPECT_EQ(strategy.reduce(ReduceOp::SUM, partial, 0), Tensor(18.f));
}

TEST(ReduceSeed, EmptyBatchesWeighNothing) {
  MirroredStrategy strategy({"CPU:0", "CPU:1", "CPU:2"});
  PerReplica<Tensor> uneven({Tensor{5.f, 6.f}, Tensor(std::vector<float>{}, {0}), Tensor{7.f}});
  EXPECT_EQ(strategy.reduce(ReduceOp::MEAN, uneven, 0), Tensor(6.f));
  EXPECT_EQ(strategy.reduce(ReduceOp::SUM, uneven, 0), Tensor(18.f));
}

TEST(ReduceErrors, MismatchedShapesNameBothReplicas) {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  PerReplica<Tensor> values({Tensor{1.f, 2.f}, Tensor{1.f, 2.f, 3.f}});
  const std::string msg = message_of<InvalidArgumentError>([&] { strategy.reduce(ReduceOp::SUM, values); });
  EXPECT_THAT(msg, HasSubstr("shape (2,) dtype float32 on replica 0"));
  EXPECT_THAT(msg, HasSubstr("shape (3,) dtype float32 on replica 1"));
}

TEST(ReduceErrors, MismatchedDtypesNameBothReplicas) {
  MirroredStrategy strategy({"CPU:0", "CPU:1", "CPU:2"});
  PerReplica<Tensor> values({Tensor{1.f}, Tensor{1.f}, Tensor{1}});
  const std::string msg = message_of<InvalidArgumentError>([&] { strategy.reduce(ReduceOp::MEAN, values); });
  EXPECT_THAT(msg, HasSubstr("dtype float32 on replica 0"));
  EXPECT_THAT(msg, HasSubstr("dtype int32 on replica 2"));
}

TEST(ReduceErrors, ShapesThatCannotBeReducedAlongTheAxis) {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  PerReplica<Tensor> values({Tensor{{1.f, 2.f}, {3.f, 4.f}}, Tensor{{1.f, 2.f, 3.f}}});
  const std::string msg = message_of<InvalidArgumentError>([&] { strategy.reduce(ReduceOp::SUM, values, 0); });
  EXPECT_THAT(msg, HasSubstr("(2,)"));
  EXPECT_THAT(msg, HasSubstr("(3,)"));
  EXPECT_THAT(msg, HasSubstr("replica 1"));
  EXPECT_THAT(msg, HasSubstr("per-replica values of shape (2, 2) and (1, 3)"));
  // Along axis 1 the same values are also incompatible: (2,) vs (1,).
  EXPECT_THROW(strategy.reduce(ReduceOp::SUM, values, 1), InvalidArgumentError);
}

}  // namespace
}  // namespace distribute
