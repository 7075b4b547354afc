// Checkpoint::track of a DistributedIterator: a restored iterator (in a
// stand-in for a new process: a new pipeline definition and a new strategy)
// returns, bitwise, the steps an uninterrupted run returns, with the same or
// another replica count; pipelines that cannot be replayed are refused at
// track(); a wrong position changes nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::message_of;

using testing::cpu_devices;
std::vector<std::string> cpus(int n) { return cpu_devices(n); }

// The natural training input: `n` rows (features i and 2i), a seeded
// shuffle that reshuffles every epoch, batches of 8 (with 100 rows the last
// one of each epoch has 4), repeated. Each call builds a new definition, as
// a new process would.
Dataset natural_pipeline(int n = 100, bool prefetch = false) {
  std::vector<float> x(static_cast<std::size_t>(n)), y(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    x[static_cast<std::size_t>(i)] = static_cast<float>(i);
    y[static_cast<std::size_t>(i)] = static_cast<float>(2 * i);
  }
  return Dataset::from_tensor_slices(std::vector<Tensor>{Tensor(x, Shape{n}), Tensor(y, Shape{n})})
      .shuffle(50, /*seed=*/7)
      .batch(8)
      .repeat()
      .prefetch(prefetch ? 3 : 0);
}

// A step as the global batch: every replica's rows of each component, in
// replica order.
std::vector<std::vector<float>> global_batch(const PerReplica<Element>& step) {
  std::vector<std::vector<float>> out;
  for (std::size_t c = 0; c < step.primary().size(); ++c) {
    std::vector<float> rows;
    for (const Element& e : step) {
      const auto d = e[c].data<float>();
      rows.insert(rows.end(), d.begin(), d.end());
    }
    out.push_back(std::move(rows));
  }
  return out;
}

std::vector<std::vector<std::vector<float>>> steps_of(DistributedIterator& it, int n) {
  std::vector<std::vector<std::vector<float>>> out;
  for (int i = 0; i < n; ++i) out.push_back(global_batch(it.get_next()));
  return out;
}

// The natural pipeline's position after `steps` steps on 2 replicas,
// saved into `dir`.
std::string save_after(const std::string& dir, int steps) {
  MirroredStrategy two(cpus(2));
  DistributedIterator it = two.experimental_distribute_dataset(natural_pipeline()).make_iterator();
  for (int i = 0; i < steps; ++i) it.get_next();
  Checkpoint ckpt;
  ckpt.track("iterator", it);
  return ckpt.save(dir);
}

class IteratorCheckpointTest : public ::testing::Test {
 protected:
  testing::TempDir temp_{"iterator_checkpoint_test"};
  const std::string dir_ = temp_.path();
};

// Saved after `at` steps on `save_replicas` replicas, restored on
// `restore_replicas`: the next 30 steps (across epochs) equal an
// uninterrupted run's steps at..at+29 on `restore_replicas`.
void expect_resumes(const std::string& dir, int rows, int at, int save_replicas, int restore_replicas,
                    bool prefetch = false) {
  SCOPED_TRACE(std::to_string(rows) + " rows, saved after " + std::to_string(at) + " steps on " +
               std::to_string(save_replicas) + " replicas, restored on " + std::to_string(restore_replicas));
  std::vector<std::vector<std::vector<float>>> expected;
  {
    MirroredStrategy reference(cpus(restore_replicas));
    DistributedIterator it = reference.experimental_distribute_dataset(natural_pipeline(rows, prefetch)).make_iterator();
    expected = steps_of(it, at + 30);
  }
  std::string path;
  {
    MirroredStrategy first(cpus(save_replicas));
    DistributedDataset data = first.experimental_distribute_dataset(natural_pipeline(rows, prefetch));
    DistributedIterator it = data.make_iterator();
    for (int i = 0; i < at; ++i) it.get_next();
    Checkpoint ckpt;
    ckpt.track("iterator", it);
    path = ckpt.save(dir);
  }
  MirroredStrategy second(cpus(restore_replicas));
  DistributedDataset data = second.experimental_distribute_dataset(natural_pipeline(rows, prefetch));
  DistributedIterator it = data.make_iterator();
  it.get_next();  // the fresh iterator moves: restore() replaces its position
  Checkpoint ckpt;
  ckpt.track("iterator", it);
  ckpt.restore(path);
  const auto resumed = steps_of(it, 30);
  for (int i = 0; i < 30; ++i) {
    ASSERT_EQ(resumed[static_cast<std::size_t>(i)], expected[static_cast<std::size_t>(at + i)]) << "step " << at + i;
  }
}

TEST_F(IteratorCheckpointTest, ResumesBitwiseWhereTheRunStoppedAcrossEpochs) {
  // 13 steps an epoch, the 13th of 4 rows.
  for (int at : {0, 1, 12, 13, 14, 40}) expect_resumes(dir_, 100, at, 2, 2);
  expect_resumes(dir_, 100, 27, 1, 1);
}

TEST_F(IteratorCheckpointTest, ResumesWithAPrefetchInThePipeline) {
  // The prefetch's thread runs ahead across epoch boundaries (taking
  // shuffle iterations) while the checkpoint is saved and restored.
  for (int at : {3, 13, 30}) expect_resumes(dir_, 100, at, 2, 2, /*prefetch=*/true);
}

// TF's file input: the lines of text files, shuffled with a seed, batched,
// repeated; resumed in a new pipeline on another replica count.
TEST_F(IteratorCheckpointTest, ResumesATextLinePipelineBitwise) {
  std::vector<std::string> files;
  for (int f = 0; f < 3; ++f) {
    files.push_back(temp_ / ("lines" + std::to_string(f) + ".txt"));
    std::ofstream out(files.back());
    for (int i = 0; i < 12; ++i) out << "file " << f << " line " << i << "\n";  // 36 lines: 9 whole batches
  }
  auto pipeline = [&] { return TextLineDataset(files).shuffle(10, /*seed=*/3).batch(4).repeat(); };
  auto strings_of_step = [](const PerReplica<Element>& step) {
    std::vector<std::string> rows;
    for (const Element& e : step) rows.insert(rows.end(), e.tensor().strings().begin(), e.tensor().strings().end());
    return rows;
  };
  std::vector<std::vector<std::string>> expected;
  {
    MirroredStrategy reference(cpus(1));
    DistributedIterator it = reference.experimental_distribute_dataset(pipeline()).make_iterator();
    for (int i = 0; i < 25; ++i) expected.push_back(strings_of_step(it.get_next()));
  }
  std::string path;
  {
    MirroredStrategy first(cpus(2));
    DistributedIterator it = first.experimental_distribute_dataset(pipeline()).make_iterator();
    for (int i = 0; i < 10; ++i) it.get_next();
    Checkpoint ckpt;
    ckpt.track("iterator", it);
    path = ckpt.save(dir_);
  }
  MirroredStrategy second(cpus(1));
  DistributedIterator it = second.experimental_distribute_dataset(pipeline()).make_iterator();
  Checkpoint ckpt;
  ckpt.track("iterator", it);
  ckpt.restore(path);
  for (int i = 10; i < 25; ++i) EXPECT_EQ(strings_of_step(it.get_next()), expected[static_cast<std::size_t>(i)]) << i;
}

TEST_F(IteratorCheckpointTest, AFailedRestoreLeavesTheShufflesAsTheyWere) {
  // The restore fails after its replay (another replica count after a
  // partial batch): the tracked iterator, and new iterators of the same
  // dataset, go on exactly as if it had not been tried.
  const std::string path = save_after(dir_, 30);
  MirroredStrategy one(cpus(1));
  std::vector<std::vector<std::vector<float>>> expected_it, expected_new;
  {
    DistributedDataset data = one.experimental_distribute_dataset(natural_pipeline());
    DistributedIterator it = data.make_iterator();
    it.get_next();
    expected_it = steps_of(it, 40);
    DistributedIterator again = data.make_iterator();
    expected_new = steps_of(again, 40);
  }
  DistributedDataset data = one.experimental_distribute_dataset(natural_pipeline());
  DistributedIterator it = data.make_iterator();
  it.get_next();
  Checkpoint ckpt;
  ckpt.track("iterator", it);
  EXPECT_THROW(ckpt.restore(path), InvalidArgumentError);
  EXPECT_EQ(steps_of(it, 40), expected_it);
  DistributedIterator again = data.make_iterator();
  EXPECT_EQ(steps_of(again, 40), expected_new);
}

TEST_F(IteratorCheckpointTest, AMovedFromIteratorIsRefused) {
  MirroredStrategy strategy(cpus(2));
  DistributedIterator it = strategy.experimental_distribute_dataset(natural_pipeline()).make_iterator();
  Checkpoint ckpt;
  ckpt.track("iterator", it);
  DistributedIterator moved = std::move(it);
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { ckpt.save(dir_); }), HasSubstr("moved from"));
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(IteratorCheckpointTest, ResumesTheSameGlobalBatchesOnAnotherReplicaCount) {
  // 96 rows: every global batch is whole, so every replica count cuts the
  // stream at the same rows.
  expect_resumes(dir_, 96, 17, 2, 1);
  expect_resumes(dir_, 96, 17, 1, 2);
  expect_resumes(dir_, 96, 5, 2, 4);
  // Before the first partial batch the steps hold the same rows too.
  expect_resumes(dir_, 100, 12, 2, 1);
}

TEST_F(IteratorCheckpointTest, AnotherReplicaCountAfterAPartialBatchInsideTheStreamIsRefused) {
  // 2 replicas cut the epoch's 4-row batch and the next epoch's first rows
  // into one step of 8; 1 replica returns the 4 rows alone: after step 13,
  // the same step count is not the same input position.
  const std::string path = save_after(dir_, 15);
  MirroredStrategy one(cpus(1));
  DistributedIterator it = one.experimental_distribute_dataset(natural_pipeline()).make_iterator();
  Checkpoint ckpt;
  ckpt.track("iterator", it);
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { ckpt.restore(path); }),
              AllOf(HasSubstr("saved after 15 steps holding 120 rows"), HasSubstr("hold 116 rows split into 1 local replica(s)"),
                    HasSubstr("restore with the replica count it was saved with")));
}

// The saving process iterated make()'s dataset once before (an evaluation
// pass), so its shuffles were at their second iteration when the tracked
// iterator was made; saved after `at` steps, the position restores into a
// new definition's iterator whose next `n` steps are the saved iterator's.
void expect_restores_after_an_earlier_pass(const std::function<Dataset()>& make, const std::string& dir, int at,
                                           int n) {
  MirroredStrategy strategy(cpus(2));
  DistributedDataset data = strategy.experimental_distribute_dataset(make());
  {
    DistributedIterator warm = data.make_iterator();
    warm.get_next();
  }
  DistributedIterator it = data.make_iterator();
  for (int i = 0; i < at; ++i) it.get_next();
  Checkpoint save;
  save.track("iterator", it);
  const std::string path = save.save(dir);
  const auto expected = steps_of(it, n);

  DistributedDataset again = strategy.experimental_distribute_dataset(make());
  DistributedIterator restored = again.make_iterator();
  Checkpoint load;
  load.track("iterator", restored);
  load.restore(path);
  EXPECT_EQ(steps_of(restored, n), expected);
}

TEST_F(IteratorCheckpointTest, AnEarlierIterationOfTheSameDatasetDoesNotShiftTheShuffle) {
  expect_restores_after_an_earlier_pass([] { return natural_pipeline(); }, dir_, 9, 20);
}

TEST_F(IteratorCheckpointTest, PipelinesThatCannotBeReplayedAreRefusedAtTrack) {
  MirroredStrategy strategy(cpus(2));
  Checkpoint ckpt;
  DistributedIterator unseeded =
      strategy.experimental_distribute_dataset(Dataset::range(0, 40).shuffle(10).batch(4)).make_iterator();
  EXPECT_THAT(message_of<UnimplementedError>([&] { ckpt.track("a", unseeded); }),
              AllOf(HasSubstr("Checkpoint::track('a')"), HasSubstr("shuffle without a seed")));
  DistributedIterator generated =
      strategy
          .experimental_distribute_dataset(Dataset::from_generator([] {
                                             auto n = std::make_shared<int>(0);
                                             return Dataset::Generator([n]() -> std::optional<Element> {
                                               if (*n == 8) return std::nullopt;
                                               return Element{Tensor(std::vector<float>{static_cast<float>((*n)++)},
                                                                     Shape{1})};
                                             });
                                           }).unbatch().batch(2))
          .make_iterator();
  EXPECT_THAT(message_of<UnimplementedError>([&] { ckpt.track("b", generated); }), HasSubstr("from_generator"));
  EXPECT_TRUE(ckpt.tracked_names().empty());
}

// The rows of one component of a step, replica after replica.
std::vector<std::int64_t> rows_of(const PerReplica<Element>& step) {
  std::vector<std::int64_t> rows;
  for (const Element& e : step) {
    const auto d = e[0].data<std::int64_t>();
    rows.insert(rows.end(), d.begin(), d.end());
  }
  return rows;
}

Dataset slices(std::int64_t n, std::int64_t batch) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return Dataset::from_tensor_slices(Tensor(v, Shape{n})).shuffle(8, /*seed=*/1).batch(batch);
}

TEST_F(IteratorCheckpointTest, APositionOfAnotherPipelineOrBeyondItsEndChangesNothing) {
  MirroredStrategy strategy(cpus(2));
  const auto save_after = [&](Dataset pipeline, int steps, const std::string& sub) {
    DistributedIterator it = strategy.experimental_distribute_dataset(pipeline).make_iterator();
    for (int i = 0; i < steps; ++i) it.get_next();
    Checkpoint ckpt;
    ckpt.track("iterator", it);
    fs::create_directory(dir_ + "/" + sub);
    return ckpt.save(dir_ + "/" + sub);
  };
  // Batches of 2: another definition. 40 rows, 8 steps: the same definition
  // (the pipeline's transformations, not its data) as the tracked 24-row
  // one below, which ends after 6 steps.
  const std::string other = save_after(slices(40, 2), 3, "other");
  const std::string far = save_after(slices(40, 4), 8, "far");

  DistributedIterator it = strategy.experimental_distribute_dataset(slices(24, 4)).make_iterator();
  std::vector<std::vector<std::int64_t>> expected;
  {
    DistributedIterator reference = strategy.experimental_distribute_dataset(slices(24, 4)).make_iterator();
    for (int i = 0; i < 6; ++i) expected.push_back(rows_of(reference.get_next()));
  }
  EXPECT_EQ(rows_of(it.get_next()), expected[0]);
  Checkpoint ckpt;
  ckpt.track("iterator", it);
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { ckpt.restore(other); }),
              AllOf(HasSubstr("'iterator'"), HasSubstr("another input pipeline")));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { ckpt.restore(far); }),
              AllOf(HasSubstr("saved after 8 steps"), HasSubstr("ends after 6")));
  // Nothing changed: the iterator goes on where it was.
  for (int i = 1; i < 6; ++i) EXPECT_EQ(rows_of(it.get_next()), expected[static_cast<std::size_t>(i)]) << i;
  EXPECT_FALSE(it.get_next_as_optional().has_value());
}

// Another shuffle seed is another pipeline: its rows come in another order,
// so the position is refused rather than replayed into the wrong rows (the
// seed is part of the pipeline's description, and of its fingerprint).
TEST_F(IteratorCheckpointTest, APositionSavedWithAnotherShuffleSeedIsRefused) {
  MirroredStrategy strategy(cpus(2));
  const auto pipeline = [](std::uint64_t seed) {
    return Dataset::range(40).shuffle(10, seed).batch(4).repeat();
  };
  EXPECT_THAT(pipeline(7).describe(), HasSubstr("Shuffle(10, seed=7)"));
  DistributedIterator saved = strategy.experimental_distribute_dataset(pipeline(7)).make_iterator();
  for (int i = 0; i < 3; ++i) saved.get_next();
  Checkpoint out;
  out.track("iterator", saved);
  const std::string path = out.save(dir_);

  DistributedIterator other = strategy.experimental_distribute_dataset(pipeline(8)).make_iterator();
  Checkpoint in;
  in.track("iterator", other);
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { in.restore(path); }),
              AllOf(HasSubstr("'iterator'"), HasSubstr("another input pipeline")));
}

}  // namespace
}  // namespace distribute

namespace distribute {
namespace {

// Every branch of a zip counts: its shuffles' iterations are saved and set
// back (here the second branch's shuffle is at its second iteration when
// the tracked iterator is made), and the pieces of the other new
// transformations replay.
TEST_F(IteratorCheckpointTest, ResumesAZipOfShuffledBranchesAndTheNewTransformations) {
  const auto pipeline = [] {
    const Dataset features = Dataset::range(60).map([](const Element& e) -> Element {
      return Tensor(std::vector<float>{static_cast<float>(e.tensor().item<std::int64_t>())}, Shape{1});
    });
    const Dataset noise = Dataset::range(60).shuffle(20, 3).map([](const Element& e) -> Element {
      return Tensor(std::vector<float>{static_cast<float>(e.tensor().item<std::int64_t>()) / 100.f}, Shape{1});
    });
    return Dataset::zip({features.cache(), noise})
        .interleave([](const Element& e) { return Dataset::from_tensors(e).repeat(2); }, 3, 2)
        .padded_batch(6)
        .repeat();
  };
  expect_restores_after_an_earlier_pass(pipeline, dir_, 25, 30);
}

TEST_F(IteratorCheckpointTest, ACacheOfAReshufflingShuffleIsRefused) {
  MirroredStrategy strategy(cpus(2));
  Checkpoint ckpt;
  DistributedIterator frozen =
      strategy.experimental_distribute_dataset(Dataset::range(40).shuffle(10, 1).cache().batch(4)).make_iterator();
  EXPECT_THAT(message_of<UnimplementedError>([&] { ckpt.track("a", frozen); }),
              HasSubstr("cache() of a reshuffling shuffle"));
  DistributedIterator fine =
      strategy
          .experimental_distribute_dataset(
              Dataset::range(40).shuffle(10, 1, /*reshuffle_each_iteration=*/false).cache().batch(4))
          .make_iterator();
  ckpt.track("b", fine);
  EXPECT_EQ(ckpt.tracked_names(), std::vector<std::string>{"b"});
}

}  // namespace
}  // namespace distribute
