// Loss scaling (distribute/nn.h) with TF's expected values from
// tensorflow/python/ops/nn_loss_scaling_utilities_test.py, on every strategy
// of the matrix: the replicas' scaled losses add up to the global mean.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "distribute/distribute.h"
#include "distribute/nn.h"
#include "testing/strategy_matrix.h"

namespace distribute {
namespace {

using ::testing::HasSubstr;
using testing::message_of;
using testing::StrategyTest;

float scalar(const Tensor& t) { return t.cast(DType::kFloat32).data<float>()[0]; }

TEST(ComputeAverageLoss, DividesByTheGivenGlobalBatch) {
  // TF: compute_average_loss([1, 2, 3, 4, 5], global_batch_size=10) == 1.5.
  const Tensor loss = nn::compute_average_loss(Tensor{1, 2, 3, 4, 5}, {.global_batch_size = 10});
  EXPECT_EQ(loss.dtype(), DType::kFloat32);  // int32 losses give float32
  EXPECT_EQ(loss.rank(), 0);
  EXPECT_FLOAT_EQ(scalar(loss), 1.5f);
  // No strategy: one replica, the batch is the loss's own.
  EXPECT_FLOAT_EQ(scalar(nn::compute_average_loss(Tensor{2.5f, 6.2f, 5.f})), (2.5f + 6.2f + 5.f) / 3);
  EXPECT_FLOAT_EQ(scalar(nn::scale_regularization_loss(Tensor{2.5f, 6.2f, 5.f})), 2.5f + 6.2f + 5.f);
  // A replica whose share of the batch is empty contributes 0, never NaN.
  const Tensor empty = nn::compute_average_loss(Tensor(std::vector<float>{}, Shape{0}));
  EXPECT_EQ(scalar(empty), 0.f);
  EXPECT_EQ(scalar(nn::compute_average_loss(Tensor{1.f, 2.f}, {.global_batch_size = 0})), 0.f);
}

TEST(ComputeAverageLoss, BadInputIsNamed) {
  EXPECT_THAT(message_of<InvalidArgumentError>([] { nn::compute_average_loss(Tensor(2.f)); }),
              HasSubstr("expected per_example_loss of rank >= 1 (one loss per example), got"));
  // TF: "Incompatible shapes: [3] vs. [2]".
  EXPECT_THAT(message_of<InvalidArgumentError>([] {
                nn::compute_average_loss(Tensor{2.5f, 6.2f, 5.f},
                                         {.sample_weight = Tensor{0.2f, 0.8f}, .global_batch_size = 10});
              }),
              HasSubstr("sample_weight of shape (2,) does not broadcast to per_example_loss of shape (3,)"));
  EXPECT_THAT(message_of<InvalidArgumentError>(
                  [] { nn::compute_average_loss(Tensor{1.f}, {.global_batch_size = -1}); }),
              HasSubstr("expected global_batch_size >= 0, got -1"));
}

class LossScalingTest : public StrategyTest {};

// TF's testComputeAverageLossDefaultGlobalBatchSize and
// testScaleRegularizationLoss: the sum over replicas is the mean over the
// global batch, the regularization counted once.
TEST_P(LossScalingTest, ReplicaLossesSumToTheGlobalMean) {
  const auto losses = strategy().run([] { return nn::compute_average_loss(Tensor{2.5f, 6.2f, 5.f}); });
  EXPECT_NEAR(scalar(strategy().reduce(ReduceOp::SUM, losses, std::nullopt)), (2.5f + 6.2f + 5.f) / 3, 1e-6);
  const auto reg = strategy().run([] { return nn::scale_regularization_loss(Tensor{2.5f, 6.2f, 5.f}); });
  EXPECT_NEAR(scalar(strategy().reduce(ReduceOp::SUM, reg, std::nullopt)), 2.5f + 6.2f + 5.f, 1e-5);
}

// TF's testComputeAverageLossSampleWeights and testComputeAverageLossDtype.
TEST_P(LossScalingTest, SampleWeightsScalarPerExampleAndPerTimeStep) {
  auto sum_of = [&](auto fn) { return scalar(strategy().reduce(ReduceOp::SUM, strategy().run(fn), std::nullopt)); };
  EXPECT_NEAR(sum_of([] { return nn::compute_average_loss(Tensor{2.f, 4.f, 6.f}, {.sample_weight = Tensor(2.f)}); }),
              (2. + 4. + 6.) * 2. / 3, 1e-5);
  EXPECT_NEAR(sum_of([] {
                return nn::compute_average_loss(Tensor{2.f, 4.f, 6.f}, {.sample_weight = Tensor{0.3f, 0.5f, 0.2f}});
              }),
              (2. * 0.3 + 4. * 0.5 + 6. * 0.2) / 3, 1e-5);
  EXPECT_NEAR(sum_of([] {
                return nn::compute_average_loss(Tensor(std::vector<float>{2.f, 0.5f, 4.f, 1.f}, Shape{2, 2}),
                                                {.sample_weight = Tensor(std::vector<float>{0.3f, 0.7f, 0.2f, 0.8f},
                                                                         Shape{2, 2})});
              }),
              (2. * 0.3 + 0.5 * 0.7 + 4. * 0.2 + 1. * 0.8) / 2, 1e-5);
  // Broadcast along a dimension of 1: one weight per example of a [2, 2] loss.
  EXPECT_NEAR(sum_of([] {
                return nn::compute_average_loss(Tensor(std::vector<float>{2.f, 0.5f, 4.f, 1.f}, Shape{2, 2}),
                                                {.sample_weight = Tensor(std::vector<float>{0.5f, 2.f}, Shape{2, 1})});
              }),
              ((2. + 0.5) * 0.5 + (4. + 1.) * 2.) / 2, 1e-5);
  // TF's rank adjustment: [b, 1] weights for a [b] loss, [b] weights for a
  // [b, t] loss (one per example, over its time steps).
  EXPECT_NEAR(sum_of([] {
                return nn::compute_average_loss(Tensor{2.f, 4.f, 6.f},
                                                {.sample_weight = Tensor(std::vector<float>{0.3f, 0.5f, 0.2f},
                                                                         Shape{3, 1})});
              }),
              (2. * 0.3 + 4. * 0.5 + 6. * 0.2) / 3, 1e-5);
  EXPECT_NEAR(sum_of([] {
                return nn::compute_average_loss(Tensor(std::vector<float>{2.f, 0.5f, 4.f, 1.f}, Shape{2, 2}),
                                                {.sample_weight = Tensor{0.5f, 2.f}});
              }),
              ((2. + 0.5) * 0.5 + (4. + 1.) * 2.) / 2, 1e-5);
  const auto f64 = strategy().run(
      [] { return nn::compute_average_loss(Tensor{2.0, 4.0, 6.0}, {.sample_weight = Tensor(2.0)}); });
  EXPECT_EQ(strategy().reduce(ReduceOp::SUM, f64, std::nullopt).dtype(), DType::kFloat64);
}

// TF's ...InCrossReplicaContext tests: inside the scope, not inside run.
TEST_P(LossScalingTest, CrossReplicaContextRaisesWithoutAGlobalBatch) {
  auto scope = strategy().scope();
  if (!has_strategy()) GTEST_SKIP() << "the default strategy's scope is no cross-replica context";
  EXPECT_THAT(message_of<FailedPreconditionError>([] { nn::compute_average_loss(Tensor{2.f, 3.f}); }),
              HasSubstr("compute_average_loss: called in cross-replica context"));
  EXPECT_THAT(message_of<FailedPreconditionError>([] { nn::scale_regularization_loss(Tensor{2.f, 3.f}); }),
              HasSubstr("scale_regularization_loss: called in cross-replica context"));
  // With the global batch given it needs no replica context (as TF).
  EXPECT_FLOAT_EQ(scalar(nn::compute_average_loss(Tensor{2.f, 3.f}, {.global_batch_size = 4})), 1.25f);
}

DISTRIBUTE_INSTANTIATE_STRATEGY_MATRIX(LossScalingTest);

}  // namespace
}  // namespace distribute
