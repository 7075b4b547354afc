// Mirrored and sync-on-read variables over the strategy matrix.
#include <gtest/gtest.h>

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "testing/strategy_matrix.h"

// g++ 12 warns (-Wextra) about members a designated initializer leaves to
// their defaults, which is how VariableOptions is meant to be used.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace distribute {
namespace {

using testing::message_of;
using testing::StrategyTest;
using ::testing::HasSubstr;

using Sync = VariableSynchronization;
using Agg = VariableAggregation;

float f(int x) { return static_cast<float>(x); }

int replica_id() { return get_replica_context()->replica_id_in_sync_group(); }

std::vector<std::string> cpus(int n) {
  std::vector<std::string> devices;
  for (int i = 0; i < n; ++i) devices.push_back("CPU:" + std::to_string(i));
  return devices;
}

// Every component of v equals `expected`.
void expect_all_components(const Variable& v, const Tensor& expected) {
  const std::vector<Tensor> components = v.values();
  ASSERT_EQ(static_cast<int>(components.size()), v.num_components());
  for (std::size_t i = 0; i < components.size(); ++i) {
    EXPECT_EQ(components[i], expected) << "component " << i << ": " << components[i];
  }
}

class VariableTest : public StrategyTest {
 protected:
  // True for the MirroredStrategy cases: variables created in their scope are
  // distributed.
  bool distributed() { return dynamic_cast<MirroredStrategy*>(&strategy()) != nullptr; }
  // A variable created inside strategy()'s scope.
  Variable make(Tensor init, VariableOptions options) {
    auto scope = strategy().scope();
    return Variable(std::move(init), std::move(options));
  }
  Variable mirrored(float init, Agg aggregation) {
    return make(Tensor(init), {.name = "w", .aggregation = aggregation});
  }
  Variable sync_on_read(float init, Agg aggregation) {
    return make(Tensor(init), {.name = "m", .synchronization = Sync::ON_READ, .aggregation = aggregation});
  }
};
DISTRIBUTE_INSTANTIATE_STRATEGY_MATRIX(VariableTest);

// --- Creation ---------------------------------------------------------------

TEST_P(VariableTest, CreationInScopeDistributesOnlyForMirrored) {
  for (Sync sync : {Sync::AUTO, Sync::ON_WRITE, Sync::ON_READ}) {
    Variable v = make(Tensor{1.f, 2.f}, {.name = "w", .synchronization = sync, .aggregation = Agg::SUM});
    EXPECT_EQ(v.name(), "w");
    EXPECT_EQ(v.dtype(), DType::kFloat32);
    EXPECT_EQ(v.shape(), (Shape{2}));
    EXPECT_EQ(v.aggregation(), Agg::SUM);
    EXPECT_EQ(v.synchronization(), sync == Sync::ON_READ ? Sync::ON_READ : Sync::ON_WRITE);
    if (distributed()) {
      EXPECT_EQ(v.is_mirrored(), sync != Sync::ON_READ);
      EXPECT_EQ(v.is_sync_on_read(), sync == Sync::ON_READ);
      EXPECT_EQ(v.num_components(), n());
    } else {
      EXPECT_FALSE(v.is_mirrored());
      EXPECT_FALSE(v.is_sync_on_read());
      EXPECT_EQ(v.num_components(), 1);
    }
    expect_all_components(v, Tensor{1.f, 2.f});
  }
}

TEST_P(VariableTest, SynchronizationNoneIsRejectedOnlyInsideAMirroredScope) {
  auto create = [&] { return make(Tensor(1.f), {.name = "no_sync", .synchronization = Sync::NONE}); };
  if (distributed()) {
    EXPECT_THAT(message_of<InvalidArgumentError>(create), HasSubstr("no_sync"));
  } else {
    Variable v = create();
    EXPECT_EQ(v.num_components(), 1);
    EXPECT_FALSE(v.is_mirrored());
  }
}

TEST_P(VariableTest, IntegerMeanIsRejectedInsideAMirroredScope) {
  for (Sync sync : {Sync::AUTO, Sync::ON_READ}) {
    auto create = [&] {
      return make(Tensor(std::int32_t{1}), {.name = "int_mean", .synchronization = sync, .aggregation = Agg::MEAN});
    };
    if (distributed()) {
      EXPECT_THAT(message_of<InvalidArgumentError>(create), HasSubstr("int_mean"));
    } else {
      EXPECT_EQ(create().num_components(), 1);
    }
  }
  // int32 with SUM is fine everywhere.
  Variable ok = make(Tensor(std::int32_t{1}), {.name = "int_sum", .aggregation = Agg::SUM});
  EXPECT_EQ(ok.num_components(), distributed() ? n() : 1);
}

TEST_P(VariableTest, CreationInsideAReplicaFunction) {
  if (distributed()) {
    const std::string msg = message_of<FailedPreconditionError>([&] {
      strategy().run([] { Variable v(Tensor(1.f), {.name = "inner"}); });
    });
    EXPECT_THAT(msg, HasSubstr("inner"));
  } else {
    auto comps = strategy().run([] {
      Variable v(Tensor(1.f), {.name = "inner"});
      return v.num_components();
    });
    EXPECT_EQ(comps[0], 1);
  }
}

TEST(VariableCreation, OutsideAnyScopeIsOrdinary) {
  for (Sync sync : {Sync::AUTO, Sync::ON_WRITE, Sync::ON_READ, Sync::NONE}) {
    Variable v(Tensor(3.f), {.name = "plain", .synchronization = sync, .aggregation = Agg::SUM});
    EXPECT_FALSE(v.is_mirrored());
    EXPECT_FALSE(v.is_sync_on_read());
    EXPECT_EQ(v.num_components(), 1);
    EXPECT_EQ(v.value(), Tensor(3.f));
  }
  Variable d(Tensor(0.f));
  EXPECT_EQ(d.name(), "Variable");
  EXPECT_EQ(d.aggregation(), Agg::NONE);
  EXPECT_EQ(d.synchronization(), Sync::ON_WRITE);
}

TEST(VariableCreation, TrainableDefaultsAndOverride) {
  MirroredStrategy strategy(cpus(2));
  auto scope = strategy.scope();
  EXPECT_TRUE(Variable(Tensor(1.f)).trainable());
  EXPECT_TRUE(Variable(Tensor(1.f), {.synchronization = Sync::ON_WRITE}).trainable());
  EXPECT_FALSE(Variable(Tensor(1.f), {.synchronization = Sync::ON_READ, .aggregation = Agg::SUM}).trainable());
  EXPECT_FALSE(Variable(Tensor(1.f), {.trainable = false}).trainable());
  EXPECT_TRUE(
      Variable(Tensor(1.f), {.synchronization = Sync::ON_READ, .aggregation = Agg::SUM, .trainable = true}).trainable());
}

TEST(VariableCreation, TrainableOutsideScope) {
  EXPECT_TRUE(Variable(Tensor(1.f)).trainable());
  EXPECT_FALSE(Variable(Tensor(1.f), {.synchronization = Sync::ON_READ}).trainable());
  EXPECT_FALSE(Variable(Tensor(1.f), {.trainable = false}).trainable());
}

// --- MirroredVariable in replica context ------------------------------------

TEST_P(VariableTest, MirroredAssignAddSum) {
  Variable v = mirrored(1.f, Agg::SUM);
  auto out = strategy().run([&] { return v.assign_add(Tensor(f(replica_id() + 1))); });
  const Tensor expected(1.f + f(n() * (n() + 1) / 2));
  expect_all_components(v, expected);
  for (int r = 0; r < n(); ++r) EXPECT_EQ(out[r], expected) << "replica " << r;
  EXPECT_EQ(v.value(), expected);
}

TEST_P(VariableTest, MirroredAssignAddMean) {
  Variable v = mirrored(1.f, Agg::MEAN);
  auto out = strategy().run([&] { return v.assign_add(Tensor(f(replica_id() + 1))); });
  const Tensor expected(1.f + f(n() + 1) / 2.f);
  expect_all_components(v, expected);
  for (int r = 0; r < n(); ++r) EXPECT_EQ(out[r], expected) << "replica " << r;
}

TEST_P(VariableTest, MirroredAssignAddOnlyFirstReplica) {
  Variable v = mirrored(1.f, Agg::ONLY_FIRST_REPLICA);
  auto out = strategy().run([&] { return v.assign_add(Tensor(f(replica_id() + 1))); });
  expect_all_components(v, Tensor(2.f));
  for (int r = 0; r < n(); ++r) EXPECT_EQ(out[r], Tensor(2.f)) << "replica " << r;
}

TEST_P(VariableTest, MirroredAssignSumOfReplicaIds) {
  Variable v = mirrored(7.f, Agg::SUM);
  strategy().run([&] { v.assign(Tensor(f(replica_id()))); });
  expect_all_components(v, Tensor(f(n() * (n() - 1) / 2)));
}

TEST_P(VariableTest, MirroredAssignSub) {
  Variable v = mirrored(10.f, Agg::SUM);
  strategy().run([&] { v.assign_sub(Tensor(1.f)); });
  expect_all_components(v, Tensor(10.f - f(n())));
  Variable m = mirrored(10.f, Agg::MEAN);
  strategy().run([&] { m.assign_sub(Tensor(f(2 * replica_id()))); });
  expect_all_components(m, Tensor(10.f - f(n() - 1)));
}

TEST_P(VariableTest, MirroredIntegerSumInReplicaContext) {
  Variable v = make(Tensor(std::int32_t{5}), {.name = "steps", .aggregation = Agg::SUM});
  strategy().run([&] { v.assign_add(Tensor(static_cast<std::int32_t>(replica_id() + 1))); });
  expect_all_components(v, Tensor(static_cast<std::int32_t>(5 + n() * (n() + 1) / 2)));
  Variable first = make(Tensor(std::int32_t{5}), {.name = "first", .aggregation = Agg::ONLY_FIRST_REPLICA});
  strategy().run([&] { first.assign(Tensor(static_cast<std::int32_t>(100 + replica_id()))); });
  expect_all_components(first, Tensor(std::int32_t{100}));
}

TEST_P(VariableTest, SeveralUpdatesInOneRunStayIdenticalOnAllReplicas) {
  Variable v = mirrored(0.f, Agg::SUM);
  auto seen = strategy().run([&] {
    std::vector<Tensor> steps;
    steps.push_back(v.assign_add(Tensor(1.f)));  // +n
    steps.push_back(v.value());
    steps.push_back(v.assign_sub(Tensor(f(replica_id()))));  // -n(n-1)/2
    steps.push_back(v.assign(Tensor(2.f)));  // 2n
    steps.push_back(v.assign_add(Tensor(f(replica_id()))));  // +n(n-1)/2
    return steps;
  });
  const float nf = f(n());
  const float tri = f(n() * (n() - 1) / 2);
  const std::vector<Tensor> expected{Tensor(nf), Tensor(nf), Tensor(nf - tri), Tensor(2.f * nf),
                                     Tensor(2.f * nf + tri)};
  for (int r = 0; r < n(); ++r) EXPECT_EQ(seen[r], expected) << "replica " << r;
  expect_all_components(v, expected.back());
}

TEST_P(VariableTest, MirroredReadsLocalComponentInReplicaContextAndPrimaryOutside) {
  Variable v = mirrored(1.f, Agg::SUM);
  // assign_add gives every component its own buffer, so buffers identify them.
  strategy().run([&] { v.assign_add(Tensor(1.f)); });
  const std::vector<Tensor> components = v.values();
  auto reads = strategy().run([&] { return v.value(); });
  for (int r = 0; r < n(); ++r) {
    EXPECT_TRUE(reads[r].shares_buffer_with(components[static_cast<std::size_t>(r)])) << "replica " << r;
  }
  EXPECT_TRUE(v.value().shares_buffer_with(components[0]));
  {
    auto scope = strategy().scope();
    EXPECT_TRUE(v.read_value().shares_buffer_with(components[0]));
  }
}

// Current TF (mirrored_strategy_test
// testAssignMirroredVarReplicaContextWithoutAggregationType): with aggregation
// NONE a replica-context update changes the replica's own component only.
TEST_P(VariableTest, MirroredAggregationNoneInReplicaContextUpdatesTheLocalComponent) {
  Variable v = mirrored(1.f, Agg::NONE);
  // Each replica adds its own amount and reads back its own component.
  const PerReplica<Tensor> read = strategy().run([&] {
    const float mine = static_cast<float>(get_replica_context()->replica_id_in_sync_group() + 1);
    const Tensor returned = v.assign_add(Tensor(mine));
    EXPECT_EQ(returned, Tensor(1.f + mine));
    return v.value();
  });
  const std::vector<Tensor> components = v.values();
  ASSERT_EQ(static_cast<int>(components.size()), distributed() ? n() : 1);
  for (std::size_t r = 0; r < components.size(); ++r) {
    SCOPED_TRACE("replica " + std::to_string(r));
    EXPECT_EQ(components[r], Tensor(2.f + static_cast<float>(r)));
    EXPECT_EQ(read[static_cast<int>(r)], components[r]);
  }
  // The same update on every replica keeps the copies identical: what a
  // data-parallel optimizer step on all-reduced gradients does.
  strategy().run([&] { v.assign(Tensor(3.f)); });
  strategy().run([&] { v.assign_sub(Tensor(0.5f)); });
  expect_all_components(v, Tensor(2.5f));
  // A cross-replica update still writes every component.
  v.assign(Tensor(4.f));
  expect_all_components(v, Tensor(4.f));
}

TEST_P(VariableTest, WrongShapeOrDtypeUpdateIsRejected) {
  Variable v = mirrored(1.f, Agg::SUM);
  const std::string shape_msg =
      message_of<InvalidArgumentError>([&] { strategy().run([&] { v.assign_add(Tensor{1.f, 2.f}); }); });
  EXPECT_THAT(shape_msg, HasSubstr("'w'"));
  message_of<InvalidArgumentError>([&] { strategy().run([&] { v.assign(Tensor(1.0)); }); });
  message_of<InvalidArgumentError>([&] { v.assign_sub(Tensor(std::int32_t{1})); });
  message_of<InvalidArgumentError>([&] { v.assign(Tensor{1.f}); });
  expect_all_components(v, Tensor(1.f));
  // Still usable afterwards.
  strategy().run([&] { v.assign_add(Tensor(1.f)); });
  expect_all_components(v, Tensor(1.f + f(n())));
}

// --- MirroredVariable in cross-replica context -------------------------------

TEST_P(VariableTest, MirroredCrossReplicaUpdatesIgnoreAggregation) {
  for (Agg agg : {Agg::SUM, Agg::MEAN, Agg::ONLY_FIRST_REPLICA, Agg::NONE}) {
    Variable v = mirrored(1.f, agg);
    {
      auto scope = strategy().scope();
      EXPECT_EQ(v.assign(Tensor(5.f)), Tensor(5.f));
      expect_all_components(v, Tensor(5.f));
      EXPECT_EQ(v.assign_add(Tensor(2.f)), Tensor(7.f));
      expect_all_components(v, Tensor(7.f));
    }
    EXPECT_EQ(v.assign_sub(Tensor(3.f)), Tensor(4.f));  // outside any scope
    expect_all_components(v, Tensor(4.f));
    EXPECT_EQ(v.value(), Tensor(4.f));
  }
}

TEST_P(VariableTest, MirroredUpdateInsideMergeCallIsCrossReplica) {
  Variable v = mirrored(1.f, Agg::NONE);
  strategy().run([&] {
    get_replica_context()->merge_call([&](Strategy&) { v.assign_add(Tensor(10.f)); });
  });
  expect_all_components(v, Tensor(11.f));
}

// --- SyncOnReadVariable -------------------------------------------------------

TEST_P(VariableTest, SyncOnReadReplicasUpdateOnlyTheirOwnComponent) {
  Variable v = sync_on_read(-1.f, Agg::SUM);
  auto reads = strategy().run([&] {
    const Tensor assigned = v.assign(Tensor(f(replica_id())));
    EXPECT_EQ(assigned, Tensor(f(replica_id())));
    return v.value();
  });
  const std::vector<Tensor> components = v.values();
  ASSERT_EQ(static_cast<int>(components.size()), v.num_components());
  for (int r = 0; r < v.num_components(); ++r) {
    EXPECT_EQ(components[static_cast<std::size_t>(r)], Tensor(f(r)));
  }
  for (int r = 0; r < n(); ++r) EXPECT_EQ(reads[r], Tensor(f(r))) << "replica " << r;
}

TEST_P(VariableTest, SyncOnReadConcurrentLocalUpdates) {
  // Many concurrent local updates and reads (TSan checks they do not race).
  Variable v = sync_on_read(0.f, Agg::SUM);
  strategy().run([&] {
    for (int i = 0; i < 200; ++i) {
      v.assign_add(Tensor(1.f));
      (void)v.value();
      (void)v.dtype();
      (void)v.shape();
    }
  });
  expect_all_components(v, Tensor(200.f));
  EXPECT_EQ(v.value(), Tensor(200.f * f(n())));
}

TEST_P(VariableTest, SyncOnReadCrossReplicaReadAggregates) {
  const float tri = f(n() * (n() - 1) / 2);
  const std::vector<std::pair<Agg, float>> cases{
      {Agg::SUM, tri}, {Agg::MEAN, tri / f(n())}, {Agg::ONLY_FIRST_REPLICA, 0.f}};
  for (const auto& [agg, expected] : cases) {
    Variable v = sync_on_read(0.f, agg);
    strategy().run([&] { v.assign(Tensor(f(replica_id()))); });
    EXPECT_EQ(v.value(), Tensor(expected)) << variable_aggregation_name(agg);
    auto scope = strategy().scope();
    EXPECT_EQ(v.read_value(), Tensor(expected)) << variable_aggregation_name(agg);
  }
}

TEST_P(VariableTest, SyncOnReadNoneCannotBeReadInCrossReplicaContext) {
  Variable v = sync_on_read(1.f, Agg::NONE);
  auto local = strategy().run([&] { return v.assign_add(Tensor(f(replica_id()))); });
  for (int r = 0; r < n(); ++r) EXPECT_EQ(local[r], Tensor(1.f + f(r)));
  if (distributed()) {
    EXPECT_THAT(message_of<InvalidArgumentError>([&] { (void)v.value(); }), HasSubstr("VariableAggregation.NONE"));
    auto scope = strategy().scope();
    EXPECT_THAT(message_of<InvalidArgumentError>([&] { (void)v.read_value(); }),
                HasSubstr("VariableAggregation.NONE"));
  } else {
    EXPECT_EQ(v.value(), Tensor(1.f));
  }
}

TEST_P(VariableTest, SyncOnReadDocstringExample) {
  // TF docstring: SUM variable starting at 1.0, every replica adds 1.0; the
  // cross-replica read is the sum of the components, 2.0 each.
  Variable v = sync_on_read(1.f, Agg::SUM);
  strategy().run([&] { v.assign_add(Tensor(1.f)); });
  expect_all_components(v, Tensor(2.f));
  EXPECT_EQ(v.value(), Tensor(2.f * f(n())));
}

TEST_P(VariableTest, SyncOnReadCrossReplicaAssign) {
  Variable sum = sync_on_read(1.f, Agg::SUM);
  EXPECT_EQ(sum.assign(Tensor(12.f)), Tensor(12.f));
  expect_all_components(sum, Tensor(12.f / f(n())));
  EXPECT_EQ(sum.value(), Tensor(12.f));
  for (Agg agg : {Agg::MEAN, Agg::ONLY_FIRST_REPLICA}) {
    Variable v = sync_on_read(1.f, agg);
    auto scope = strategy().scope();
    EXPECT_EQ(v.assign(Tensor(12.f)), Tensor(12.f));
    expect_all_components(v, Tensor(12.f));
    EXPECT_EQ(v.value(), Tensor(12.f));
  }
}

TEST_P(VariableTest, SyncOnReadIntegerSumAssignKeepsTheTotalExactly) {
  // x / N rounded toward zero in every component and the remainder in the
  // first: the aggregated read is x again, for negative elements too, and
  // for int64 values beyond a double's 53 bits.
  const std::int64_t big = (std::int64_t{1} << 60) + 7;
  Variable wide = make(Tensor(std::vector<std::int64_t>{0, 0, 0}, Shape{3}),
                       {.name = "wide", .synchronization = Sync::ON_READ, .aggregation = Agg::SUM});
  const Tensor x(std::vector<std::int64_t>{-7, 8, big}, Shape{3});
  {
    auto scope = strategy().scope();
    EXPECT_EQ(wide.assign(x), x);
  }
  EXPECT_EQ(wide.value(), x);
  const std::int64_t n = std::max<std::int64_t>(wide.num_components(), 1);
  const std::vector<Tensor> components = wide.values();
  for (std::size_t i = 0; i < components.size(); ++i) {
    const auto c = components[i].data<std::int64_t>();
    const auto v = x.data<std::int64_t>();
    for (std::size_t k = 0; k < v.size(); ++k) {
      EXPECT_EQ(c[k], v[k] / n + (i == 0 ? v[k] % n : 0)) << "component " << i << ", element " << k;
    }
  }
  Variable narrow = make(Tensor(std::int32_t{0}),
                         {.name = "narrow", .synchronization = Sync::ON_READ, .aggregation = Agg::SUM});
  {
    auto scope = strategy().scope();
    narrow.assign(Tensor(std::int32_t{-5}));
  }
  EXPECT_EQ(narrow.value(), Tensor(std::int32_t{-5}));
}

TEST_P(VariableTest, SyncOnReadCrossReplicaAddAndSub) {
  Variable sum = sync_on_read(1.f, Agg::SUM);
  if (distributed()) {
    EXPECT_THAT(message_of<InvalidArgumentError>([&] { sum.assign_add(Tensor(1.f)); }), HasSubstr("'m'"));
    message_of<InvalidArgumentError>([&] { sum.assign_sub(Tensor(1.f)); });
    expect_all_components(sum, Tensor(1.f));
  } else {
    sum.assign_add(Tensor(2.f));
    EXPECT_EQ(sum.value(), Tensor(3.f));
  }
  for (Agg agg : {Agg::MEAN, Agg::ONLY_FIRST_REPLICA}) {
    Variable v = sync_on_read(1.f, agg);
    strategy().run([&] { v.assign(Tensor(f(replica_id()))); });
    auto scope = strategy().scope();
    v.assign_add(Tensor(10.f));
    v.assign_sub(Tensor(4.f));
    const std::vector<Tensor> components = v.values();
    for (int r = 0; r < v.num_components(); ++r) EXPECT_EQ(components[static_cast<std::size_t>(r)], Tensor(f(r) + 6.f));
  }
}

TEST_P(VariableTest, SyncOnReadMetricCounter) {
  // An accuracy-like metric: per replica and step, `batch` examples of which
  // replica_id + 1 are correct (capped), summed over 10 runs.
  constexpr int kBatch = 4;
  constexpr int kSteps = 10;
  Variable correct = make(Tensor(std::int32_t{0}),
                          {.name = "correct", .synchronization = Sync::ON_READ, .aggregation = Agg::SUM});
  Variable total = make(Tensor(0.f), {.name = "total", .synchronization = Sync::ON_READ, .aggregation = Agg::SUM});
  for (int step = 0; step < kSteps; ++step) {
    strategy().run([&] {
      const int hits = std::min(replica_id() + 1, kBatch);
      correct.assign_add(Tensor(static_cast<std::int32_t>(hits)));
      total.assign_add(Tensor(f(kBatch)));
    });
  }
  int per_step = 0;
  for (int r = 0; r < n(); ++r) per_step += std::min(r + 1, kBatch);
  EXPECT_EQ(correct.value(), Tensor(static_cast<std::int32_t>(kSteps * per_step)));
  EXPECT_EQ(total.value(), Tensor(f(kSteps * kBatch * n())));
  // Reset, as Metric.reset_state does.
  correct.assign(Tensor(std::int32_t{0}));
  total.assign(Tensor(0.f));
  EXPECT_EQ(correct.value(), Tensor(std::int32_t{0}));
  EXPECT_EQ(total.value(), Tensor(0.f));
}

// --- Printing, local results, handles ---------------------------------------

TEST(VariablePrinting, MirroredSyncOnReadAndOrdinary) {
  MirroredStrategy strategy(cpus(2));
  std::vector<Variable> vars;
  {
    auto scope = strategy.scope();
    vars.emplace_back(Tensor(1.f), VariableOptions{.name = "w"});
    vars.emplace_back(Tensor(1.f),
                      VariableOptions{.name = "m", .synchronization = Sync::ON_READ, .aggregation = Agg::SUM});
  }
  EXPECT_EQ(vars[0].to_string(),
            "MirroredVariable:{\n  0: Tensor(1.0, shape=(), dtype=float32),\n  1: Tensor(1.0, shape=(), "
            "dtype=float32)\n}");
  EXPECT_EQ(vars[1].to_string(),
            "SyncOnReadVariable:{\n  0: Tensor(1.0, shape=(), dtype=float32),\n  1: Tensor(1.0, shape=(), "
            "dtype=float32)\n}");
  Variable plain(Tensor(1.f), {.name = "w"});
  EXPECT_EQ(plain.to_string(), "Variable('w', Tensor(1.0, shape=(), dtype=float32))");
  std::ostringstream os;
  os << plain;
  EXPECT_EQ(os.str(), plain.to_string());
}

TEST_P(VariableTest, ExperimentalLocalResultsAreTheComponents) {
  Variable v = sync_on_read(0.f, Agg::SUM);
  strategy().run([&] { v.assign(Tensor(f(10 * replica_id()))); });
  const std::vector<Tensor> local = strategy().experimental_local_results(v);
  ASSERT_EQ(static_cast<int>(local.size()), distributed() ? n() : 1);
  EXPECT_EQ(local, v.values());
  for (std::size_t r = 0; r < local.size(); ++r) EXPECT_EQ(local[r], Tensor(f(10 * static_cast<int>(r))));
}

TEST_P(VariableTest, CopiesShareState) {
  Variable a = mirrored(1.f, Agg::SUM);
  Variable b = a;
  strategy().run([&] { b.assign_add(Tensor(1.f)); });
  expect_all_components(a, Tensor(1.f + f(n())));
  a.assign(Tensor(9.f));
  EXPECT_EQ(b.value(), Tensor(9.f));
  EXPECT_EQ(b.name(), "w");
}

// --- Faults and misuse ---------------------------------------------------------

TEST(VariableFault, ReplicaFailingBeforeTheAggregatedUpdateReleasesTheOthers) {
  MirroredStrategy strategy(cpus(3));
  Variable v = [&] {
    auto scope = strategy.scope();
    return Variable(Tensor(1.f), {.name = "w", .aggregation = Agg::SUM});
  }();
  try {
    strategy.run([&] {
      if (replica_id() == 1) throw InvalidArgumentError("replica one failed");
      v.assign_add(Tensor(1.f));
    });
    ADD_FAILURE() << "run did not throw";
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(e.replica_id(), 1);
    EXPECT_THAT(e.what(), HasSubstr("replica one failed"));
  }
  expect_all_components(v, Tensor(1.f));
  strategy.run([&] { v.assign_add(Tensor(f(replica_id()))); });
  expect_all_components(v, Tensor(4.f));
}

TEST(VariableMisuse, VariableOfAnotherStrategyInAReplicaFunction) {
  MirroredStrategy a(cpus(2));
  MirroredStrategy b(cpus(2));
  Variable mirrored = [&] {
    auto scope = a.scope();
    return Variable(Tensor(1.f), {.name = "of_a", .aggregation = Agg::SUM});
  }();
  Variable on_read = [&] {
    auto scope = a.scope();
    return Variable(Tensor(1.f), {.name = "of_a_read", .synchronization = Sync::ON_READ, .aggregation = Agg::SUM});
  }();
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { b.run([&] { (void)mirrored.value(); }); }),
              HasSubstr("of_a"));
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { b.run([&] { mirrored.assign_add(Tensor(1.f)); }); }),
              HasSubstr("of_a"));
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { b.run([&] { on_read.assign(Tensor(2.f)); }); }),
              HasSubstr("of_a_read"));
  OneDeviceStrategy one("CPU:0");
  message_of<FailedPreconditionError>([&] { one.run([&] { (void)mirrored.value(); }); });
  expect_all_components(mirrored, Tensor(1.f));
  expect_all_components(on_read, Tensor(1.f));
  // Still fine with its own strategy.
  a.run([&] { mirrored.assign_add(Tensor(1.f)); });
  expect_all_components(mirrored, Tensor(3.f));
}

// Options structs take designated initializers without warnings (the
// project builds with -Wextra -Werror, as users may).
TEST(VariableOptionsTest, DesignatedInitializers) {
  const VariableOptions options{.name = "w", .aggregation = VariableAggregation::SUM};
  const CommunicationOptions communication{.bytes_per_pack = 1024};
  EXPECT_EQ(options.name, "w");
  EXPECT_FALSE(options.trainable.has_value());
  EXPECT_FALSE(communication.timeout_seconds.has_value());
}

}  // namespace
}  // namespace distribute
