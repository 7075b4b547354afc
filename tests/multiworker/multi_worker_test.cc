// MultiWorkerMirroredStrategy under a real mpirun (CTest label "mpi"): every
// rank runs these tests; the local replica count comes from
// --local_replicas=N. Results are checked against closed forms and against a
// MirroredStrategy with the same total number of replicas in this process.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <cstring>
#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "strategy/strategy_access.h"
#include "testing/shared_memory.h"
#include "testing/forked_child.h"
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

// What carries the workers' all_reduce: "host segment" (every worker on
// this host), "hierarchical" (several hosts, some with several workers:
// tests/net/run_net.sh) or "mpi".
std::string transport() { return internal::StrategyAccess::cross_worker_transport(strategy()); }

using distribute::testing::segment_mapped;

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

TEST(MultiWorker, BlocksFromAllocateSharedAreReducedInPlaceWithTheCopyingPathsBits) {
  MultiWorkerMirroredStrategy& s = strategy();
  const int total = s.num_replicas_in_sync();
  constexpr std::int64_t kCount = 300001;  // 1.2 MB, not whole cache lines
  const std::size_t bytes = static_cast<std::size_t>(kCount) * sizeof(float);
  std::vector<std::shared_ptr<std::byte>> blocks = s.experimental_allocate_shared(bytes);
  ASSERT_EQ(blocks.size(), static_cast<std::size_t>(g_local));
  for (const auto& b : blocks) {
    const auto* f = reinterpret_cast<const float*>(b.get());
    EXPECT_EQ(f[0], 0.f);
    EXPECT_EQ(f[kCount - 1], 0.f);
  }
  const std::uint64_t in_place_before = internal::StrategyAccess::shared_in_place_sums(s);
  auto input = [](int g, std::size_t i) {
    return std::ldexp(0.1f * static_cast<float>(g + 1) + 1e-3f * static_cast<float>(i % 97), static_cast<int>(i % 13) - 6);
  };
  for (int step = 0; step < 3; ++step) {
    auto out = s.run([&] {
      ReplicaContext& ctx = *get_replica_context();
      const int g = ctx.replica_id_in_sync_group();
      const std::shared_ptr<std::byte>& block = blocks[static_cast<std::size_t>(g % g_local)];
      auto* f = reinterpret_cast<float*>(block.get());
      for (std::size_t i = 0; i < static_cast<std::size_t>(kCount); ++i) f[i] = input(g, i) * static_cast<float>(step + 1);
      // The copying path's result, for the bits.
      const Tensor copied = ctx.all_reduce(ReduceOp::SUM, Tensor(std::vector<float>(f, f + kCount), Shape{kCount}));
      Tensor wrapped = Tensor::wrap(DType::kFloat32, Shape{kCount}, block.get(),
                                    std::make_shared<std::shared_ptr<std::byte>>(block), /*writable=*/true);
      Tensor summed = ctx.all_reduce(ReduceOp::SUM, std::move(wrapped));
      return std::vector<Tensor>{copied, summed};
    });
    for (int r = 0; r < g_local; ++r) {
      const Tensor& copied = out[r][0];
      const Tensor& summed = out[r][1];
      EXPECT_EQ(summed, copied) << "step " << step;
      if (g_local == 1) {
        // One replica per worker: reduced in place, in the block.
        EXPECT_EQ(static_cast<const void*>(summed.bytes().data()), static_cast<const void*>(blocks[0].get()));
      }
      float expected = 0;
      for (int g = 0; g < total; ++g) expected += input(g, 5) * static_cast<float>(step + 1);
      EXPECT_FLOAT_EQ(summed.data<float>()[5], expected);
    }
  }
  // Over a segment with one replica per worker, the three in-place calls
  // were summed straight from the blocks (no copy): on one host, or across
  // hosts in the host-local step of a host with several workers (one alone
  // on its host maps no segment and gets ordinary memory).
  const std::uint64_t in_place = internal::StrategyAccess::shared_in_place_sums(s) - in_place_before;
  EXPECT_EQ(in_place, g_local == 1 && transport() != "mpi" && segment_mapped() ? 3u : 0u) << transport();
}

TEST(MultiWorker, AllocateSharedOfDifferentSizesRaisesOnEveryWorker) {
  MultiWorkerMirroredStrategy& s = strategy();
  if (g_local != 1) GTEST_SKIP() << "ordinary memory with several local replicas: no collective";
  const std::size_t bytes = s.worker_index() == 0 ? 4096 : 8192;
  // Over shared memory (one host's segment, or the hosts' in the
  // hierarchical mode) a collective that raises on every worker; over MPI
  // messages alone (DISTRIBUTE_SHARED_MEMORY=0) ordinary memory on each:
  // never one worker raising alone.
  float raised = 0;
  try {
    (void)s.experimental_allocate_shared(bytes);
  } catch (const InvalidArgumentError& e) {
    raised = 1;
    EXPECT_THAT(e.what(), HasSubstr("expected the same size on every worker, got 4096 bytes on worker 0 and 8192 "
                                    "bytes on worker 1"));
  }
  // The workers stay in step, and raised together (over the segment) or
  // not at all (over MPI messages).
  auto sums = s.run([&] { return get_replica_context()->all_reduce(ReduceOp::SUM, Tensor{raised}); });
  const float all = sums[0].data<float>()[0];
  EXPECT_EQ(all, transport() != "mpi" ? static_cast<float>(s.num_workers()) : 0.f) << transport();
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

// As TF's MultiWorkerMirroredStrategy: a plain value is the worker's own
// (what run returns with one local replica) and is reduced or gathered
// across the workers.
TEST(MultiWorker, APlainValueIsTheWorkersOwnInReduceAndGather) {
  MultiWorkerMirroredStrategy& s = strategy();
  const int workers = s.num_workers();
  const Tensor mine{static_cast<float>(s.worker_index() + 1)};
  const auto sum_of_workers = static_cast<float>(workers * (workers + 1) / 2);
  // MEAN counts it once per local replica: the mean over the workers.
  EXPECT_TRUE(allclose(s.reduce(ReduceOp::MEAN, mine), Tensor{sum_of_workers / static_cast<float>(workers)}));
  if (g_local == 1) {
    EXPECT_EQ(s.reduce(ReduceOp::SUM, mine), Tensor{sum_of_workers});
    std::vector<float> each;
    for (int w = 1; w <= workers; ++w) each.push_back(static_cast<float>(w));
    EXPECT_EQ(s.gather(mine, 0), Tensor(each, Shape{workers}));
  } else {
    EXPECT_THROW((void)s.reduce(ReduceOp::SUM, mine), InvalidArgumentError);
    EXPECT_THROW((void)s.gather(mine, 0), InvalidArgumentError);
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
  // Assigning the total in cross-replica context (as a checkpoint restore
  // does) reads back as that total, however many workers share it.
  metric->assign(Tensor{7.f});
  EXPECT_EQ(metric->value(), Tensor{7.f});
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
}

// Every (step, local replica) element of `dataset` distributed by `s`, as
// the int64 values of its rows (a step is one vector per local replica).
std::vector<std::vector<std::vector<std::int64_t>>> collect(Strategy& s, const DistributedDataset& dataset) {
  std::vector<std::vector<std::vector<std::int64_t>>> steps;
  for (const auto& step : dataset) {
    std::vector<std::vector<std::int64_t>> replicas;
    for (const Element& e : step) replicas.push_back(values_of<std::int64_t>(e.tensor()));
    EXPECT_EQ(replicas.size(), static_cast<std::size_t>(s.num_local_replicas()));
    steps.push_back(std::move(replicas));
  }
  return steps;
}

// TF's DATA auto-sharding: each global batch cut into N pieces of ceil(B/N)
// rows; replica r of worker w gets piece w + r * W.
std::vector<std::vector<std::vector<std::int64_t>>> expected_data_sharding(const std::vector<std::vector<std::int64_t>>& batches,
                                                                          int workers, int worker, int local) {
  const int n = workers * local;
  std::vector<std::vector<std::vector<std::int64_t>>> steps;
  for (const auto& batch : batches) {
    const auto rows = static_cast<std::int64_t>(batch.size());
    const std::int64_t per = (rows + n - 1) / n;
    std::vector<std::vector<std::int64_t>> replicas;
    for (int r = 0; r < local; ++r) {
      const std::int64_t j = worker + r * workers;
      const std::int64_t begin = std::min(rows, j * per), end = std::min(rows, begin + per);
      replicas.emplace_back(batch.begin() + begin, batch.begin() + end);
    }
    steps.push_back(std::move(replicas));
  }
  return steps;
}

TEST(MultiWorker, DataShardingOfUnevenAndIndivisibleBatches) {
  MultiWorkerMirroredStrategy& s = strategy();
  // range(9).batch(2): the last batch has 1 row; range(10).batch(5): 5 rows
  // do not divide among the replicas.
  for (const auto& [total, batch] : {std::pair<int, int>{9, 2}, std::pair<int, int>{10, 5}}) {
    std::vector<std::vector<std::int64_t>> batches;
    for (int b = 0; b < total; b += batch) {
      std::vector<std::int64_t> rows;
      for (int i = b; i < std::min(total, b + batch); ++i) rows.push_back(i);
      batches.push_back(rows);
    }
    for (AutoShardPolicy policy : {AutoShardPolicy::AUTO, AutoShardPolicy::DATA}) {
      InputOptions options;
      options.auto_shard_policy = policy;
      const auto got = collect(s, s.experimental_distribute_dataset(Dataset::range(total).batch(batch), options));
      EXPECT_EQ(got, expected_data_sharding(batches, s.num_workers(), s.worker_index(), g_local))
          << total << "/" << batch;
      // The workers' shards are disjoint and cover the dataset.
      std::int64_t sum = 0, count = 0;
      for (const auto& step : got) {
        for (const auto& rows : step) {
          for (std::int64_t v : rows) sum += v;
          count += static_cast<std::int64_t>(rows.size());
        }
      }
      std::vector<Tensor> parts(static_cast<std::size_t>(g_local), Tensor{std::int64_t{0}, std::int64_t{0}});
      parts[0] = Tensor{sum, count};
      EXPECT_EQ(s.reduce(ReduceOp::SUM, PerReplica<Tensor>(parts)),
                (Tensor{static_cast<std::int64_t>(total * (total - 1) / 2), static_cast<std::int64_t>(total)}));
    }
  }
}

TEST(MultiWorker, OffShardingGivesEveryWorkerTheWholeDataset) {
  MultiWorkerMirroredStrategy& s = strategy();
  const int n = s.num_replicas_in_sync();
  InputOptions options;
  options.auto_shard_policy = AutoShardPolicy::OFF;
  const auto got = collect(s, s.experimental_distribute_dataset(Dataset::range(4 * n).batch(2 * n), options));
  // Batches of 2N rows cut into sub-batches of 2 (TF's batch_sizes_for_worker),
  // R per step: every worker goes through all 4N values.
  std::vector<std::int64_t> seen;
  for (const auto& step : got) {
    for (const auto& rows : step) {
      EXPECT_EQ(rows.size(), 2u);
      seen.insert(seen.end(), rows.begin(), rows.end());
    }
  }
  std::vector<std::int64_t> all(static_cast<std::size_t>(4 * n));
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int64_t>(i);
  EXPECT_EQ(seen, all);
  InputOptions file;
  file.auto_shard_policy = AutoShardPolicy::FILE;
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { s.experimental_distribute_dataset(Dataset::range(4).batch(2), file); }),
              HasSubstr("needs a dataset that reads a list of files"));
}

// CSV files of one column under a directory of this rank's: file f holds
// rows 100 f, 100 f + 1.
std::vector<std::string> write_files(int count) {
  std::string dir = ::testing::TempDir();
  if (!dir.empty() && dir.back() != '/') dir += '/';
  std::vector<std::string> paths;
  for (int f = 0; f < count; ++f) {
    paths.push_back(dir + "distribute_mw_" + std::to_string(::getpid()) + "_" + std::to_string(f) + ".csv");
    std::ofstream(paths.back()) << 100 * f << "\n" << 100 * f + 1 << "\n";
  }
  return paths;
}

TEST(MultiWorker, FileShardingGivesEachWorkerItsFiles) {
  MultiWorkerMirroredStrategy& s = strategy();
  const int workers = s.num_workers(), w = s.worker_index();
  const std::vector<std::string> files = write_files(2 * workers);
  for (AutoShardPolicy policy : {AutoShardPolicy::FILE, AutoShardPolicy::AUTO}) {
    InputOptions options;
    options.auto_shard_policy = policy;
    std::vector<double> seen;
    for (const auto& step : s.experimental_distribute_dataset(Dataset::from_csv_files(files).batch(2), options)) {
      for (const Element& e : step) {
        for (double v : values_of<double>(e.tensor())) seen.push_back(v);
      }
    }
    // Worker w reads files w and w + W, and nothing else.
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, (std::vector<double>{100. * w, 100. * w + 1, 100. * (w + workers), 100. * (w + workers) + 1}));
  }
  // Fewer files than workers: FILE raises, AUTO falls back to DATA.
  const std::vector<std::string> one(files.begin(), files.begin() + 1);
  InputOptions file;
  file.auto_shard_policy = AutoShardPolicy::FILE;
  EXPECT_THAT(message_of<InvalidArgumentError>(
                  [&] { s.experimental_distribute_dataset(Dataset::from_csv_files(one).batch(2), file); }),
              HasSubstr("at least one file per worker"));
  std::int64_t rows = 0;
  for (const auto& step : s.experimental_distribute_dataset(Dataset::from_csv_files(one).batch(2))) {
    for (const Element& e : step) rows += e.tensor().dim(0);
  }
  std::vector<Tensor> parts(static_cast<std::size_t>(g_local), Tensor(std::int64_t{0}));
  parts[0] = Tensor(rows);
  EXPECT_EQ(s.reduce(ReduceOp::SUM, PerReplica<Tensor>(parts)), Tensor(std::int64_t{2}));
  for (const std::string& f : files) std::remove(f.c_str());
}

TEST(MultiWorker, WorkersWithLessDataGetEmptyBatchesUntilEveryWorkerIsDone) {
  MultiWorkerMirroredStrategy& s = strategy();
  const int w = s.worker_index();
  // Worker w's pipeline has w + 1 batches of 2 rows per local replica.
  auto dataset = s.distribute_datasets_from_function([&](const InputContext&) {
    return Dataset::range(2 * (w + 1) * g_local).batch(2);
  });
  const auto got = collect(s, dataset);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(s.num_workers()));  // the longest worker's steps
  for (std::size_t step = 0; step < got.size(); ++step) {
    for (const auto& rows : got[step]) EXPECT_EQ(rows.size(), step < static_cast<std::size_t>(w + 1) ? 2u : 0u);
  }
  // get_next() agrees on the end too.
  DistributedIterator it = dataset.make_iterator();
  for (int i = 0; i < s.num_workers(); ++i) it.get_next();
  EXPECT_THROW(it.get_next(), OutOfRangeError);
  EXPECT_FALSE(it.get_next_as_optional().has_value());
}

TEST(MultiWorker, TrainingEndsWithTheWeightsOfMirroredStrategyOfAllReplicas) {
  // Linear regression y = x . [1, -2] + 0.5 by SGD, global batch 8, loss
  // scaled by the global batch: the same weights whatever the placement.
  MultiWorkerMirroredStrategy& s = strategy();
  const int total = s.num_replicas_in_sync();
  std::vector<float> xs, ys;
  for (int i = 0; i < 32; ++i) {
    const float a = static_cast<float>(i % 7) / 7.f, b = static_cast<float>(i % 5) / 5.f;
    xs.push_back(a);
    xs.push_back(b);
    ys.push_back(a - 2.f * b + 0.5f);
  }
  const Dataset data =
      Dataset::from_tensor_slices(std::vector<Tensor>{Tensor(xs, Shape{32, 2}), Tensor(ys, Shape{32})}).batch(8);
  auto train = [&](Strategy& st) {
    std::optional<Variable> wv, bv;
    {
      auto scope = st.scope();
      VariableOptions o;
      o.aggregation = VariableAggregation::SUM;
      o.name = "w";
      wv.emplace(Tensor{0.f, 0.f}, o);
      o.name = "b";
      bv.emplace(Tensor{0.f}, o);
    }
    for (int epoch = 0; epoch < 3; ++epoch) {
      for (const auto& step : st.experimental_distribute_dataset(data)) {
        st.run(
            [&](const Element& e) {
              const Tensor& x = e[0];
              const Tensor& y = e[1];
              const auto rows = static_cast<std::size_t>(x.dim(0));
              const auto w = wv->value().data<float>();
              const float b = bv->value().data<float>()[0];
              float g0 = 0, g1 = 0, gb = 0;
              for (std::size_t i = 0; i < rows; ++i) {
                const float err = x.data<float>()[2 * i] * w[0] + x.data<float>()[2 * i + 1] * w[1] + b - y.data<float>()[i];
                g0 += err * x.data<float>()[2 * i];
                g1 += err * x.data<float>()[2 * i + 1];
                gb += err;
              }
              // Gradient of the mean squared error over the global batch (8).
              const float scale = -0.5f * 2.f / 8.f;
              wv->assign_add(Tensor{scale * g0, scale * g1});
              bv->assign_add(Tensor{scale * gb});
            },
            step);
      }
    }
    return std::vector<Tensor>{wv->value(), bv->value()};
  };
  const auto multi = train(s);
  MirroredStrategy mirrored(cpus(total));
  const auto single = train(mirrored);
  EXPECT_TRUE(allclose(multi[0], single[0], 1e-5, 1e-6)) << multi[0] << " vs " << single[0];
  EXPECT_TRUE(allclose(multi[1], single[1], 1e-5, 1e-6)) << multi[1] << " vs " << single[1];
  EXPECT_GT(multi[0].data<float>()[0], 0.05f);  // it did learn something
}

// One directory for the job, named after the chief's process id, made by
// the chief before any worker returns.
std::string job_directory(MultiWorkerMirroredStrategy& s, const std::string& prefix) {
  std::vector<Tensor> pid(static_cast<std::size_t>(g_local), Tensor(std::int64_t{0}));
  if (s.is_chief()) pid[0] = Tensor(static_cast<std::int64_t>(::getpid()));
  const std::int64_t chief_pid = s.reduce(ReduceOp::SUM, PerReplica<Tensor>(pid)).data<std::int64_t>()[0];
  std::string dir = ::testing::TempDir();
  if (!dir.empty() && dir.back() != '/') dir += '/';
  dir += prefix + std::to_string(chief_pid);
  if (s.is_chief()) std::filesystem::create_directories(dir);
  s.reduce(ReduceOp::SUM, PerReplica<Tensor>(pid));  // the directory exists before anyone saves
  return dir;
}

// Removes it once every worker is done with it.
void remove_job_directory(MultiWorkerMirroredStrategy& s, const std::string& dir) {
  s.run([] { get_replica_context()->all_reduce(ReduceOp::SUM, Tensor{0.f}); });
  if (s.is_chief()) std::filesystem::remove_all(dir);
}

TEST(MultiWorker, CheckpointIsWrittenByTheChiefAndRestoredOnEveryWorker) {
  MultiWorkerMirroredStrategy& s = strategy();
  const std::string dir = job_directory(s, "distribute_mw_ckpt_");

  std::optional<Variable> weights, seen;
  {
    auto scope = s.scope();
    VariableOptions w;
    w.name = "weights";
    w.aggregation = VariableAggregation::MEAN;
    weights.emplace(Tensor{1.f, 2.f}, w);
    VariableOptions m;
    m.name = "seen";
    m.synchronization = VariableSynchronization::ON_READ;
    m.aggregation = VariableAggregation::SUM;
    seen.emplace(Tensor{0.f}, m);
  }
  s.run([&] { seen->assign_add(Tensor{1.f}); });
  std::int64_t step = 42;
  std::optional<Checkpoint> ckpt;
  {
    auto scope = s.scope();
    ckpt.emplace();
    ckpt->track("weights", *weights);
    ckpt->track("seen", *seen);
    ckpt->track("step", &step);
  }
  const std::string path = ckpt->save(dir);
  // Every worker returns the chief's path, and there is one file.
  std::vector<Tensor> same(static_cast<std::size_t>(g_local), Tensor(std::int64_t{0}));
  same[0] = Tensor(static_cast<std::int64_t>(std::hash<std::string>{}(path) % 1000003));
  EXPECT_EQ(s.reduce(ReduceOp::SUM, PerReplica<Tensor>(same)).data<std::int64_t>()[0],
            s.num_workers() * same[0].data<std::int64_t>()[0]);
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator{}), 1);

  // Change everything, restore, and every worker has the saved state back.
  weights->assign(Tensor{9.f, 9.f});
  seen->assign(Tensor{100.f});
  step = 0;
  ckpt->restore(path);
  for (const Tensor& c : weights->values()) EXPECT_EQ(c, (Tensor{1.f, 2.f}));
  EXPECT_EQ(seen->value(), Tensor{static_cast<float>(s.num_replicas_in_sync())});
  EXPECT_EQ(step, 42);
  remove_job_directory(s, dir);  // after everyone restored
}

// A distributed iterator's position saved by the chief is restored on every
// worker: the next steps are those the iterator gave after the save.
TEST(MultiWorker, IteratorCheckpointResumesTheSameStepsOnEveryWorker) {
  MultiWorkerMirroredStrategy& s = strategy();
  const std::string dir = job_directory(s, "distribute_mw_iter_");

  const auto pipeline = [] {
    std::vector<std::int64_t> v(200);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int64_t>(i);
    return Dataset::from_tensor_slices(Tensor(v, Shape{200})).shuffle(64, /*seed=*/5).batch(12).repeat();
  };
  const auto rows = [](const PerReplica<Element>& step) {
    std::vector<std::int64_t> out;
    for (const Element& e : step) {
      const auto d = e[0].data<std::int64_t>();
      out.insert(out.end(), d.begin(), d.end());
    }
    return out;
  };
  DistributedIterator it = s.experimental_distribute_dataset(pipeline()).make_iterator();
  for (int i = 0; i < 20; ++i) it.get_next();
  Checkpoint ckpt;
  ckpt.track("iterator", it);
  // Outside the strategy's scope every worker would write the file itself.
  EXPECT_THROW(ckpt.save(dir), FailedPreconditionError);
  std::string path;
  {
    auto scope = s.scope();
    path = ckpt.save(dir);
  }
  std::vector<std::vector<std::int64_t>> expected;
  for (int i = 0; i < 25; ++i) expected.push_back(rows(it.get_next()));

  DistributedIterator again = s.experimental_distribute_dataset(pipeline()).make_iterator();
  Checkpoint load;
  load.track("iterator", again);
  {
    auto scope = s.scope();
    load.restore(path);
  }
  for (int i = 0; i < 25; ++i) EXPECT_EQ(rows(again.get_next()), expected[static_cast<std::size_t>(i)]) << i;

  // A pipeline per worker (TF's sharding by input_pipeline_id): each
  // worker's own position is resumed.
  const auto per_worker = [&] {
    return s.distribute_datasets_from_function([&](const InputContext& context) {
      return pipeline()
          .unbatch()
          .shard(context.num_input_pipelines(), context.input_pipeline_id())
          .batch(4)
          .repeat();
    });
  };
  DistributedIterator own = per_worker().make_iterator();
  for (int i = 0; i < 7; ++i) own.get_next();
  Checkpoint own_ckpt;
  own_ckpt.track("iterator", own);
  std::string own_path;
  {
    auto scope = s.scope();
    own_path = own_ckpt.save(dir);
  }
  std::vector<std::vector<std::int64_t>> own_expected;
  for (int i = 0; i < 12; ++i) own_expected.push_back(rows(own.get_next()));
  DistributedIterator own_again = per_worker().make_iterator();
  Checkpoint own_load;
  own_load.track("iterator", own_again);
  {
    auto scope = s.scope();
    own_load.restore(own_path);
  }
  for (int i = 0; i < 12; ++i) EXPECT_EQ(rows(own_again.get_next()), own_expected[static_cast<std::size_t>(i)]) << i;
  remove_job_directory(s, dir);
}

// The chief's failure to save reaches every worker as its error code and
// its own message.
TEST(MultiWorker, TheChiefsSaveErrorIsRaisedOnEveryWorkerWithItsMessage) {
  MultiWorkerMirroredStrategy& s = strategy();
  std::optional<Checkpoint> ckpt;
  std::optional<Variable> v;
  {
    auto scope = s.scope();
    ckpt.emplace();
    VariableOptions options;
    options.name = "v_for_the_failed_save";
    v.emplace(Tensor{1.f}, options);
  }
  ckpt->track("v", *v);  // (a checkpoint's strategy is its variables')
  const std::string missing = "/nonexistent/distribute-mw-ckpt";
  try {
    ckpt->save(missing);
    ADD_FAILURE() << "save into a missing directory returned on worker " << s.worker_index();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_THAT(what, HasSubstr("Checkpoint::save: directory"));
    EXPECT_THAT(what, HasSubstr(missing));
    if (!s.is_chief()) {
      EXPECT_THAT(what, HasSubstr("the chief (worker 0) could not save the checkpoint: ")) << "worker " << s.worker_index();
    }
  }
  // The workers are still in step.
  auto ok = s.run([] { return get_replica_context()->all_reduce(ReduceOp::SUM, Tensor{1.f}); });
  EXPECT_EQ(ok[0], Tensor{static_cast<float>(s.num_replicas_in_sync())});
}

TEST(MultiWorker, DifferentVariablesOnTheWorkersAreNamed) {
  MultiWorkerMirroredStrategy& s = strategy();
  auto scope = s.scope();
  VariableOptions same_options, bias_options;
  same_options.name = "same";
  bias_options.name = "bias";
  Variable same(Tensor{1.f, 2.f}, same_options);
  const std::string msg = message_of<InvalidArgumentError>([&] {
    // Worker 1 (and later ones) create a variable of another shape.
    Variable differs(s.worker_index() == 0 ? Tensor{1.f} : Tensor{1.f, 2.f}, bias_options);
  });
  EXPECT_THAT(msg, HasSubstr("the workers differ in variable #"));
  EXPECT_THAT(msg, HasSubstr("'bias' shape (1,) dtype float32"));
  EXPECT_THAT(msg, HasSubstr("'bias' shape (2,) dtype float32"));
  EXPECT_THAT(msg, HasSubstr("on worker 1"));
}

// TF raises when an unbatched dataset is distributed; so does every worker
// here, at the call, with no message exchanged (the channel stays in step:
// the next collective works).
TEST(MultiWorker, AnUnbatchedDatasetRaisesWhenDistributedOnEveryWorker) {
  MultiWorkerMirroredStrategy& s = strategy();
  const std::string msg =
      message_of<InvalidArgumentError>([&] { s.experimental_distribute_dataset(Dataset::range(8)); });
  EXPECT_THAT(msg, HasSubstr("expected a batched dataset"));
  EXPECT_THAT(msg, HasSubstr("call the batch method"));
  auto ok = s.run([] { return current_replica_context().all_reduce(ReduceOp::SUM, Tensor{1.f}); });
  EXPECT_EQ(ok[0], Tensor{static_cast<float>(s.num_replicas_in_sync())});
}

// Which transport carries the workers' collectives: the shared-memory
// segment (every worker on this host; across hosts, the segment of each
// host with several workers) unless DISTRIBUTE_SHARED_MEMORY=0. The segment
// stays mapped (as "/dev/shm/distribute-... (deleted)"), and its name is
// gone once every worker has mapped it.
TEST(MultiWorker, TheHostsWorkersShareAMappedSegmentWithoutAName) {
  MultiWorkerMirroredStrategy& s = strategy();
  s.run([] { get_replica_context()->all_reduce(ReduceOp::SUM, Tensor{1.f}); });
  const char* env = std::getenv("DISTRIBUTE_SHARED_MEMORY");
  const bool expect_shm = env == nullptr || std::string(env) != "0";
  std::ifstream maps("/proc/self/maps");
  std::string line;
  bool mapped = false;
  while (std::getline(maps, line)) mapped = mapped || line.find("/dev/shm/distribute-") != std::string::npos;
  const std::string t = transport();
  if (!expect_shm) {
    EXPECT_EQ(t, "mpi") << "DISTRIBUTE_SHARED_MEMORY=" << env;
  }
  // (In the hierarchical mode, a host of one worker maps none.)
  if (t != "hierarchical") {
    EXPECT_EQ(mapped, t == "host segment") << t;
  }
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    EXPECT_EQ(entry.path().filename().string().rfind("distribute-", 0), std::string::npos) << entry.path();
  }
}

// A child forked without exec (Python's os.fork, multiprocessing, a data
// loader's workers) that ends through exit(), running the destructors and
// the at-exit handlers of its copy of the worker (the strategy with its
// replica threads, MPI, the segment, the process watch, a prefetching
// iterator): it ends at once, and the job goes on as if it never existed
// (no departure or failure reaches the other workers on the parent's
// behalf).
TEST(MultiWorker, AForkedChildThatEndsLeavesTheJobAlone) {
  // (Every worker skips alike: the sanitizer is the build's.)
  DISTRIBUTE_SKIP_FORK_WITH_THREADS();
  MultiWorkerMirroredStrategy& s = strategy();
  s.run([] { get_replica_context()->all_reduce(ReduceOp::SUM, Tensor{1.f}); });
  auto iterator = std::make_unique<Dataset::Iterator>(
      Dataset::from_tensor_slices(Tensor(std::vector<float>(64, 1.f), Shape{64})).map([](const Element& e) {
        return e;
      }, 2).prefetch(2).make_iterator());
  ASSERT_TRUE(iterator->get_next_as_optional().has_value());
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Its copies raise instead of waiting for the parent's threads and peers.
    int code = 0;
    try {
      s.run([] {});
      code = 2;
    } catch (const FailedPreconditionError&) {
    }
    try {
      MultiWorkerMirroredStrategy again;
      code = 3;
    } catch (const FailedPreconditionError& e) {
      if (std::string(e.what()).find("forked") == std::string::npos) code = 4;
    }
    iterator.reset();
    delete &s;
    std::exit(code);
  }
  int status = 0;
  pid_t ended = 0;
  for (int i = 0; i < 300 && ended == 0; ++i) {
    ended = ::waitpid(pid, &status, WNOHANG);
    if (ended == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (ended == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    FAIL() << "the forked child did not end within 30 s of its exit()";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "child status " << status << " (exit 2: its run returned; 3: a new strategy started; 4: other message)";
  EXPECT_TRUE(iterator->get_next_as_optional().has_value());
  const int total = s.num_replicas_in_sync();
  auto sums = s.run([] {
    return get_replica_context()->all_reduce(ReduceOp::SUM, value_of(get_replica_context()->replica_id_in_sync_group()));
  });
  EXPECT_EQ(sums[0], (Tensor{static_cast<float>(total * (total + 1) / 2), 10.f * static_cast<float>(total * (total + 1) / 2)}));
}

// Sums across the transports' size classes (empty, fewer elements than
// workers, the direct path, its boundary, several chunks of the segment's
// slots) for every dtype, against the closed form: replica g's element i is
// (g + 1) * (i % 1000), exact in every dtype.
TEST(MultiWorker, AllReduceOfEverySizeClassAndDtypeIsExact) {
  MultiWorkerMirroredStrategy& s = strategy();
  const int total = s.num_replicas_in_sync();
  // (262145: a last chunk of one element, fewer than the workers.)
  const std::vector<std::int64_t> counts{0, 1, 2, 1000, 16384, 16385, 262145, 300001, 600007};
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64}) {
    for (std::int64_t count : counts) {
      auto out = s.run([&] {
        const int g = get_replica_context()->replica_id_in_sync_group();
        std::vector<double> v(static_cast<std::size_t>(count));
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((g + 1) * static_cast<int>(i % 1000));
        return get_replica_context()->all_reduce(ReduceOp::SUM, Tensor(v, Shape{count}).cast(dtype));
      });
      const Tensor got = out[0].cast(DType::kFloat64);
      ASSERT_EQ(got.num_elements(), count);
      const double factor = static_cast<double>(total * (total + 1) / 2);
      std::int64_t wrong = 0;
      for (std::int64_t i = 0; i < count; ++i) {
        wrong += got.data<double>()[static_cast<std::size_t>(i)] != factor * static_cast<double>(i % 1000) ? 1 : 0;
      }
      EXPECT_EQ(wrong, 0) << count << " elements of " << dtype_name(dtype);
    }
  }
}

// An all_gather and a broadcast (a variable's initial value from the chief)
// larger than the segment's slots travel in several rounds.
TEST(MultiWorker, LargeAllGatherAndBroadcastArriveWhole) {
  MultiWorkerMirroredStrategy& s = strategy();
  const int total = s.num_replicas_in_sync();
  constexpr std::int64_t kRows = 150000;  // 2.4 MB of int64 per replica and more: several rounds
  auto out = s.run([] {
    const int g = get_replica_context()->replica_id_in_sync_group();
    std::vector<std::int64_t> v(static_cast<std::size_t>(kRows * (g + 1)));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = g * 1000003 + static_cast<std::int64_t>(i);
    return get_replica_context()->all_gather(Tensor(v, Shape{kRows * (g + 1)}), 0);
  });
  const std::vector<std::int64_t> got = values_of<std::int64_t>(out[0]);
  ASSERT_EQ(static_cast<std::int64_t>(got.size()), kRows * total * (total + 1) / 2);
  std::size_t at = 0;
  std::int64_t wrong = 0;
  for (int g = 0; g < total; ++g) {
    for (std::int64_t i = 0; i < kRows * (g + 1); ++i) wrong += got[at++] != g * 1000003 + i ? 1 : 0;
  }
  EXPECT_EQ(wrong, 0);
  std::optional<Variable> big;
  {
    auto scope = s.scope();
    VariableOptions options;
    options.name = "big";
    std::vector<float> init(400000, static_cast<float>(s.worker_index() + 3));  // 1.6 MB
    init.back() = static_cast<float>(s.worker_index());
    big.emplace(Tensor(init, Shape{400000}), options);
  }
  for (const Tensor& c : big->values()) {
    EXPECT_EQ(c.data<float>()[0], 3.f);
    EXPECT_EQ(c.data<float>()[399999], 0.f);
    EXPECT_EQ(c.data<float>()[262144], 3.f);
  }
}

// Replica ids of experimental_distribute_values_from_function are global
// and worker-major, as run's.
TEST(MultiWorker, ValuesFromFunctionUseGlobalReplicaIds) {
  MultiWorkerMirroredStrategy& s = strategy();
  const PerReplica<int> ids =
      s.experimental_distribute_values_from_function([&](const ValueContext& ctx) {
        EXPECT_EQ(ctx.num_replicas_in_sync, s.num_replicas_in_sync());
        return ctx.replica_id_in_sync_group;
      });
  ASSERT_EQ(static_cast<int>(ids.size()), g_local);
  for (int r = 0; r < g_local; ++r) EXPECT_EQ(ids[r], s.worker_index() * g_local + r);
  const auto same = s.run([](int id) { return id == get_replica_context()->replica_id_in_sync_group(); }, ids);
  for (int r = 0; r < g_local; ++r) EXPECT_TRUE(same[r]);
}

// The launch says which transport it set up (tests/net/run_net.sh:
// DISTRIBUTE_EXPECT_TRANSPORT): a silent fall-back to MPI messages alone
// would pass every other test.
TEST(MultiWorker, TheTransportIsTheOneTheLaunchSetUp) {
  const char* expected = std::getenv("DISTRIBUTE_EXPECT_TRANSPORT");
  if (expected == nullptr) GTEST_SKIP() << "DISTRIBUTE_EXPECT_TRANSPORT is not set";
  EXPECT_EQ(transport(), expected);
}

// A timeout of infinity is no deadline (options.h): every path, the
// hierarchical one's later deadlines for its later steps too, waits without
// one and sums right.
TEST(MultiWorker, AnAllReduceWithoutADeadlineSumsRight) {
  MultiWorkerMirroredStrategy& s = strategy();
  const float total = static_cast<float>(s.num_replicas_in_sync());
  for (std::int64_t n : {std::int64_t{1024}, std::int64_t{1} << 18}) {
    auto out = s.run([&] {
      CommunicationOptions options;
      options.timeout_seconds = std::numeric_limits<double>::infinity();
      return get_replica_context()->all_reduce(
          ReduceOp::SUM, Tensor(std::vector<float>(static_cast<std::size_t>(n), 1.f), Shape{n}), options);
    });
    for (const Tensor& t : s.experimental_local_results(out)) {
      EXPECT_EQ(t.data<float>()[0], total);
      EXPECT_EQ(t.data<float>()[static_cast<std::size_t>(n - 1)], total);
    }
  }
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
  if (transport() == "hierarchical") {
    // Across hosts, a mismatch breaks the channel (so this test runs last):
    // the workers that found it raise WorkersMismatchError, and report it
    // to the others, which raise UnavailableError with it. Each host
    // compares its own workers first, but a report of another host's
    // mismatch may reach a worker before its own call starts (its process
    // watch, at the call's start): either type, the same cause.
    std::string msg;
    try {
      mismatched();
    } catch (const Error& e) {
      msg = e.what();
    }
    EXPECT_THAT(msg, HasSubstr("workers made different collective calls at cross-worker all_reduce #1:"));
    EXPECT_THAT(msg, ::testing::ContainsRegex("[0-9] elements of float32 on worker [0-9] vs [0-9] elements of float32 "
                                            "on worker [0-9]"));
    return;
  }
  const std::string msg = message_of<InvalidArgumentError>(mismatched);
  EXPECT_THAT(msg, HasSubstr("workers made different collective calls"));
  EXPECT_THAT(msg, HasSubstr("1 elements of float32 on worker 0 vs 2 elements of float32 on worker 1"));
  // Numbered as the user counts (the run's first collective is #1, as
  // in-process), not by the exchanges the library made before (start-up,
  // variables, input).
  EXPECT_THAT(msg, HasSubstr("cross-worker all_reduce #1:"));
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
