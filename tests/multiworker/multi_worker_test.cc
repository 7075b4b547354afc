// MultiWorkerMirroredStrategy under a real mpirun (CTest label "mpi"): every
// rank runs these tests; the local replica count comes from
// --local_replicas=N. Results are checked against closed forms and against a
// MirroredStrategy with the same total number of replicas in this process.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

using ::testing::HasSubstr;
using testing::message_of;
using testing::values_of;

int g_local = 1;  // --local_replicas

std::vector<std::string> cpus(int n) {
  std::vector<std::string> d;
  for (int i = 0; i < n; ++i) d.push_back("CPU:" + std::to_string(i));
  return d;
}

MultiWorkerMirroredStrategy& strategy() {
  static MultiWorkerMirroredStrategy* s = [] {
    MultiWorkerOptions options;
    options.local_devices = cpus(g_local);
    options.communication.timeout_seconds = 30;
    return new MultiWorkerMirroredStrategy(options);
  }();
  return *s;
}

int rank_from_launcher() {
  const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
  if (r == nullptr) r = std::getenv("PMI_RANK");
  return r == nullptr ? -1 : std::atoi(r);
}

// Replica g's value: g + 1 and 10 * (g + 1), as float32.
Tensor value_of(int g) { return Tensor{static_cast<float>(g + 1), 10.f * static_cast<float>(g + 1)}; }

TEST(MultiWorker, CountsAndGlobalWorkerMajorIds) {
  MultiWorkerMirroredStrategy& s = strategy();
  const int workers = s.num_workers();
  EXPECT_GE(workers, 2);
  EXPECT_EQ(s.worker_index(), rank_from_launcher());
  EXPECT_EQ(s.is_chief(), s.worker_index() == 0);
  EXPECT_EQ(s.num_local_replicas(), g_local);
  EXPECT_EQ(s.num_replicas_in_sync(), workers * g_local);
  auto ids = s.run([] { return get_replica_context()->replica_id_in_sync_group(); });
  ASSERT_EQ(ids.values().size(), static_cast<std::size_t>(g_local));
  for (int r = 0; r < g_local; ++r) EXPECT_EQ(ids[r], s.worker_index() * g_local + r);
  auto n = s.run([] { return get_replica_context()->num_replicas_in_sync(); });
  EXPECT_EQ(n[0], workers * g_local);
  EXPECT_THAT(s.to_string(), HasSubstr("MultiWorkerMirroredStrategy"));
}

TEST(MultiWorker, AllReduceSumAndMeanMatchMirroredStrategyOfAllReplicas) {
  MultiWorkerMirroredStrategy& s = strategy();
  const int total = s.num_replicas_in_sync();
  auto sums = s.run([] {
    return get_replica_context()->all_reduce(ReduceOp::SUM, value_of(get_replica_context()->replica_id_in_sync_group()));
  });
  auto means = s.run([] {
    return get_replica_context()->all_reduce(ReduceOp::MEAN,
                                             value_of(get_replica_context()->replica_id_in_sync_group()));
  });
  MirroredStrategy mirrored(cpus(total));
  auto expected = mirrored.run([] {
    return get_replica_context()->all_reduce(ReduceOp::SUM, value_of(get_replica_context()->replica_id_in_sync_group()));
  });
  const float t = static_cast<float>(total * (total + 1) / 2);
  for (int r = 0; r < g_local; ++r) {
    EXPECT_EQ(sums[r], (Tensor{t, 10.f * t}));
    EXPECT_TRUE(allclose(sums[r], expected[0]));
    EXPECT_TRUE(allclose(means[r], Tensor{t / static_cast<float>(total), 10.f * t / static_cast<float>(total)}));
  }
}

TEST(MultiWorker, LargeAndPackedAllReduceAreBitwiseEqualOnEveryWorker) {
  MultiWorkerMirroredStrategy& s = strategy();
  const int total = s.num_replicas_in_sync();
  constexpr std::int64_t kCount = 300000;  // 1.2 MB: the reduce-scatter path
  auto out = s.run([&] {
    const int g = get_replica_context()->replica_id_in_sync_group();
    std::vector<float> big(static_cast<std::size_t>(kCount));
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = 0.1f * static_cast<float>(g + 1) + 1e-3f * static_cast<float>(i % 97);
    std::vector<Tensor> list{Tensor(big, Shape{kCount}), Tensor{static_cast<std::int32_t>(g)},
                             Tensor{static_cast<double>(g), 2.0}};
    return get_replica_context()->all_reduce(ReduceOp::SUM, list, CommunicationOptions{1024, std::nullopt});
  });
  const auto ints = static_cast<std::int32_t>(total * (total - 1) / 2);
  for (int r = 0; r < g_local; ++r) {
    ASSERT_EQ(out[r].size(), 3u);
    EXPECT_EQ(out[r][1], Tensor{ints});
    EXPECT_EQ(out[r][2], (Tensor{static_cast<double>(ints), 2.0 * total}));
    EXPECT_NEAR(out[r][0].data<float>()[5], 0.1f * static_cast<float>(total * (total + 1) / 2) + 5e-3f * static_cast<float>(total), 1e-3);
    EXPECT_EQ(out[r][0], out[0][0]);
  }
  // Every worker's result has the same bits: gather them and compare rows.
  const Tensor rows = s.gather(PerReplica<Tensor>(std::vector<Tensor>(static_cast<std::size_t>(g_local),
                                                                      out[0][0].reshape(Shape{1, kCount}))),
                               0);
  ASSERT_EQ(rows.dim(0), total);
  const auto* base = rows.bytes().data();
  const std::size_t row = static_cast<std::size_t>(kCount) * sizeof(float);
  for (int g = 1; g < total; ++g) {
    EXPECT_EQ(std::memcmp(base, base + static_cast<std::size_t>(g) * row, row), 0) << "replica " << g;
  }
}

TEST(MultiWorker, AllGatherWithUnequalSizesAcrossWorkers) {
  MultiWorkerMirroredStrategy& s = strategy();
  const int total = s.num_replicas_in_sync();
  // Replica g contributes g + 1 rows of [g, g].
  auto out = s.run([] {
    const int g = get_replica_context()->replica_id_in_sync_group();
    std::vector<std::int64_t> v(static_cast<std::size_t>(2 * (g + 1)), g);
    return get_replica_context()->all_gather(Tensor(v, Shape{g + 1, 2}), 0);
  });
  std::vector<std::int64_t> expected;
  for (int g = 0; g < total; ++g) {
    for (int k = 0; k < 2 * (g + 1); ++k) expected.push_back(g);
  }
  for (int r = 0; r < g_local; ++r) {
    ASSERT_EQ(out[r].dim(0), total * (total + 1) / 2);
    EXPECT_EQ(values_of<std::int64_t>(out[r]), expected);
  }
}

TEST(MultiWorker, StrategyReduceAndGatherCoverEveryWorker) {
  MultiWorkerMirroredStrategy& s = strategy();
  const int total = s.num_replicas_in_sync();
  auto per_replica = s.run([] { return value_of(get_replica_context()->replica_id_in_sync_group()); });
  const float t = static_cast<float>(total * (total + 1) / 2);
  EXPECT_EQ(s.reduce(ReduceOp::SUM, per_replica), (Tensor{t, 10.f * t}));
  EXPECT_TRUE(allclose(s.reduce(ReduceOp::MEAN, per_replica),
                       Tensor{t / static_cast<float>(total), 10.f * t / static_cast<float>(total)}));
  // Along axis 0 MEAN divides by every replica's element count.
  EXPECT_TRUE(allclose(s.reduce(ReduceOp::MEAN, per_replica, 0), Tensor(11.f * t / static_cast<float>(2 * total))));
  const Tensor all = s.gather(per_replica, 0);
  std::vector<float> expected;
  for (int g = 0; g < total; ++g) {
    expected.push_back(static_cast<float>(g + 1));
    expected.push_back(10.f * static_cast<float>(g + 1));
  }
  EXPECT_EQ(values_of<float>(all), expected);
}

TEST(MultiWorker, MergeCallSeesLocalReplicasAndReducesGlobally) {
  MultiWorkerMirroredStrategy& s = strategy();
  const int total = s.num_replicas_in_sync();
  auto out = s.run([] {
    const int g = get_replica_context()->replica_id_in_sync_group();
    return get_replica_context()->merge_call(
        [](Strategy& st, const PerReplica<Tensor>& v) {
          EXPECT_EQ(v.values().size(), static_cast<std::size_t>(g_local));
          return st.reduce(ReduceOp::SUM, v);
        },
        Tensor(static_cast<float>(g)));
  });
  for (int r = 0; r < g_local; ++r) EXPECT_EQ(out[r], Tensor(static_cast<float>(total * (total - 1) / 2)));
}

TEST(MultiWorker, VariablesStartFromTheChiefAndAggregateOverWorkers) {
  MultiWorkerMirroredStrategy& s = strategy();
  const int total = s.num_replicas_in_sync();
  std::optional<Variable> weights, metric;
  {
    auto scope = s.scope();
    // Every worker proposes its own initial value; the chief's wins.
    VariableOptions weight_options;
    weight_options.name = "w";
    weight_options.aggregation = VariableAggregation::SUM;
    weights.emplace(Tensor{static_cast<float>(s.worker_index()) + 5.f}, weight_options);
    VariableOptions metric_options;
    metric_options.name = "count";
    metric_options.synchronization = VariableSynchronization::ON_READ;
    metric_options.aggregation = VariableAggregation::SUM;
    metric.emplace(Tensor{0.f}, metric_options);
  }
  for (const Tensor& c : weights->values()) EXPECT_EQ(c, Tensor{5.f});
  s.run([&] {
    const int g = get_replica_context()->replica_id_in_sync_group();
    weights->assign_add(Tensor{static_cast<float>(g)});  // SUM over all replicas
    metric->assign_add(Tensor{1.f});
  });
  for (const Tensor& c : weights->values()) EXPECT_EQ(c, Tensor{5.f + static_cast<float>(total * (total - 1) / 2)});
  EXPECT_EQ(metric->value(), Tensor{static_cast<float>(total)});  // a read across workers
}

TEST(MultiWorker, DatasetsFromFunctionGetOnePipelinePerWorker) {
  MultiWorkerMirroredStrategy& s = strategy();
  const int total = s.num_replicas_in_sync();
  // Each worker shards the numbers 0..4*total-1 by its pipeline id; every
  // replica takes one element per step.
  auto dist_dataset = s.distribute_datasets_from_function([&](const InputContext& context) {
    EXPECT_EQ(context.num_input_pipelines(), s.num_workers());
    EXPECT_EQ(context.input_pipeline_id(), s.worker_index());
    EXPECT_EQ(context.num_replicas_in_sync(), total);
    return Dataset::range(4 * total).shard(context.num_input_pipelines(), context.input_pipeline_id());
  });
  std::int64_t local_sum = 0;
  int steps = 0;
  for (const auto& step : dist_dataset) {
    ASSERT_EQ(step.values().size(), static_cast<std::size_t>(g_local));
    for (const Element& e : step) local_sum += e.tensor().data<std::int64_t>()[0];
    ++steps;
  }
  EXPECT_EQ(steps, 4 * total / s.num_workers() / g_local);
  // The workers' shards cover the range once.
  std::vector<Tensor> parts(static_cast<std::size_t>(g_local), Tensor(std::int64_t{0}));
  parts[0] = Tensor(local_sum);
  EXPECT_EQ(s.reduce(ReduceOp::SUM, PerReplica<Tensor>(parts)),
            Tensor(static_cast<std::int64_t>(4 * total * (4 * total - 1) / 2)));
  const std::string msg = message_of<UnimplementedError>([&] { s.experimental_distribute_dataset(Dataset::range(4)); });
  EXPECT_THAT(msg, HasSubstr("distribute_datasets_from_function"));
}

TEST(MultiWorker, MismatchedShapesAcrossWorkersRaiseOnEveryWorker) {
  MultiWorkerMirroredStrategy& s = strategy();
  const int w = s.worker_index();
  auto mismatched = [&] {
    s.run([&] {
      return get_replica_context()->all_reduce(
          ReduceOp::SUM, Tensor(std::vector<float>(static_cast<std::size_t>(w + 1), 1.f), Shape{w + 1}));
    });
  };
  const std::string msg = message_of<InvalidArgumentError>(mismatched);
  EXPECT_THAT(msg, HasSubstr("workers made different collective calls"));
  EXPECT_THAT(msg, HasSubstr("1 elements of float32 on worker 0 vs 2 elements of float32 on worker 1"));
  // The headers were checked before any data moved: the workers are still in
  // step and the channel still works.
  auto ok = s.run([] { return get_replica_context()->all_reduce(ReduceOp::SUM, Tensor{1.f}); });
  EXPECT_EQ(ok[0], Tensor{static_cast<float>(s.num_replicas_in_sync())});
  const std::string reduce_msg = message_of<InvalidArgumentError>(
      [&] { s.reduce(ReduceOp::SUM, PerReplica<Tensor>(std::vector<Tensor>(static_cast<std::size_t>(g_local),
                                                                         Tensor(std::vector<float>(static_cast<std::size_t>(w + 1), 1.f), Shape{w + 1})))); });
  EXPECT_THAT(reduce_msg, HasSubstr("on worker 1"));
}

}  // namespace
}  // namespace distribute

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--local_replicas=", 0) == 0) distribute::g_local = std::atoi(arg.c_str() + 17);
  }
  const int result = RUN_ALL_TESTS();
  return result;
}
