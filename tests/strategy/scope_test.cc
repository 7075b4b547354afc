// scope() nesting rules and the per-thread context queries (TF's
// distribute_lib: _CurrentDistributionContext, _DefaultDistributionContext,
// _require_cross_replica_or_default_context_extended).
#include <gtest/gtest.h>

#include <thread>

#include "distribute/distribute.h"
#include "testing/strategy_matrix.h"

namespace distribute {
namespace {

using testing::message_of;
using testing::StrategyTest;
using ::testing::HasSubstr;

class ScopeTest : public StrategyTest {};
DISTRIBUTE_INSTANTIATE_STRATEGY_MATRIX(ScopeTest);

TEST_P(ScopeTest, ScopeEntersCrossReplicaContext) {
  {
    auto scope = strategy().scope();
    EXPECT_TRUE(in_cross_replica_context());
    EXPECT_EQ(get_replica_context(), nullptr);
    EXPECT_EQ(get_cross_replica_context(), &strategy());
    EXPECT_EQ(&get_strategy(), &strategy());
    EXPECT_EQ(has_strategy(), !strategy().is_default());
  }
  EXPECT_FALSE(in_cross_replica_context());
  EXPECT_NE(get_replica_context(), nullptr);
  EXPECT_TRUE(get_strategy().is_default());
}

TEST_P(ScopeTest, SameStrategyScopeIsReentrant) {
  auto outer = strategy().scope();
  {
    auto inner = strategy().scope();
    EXPECT_EQ(&get_strategy(), &strategy());
  }
  EXPECT_TRUE(in_cross_replica_context());
  EXPECT_EQ(&get_strategy(), &strategy());
}

TEST_P(ScopeTest, RunAndReduceWorkInsideTheScope) {
  auto scope = strategy().scope();
  auto ones = strategy().run([] { return Tensor(1.f); });
  EXPECT_EQ(strategy().reduce(ReduceOp::SUM, ones), Tensor(static_cast<float>(n())));
  EXPECT_TRUE(in_cross_replica_context());  // still in the scope after run
}

TEST_P(ScopeTest, ScopeInsideTheReplicaFunctionRaises) {
  if (strategy().is_default()) {
    // No strategy is current inside the default strategy's replica function,
    // so its scope may be entered there (TF's default replica context).
    auto out = strategy().run([this] {
      auto s = strategy().scope();
      return in_cross_replica_context();
    });
    EXPECT_TRUE(out.primary());
    return;
  }
  const std::string msg =
      message_of<FailedPreconditionError>([&] { strategy().run([this] { auto s = strategy().scope(); }); });
  EXPECT_THAT(msg, HasSubstr("cross-replica context"));
  EXPECT_THAT(msg, HasSubstr("merge_call"));
}

TEST_P(ScopeTest, ReduceInsideTheReplicaFunctionRaises) {
  // Also for the default strategy: its run() pushes a real replica context
  // (only the untouched default state counts as "default context" in TF).
  const std::string msg = message_of<FailedPreconditionError>(
      [&] { strategy().run([this] { strategy().reduce(ReduceOp::SUM, Tensor(1.f)); }); });
  EXPECT_THAT(msg, HasSubstr("Strategy::reduce requires being in cross-replica context"));
}

TEST(ScopeNesting, DifferentStrategiesDoNotMix) {
  MirroredStrategy a({"CPU:0", "CPU:1"});
  MirroredStrategy b({"CPU:0", "CPU:1"});
  auto scope = a.scope();
  const std::string msg = message_of<FailedPreconditionError>([&] { auto inner = b.scope(); });
  EXPECT_THAT(msg, HasSubstr("Mixing different tf.distribute.Strategy objects"));
  EXPECT_THAT(msg, HasSubstr("a different object with the same devices"));
  EXPECT_THROW(b.run([] {}), FailedPreconditionError);
  EXPECT_THROW(b.reduce(ReduceOp::MEAN, Tensor(1.f)), FailedPreconditionError);
  EXPECT_EQ(&get_strategy(), &a);  // the failed entries left the stack as it was
}

TEST(ScopeNesting, DefaultScopeMustNotNestInsideAnother) {
  OneDeviceStrategy one("CPU:0");
  auto scope = one.scope();
  const std::string msg = message_of<FailedPreconditionError>([&] { auto inner = get_default_strategy().scope(); });
  EXPECT_THAT(msg, HasSubstr("must not nest"));
  EXPECT_THROW(get_default_strategy().run([] {}), FailedPreconditionError);
}

TEST(ScopeNesting, StrategyScopeInsideTheDefaultScopeIsAllowed) {
  MirroredStrategy mirrored({"CPU:0", "CPU:1"});
  auto outer = get_default_strategy().scope();
  EXPECT_TRUE(in_cross_replica_context());
  EXPECT_EQ(get_replica_context(), nullptr);
  {
    auto inner = mirrored.scope();
    EXPECT_EQ(&get_strategy(), &mirrored);
  }
  EXPECT_TRUE(get_strategy().is_default());
}

TEST(ScopeNesting, CrossReplicaCallInsideTheDefaultScopeNamesTheFix) {
  MirroredStrategy mirrored({"CPU:0", "CPU:1"});
  auto outer = get_default_strategy().scope();
  const std::string msg =
      message_of<FailedPreconditionError>([&] { mirrored.reduce(ReduceOp::MEAN, Tensor(1.f)); });
  EXPECT_THAT(msg, HasSubstr("strategy.scope()"));
}

TEST(ScopeNesting, ScopesArePerThread) {
  MirroredStrategy mirrored({"CPU:0", "CPU:1"});
  auto scope = mirrored.scope();
  bool other_thread_default = false;
  std::thread t([&] { other_thread_default = get_strategy().is_default() && !in_cross_replica_context(); });
  t.join();
  EXPECT_TRUE(other_thread_default);
  EXPECT_EQ(&get_strategy(), &mirrored);
}

TEST(ScopeNesting, ReplicaThreadsSeeTheirOwnContextNotTheCallersScope) {
  MirroredStrategy mirrored({"CPU:0", "CPU:1", "CPU:2"});
  auto scope = mirrored.scope();
  auto in_replica = mirrored.run([] { return get_replica_context() != nullptr && !in_cross_replica_context(); });
  for (bool ok : in_replica) EXPECT_TRUE(ok);
}

}  // namespace
}  // namespace distribute
