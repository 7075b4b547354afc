// Mistakes users make with strategies, each a clear error (issue 12): a
// value of one strategy passed to another (item 5), the replica context
// asked for outside a replica (item 6), an ordinary variable updated by
// several replicas (item 2, also run under ThreadSanitizer), an unbatched
// dataset distributed (item 8).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

using ::testing::HasSubstr;
using testing::cpu_devices;
using testing::message_of;

// --- Values remember their strategy (item 5) ---------------------------
// TF: "Mixing different tf.distribute.Strategy objects" is an error; a
// PerReplica of strategy A is not a valid argument of strategy B's run.

TEST(ValuesRememberTheirStrategy, RunRejectsAnotherStrategysResult) {
  MirroredStrategy a(cpu_devices(2));
  MirroredStrategy b(cpu_devices(2));
  const auto from_a = a.run([] { return Tensor{1.f}; });
  EXPECT_EQ(from_a.origin(), a.id());
  const std::string msg = message_of<InvalidArgumentError>([&] { b.run([](const Tensor& x) { return x; }, from_a); });
  EXPECT_THAT(msg, HasSubstr("Strategy::run: argument 0"));
  EXPECT_THAT(msg, HasSubstr("strategy #" + std::to_string(a.id())));
  EXPECT_THAT(msg, HasSubstr("strategy #" + std::to_string(b.id())));
  EXPECT_THAT(msg, HasSubstr("MirroredStrategy(CPU:0, CPU:1)"));
  // Its own strategy takes it.
  const auto again = a.run([](const Tensor& x) { return x + 1.f; }, from_a);
  EXPECT_EQ(again[1], Tensor{2.f});
}

TEST(ValuesRememberTheirStrategy, ReduceAndGatherRejectAnotherStrategysValues) {
  MirroredStrategy a(cpu_devices(2));
  MirroredStrategy b(cpu_devices(2));
  const auto from_a = a.run([] { return Tensor{1.f}; });
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { b.reduce(ReduceOp::SUM, from_a); }),
              HasSubstr("strategy #" + std::to_string(a.id())));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { b.gather(from_a, 0); }),
              HasSubstr("Strategy::gather"));
  EXPECT_EQ(a.reduce(ReduceOp::SUM, from_a), Tensor{2.f});
}

TEST(ValuesRememberTheirStrategy, DistributedDatasetStepsBelongToTheirStrategy) {
  MirroredStrategy a(cpu_devices(2));
  MirroredStrategy b(cpu_devices(2));
  auto it = a.experimental_distribute_dataset(Dataset::range(4).batch(2)).make_iterator();
  const PerReplica<Element> step = it.get_next();
  EXPECT_EQ(step.origin(), a.id());
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { b.run([](const Element& e) { return e.tensor(); }, step); }),
              HasSubstr("another one"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { b.reduce(ReduceOp::SUM, step, 0); }),
              HasSubstr("strategy #" + std::to_string(a.id())));
  const auto doubled = a.run([](const Element& e) { return e.tensor() * std::int64_t{2}; }, step);
  EXPECT_EQ(doubled[1], (Tensor{std::int64_t{2}}));
}

TEST(ValuesRememberTheirStrategy, ValuesBuiltByHandAreAcceptedByAnyStrategy) {
  MirroredStrategy a(cpu_devices(2));
  MirroredStrategy b(cpu_devices(2));
  const PerReplica<Tensor> by_hand(std::vector<Tensor>{Tensor{1.f}, Tensor{2.f}});
  EXPECT_EQ(by_hand.origin(), 0u);
  EXPECT_EQ(a.reduce(ReduceOp::SUM, by_hand), Tensor{3.f});
  EXPECT_EQ(b.reduce(ReduceOp::SUM, by_hand), Tensor{3.f});
  // ... and so is a PerReplica rebuilt from another strategy's local results.
  const auto from_a = a.run([] { return Tensor{5.f}; });
  const PerReplica<Tensor> moved(a.experimental_local_results(from_a));
  EXPECT_EQ(b.reduce(ReduceOp::SUM, moved), Tensor{10.f});
}

TEST(ValuesRememberTheirStrategy, AValueOfADestroyedStrategyIsNotTakenForANewOnes) {
  std::optional<PerReplica<Tensor>> old;
  {
    MirroredStrategy gone(cpu_devices(2));
    old = gone.run([] { return Tensor{1.f}; });
  }
  MirroredStrategy fresh(cpu_devices(2));  // may reuse the old one's address, never its id
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { fresh.reduce(ReduceOp::SUM, *old); }), HasSubstr("destroyed"));
}

// --- The replica context as a reference (item 6) ------------------------

TEST(CurrentReplicaContext, InsideRunIsTheReplicasContext) {
  MirroredStrategy s(cpu_devices(2));
  const auto ids = s.run([] { return current_replica_context().replica_id_in_sync_group(); });
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 1);
  const auto sums = s.run([] { return current_replica_context().all_reduce(ReduceOp::SUM, Tensor{1.f}); });
  EXPECT_EQ(sums[1], Tensor{2.f});
}

TEST(CurrentReplicaContext, InCrossReplicaContextRaisesInsteadOfANullPointer) {
  MirroredStrategy s(cpu_devices(2));
  auto scope = s.scope();
  EXPECT_EQ(get_replica_context(), nullptr);  // TF's spelling: None there
  const std::string msg = message_of<FailedPreconditionError>(
      [] { current_replica_context().all_reduce(ReduceOp::SUM, Tensor{1.f}); });
  EXPECT_THAT(msg, HasSubstr("not in a replica context: call this inside strategy.run"));
  EXPECT_THAT(msg, HasSubstr("MirroredStrategy(CPU:0, CPU:1)"));
}

TEST(CurrentReplicaContext, DefaultStateIsTheDefaultReplicaContext) {
  EXPECT_EQ(&current_replica_context(), get_replica_context());
  EXPECT_EQ(current_replica_context().num_replicas_in_sync(), 1);
}

// --- An ordinary variable and several replicas (item 2) -----------------

TEST(OrdinaryVariable, UpdateFromSeveralReplicasRaisesNamingTheFix) {
  Variable counter(Tensor{0.f}, VariableOptions{.name = "counter"});  // outside strategy.scope()
  MirroredStrategy s(cpu_devices(2));
  for (int attempt = 0; attempt < 20; ++attempt) {  // was a data race: corruption or lost updates
    const std::string msg = message_of<FailedPreconditionError>([&] {
      s.run([&] { counter.assign_add(Tensor{1.f}); });
    });
    EXPECT_THAT(msg, HasSubstr("Variable 'counter'::assign_add"));
    EXPECT_THAT(msg, HasSubstr("MirroredStrategy(CPU:0, CPU:1)"));
    EXPECT_THAT(msg, HasSubstr("create it in strategy.scope()"));
  }
  EXPECT_EQ(counter.value(), Tensor{0.f});  // no replica changed it
  // Reads stay allowed.
  const auto reads = s.run([&] { return counter.value(); });
  EXPECT_EQ(reads[1], Tensor{0.f});
  // The same update outside run, or with one replica, is fine.
  counter.assign_add(Tensor{1.f});
  OneDeviceStrategy one("CPU:0");
  one.run([&] { counter.assign_add(Tensor{1.f}); });
  EXPECT_EQ(counter.value(), Tensor{2.f});
}

TEST(OrdinaryVariable, EveryUpdateKindIsChecked) {
  Variable v(Tensor{1.f});
  MirroredStrategy s(cpu_devices(3));
  EXPECT_THROW(s.run([&] { v.assign(Tensor{2.f}); }), FailedPreconditionError);
  EXPECT_THROW(s.run([&] { v.assign_sub(Tensor{2.f}); }), FailedPreconditionError);
  EXPECT_EQ(v.value(), Tensor{1.f});
}

// --- An unbatched dataset is refused when distributed (item 8) ----------
// TF raises in experimental_distribute_dataset itself (its rebatch needs a
// batch dimension), not at the first step.

TEST(UnbatchedDataset, RaisesWhenDistributed) {
  MirroredStrategy s(cpu_devices(2));
  const std::string msg = message_of<InvalidArgumentError>(
      [&] { s.experimental_distribute_dataset(Dataset::from_tensor_slices({1.f, 2.f, 3.f, 4.f})); });
  EXPECT_THAT(msg, HasSubstr("expected a batched dataset"));
  EXPECT_THAT(msg, HasSubstr("call the batch method"));
  EXPECT_THROW(s.experimental_distribute_dataset(Dataset::range(8).shuffle(4, 1).repeat(2)), InvalidArgumentError);
  // A tuple with a scalar label cannot be split either.
  const Tensor x(std::vector<float>(8, 1.f), Shape{4, 2});
  const Tensor y{1.f, 2.f, 3.f, 4.f};
  EXPECT_THROW(s.experimental_distribute_dataset(Dataset::from_tensor_slices({x, y})), InvalidArgumentError);
  // Batched, or rebatched by unbatch().batch(), is fine; one replica takes anything.
  EXPECT_NO_THROW(s.experimental_distribute_dataset(Dataset::range(8).batch(4)));
  EXPECT_NO_THROW(s.experimental_distribute_dataset(Dataset::range(8).batch(4).unbatch().batch(2)));
  EXPECT_NO_THROW(s.experimental_distribute_dataset(Dataset::from_tensor_slices({x, y}).batch(2)));
  EXPECT_NO_THROW(s.experimental_distribute_dataset(Dataset::from_tensors(x)));  // rank 2: split along rows
  OneDeviceStrategy one("CPU:0");
  EXPECT_NO_THROW(one.experimental_distribute_dataset(Dataset::range(8)));
}

}  // namespace
}  // namespace distribute
