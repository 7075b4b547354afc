// StrategyExtended (TF's strategy.extended): reduce_to, batch_reduce_to and
// update as a custom optimizer uses them from merge_call, and the
// informational pieces. The optimizer step follows TF's pattern
// (OptimizerV2._distributed_apply: merge_call -> batch_reduce_to(SUM) ->
// update per variable).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "distribute/strategy_extended.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

using testing::cpu_devices;
using ::testing::HasSubstr;
using testing::message_of;

// A variable created in `strategy`'s scope.
Variable in_scope(Strategy& strategy, Tensor initial, VariableOptions options) {
  StrategyScope scope = strategy.scope();
  return Variable(std::move(initial), std::move(options));
}

TEST(StrategyExtended, AnOptimizerStepThroughMergeCallBatchReduceToAndUpdate) {
  MirroredStrategy strategy(cpu_devices(2));
  StrategyScope scope = strategy.scope();
  Variable w(Tensor{1.f, 2.f}, {.name = "w"});
  Variable b(Tensor(0.5f), {.name = "b"});
  strategy.run([&] {
    ReplicaContext& ctx = current_replica_context();
    const float r = static_cast<float>(ctx.replica_id_in_sync_group());
    const Tensor gw{r + 1.f, 10.f * (r + 1.f)};  // replica 0: (1, 10); replica 1: (2, 20)
    const Tensor gb(r);
    ctx.merge_call(
        [&](Strategy& s, const PerReplica<Tensor>& grad_w, const PerReplica<Tensor>& grad_b) {
          StrategyExtended ext = s.extended();
          const std::vector<Mirrored<Tensor>> reduced = ext.batch_reduce_to(ReduceOp::SUM, {{grad_w, w}, {grad_b, b}});
          ASSERT_EQ(reduced.size(), 2u);
          EXPECT_EQ(reduced[0].values().size(), 2u);
          ext.update(
              w, [](Variable& v, const Tensor& g) { v.assign_sub(g * 0.1); }, reduced[0]);
          ext.update(
              b, [](Variable& v, const Tensor& g) { v.assign_sub(g * 0.1); }, reduced[1]);
        },
        gw, gb);
  });
  // w - 0.1 * (3, 30), b - 0.1 * 1, on every component.
  for (const Tensor& c : w.values()) {
    EXPECT_FLOAT_EQ(c.data<float>()[0], 0.7f);
    EXPECT_FLOAT_EQ(c.data<float>()[1], -1.f);
  }
  for (const Tensor& c : b.values()) EXPECT_FLOAT_EQ(c.item<float>(), 0.4f);
}

TEST(StrategyExtended, UpdateCallsFnPerComponentWhichSeesAndChangesOnlyItsOwn) {
  MirroredStrategy strategy(cpu_devices(3));
  Variable counts = in_scope(
      strategy, Tensor(0.f),
      {.name = "counts", .synchronization = VariableSynchronization::ON_READ, .aggregation = VariableAggregation::SUM});
  strategy.run(
      [&] { counts.assign_add(Tensor(static_cast<float>(current_replica_context().replica_id_in_sync_group()))); });
  StrategyExtended ext = strategy.extended();
  const PerReplica<Tensor> extra({Tensor(100.f), Tensor(200.f), Tensor(300.f)});
  const Mirrored<float> seen = ext.update(
      counts,
      [](Variable& v, const Tensor& add) {
        const float before = v.value().item<float>();
        v.assign_add(add);
        return before;
      },
      extra);
  EXPECT_EQ(seen.values(), (std::vector<float>{0.f, 1.f, 2.f}));
  EXPECT_EQ(counts.values(), (std::vector<Tensor>{Tensor(100.f), Tensor(201.f), Tensor(302.f)}));
  EXPECT_EQ(counts.value(), Tensor(603.f));  // cross-replica read: the SUM again
  // A plain argument goes to every component; a void fn returns nothing.
  ext.update(
      counts, [](Variable& v, const Tensor& x) { v.assign(x); }, Tensor(1.f));
  EXPECT_EQ(counts.values(), (std::vector<Tensor>{Tensor(1.f), Tensor(1.f), Tensor(1.f)}));
  // An ordinary variable: fn once.
  Variable plain(Tensor(5.f));
  int calls = 0;
  ext.update(plain, [&](Variable& v) {
    ++calls;
    v.assign_add(Tensor(1.f));
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(plain.value(), Tensor(6.f));
}

TEST(StrategyExtended, ReduceToFollowsReducesRulesAndPlacesACopyPerComponent) {
  MirroredStrategy strategy(cpu_devices(2));
  const Variable v = in_scope(strategy, Tensor(0.0), {.name = "v"});
  StrategyExtended ext = strategy.extended();
  const Mirrored<Tensor> mean = ext.reduce_to(ReduceOp::MEAN, PerReplica<Tensor>({Tensor(1.0), Tensor(3.0)}), v);
  EXPECT_EQ(mean.values(), (std::vector<Tensor>{Tensor(2.0), Tensor(2.0)}));
  EXPECT_EQ(ext.reduce_to(ReduceOp::SUM, Mirrored<Tensor>({Tensor(1.0), Tensor(1.0)}), v).values(),
            (std::vector<Tensor>{Tensor(2.0), Tensor(2.0)}));
  EXPECT_EQ(ext.reduce_to(ReduceOp::MEAN, Tensor(4.0), v).values(), (std::vector<Tensor>{Tensor(4.0), Tensor(4.0)}));
  EXPECT_THROW(ext.reduce_to(ReduceOp::SUM, Tensor(4.0), v), InvalidArgumentError);
}

TEST(StrategyExtended, RefusesReplicaContextOtherStrategiesAndMiscountedArguments) {
  MirroredStrategy strategy(cpu_devices(2)), other(cpu_devices(2));
  const Variable v = in_scope(strategy, Tensor(0.f), {.name = "v"});
  const Variable theirs = in_scope(other, Tensor(0.f), {.name = "theirs"});
  StrategyExtended ext = strategy.extended();
  EXPECT_THAT(message_of<FailedPreconditionError>(
                  [&] { strategy.run([&] { ext.update(v, [](Variable& x) { x.assign(Tensor(1.f)); }); }); }),
              HasSubstr("from merge_call's function"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { ext.update(theirs, [](Variable&) {}); }),
              HasSubstr("variable 'theirs' belongs to"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] {
                ext.reduce_to(ReduceOp::SUM, PerReplica<Tensor>({Tensor(1.f), Tensor(1.f)}), theirs);
              }),
              HasSubstr("destination variable 'theirs'"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] {
                ext.update(
                    v, [](Variable&, const Tensor&) {}, PerReplica<Tensor>({Tensor(1.f), Tensor(1.f), Tensor(1.f)}));
              }),
              HasSubstr("one value per component of 'v' (2), got 3"));
  EXPECT_EQ(v.values(), (std::vector<Tensor>{Tensor(0.f), Tensor(0.f)}));
}

TEST(StrategyExtended, KnowsItsVariablesDevicesAndWhoCheckpoints) {
  MirroredStrategy strategy(cpu_devices(2));
  const Variable mine = in_scope(strategy, Tensor(0.f), {});
  const Variable plain(Tensor(0.f));
  StrategyExtended ext = strategy.extended();
  EXPECT_TRUE(ext.variable_created_in_scope(mine));
  EXPECT_FALSE(ext.variable_created_in_scope(plain));
  EXPECT_TRUE(get_strategy().extended().variable_created_in_scope(plain));
  EXPECT_FALSE(get_strategy().extended().variable_created_in_scope(mine));
  EXPECT_EQ(ext.worker_devices(), (std::vector<std::string>{"/job:localhost/replica:0/task:0/device:CPU:0",
                                                            "/job:localhost/replica:0/task:0/device:CPU:1"}));
  EXPECT_TRUE(ext.should_checkpoint());
  EXPECT_TRUE(ext.should_save_summary());
  EXPECT_EQ(&ext.strategy(), &strategy);
}

}  // namespace
}  // namespace distribute
