// MultiWorkerMirroredStrategy with threads of this process as the workers
// (the in-process stand-in transport, src/transport/local_cross_worker.h):
// the multi-worker paths above the transport -- cross-worker collectives,
// worker agreement in distributed input, variable creation checks,
// checkpoint commit, failure reports, deadlines, preemption -- in the
// ordinary suite and under ThreadSanitizer. The same paths over MPI:
// multi_worker_test.cc under mpirun.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "distribute/distribute.h"
#include "testing/helpers.h"
#include "transport/local_cross_worker.h"

namespace distribute {
namespace {

using ::testing::HasSubstr;
using testing::cpu_devices;
using testing::message_of;
using testing::TempDir;

// Runs body(worker, strategy) on one thread per worker, each with its own
// MultiWorkerMirroredStrategy of `replicas` local replicas over one hub.
// Returns each worker's exception (null when it returned).
std::vector<std::exception_ptr> run_workers(int workers, int replicas,
                                            const std::function<void(int, MultiWorkerMirroredStrategy&)>& body,
                                            double timeout_seconds = 20) {
  const auto channels = internal::make_local_cross_workers(workers);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(workers));
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      try {
        MultiWorkerOptions options;
        options.local_devices = cpu_devices(replicas);
        options.communication.timeout_seconds = timeout_seconds;
        MultiWorkerMirroredStrategy strategy(options, channels[static_cast<std::size_t>(w)]);
        body(w, strategy);
      } catch (...) {
        errors[static_cast<std::size_t>(w)] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

std::string what_of(const std::exception_ptr& e) {
  if (!e) return "(returned)";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
  return "(not a std::exception)";
}

void expect_all_returned(const std::vector<std::exception_ptr>& errors) {
  for (std::size_t w = 0; w < errors.size(); ++w) EXPECT_FALSE(errors[w]) << "worker " << w << ": " << what_of(errors[w]);
}

template <class E>
bool is(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

TEST(LocalWorkers, CollectivesSpanEveryWorkersReplicasInGlobalOrder) {
  expect_all_returned(run_workers(2, 2, [](int w, MultiWorkerMirroredStrategy& s) {
    EXPECT_EQ(s.num_workers(), 2);
    EXPECT_EQ(s.worker_index(), w);
    EXPECT_EQ(s.is_chief(), w == 0);
    EXPECT_EQ(s.num_replicas_in_sync(), 4);
    auto sums = s.run([] {
      const int g = current_replica_context().replica_id_in_sync_group();
      return current_replica_context().all_reduce(ReduceOp::SUM, Tensor{static_cast<float>(g + 1)});
    });
    auto means = s.run([] {
      const int g = current_replica_context().replica_id_in_sync_group();
      return current_replica_context().all_reduce(ReduceOp::MEAN, Tensor{static_cast<double>(g)});
    });
    auto gathered = s.run([] {
      const int g = current_replica_context().replica_id_in_sync_group();
      return current_replica_context().all_gather(Tensor{static_cast<std::int64_t>(g)}, 0);
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(sums[r], Tensor{10.f});
      EXPECT_EQ(means[r], Tensor{1.5});
      EXPECT_EQ(gathered[r], (Tensor(std::vector<std::int64_t>{0, 1, 2, 3}, Shape{4})));
    }
    // Cross-replica: reduce and gather of this worker's values.
    PerReplica<Tensor> mine(std::vector<Tensor>{Tensor{static_cast<float>(2 * w)}, Tensor{static_cast<float>(2 * w + 1)}});
    EXPECT_EQ(s.reduce(ReduceOp::SUM, mine), Tensor{6.f});
    EXPECT_EQ(s.gather(mine, 0), (Tensor{0.f, 1.f, 2.f, 3.f}));
  }));
}

// Donation with other workers: one local replica's single tensor is summed
// across the workers in its own buffer (the result is the donated buffer,
// with the const& call's bits); with two local replicas, or packed with
// another tensor, the result is a new buffer and the donated one is left
// alone. experimental_allocate_shared gives ordinary blocks over this
// transport, one per local replica.
TEST(LocalWorkers, ADonatedTensorOfOneLocalReplicaIsSummedInPlaceAcrossTheWorkers) {
  for (const int replicas : {1, 2}) {
    SCOPED_TRACE(std::to_string(replicas) + " local replica(s)");
    constexpr std::int64_t kCount = 70001;
    expect_all_returned(run_workers(3, replicas, [&](int, MultiWorkerMirroredStrategy& s) {
      const auto blocks = s.experimental_allocate_shared(static_cast<std::size_t>(kCount) * sizeof(float));
      ASSERT_EQ(blocks.size(), static_cast<std::size_t>(replicas));
      auto out = s.run([&] {
        ReplicaContext& ctx = *get_replica_context();
        const int g = ctx.replica_id_in_sync_group();
        const std::shared_ptr<std::byte>& block = blocks[static_cast<std::size_t>(g % replicas)];
        auto* f = reinterpret_cast<float*>(block.get());
        for (std::int64_t i = 0; i < kCount; ++i) f[i] = 0.1f * static_cast<float>(g + 1) + 1e-3f * static_cast<float>(i % 89);
        const Tensor copied = ctx.all_reduce(ReduceOp::MEAN, Tensor(std::vector<float>(f, f + kCount), Shape{kCount}));
        Tensor wrapped = Tensor::wrap(DType::kFloat32, Shape{kCount}, f,
                                      std::make_shared<std::shared_ptr<std::byte>>(block), /*writable=*/true);
        const Tensor donated = ctx.all_reduce(ReduceOp::MEAN, std::move(wrapped));
        // Packed with a second tensor: never in place with other workers.
        Tensor packed = Tensor(std::vector<float>(f, f + 100), Shape{100});
        const auto* packed_address = packed.bytes().data();
        std::vector<Tensor> pair;
        pair.push_back(std::move(packed));
        pair.push_back(Tensor{1.f});
        const std::vector<Tensor> packed_out = ctx.all_reduce(ReduceOp::SUM, std::move(pair));
        EXPECT_NE(packed_out[0].bytes().data(), packed_address);
        const bool in_place = donated.bytes().data() == block.get();
        EXPECT_EQ(in_place, replicas == 1);
        return std::vector<Tensor>{copied, donated};
      });
      for (int r = 0; r < replicas; ++r) {
        EXPECT_EQ(std::memcmp(out[r][0].bytes().data(), out[r][1].bytes().data(), out[r][0].bytes().size()), 0);
      }
    }));
  }
}

TEST(LocalWorkers, DistributedInputShardsOnePipelinePerWorker) {
  std::map<int, std::vector<std::int64_t>> seen;  // worker -> rows, in order
  std::map<int, int> steps;
  std::mutex mutex;
  expect_all_returned(run_workers(2, 1, [&](int w, MultiWorkerMirroredStrategy& s) {
    std::vector<std::int64_t> rows;
    int n = 0;
    for (const PerReplica<Element>& step : s.experimental_distribute_dataset(Dataset::range(20).batch(4))) {
      for (std::int64_t v : step[0][0].data<std::int64_t>()) rows.push_back(v);
      ++n;
    }
    // One pipeline per worker, from distribute_datasets_from_function.
    std::vector<int> ids;
    for (const PerReplica<Element>& step : s.distribute_datasets_from_function([&](const InputContext& ctx) {
           ids.push_back(ctx.input_pipeline_id());
           EXPECT_EQ(ctx.num_input_pipelines(), 2);
           return Dataset::range(4).batch(2);
         })) {
      EXPECT_EQ(step[0][0].num_elements(), 2);
    }
    EXPECT_EQ(ids, std::vector<int>{w});
    std::lock_guard<std::mutex> lock(mutex);
    seen[w] = rows;
    steps[w] = n;
  }));
  // Every row once, over the workers; the same number of steps on each.
  std::vector<std::int64_t> all = seen[0];
  all.insert(all.end(), seen[1].begin(), seen[1].end());
  std::sort(all.begin(), all.end());
  std::vector<std::int64_t> expected(20);
  for (int i = 0; i < 20; ++i) expected[static_cast<std::size_t>(i)] = i;
  EXPECT_EQ(all, expected);
  EXPECT_EQ(steps[0], steps[1]);
}

// Across workers a step's batches may be empty (a worker whose data ended),
// so the element_spec's batch dimension is unknown, as TF's; only an
// infinite input keeps it. One worker keeps the fixed size.
TEST(LocalWorkers, TheElementSpecsBatchDimensionIsUnknownUnlessTheInputIsInfinite) {
  const Dataset fixed = Dataset::range(16).batch(4, /*drop_remainder=*/true);
  expect_all_returned(run_workers(2, 1, [&](int, MultiWorkerMirroredStrategy& s) {
    EXPECT_EQ(s.experimental_distribute_dataset(fixed).element_spec().components.at(0).shape,
              std::vector<std::int64_t>{-1});
    EXPECT_EQ(s.experimental_distribute_dataset(fixed.repeat()).element_spec().components.at(0).shape,
              std::vector<std::int64_t>{2});
    const auto from_function = s.distribute_datasets_from_function([&](const InputContext&) { return fixed; });
    EXPECT_EQ(from_function.element_spec().components.at(0).shape, std::vector<std::int64_t>{-1});
  }));
  expect_all_returned(run_workers(1, 2, [&](int, MultiWorkerMirroredStrategy& s) {
    EXPECT_EQ(s.experimental_distribute_dataset(fixed).element_spec().components.at(0).shape,
              std::vector<std::int64_t>{2});
  }));
}

// TF's FILE sharding of TFRecord files: worker w reads files w, w + W, ...
// With 3 files on 2 workers, worker 1 runs out first and gets empty string
// batches while worker 0 still has data (every worker takes the same steps).
TEST(LocalWorkers, TFRecordFilesAreShardedByFileAndUnevenSharesGetEmptyBatches) {
  std::vector<std::string> shards;
  for (int k = 0; k < 3; ++k) shards.push_back(std::string(DISTRIBUTE_TF_FILES_DIR) + "/shard-" + std::to_string(k) + ".tfrecord");
  std::mutex mutex;
  std::map<int, std::vector<std::string>> seen;
  std::map<int, int> steps, empty;
  expect_all_returned(run_workers(2, 1, [&](int w, MultiWorkerMirroredStrategy& s) {
    std::vector<std::string> mine;
    int n = 0, n_empty = 0;
    for (const PerReplica<Element>& step : s.experimental_distribute_dataset(TFRecordDataset(shards).batch(3))) {
      const Tensor& batch = step[0].tensor();
      EXPECT_EQ(batch.dtype(), DType::kString);
      if (batch.dim(0) == 0) ++n_empty;
      for (const std::string& r : batch.strings()) mine.push_back(r);
      ++n;
    }
    std::lock_guard<std::mutex> lock(mutex);
    seen[w] = mine;
    steps[w] = n;
    empty[w] = n_empty;
  }));
  EXPECT_EQ(seen[0], (std::vector<std::string>{"k0-r0", "k0-r1", "k0-r2", "k2-r0", "k2-r1", "k2-r2"}));
  EXPECT_EQ(seen[1], (std::vector<std::string>{"k1-r0", "k1-r1", "k1-r2"}));
  // batch(3) is the global batch of 2 replicas: each worker's batches are
  // cut into shares of 2 and 1 (TF's rebatch), one step each: worker 0's
  // two batches take 4 steps, worker 1's one batch 2, then 2 empty ones.
  EXPECT_EQ(steps[0], 4);
  EXPECT_EQ(steps[1], 4);
  EXPECT_EQ(empty[0], 0);
  EXPECT_EQ(empty[1], 2);
}

// TF sets the policy on the dataset (Dataset::with_options); an explicit
// InputOptions policy overrides it for one call.
TEST(LocalWorkers, TheDatasetsAutoShardOptionDecidesUnlessTheCallSetsOne) {
  std::mutex mutex;
  std::map<int, std::vector<std::int64_t>> off, data;
  Options whole;
  whole.experimental_distribute.auto_shard_policy = AutoShardPolicy::OFF;
  const Dataset optioned = Dataset::range(8).batch(4).with_options(whole);
  expect_all_returned(run_workers(2, 1, [&](int w, MultiWorkerMirroredStrategy& s) {
    std::vector<std::int64_t> a, b;
    for (const PerReplica<Element>& step : s.experimental_distribute_dataset(optioned)) {
      for (std::int64_t v : step[0][0].data<std::int64_t>()) a.push_back(v);
    }
    InputOptions by_data;
    by_data.auto_shard_policy = AutoShardPolicy::DATA;
    for (const PerReplica<Element>& step : s.experimental_distribute_dataset(optioned, by_data)) {
      for (std::int64_t v : step[0][0].data<std::int64_t>()) b.push_back(v);
    }
    Options file;
    file.experimental_distribute.auto_shard_policy = AutoShardPolicy::FILE;
    EXPECT_THAT(message_of<InvalidArgumentError>(
                    [&] { s.experimental_distribute_dataset(Dataset::range(8).batch(4).with_options(file)); }),
                HasSubstr("AutoShardPolicy::FILE needs a dataset that reads a list of files"));
    std::lock_guard<std::mutex> lock(mutex);
    off[w] = a;
    data[w] = b;
  }));
  // OFF: each worker sees all 8 rows (batches of 4 rows, the worker's
  // share of a global batch being the whole batch); DATA: half each.
  for (int w = 0; w < 2; ++w) EXPECT_EQ(off[w], (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7})) << w;
  EXPECT_EQ(data[0], (std::vector<std::int64_t>{0, 1, 4, 5}));
  EXPECT_EQ(data[1], (std::vector<std::int64_t>{2, 3, 6, 7}));
}

TEST(LocalWorkers, VariablesStartFromTheChiefAndDifferentVariablesAreNamed) {
  expect_all_returned(run_workers(2, 1, [](int w, MultiWorkerMirroredStrategy& s) {
    StrategyScope scope = s.scope();
    // Each worker proposes its own start: the chief's wins everywhere.
    Variable v(Tensor{static_cast<float>(w + 7)});
    EXPECT_EQ(v.value(), Tensor{7.f});
    VariableOptions options;
    options.name = "bias";
    const std::string msg = message_of<InvalidArgumentError>([&] {
      Variable differs(w == 0 ? Tensor{1.f} : Tensor{1.f, 2.f}, options);
    });
    EXPECT_THAT(msg, HasSubstr("the workers differ in variable #"));
    EXPECT_THAT(msg, HasSubstr("on worker 1"));
  }));
}

// The step's rows (its only replica's), appended to `rows`.
void append_rows(const PerReplica<Element>& step, std::vector<std::int64_t>& rows) {
  for (std::int64_t v : step[0][0].data<std::int64_t>()) rows.push_back(v);
}

TEST(LocalWorkers, CheckpointIsCommittedByTheChiefAndRestoresTheIteratorOnEveryWorker) {
  TempDir dir("local_workers_test");
  const auto pipeline = [] { return Dataset::range(40).shuffle(10, /*seed=*/3).batch(4).repeat(); };
  std::map<int, std::vector<std::int64_t>> uninterrupted, resumed;
  std::mutex mutex;
  // Six steps in one go, and three + (save, new strategies, restore) + three.
  expect_all_returned(run_workers(2, 1, [&](int w, MultiWorkerMirroredStrategy& s) {
    DistributedIterator it = s.experimental_distribute_dataset(pipeline()).make_iterator();
    std::vector<std::int64_t> rows;
    for (int i = 0; i < 6; ++i) append_rows(it.get_next(), rows);
    std::lock_guard<std::mutex> lock(mutex);
    uninterrupted[w] = rows;
  }));
  std::map<int, std::string> paths;
  expect_all_returned(run_workers(2, 1, [&](int w, MultiWorkerMirroredStrategy& s) {
    StrategyScope scope = s.scope();
    DistributedIterator it = s.experimental_distribute_dataset(pipeline()).make_iterator();
    std::vector<std::int64_t> rows;
    for (int i = 0; i < 3; ++i) append_rows(it.get_next(), rows);
    Checkpoint ckpt;
    ckpt.track("iterator", it);
    const std::string path = ckpt.save(dir.path());
    std::lock_guard<std::mutex> lock(mutex);
    paths[w] = path;
    resumed[w] = rows;
  }));
  EXPECT_EQ(paths[0], paths[1]);
  EXPECT_EQ(paths[0], dir / "ckpt-1.dckpt");
  expect_all_returned(run_workers(2, 1, [&](int w, MultiWorkerMirroredStrategy& s) {
    StrategyScope scope = s.scope();
    DistributedIterator it = s.experimental_distribute_dataset(pipeline()).make_iterator();
    Checkpoint ckpt;
    ckpt.track("iterator", it);
    ckpt.restore(*latest_checkpoint(dir.path()));
    std::vector<std::int64_t> rows;
    for (int i = 0; i < 3; ++i) append_rows(it.get_next(), rows);
    std::lock_guard<std::mutex> lock(mutex);
    resumed[w].insert(resumed[w].end(), rows.begin(), rows.end());
  }));
  EXPECT_EQ(resumed, uninterrupted);
}

// CheckpointManager over workers: the chief numbers, writes and deletes;
// every worker gets the same path and restores the latest.
TEST(LocalWorkers, CheckpointManagerSavesOnceForAllWorkers) {
  TempDir dir("local_workers_manager");
  std::mutex mutex;
  std::map<int, std::vector<std::string>> paths;
  expect_all_returned(run_workers(2, 1, [&](int w, MultiWorkerMirroredStrategy& s) {
    StrategyScope scope = s.scope();
    std::int64_t step = 0;
    Checkpoint ckpt;
    ckpt.track("step", &step);
    CheckpointManager manager(ckpt, dir / "run", {.max_to_keep = 2});
    std::vector<std::string> mine;
    for (step = 1; step <= 3; ++step) mine.push_back(*manager.save());
    EXPECT_EQ(manager.checkpoints().size(), 2u);
    step = 0;
    EXPECT_EQ(manager.restore_or_initialize(), mine.back());
    EXPECT_EQ(step, 3);
    std::lock_guard<std::mutex> lock(mutex);
    paths[w] = mine;
  }));
  EXPECT_EQ(paths[0], paths[1]);
  EXPECT_EQ(paths[0].back(), dir / "run/ckpt-3.dckpt");
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir / "run")) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"ckpt-2.dckpt", "ckpt-3.dckpt"}));
}

// A restore in which the workers read different files (each listed its own
// directory) raises on every worker, and no worker changes its state.
TEST(LocalWorkers, WorkersRestoringDifferentFilesRaiseAndChangeNothing) {
  TempDir dir("local_workers_different");
  // One file per worker, with different values: written outside any
  // strategy (an ordinary variable and the default strategy).
  for (int w = 0; w < 2; ++w) {
    Variable plain(Tensor(static_cast<float>(10 + w)), {.name = "v"});
    Checkpoint ckpt;
    ckpt.track("v", plain);
    std::filesystem::create_directories(dir / std::to_string(w));
    ckpt.save(dir / std::to_string(w));
  }
  const auto errors = run_workers(2, 1, [&](int w, MultiWorkerMirroredStrategy& s) {
    Variable v = [&] {
      StrategyScope scope = s.scope();
      return Variable(Tensor(1.f), {.name = "v"});
    }();
    Checkpoint ckpt;
    ckpt.track("v", v);
    try {
      ckpt.restore(*latest_checkpoint(dir / std::to_string(w)));
    } catch (...) {
      EXPECT_EQ(v.value(), Tensor(1.f)) << "worker " << w << " changed its variable";
      throw;
    }
  });
  for (int w = 0; w < 2; ++w) {
    const auto& e = errors[static_cast<std::size_t>(w)];
    EXPECT_TRUE(is<FailedPreconditionError>(e)) << "worker " << w << ": " << what_of(e);
    EXPECT_THAT(what_of(e), HasSubstr("the workers read different files (worker 0: "));
    EXPECT_THAT(what_of(e), HasSubstr("no worker changed its state"));
  }
}

// latest_checkpoint(directory, strategy): the chief's listing on every
// worker, and the chief's error on every worker.
TEST(LocalWorkers, LatestCheckpointOfTheStrategyIsTheChiefs) {
  TempDir dir("local_workers_latest");
  std::int64_t step = 1;
  Checkpoint ckpt;
  ckpt.track("step", &step);
  std::filesystem::create_directories(dir / "0");
  std::filesystem::create_directories(dir / "1");
  ckpt.save(dir / "0");
  for (int i = 0; i < 3; ++i) ckpt.save(dir / "1");  // worker 1 alone would pick ckpt-3
  std::mutex mutex;
  std::map<int, std::optional<std::string>> found;
  expect_all_returned(run_workers(2, 1, [&](int w, MultiWorkerMirroredStrategy& s) {
    std::optional<std::string> latest = latest_checkpoint(dir / std::to_string(w), s);
    std::lock_guard<std::mutex> lock(mutex);
    found[w] = latest;
  }));
  // The chief's file name, in each worker's own directory (a shared file
  // system may be mounted elsewhere on another host).
  EXPECT_EQ(found[0], std::optional<std::string>(dir / "0/ckpt-1.dckpt"));
  EXPECT_EQ(found[1], std::optional<std::string>(dir / "1/ckpt-1.dckpt"));
  // save() and restore_or_initialize() give every worker the chief's file
  // in the worker's own spelling of the directory.
  std::map<int, std::string> saved;
  std::map<int, std::optional<std::string>> restored;
  expect_all_returned(run_workers(2, 1, [&](int w, MultiWorkerMirroredStrategy& s) {
    StrategyScope scope = s.scope();
    const std::string mine = w == 0 ? dir / "0" : dir / "./0";
    std::int64_t value = 7;
    Checkpoint tracked;
    tracked.track("step", &value);
    const std::string path = tracked.save(mine);
    value = 0;
    CheckpointManager manager(tracked, mine, {.checkpoint_name = "ckpt"});
    const std::optional<std::string> from = manager.restore_or_initialize();
    EXPECT_EQ(value, 7) << "worker " << w;
    std::lock_guard<std::mutex> lock(mutex);
    saved[w] = path;
    restored[w] = from;
  }));
  EXPECT_EQ(saved[0], dir / "0/ckpt-2.dckpt");
  EXPECT_EQ(saved[1], dir / "./0/ckpt-2.dckpt");
  EXPECT_EQ(restored[0], std::optional<std::string>(saved[0]));
  EXPECT_EQ(restored[1], std::optional<std::string>(saved[1]));
  // No checkpoint on the chief: none on every worker.
  std::filesystem::create_directories(dir / "empty");
  expect_all_returned(run_workers(2, 1, [&](int w, MultiWorkerMirroredStrategy& s) {
    EXPECT_EQ(latest_checkpoint(w == 0 ? dir / "empty" : dir / "1", s), std::nullopt) << "worker " << w;
  }));
  // A chief that cannot list its directory (a file): its error everywhere.
  const auto errors = run_workers(2, 1, [&](int w, MultiWorkerMirroredStrategy& s) {
    latest_checkpoint(w == 0 ? dir / "0/ckpt-1.dckpt" : dir / "1", s);
  });
  EXPECT_TRUE(is<FailedPreconditionError>(errors[0])) << what_of(errors[0]);
  EXPECT_THAT(what_of(errors[0]), HasSubstr("latest_checkpoint: cannot list the directory"));
  EXPECT_TRUE(is<FailedPreconditionError>(errors[1])) << what_of(errors[1]);
  EXPECT_THAT(what_of(errors[1]), HasSubstr("the chief (worker 0) could not find the latest checkpoint: "));
  // The same in CheckpointManager::restore_or_initialize: only the chief
  // lists, and its error reaches every worker at once (before, every worker
  // listed, and one whose listing raised left the others in the collective).
  const auto manager_errors = run_workers(2, 1, [&](int w, MultiWorkerMirroredStrategy& s) {
    StrategyScope scope = s.scope();
    std::int64_t mine = 0;
    Checkpoint tracked;
    tracked.track("step", &mine);
    CheckpointManager manager(tracked, w == 0 ? dir / "0/ckpt-1.dckpt" : dir / "1");
    manager.restore_or_initialize();
  });
  EXPECT_TRUE(is<FailedPreconditionError>(manager_errors[0])) << what_of(manager_errors[0]);
  EXPECT_THAT(what_of(manager_errors[0]), HasSubstr("CheckpointManager: cannot list the directory"));
  EXPECT_TRUE(is<FailedPreconditionError>(manager_errors[1])) << what_of(manager_errors[1]);
  EXPECT_THAT(what_of(manager_errors[1]),
              HasSubstr("CheckpointManager::restore_or_initialize: the chief (worker 0) could not find"));
}

// An integer SUM SyncOnReadVariable assigned (restored) across workers
// keeps its total exactly: the remainder goes to the chief's first
// component only.
TEST(LocalWorkers, IntegerSumSyncOnReadAssignKeepsTheTotalOverWorkers) {
  expect_all_returned(run_workers(2, 2, [&](int w, MultiWorkerMirroredStrategy& s) {
    StrategyScope scope = s.scope();
    Variable count(Tensor(std::int64_t{0}), {.name = "count",
                                            .synchronization = VariableSynchronization::ON_READ,
                                            .aggregation = VariableAggregation::SUM});
    count.assign(Tensor(std::int64_t{7}));  // 4 replicas: 1 each, and 3 more on replica 0
    EXPECT_EQ(count.value(), Tensor(std::int64_t{7})) << "worker " << w;
    const std::vector<Tensor> components = count.values();
    ASSERT_EQ(components.size(), 2u);
    EXPECT_EQ(components[0], Tensor(std::int64_t{w == 0 ? 4 : 1})) << "worker " << w;
    EXPECT_EQ(components[1], Tensor(std::int64_t{1})) << "worker " << w;
  }));
}

// strategy.extended() over workers: reduce_to spans every worker's
// replicas, update stays local, and only the chief checkpoints.
TEST(LocalWorkers, ExtendedReducesOverWorkersAndUpdatesLocally) {
  expect_all_returned(run_workers(2, 2, [&](int w, MultiWorkerMirroredStrategy& s) {
    Variable v = [&] {
      StrategyScope scope = s.scope();
      return Variable(Tensor(0.0), {.name = "v"});
    }();
    StrategyExtended ext = s.extended();
    EXPECT_EQ(ext.should_checkpoint(), w == 0);
    EXPECT_EQ(ext.worker_devices(),
              (std::vector<std::string>{"/job:worker/replica:0/task:" + std::to_string(w) + "/device:CPU:0",
                                        "/job:worker/replica:0/task:" + std::to_string(w) + "/device:CPU:1"}));
    // Replica values 1..4 over the two workers: SUM 10 on every component.
    const double base = 2.0 * w;
    const Mirrored<Tensor> total =
        ext.reduce_to(ReduceOp::SUM, PerReplica<Tensor>({Tensor(base + 1), Tensor(base + 2)}), v);
    ext.update(
        v, [](Variable& x, const Tensor& t) { x.assign(t); }, total);
    EXPECT_EQ(v.values(), (std::vector<Tensor>{Tensor(10.0), Tensor(10.0)}));
  }));
}

// Structures across workers: a dict all_reduce and a tuple reduce span
// every worker's replicas; other keys on one worker are refused everywhere.
TEST(LocalWorkers, StructuresReduceOverWorkersAndOtherKeysAreRefused) {
  using Dict = std::map<std::string, Tensor>;
  expect_all_returned(run_workers(2, 2, [&](int, MultiWorkerMirroredStrategy& s) {
    auto [sum, n] = s.run([] {
      const float id = static_cast<float>(current_replica_context().replica_id_in_sync_group());
      const Dict d = current_replica_context().all_reduce(ReduceOp::SUM, Dict{{"g", Tensor(id)}});
      return std::make_tuple(d.at("g"), Tensor(1));
    });
    const auto [total, count] = s.reduce(ReduceOp::SUM, std::make_tuple(sum, n));
    EXPECT_EQ(total, Tensor(4.f * 6.f));  // every replica holds 0+1+2+3
    EXPECT_EQ(count, Tensor(4));
  }));
  const auto errors = run_workers(2, 1, [&](int w, MultiWorkerMirroredStrategy& s) {
    s.run([&] { current_replica_context().all_reduce(ReduceOp::SUM, Dict{{w == 0 ? "a" : "b", Tensor(1.f)}}); });
  });
  for (const auto& e : errors) {
    EXPECT_TRUE(is<InvalidArgumentError>(e)) << what_of(e);
    EXPECT_THAT(what_of(e), HasSubstr("replica(s) 1 passed other lengths or keys than replica 0"));
  }
  // Strategy::reduce of a structure: one collective per leaf, so the
  // workers' structures are compared first.
  const auto reduced = run_workers(2, 1, [&](int w, MultiWorkerMirroredStrategy& s) {
    s.reduce(ReduceOp::SUM, std::map<std::string, PerReplica<Tensor>>{
                                {w == 0 ? "a" : "b", PerReplica<Tensor>({Tensor(1.f)})}});
  });
  for (const auto& e : reduced) {
    EXPECT_TRUE(is<InvalidArgumentError>(e)) << what_of(e);
    EXPECT_THAT(what_of(e), HasSubstr("Strategy::reduce of a structure"));
  }
}

TEST(LocalWorkers, MismatchedCallsRaiseOnEveryWorkerAndTheChannelStaysInStep) {
  expect_all_returned(run_workers(2, 1, [](int w, MultiWorkerMirroredStrategy& s) {
    const std::string msg = message_of<InvalidArgumentError>([&] {
      s.run([&] {
        return current_replica_context().all_reduce(
            ReduceOp::SUM, Tensor(std::vector<float>(static_cast<std::size_t>(w + 1), 1.f), Shape{w + 1}));
      });
    });
    EXPECT_THAT(msg, HasSubstr("workers made different collective calls"));
    EXPECT_THAT(msg, HasSubstr("1 elements of float32 on worker 0 vs 2 elements of float32 on worker 1"));
    EXPECT_THAT(msg, HasSubstr("cross-worker all_reduce #1"));
    auto ok = s.run([] { return current_replica_context().all_reduce(ReduceOp::SUM, Tensor{1.f}); });
    EXPECT_EQ(ok[0], Tensor{2.f});
  }));
}

TEST(LocalWorkers, TheSameCountInOtherShapesIsAMismatch) {
  // 6 elements on both workers: {2, 3} against {3, 2} (a sum would pair
  // elements of different positions); in a list, {4}, {2} against {2}, {4};
  // and Strategy::reduce of {6} against {1, 6}.
  expect_all_returned(run_workers(2, 1, [](int w, MultiWorkerMirroredStrategy& s) {
    const Tensor six(std::vector<float>(6, 1.f), w == 0 ? Shape{2, 3} : Shape{3, 2});
    const std::string msg = message_of<InvalidArgumentError>(
        [&] { s.run([&] { return current_replica_context().all_reduce(ReduceOp::SUM, six); }); });
    EXPECT_THAT(msg, HasSubstr("workers made different collective calls"));
    EXPECT_THAT(msg,
                HasSubstr("the same 6 elements of float32 in tensors of different shapes or from different calls "
                          "(Strategy.reduce, all_reduce) on worker 0 and on worker 1"));
    std::vector<Tensor> parts{Tensor(std::vector<float>(4, 1.f), Shape{4}), Tensor(std::vector<float>(2, 1.f), Shape{2})};
    if (w == 1) std::swap(parts[0], parts[1]);
    const std::string list = message_of<InvalidArgumentError>(
        [&] { s.run([&] { return current_replica_context().all_reduce(ReduceOp::SUM, parts); }); });
    EXPECT_THAT(list, HasSubstr("in tensors of different shapes"));
    const PerReplica<Tensor> value({Tensor(std::vector<float>(6, 1.f), w == 0 ? Shape{6} : Shape{1, 6})});
    const std::string reduced = message_of<InvalidArgumentError>([&] { s.reduce(ReduceOp::SUM, value); });
    EXPECT_THAT(reduced, HasSubstr("in tensors of different shapes"));
    auto ok = s.run([] { return current_replica_context().all_reduce(ReduceOp::SUM, Tensor{1.f}); });
    EXPECT_EQ(ok[0], Tensor{2.f});
  }));
}

// A strategy's reduce on one worker and a replica's all_reduce of as many
// elements on the other: a mismatch on both, not a silent pairing (from
// review, 12-07: a plain value's reduce is a collective of every worker).
TEST(LocalWorkers, AReduceOnOneWorkerAgainstAnAllReduceIsAMismatch) {
  expect_all_returned(run_workers(2, 1, [](int w, MultiWorkerMirroredStrategy& s) {
    const std::string msg = message_of<InvalidArgumentError>([&] {
      if (w == 0) {
        s.reduce(ReduceOp::MEAN, Tensor{1.f});
      } else {
        s.run([] { return current_replica_context().all_reduce(ReduceOp::SUM, Tensor{1.f}); });
      }
    });
    EXPECT_THAT(msg, HasSubstr("from different calls (Strategy.reduce, all_reduce) on worker 0 and on worker 1"));
    // The workers are still in step.
    EXPECT_EQ(s.reduce(ReduceOp::SUM, Tensor{static_cast<float>(w + 1)}), Tensor{3.f});
  }));
}

TEST(LocalWorkers, AFailingReplicaOnOneWorkerReleasesTheOthersNamingIt) {
  const auto errors = run_workers(3, 2, [](int w, MultiWorkerMirroredStrategy& s) {
    s.run([&] {
      if (w == 1 && current_replica_context().replica_id_in_sync_group() == 3) {
        throw InvalidArgumentError("worker one's replica failed");
      }
      current_replica_context().all_reduce(ReduceOp::SUM, Tensor{1.f});
    });
  });
  ASSERT_TRUE(errors[1]);
  EXPECT_THAT(what_of(errors[1]), HasSubstr("worker one's replica failed"));
  for (int w : {0, 2}) {
    ASSERT_TRUE(errors[static_cast<std::size_t>(w)]) << "worker " << w << " returned";
    EXPECT_TRUE(is<UnavailableError>(errors[static_cast<std::size_t>(w)])) << what_of(errors[static_cast<std::size_t>(w)]);
    EXPECT_THAT(what_of(errors[static_cast<std::size_t>(w)]), HasSubstr("worker 1"));
  }
}

// Two workers of `replicas` local replicas each: worker 0 makes `call`,
// worker 1 never joins and leaves only once worker 0's call has returned or
// raised (or after 10 s), so that worker 0 meets its deadline rather than
// worker 1's departure, however the threads are scheduled.
std::vector<std::exception_ptr> run_with_a_stuck_worker(int replicas, double timeout_seconds,
                                                        const std::function<void(MultiWorkerMirroredStrategy&)>& call) {
  std::atomic<bool> returned{false};
  return run_workers(
      2, replicas,
      [&](int w, MultiWorkerMirroredStrategy& s) {
        if (w == 1) {
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (!returned && std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          return;
        }
        struct Returned {
          std::atomic<bool>& flag;
          ~Returned() { flag = true; }
        } on_return{returned};
        call(s);
      },
      timeout_seconds);
}

TEST(LocalWorkers, AStuckWorkerIsNamedAtTheDeadline) {
  const auto start = std::chrono::steady_clock::now();
  const auto errors = run_with_a_stuck_worker(1, 0.3, [](MultiWorkerMirroredStrategy& s) {
    s.run([] { current_replica_context().all_reduce(ReduceOp::SUM, Tensor{1.f}); });
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(errors[0]);
  EXPECT_TRUE(is<DeadlineExceededError>(errors[0])) << what_of(errors[0]);
  EXPECT_THAT(what_of(errors[0]), HasSubstr("nothing received from worker(s) [1]"));
  EXPECT_FALSE(errors[1]) << what_of(errors[1]);
  EXPECT_LT(seconds, 10.0);
}

// With two local replicas the other replica waits on replica 0's step
// across the workers past the call's deadline, so that the error is the
// transport's, naming the worker, not its own "missing []" (audit, 12-07).
TEST(LocalWorkers, AStuckWorkerIsNamedWithTwoLocalReplicas) {
  for (int pass = 0; pass < 2; ++pass) {
    const auto errors = run_with_a_stuck_worker(2, 1.0, [](MultiWorkerMirroredStrategy& s) {
      s.run([] { current_replica_context().all_reduce(ReduceOp::SUM, Tensor{1.f}); });
    });
    ASSERT_TRUE(errors[0]);
    EXPECT_THAT(what_of(errors[0]), HasSubstr("nothing received from worker(s) [1]"));
    EXPECT_FALSE(errors[1]) << what_of(errors[1]);
  }
}

// A merge_call's function reducing across the workers: its deadline is
// capped before the merge_call's own, so the leader names the worker that
// does not answer before the other local replica gives up on the leader
// ("missing [0]") (audit, 12-07).
TEST(LocalWorkers, AStuckWorkerIsNamedFromAMergeCall) {
  for (int pass = 0; pass < 2; ++pass) {
    const auto errors = run_with_a_stuck_worker(2, 1.0, [](MultiWorkerMirroredStrategy& s) {
      s.run([] {
        return current_replica_context().merge_call(
            [](Strategy& st, const PerReplica<Tensor>& v) { return st.reduce(ReduceOp::SUM, v); }, Tensor{1.f});
      });
    });
    ASSERT_TRUE(errors[0]);
    EXPECT_TRUE(is<DeadlineExceededError>(errors[0])) << what_of(errors[0]);
    EXPECT_THAT(what_of(errors[0]), HasSubstr("nothing received from worker(s) [1]"));
    EXPECT_FALSE(errors[1]) << what_of(errors[1]);
  }
}

TEST(LocalWorkers, SigtermOnOneWorkerSavesOnceAtTheSameCallOnEvery) {
  TempDir dir("local_workers_test");
  struct Stopped {};
  std::map<int, std::int64_t> stopped_at;
  std::mutex mutex;
  const auto errors = run_workers(2, 2, [&](int w, MultiWorkerMirroredStrategy& s) {
    StrategyScope scope = s.scope();
    Variable counter(Tensor{0.f});
    Checkpoint ckpt;
    ckpt.track("counter", counter);
    int polls = 0;
    TerminationConfig config;
    // Only worker 1 is told to stop, during its 4th call.
    config.termination_watcher_fn = [&, w] { return w == 1 && ++polls == 4; };
    config.exit_fn = [] { throw Stopped{}; };
    PreemptionCheckpointHandler handler(ckpt, dir.path(), config);
    try {
      for (int i = 0; i < 10; ++i) handler.run([&] { counter.assign(Tensor{static_cast<float>(i + 1)}); });
    } catch (const Stopped&) {
      std::lock_guard<std::mutex> lock(mutex);
      stopped_at[w] = handler.total_run_calls();
    }
  });
  expect_all_returned(errors);
  EXPECT_EQ(stopped_at, (std::map<int, std::int64_t>{{0, 4}, {1, 4}}));
  const std::optional<std::string> latest = latest_checkpoint(dir.path());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(*latest, dir / "ckpt-1.dckpt");  // one save, by the chief
  std::map<std::string, Tensor> saved;
  for (auto& [name, value] : load_checkpoint(*latest)) saved.emplace(name, value);
  EXPECT_EQ(saved.at("counter"), Tensor{4.f});
  EXPECT_EQ(saved.at("checkpointed_runs"), Tensor(std::int64_t{4}));
}

}  // namespace
}  // namespace distribute
