// Mistakes users make with strategies, each a clear error (issue 12): a
// value of one strategy passed to another (item 5), the replica context
// asked for outside a replica (item 6), an ordinary variable updated by
// several replicas (item 2, also run under ThreadSanitizer), an unbatched
// dataset distributed (item 8).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
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

// --- Found by an audit of the public API, 2026-12-07 -----------------------

TEST(DistributedVariable, UsedAfterItsStrategyWasDestroyedRaises) {
  auto strategy = std::make_unique<MirroredStrategy>(cpu_devices(2));
  const std::string name = strategy->to_string();
  const std::uint64_t id = strategy->id();
  std::optional<Variable> mirrored, on_read;
  {
    auto scope = strategy->scope();
    mirrored.emplace(Tensor{1.f}, VariableOptions{.name = "w"});
    on_read.emplace(Tensor{1.f}, VariableOptions{.name = "m", .synchronization = VariableSynchronization::ON_READ,
                                                 .aggregation = VariableAggregation::SUM});
  }
  EXPECT_EQ(on_read->value(), Tensor{2.f});  // alive: the sum of both components
  strategy.reset();
  // A new strategy, likely at the old one's address (the allocator reuses
  // the block): the variable must not take it for its own.
  auto later = std::make_unique<MirroredStrategy>(cpu_devices(2));
  EXPECT_FALSE(later->extended().variable_created_in_scope(*mirrored));
  const std::string msg = message_of<FailedPreconditionError>([&] { (void)on_read->value(); });
  EXPECT_THAT(msg, HasSubstr("Variable 'm'::value: expected its strategy to be alive"));
  EXPECT_THAT(msg, HasSubstr(name + ", destroyed (strategy #" + std::to_string(id) + ")"));
  EXPECT_THROW((void)mirrored->value(), FailedPreconditionError);
  EXPECT_THROW(mirrored->assign(Tensor{2.f}), FailedPreconditionError);
  EXPECT_THROW((void)mirrored->distributed_strategy(), FailedPreconditionError);
  // What needs no strategy still works: its components, its text.
  EXPECT_EQ(mirrored->values().size(), 2u);
  EXPECT_THAT(mirrored->to_string(), HasSubstr("MirroredVariable"));
}

TEST(GatherAndReduce, CheckTheReplicaCountAndTheOriginOfEveryKindOfValue) {
  MirroredStrategy s(cpu_devices(2));
  MirroredStrategy other(cpu_devices(2));
  const Tensor a{1.f}, b{2.f}, c{3.f};
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { s.gather(PerReplica<Tensor>({a, b, c}), 0); }),
              HasSubstr("Strategy::gather: expected a PerReplica with one value per replica (2 for "
                        "MirroredStrategy(CPU:0, CPU:1)), got 3 values"));
  EXPECT_THAT(message_of<InvalidArgumentError>(
                  [&] { s.reduce(ReduceOp::MEAN, Mirrored<Tensor>({a, b, c}), std::nullopt); }),
              HasSubstr("expected a Mirrored with one value per replica"));
  // Another strategy's Mirrored values (a merge_call result there, say).
  const Mirrored<Tensor> theirs({a, a}, internal::ProducedBy{other.id()});
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { s.gather(theirs, 0); }), HasSubstr("another one"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { s.reduce(ReduceOp::MEAN, theirs, std::nullopt); }),
              HasSubstr("another one"));
  EXPECT_EQ(other.reduce(ReduceOp::MEAN, theirs, std::nullopt), a);
}

TEST(AllGather, ANegativeAxisOverTensorsOfDifferentRanksRaises) {
  MirroredStrategy s(cpu_devices(2));
  const std::string msg = message_of<InvalidArgumentError>([&] {
    s.run([] {
      const std::vector<Tensor> mixed{Tensor{1.f}, Tensor(std::vector<float>{1.f, 2.f}, Shape{1, 2})};
      (void)get_replica_context()->all_gather(mixed, -1);
    });
  });
  EXPECT_THAT(msg, HasSubstr("expected tensors of one rank with the negative axis -1, got ranks 1 and 2"));
  // From the front, or one rank, is fine.
  const auto out = s.run([] {
    const std::vector<Tensor> same{Tensor(std::vector<float>{1.f, 2.f}, Shape{1, 2}),
                                   Tensor(std::vector<float>{3.f, 4.f}, Shape{1, 2})};
    return get_replica_context()->all_gather(same, -1)[1];
  });
  EXPECT_EQ(out[0].shape(), (Shape{1, 4}));
}

TEST(Regroup, ElementsOfDifferentStructuresOnReplicasRaise) {
  const PerReplica<Element> step({Element::tuple({Tensor{1.f}, Tensor{2.f}}), Element::tuple({Tensor{1.f}})});
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { (void)regroup(step); }),
              HasSubstr("expected every replica's element to have replica 0's structure, a tuple of 2 components, "
                        "got a tuple of 1 components from replica 1"));
  const PerReplica<Element> leaf_and_tuple({Element(Tensor{1.f}), Element::tuple({Tensor{1.f}})});
  EXPECT_THROW((void)regroup(leaf_and_tuple), InvalidArgumentError);
}

TEST(Iterators, AMovedFromIteratorRaisesInsteadOfCrashing) {
  Dataset::Iterator it = Dataset::range(3).make_iterator();
  Dataset::Iterator moved = std::move(it);
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { (void)it.get_next(); }),  // NOLINT(bugprone-use-after-move)
              HasSubstr("Dataset::Iterator::get_next: expected an iterator, got a moved-from one"));
  EXPECT_THROW((void)it.get_next_as_optional(), FailedPreconditionError);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(moved.get_next()[0], Tensor(std::int64_t{0}));
  MirroredStrategy s(cpu_devices(2));
  auto dist_it = s.experimental_distribute_dataset(Dataset::range(8).batch(4)).make_iterator();
  auto dist_moved = std::move(dist_it);
  EXPECT_THROW((void)dist_it.get_next(), FailedPreconditionError);              // NOLINT(bugprone-use-after-move)
  EXPECT_THROW((void)dist_it.get_next_as_optional(), FailedPreconditionError);  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(dist_moved.get_next_as_optional().has_value());
}

}  // namespace
}  // namespace distribute
