// Distributed input: experimental_distribute_dataset and
// distribute_datasets_from_function, over the strategy matrix.
//
// The expected steps are computed here from TF's rule, independently of the
// library: the rows of the (batched) input are re-cut in the sizes of
// batch_sizes_for_worker(G, 1, N, 0) used cyclically, crossing input batch
// boundaries; element k*N + r of that stream goes to replica r of step k; a
// step exists while any of its replicas has data, the others get an empty
// batch (first dimension 0). With one replica nothing is split.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <ostream>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "distribute/distribute.h"
#include "testing/strategy_matrix.h"

namespace distribute {
namespace {

using testing::message_of;
using testing::StrategyTest;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Rows = std::vector<float>;  // one replica's batch of a rank-1 dataset
using Step = std::vector<Rows>;   // one step: a batch per replica
using Steps = std::vector<Step>;

// Guards every loop over an iterator: a broken end of sequence fails the
// test instead of hanging it.
constexpr int kMaxSteps = 10000;

// float32 [start, start + 1, ..., start + rows - 1], shape (rows,).
Tensor iota(std::int64_t rows, float start = 0.f) {
  std::vector<float> v(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return Tensor(std::move(v), Shape{rows});
}

Rows seq(std::int64_t begin, std::int64_t end) {
  Rows r;
  for (std::int64_t i = begin; i < end; ++i) r.push_back(static_cast<float>(i));
  return r;
}

Rows values_of(const Tensor& t) {
  std::span<const float> d = t.data<float>();
  return Rows(d.begin(), d.end());
}

std::size_t to_size(std::int64_t v) { return static_cast<std::size_t>(v); }

// TF's batch_sizes_for_worker for one worker, written out independently:
// the first G mod N replicas get floor(G/N) + 1 rows, the others floor(G/N).
std::vector<std::int64_t> tf_sizes(std::int64_t global, int n) {
  std::vector<std::int64_t> sizes;
  for (int r = 0; r < n; ++r) sizes.push_back(global / n + (r < global % n ? 1 : 0));
  return sizes;
}

// The steps TF gives for `rows` (in order) batched with batch(G, drop) and
// distributed over n replicas.
Steps expected_steps(const Rows& rows, std::int64_t global, int n, bool drop) {
  const std::size_t g = to_size(global);
  const std::size_t kept = drop ? rows.size() / g * g : rows.size();
  Steps steps;
  if (n == 1) {  // no split: every global batch is one step
    for (std::size_t b = 0; b < kept; b += g) {
      steps.push_back({Rows(rows.begin() + static_cast<std::ptrdiff_t>(b),
                            rows.begin() + static_cast<std::ptrdiff_t>(std::min(kept, b + g)))});
    }
    return steps;
  }
  const std::vector<std::int64_t> sizes = tf_sizes(global, n);
  std::vector<Rows> stream;  // the rebatched stream, crossing input batches
  std::size_t pos = 0;
  for (std::size_t k = 0; pos < kept; ++k) {
    const std::size_t take = std::min(to_size(sizes[k % sizes.size()]), kept - pos);
    stream.emplace_back(rows.begin() + static_cast<std::ptrdiff_t>(pos),
                        rows.begin() + static_cast<std::ptrdiff_t>(pos + take));
    pos += take;
  }
  const std::size_t per_step = static_cast<std::size_t>(n);
  for (std::size_t k = 0; k < stream.size(); k += per_step) {
    Step step;
    for (std::size_t r = 0; r < per_step; ++r) step.push_back(k + r < stream.size() ? stream[k + r] : Rows{});
    steps.push_back(std::move(step));
  }
  return steps;
}

Steps expected_steps(std::int64_t rows, std::int64_t global, int n, bool drop) {
  return expected_steps(seq(0, rows), global, n, drop);
}

// One step as rows; checks that every value is a float32 rank-1 tensor.
Step rows_of(const PerReplica<Element>& step) {
  Step s;
  for (const Element& e : step) {
    EXPECT_FALSE(e.is_tuple());
    const Tensor& t = e;
    EXPECT_EQ(t.dtype(), DType::kFloat32);
    EXPECT_EQ(t.rank(), 1) << t;
    s.push_back(values_of(t));
  }
  return s;
}

// Every step of one pass over `dataset`.
Steps collect(const DistributedDataset& dataset, int n) {
  Steps out;
  DistributedIterator it = dataset.make_iterator();
  while (std::optional<PerReplica<Element>> step = it.get_next_as_optional()) {
    EXPECT_EQ(step->size(), n);
    out.push_back(rows_of(*step));
    if (static_cast<int>(out.size()) > kMaxSteps) {
      ADD_FAILURE() << "iteration does not end";
      break;
    }
  }
  return out;
}

// All replica rows of all steps, in step then replica order.
Rows flatten(const Steps& steps) {
  Rows all;
  for (const Step& s : steps) {
    for (const Rows& r : s) all.insert(all.end(), r.begin(), r.end());
  }
  return all;
}

std::set<std::int64_t> global_batch_sizes(int n) {
  std::set<std::int64_t> g{n, 2 * n, n + 1, 1, 7};
  if (2 * n - 1 > 0) g.insert(2 * n - 1);
  return g;
}

std::set<std::int64_t> dataset_lengths(std::int64_t g) { return {0, 1, g - 1, g, 2 * g, 2 * g + 1, 3 * g + 2}; }

// ---------------------------------------------------------------------------
// batch_sizes_for_worker

TEST(BatchSizesForWorkerTest, MatchesTfExamples) {
  EXPECT_THAT(batch_sizes_for_worker(4, 1, 3, 0), ElementsAre(2, 1, 1));
  EXPECT_THAT(batch_sizes_for_worker(5, 1, 2, 0), ElementsAre(3, 2));
  EXPECT_THAT(batch_sizes_for_worker(1, 1, 2, 0), ElementsAre(1, 0));
  EXPECT_THAT(batch_sizes_for_worker(7, 2, 2, 0), ElementsAre(2, 2, 2, 1));
  EXPECT_THAT(batch_sizes_for_worker(7, 2, 2, 1), ElementsAre(2, 1, 2, 2));
  EXPECT_THAT(batch_sizes_for_worker(8, 1, 1, 0), ElementsAre(8));
  EXPECT_THAT(batch_sizes_for_worker(0, 1, 2, 0), ElementsAre(0, 0));
}

TEST(BatchSizesForWorkerTest, SumsToTheGlobalBatchAndDiffersByAtMostOne) {
  for (std::int64_t g = 0; g <= 20; ++g) {
    for (int workers = 1; workers <= 4; ++workers) {
      for (int per_worker = 1; per_worker <= 4; ++per_worker) {
        const std::size_t subs = static_cast<std::size_t>(workers * per_worker);
        std::vector<std::int64_t> worker0;
        for (int w = 0; w < workers; ++w) {
          SCOPED_TRACE("G=" + std::to_string(g) + " W=" + std::to_string(workers) +
                       " R=" + std::to_string(per_worker) + " w=" + std::to_string(w));
          const std::vector<std::int64_t> sizes = batch_sizes_for_worker(g, workers, per_worker, w);
          ASSERT_EQ(sizes.size(), subs);
          EXPECT_EQ(std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0}), g);
          const auto [lo, hi] = std::minmax_element(sizes.begin(), sizes.end());
          EXPECT_LE(*hi - *lo, 1);
          EXPECT_GE(*lo, 0);
          if (w == 0) {
            worker0 = sizes;
            // Larger ones first.
            EXPECT_TRUE(std::is_sorted(sizes.rbegin(), sizes.rend()));
          } else {
            // Worker w's list is worker 0's rotated left by w * R.
            for (std::size_t i = 0; i < subs; ++i) {
              EXPECT_EQ(sizes[i], worker0[(i + static_cast<std::size_t>(w * per_worker)) % subs]);
            }
          }
        }
      }
    }
  }
}

TEST(BatchSizesForWorkerTest, RejectsInvalidArguments) {
  EXPECT_THAT(message_of<InvalidArgumentError>([] { batch_sizes_for_worker(-1, 1, 2, 0); }),
              HasSubstr("batch_sizes_for_worker"));
  EXPECT_THROW(batch_sizes_for_worker(4, 0, 2, 0), InvalidArgumentError);
  EXPECT_THROW(batch_sizes_for_worker(4, 1, 0, 0), InvalidArgumentError);
  EXPECT_THROW(batch_sizes_for_worker(4, 2, 2, 2), InvalidArgumentError);
  EXPECT_THROW(batch_sizes_for_worker(4, 2, 2, -1), InvalidArgumentError);
}

// ---------------------------------------------------------------------------
// The seed: TF's DistributedValues docstring examples on two replicas.

TEST(DistributedDatasetSeedTest, DocstringExamplesOnTwoReplicas) {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  const Dataset dataset = Dataset::from_tensor_slices({5.f, 6.f, 7.f, 8.f}).batch(2);
  DistributedIterator it = strategy.experimental_distribute_dataset(dataset).make_iterator();

  // 1. Created from a DistributedDataset.
  const PerReplica<Element> values = it.get_next();
  EXPECT_EQ(to_string(values),
            "PerReplica:{\n"
            "  0: Tensor([5.], shape=(1,), dtype=float32),\n"
            "  1: Tensor([6.], shape=(1,), dtype=float32)\n"
            "}");

  // 2. Returned by run.
  auto ids = strategy.run([] { return get_replica_context()->replica_id_in_sync_group(); });
  EXPECT_THAT(ids.values(), ElementsAre(0, 1));

  // 3. As input into run.
  auto updated = strategy.run([](const Tensor& input) { return input + 1.f; }, values);
  ASSERT_EQ(updated.size(), 2);
  EXPECT_EQ(updated[0], (Tensor{6.f}));
  EXPECT_EQ(updated[1], (Tensor{7.f}));

  // 4. As input into reduce.
  EXPECT_EQ(strategy.reduce(ReduceOp::SUM, values, 0).to_string(), "Tensor(11.0, shape=(), dtype=float32)");

  // 5. Local results.
  const std::vector<Element> local = strategy.experimental_local_results(values);
  ASSERT_EQ(local.size(), 2u);
  EXPECT_EQ(local[0], Element(Tensor{5.f}));
  EXPECT_EQ(local[1], Element(Tensor{6.f}));

  const PerReplica<Element> second = it.get_next();
  EXPECT_EQ(second[0], Element(Tensor{7.f}));
  EXPECT_EQ(second[1], Element(Tensor{8.f}));
  EXPECT_THROW(it.get_next(), OutOfRangeError);
}

// ---------------------------------------------------------------------------
// Explicit splits on fixed replica counts.

std::shared_ptr<Strategy> mirrored(int n) {
  std::vector<std::string> devices;
  for (int i = 0; i < n; ++i) devices.push_back("CPU:" + std::to_string(i));
  return std::make_shared<MirroredStrategy>(devices);
}

Steps steps_of(Strategy& strategy, std::int64_t rows, std::int64_t global, bool drop = false) {
  return collect(strategy.experimental_distribute_dataset(Dataset::from_tensor_slices(iota(rows)).batch(global, drop)),
                 strategy.num_replicas_in_sync());
}

TEST(DistributedDatasetSplitTest, UnevenGlobalBatchesPutTheLargerPiecesFirst) {
  auto three = mirrored(3);
  EXPECT_EQ(steps_of(*three, 4, 4), (Steps{{{0, 1}, {2}, {3}}}));
  auto two = mirrored(2);
  EXPECT_EQ(steps_of(*two, 5, 5), (Steps{{{0, 1, 2}, {3, 4}}}));
}

TEST(DistributedDatasetSplitTest, FinalPartialBatchIsCutByTheSameSizesInTurn) {
  auto three = mirrored(3);
  EXPECT_EQ(steps_of(*three, 10, 4), (Steps{{{0, 1}, {2}, {3}}, {{4, 5}, {6}, {7}}, {{8, 9}, {}, {}}}));
  EXPECT_EQ(steps_of(*three, 2, 4), (Steps{{{0, 1}, {}, {}}}));
  auto two = mirrored(2);
  EXPECT_EQ(steps_of(*two, 9, 4), (Steps{{{0, 1}, {2, 3}}, {{4, 5}, {6, 7}}, {{8}, {}}}));
  EXPECT_EQ(steps_of(*two, 6, 8), (Steps{{{0, 1, 2, 3}, {4, 5}}}));
  // drop_remainder drops the partial input batch before the split.
  EXPECT_EQ(steps_of(*two, 9, 4, /*drop=*/true), (Steps{{{0, 1}, {2, 3}}, {{4, 5}, {6, 7}}}));
}

TEST(DistributedDatasetSplitTest, GlobalBatchSmallerThanReplicasGivesEmptyBatches) {
  auto three = mirrored(3);
  EXPECT_EQ(steps_of(*three, 3, 1), (Steps{{{0}, {}, {}}, {{1}, {}, {}}, {{2}, {}, {}}}));
  EXPECT_EQ(steps_of(*three, 3, 2), (Steps{{{0}, {1}, {}}, {{2}, {}, {}}}));
}

// TF's DistributedDataset.cardinality: the distributed dataset's global
// batches, or the elements of the function's dataset.
TEST(DistributedDatasetSplitTest, CardinalityIsTheInputs) {
  auto two = mirrored(2);
  const Dataset ds = Dataset::range(10).batch(4);
  EXPECT_EQ(two->experimental_distribute_dataset(ds).cardinality(), 3);
  EXPECT_EQ(two->experimental_distribute_dataset(ds.repeat()).cardinality(), Dataset::kInfiniteCardinality);
  EXPECT_EQ(two->experimental_distribute_dataset(ds.filter([](const Element&) { return true; })).cardinality(),
            Dataset::kUnknownCardinality);
  EXPECT_EQ(
      two->distribute_datasets_from_function([](const InputContext&) { return Dataset::range(6).batch(2); })
          .cardinality(),
      3);
}

TEST(DistributedDatasetSplitTest, ANonPositiveReplicaCountIsRefused) {
  for (int n : {0, -2}) {
    EXPECT_THAT(message_of<InvalidArgumentError>([n] { DistributedDataset(Dataset::range(4).batch(2), n, {}); }),
                HasSubstr("expected num_replicas >= 1, got " + std::to_string(n)));
  }
}

TEST(DistributedDatasetSplitTest, EmptyBatchesHaveFirstDimensionZeroAndTheDatasetsDtype) {
  auto two = mirrored(2);
  const Tensor ints(std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}, Shape{9});
  DistributedIterator it = two->experimental_distribute_dataset(Dataset::from_tensor_slices(ints).batch(4)).make_iterator();
  it.get_next();
  it.get_next();
  const PerReplica<Element> last = it.get_next();
  EXPECT_EQ(last[0], Element(Tensor{std::int32_t{8}}));
  const Tensor& empty = last[1];
  EXPECT_EQ(empty.shape(), Shape{0});
  EXPECT_EQ(empty.dtype(), DType::kInt32);
  EXPECT_EQ(empty.num_elements(), 0);
  EXPECT_THROW(it.get_next(), OutOfRangeError);

  // Rank 2: (0, 3).
  std::vector<double> m(12);
  std::iota(m.begin(), m.end(), 0.0);
  auto three = mirrored(3);
  DistributedIterator it2 =
      three->experimental_distribute_dataset(Dataset::from_tensor_slices(Tensor(m, Shape{4, 3})).batch(2))
          .make_iterator();
  const PerReplica<Element> first = it2.get_next();
  EXPECT_EQ(first[0].tensor().shape(), (Shape{1, 3}));
  EXPECT_EQ(first[1].tensor().shape(), (Shape{1, 3}));
  EXPECT_EQ(first[2].tensor().shape(), (Shape{0, 3}));
  EXPECT_EQ(first[2].tensor().dtype(), DType::kFloat64);
}

// ---------------------------------------------------------------------------
// Unknown batch size: each element split into N pieces of ceil(B/N) rows.

TEST(DistributedDatasetSplitTest, UnknownBatchSizeSplitsEachElement) {
  auto two = mirrored(2);
  const Tensor matrix(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, Shape{6, 2});
  const Dataset rows = Dataset::from_tensor_slices(matrix);  // elements of shape (2,)
  ASSERT_FALSE(rows.static_batch_size().has_value());
  Steps expected;
  for (int k = 0; k < 6; ++k) {
    expected.push_back({{static_cast<float>(2 * k)}, {static_cast<float>(2 * k + 1)}});
  }
  EXPECT_EQ(collect(two->experimental_distribute_dataset(rows), 2), expected);

  auto three = mirrored(3);
  const Dataset fours = Dataset::from_tensors(Element(Tensor{0.f, 1.f, 2.f, 3.f})).repeat(2);
  ASSERT_FALSE(fours.static_batch_size().has_value());
  DistributedIterator it = three->experimental_distribute_dataset(fours).make_iterator();
  for (int k = 0; k < 2; ++k) {
    const PerReplica<Element> step = it.get_next();
    EXPECT_EQ(rows_of(step), (Step{{0, 1}, {2, 3}, {}}));
    EXPECT_EQ(step[2].tensor().shape(), Shape{0});
  }
  EXPECT_THROW(it.get_next(), OutOfRangeError);
}

TEST(DistributedDatasetSplitTest, ScalarElementsCannotBeSplit) {
  auto two = mirrored(2);
  // Known from the pipeline: raised when the dataset is distributed, as TF
  // does (tests/strategy/user_mistakes_test.cc has more cases).
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { two->experimental_distribute_dataset(Dataset::range(4)); }),
              HasSubstr("call the batch method"));
  // Known only when iterated (a map's result): raised at the first step.
  const std::string message = message_of<InvalidArgumentError>([&] {
    DistributedDataset dataset = two->experimental_distribute_dataset(
        Dataset::range(4).batch(2).map([](const Element& e) { return Element(e.tensor().sum()); }));
    DistributedIterator it = dataset.make_iterator();
    it.get_next();
  });
  // The same words as at the call, naming what was got.
  EXPECT_THAT(message, HasSubstr("expected a batched dataset"));
  EXPECT_THAT(message, HasSubstr("got a scalar element; call the batch method"));
}

// ---------------------------------------------------------------------------
// Over the strategy matrix.

class DistributedDatasetTest : public StrategyTest {};
DISTRIBUTE_INSTANTIATE_STRATEGY_MATRIX(DistributedDatasetTest);

TEST_P(DistributedDatasetTest, EveryStepIsSplitAsTfDoes) {
  for (std::int64_t g : global_batch_sizes(n())) {
    for (std::int64_t rows : dataset_lengths(g)) {
      for (bool drop : {false, true}) {
        SCOPED_TRACE("G=" + std::to_string(g) + " rows=" + std::to_string(rows) + (drop ? " drop_remainder" : ""));
        const Dataset batched = Dataset::from_tensor_slices(iota(rows)).batch(g, drop);
        const Steps expected = expected_steps(rows, g, n(), drop);
        for (const Step& s : expected) ASSERT_FALSE(flatten({s}).empty()) << "model: a step without data";
        const Steps actual = collect(strategy().experimental_distribute_dataset(batched), n());
        EXPECT_EQ(actual, expected);
        // The replicas together see exactly the (kept) input rows, in order.
        const std::int64_t kept = drop ? rows / g * g : rows;
        EXPECT_EQ(flatten(actual), seq(0, kept));
      }
    }
  }
}

TEST_P(DistributedDatasetTest, UnknownBatchSizeSplitsEachElementIntoCeilPieces) {
  // Elements of B = 5 rows (from_tensor_slices of a (3, 5) tensor: the batch
  // size is unknown): N pieces of ceil(5/N) rows; one replica: unsplit.
  const Tensor matrix = iota(15).reshape({3, 5});
  const Steps actual = collect(strategy().experimental_distribute_dataset(Dataset::from_tensor_slices(matrix)), n());
  const std::int64_t per = (5 + n() - 1) / n();
  Steps expected;
  for (std::int64_t k = 0; k < 3; ++k) {
    Step step;
    for (std::int64_t r = 0; r < n(); ++r) {
      const std::int64_t begin = std::min<std::int64_t>(5, r * per);
      const std::int64_t end = std::min<std::int64_t>(5, begin + per);
      step.push_back(seq(5 * k + begin, 5 * k + end));
    }
    expected.push_back(step);
  }
  EXPECT_EQ(actual, expected);
}

TEST_P(DistributedDatasetTest, TupleElementsAreSplitComponentWiseAndRegroup) {
  constexpr std::int64_t kRows = 5, kGlobal = 4;
  std::vector<float> f(to_size(kRows * 3));
  std::iota(f.begin(), f.end(), 0.f);
  std::vector<std::int32_t> l(to_size(kRows));
  std::iota(l.begin(), l.end(), 0);
  const Tensor features(f, Shape{kRows, 3});
  const Tensor labels(l, Shape{kRows});
  const Dataset dataset = Dataset::from_tensor_slices({features, labels}).batch(kGlobal);
  const Steps expected = expected_steps(kRows, kGlobal, n(), false);

  DistributedIterator it = strategy().experimental_distribute_dataset(dataset).make_iterator();
  for (const Step& want : expected) {
    const PerReplica<Element> step = it.get_next();
    ASSERT_EQ(step.size(), n());
    for (int r = 0; r < n(); ++r) {
      const Element& e = step[r];
      ASSERT_TRUE(e.is_tuple());
      ASSERT_EQ(e.size(), 2u);
      const Rows& rows = want[static_cast<std::size_t>(r)];
      const auto count = static_cast<std::int64_t>(rows.size());
      EXPECT_EQ(e[0].shape(), (Shape{count, 3}));
      EXPECT_EQ(e[0].dtype(), DType::kFloat32);
      EXPECT_EQ(e[1].shape(), (Shape{count}));
      EXPECT_EQ(e[1].dtype(), DType::kInt32);
      std::vector<std::int32_t> want_labels;
      std::vector<float> want_features;
      for (float row : rows) {
        const auto i = static_cast<std::int32_t>(row);
        want_labels.push_back(i);
        for (int c = 0; c < 3; ++c) want_features.push_back(static_cast<float>(3 * i + c));
      }
      EXPECT_EQ(e[0], Tensor(want_features, Shape{count, 3}));
      EXPECT_EQ(e[1], Tensor(want_labels, Shape{count}));
    }
    const std::vector<PerReplica<Tensor>> regrouped = regroup(step);
    ASSERT_EQ(regrouped.size(), 2u);
    for (int r = 0; r < n(); ++r) {
      EXPECT_EQ(regrouped[0][r], step[r][0]);
      EXPECT_EQ(regrouped[1][r], step[r][1]);
      EXPECT_EQ(regrouped[0][r].dim(0), regrouped[1][r].dim(0));
    }
  }
  EXPECT_THROW(it.get_next(), OutOfRangeError);
}

TEST_P(DistributedDatasetTest, ReducingATupleStepAsksForRegroup) {
  const Dataset dataset = Dataset::from_tensor_slices({iota(4), iota(4, 10.f)}).batch(4);
  DistributedIterator it = strategy().experimental_distribute_dataset(dataset).make_iterator();
  const PerReplica<Element> step = it.get_next();
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { strategy().reduce(ReduceOp::SUM, step); }),
              HasSubstr("regroup"));
  // The suggested fix works.
  EXPECT_EQ(strategy().reduce(ReduceOp::SUM, regroup(step)[1], 0), Tensor(46.f));
}

TEST_P(DistributedDatasetTest, ReplicaValuesAreZeroCopySlicesOfTheGlobalBatch) {
  for (std::int64_t g : global_batch_sizes(n())) {
    SCOPED_TRACE("G=" + std::to_string(g));
    const Tensor source = iota(3 * g + 2);
    // batch() of slices of one buffer is zero-copy: so must every split be.
    DistributedIterator it =
        strategy().experimental_distribute_dataset(Dataset::from_tensor_slices(source).batch(g)).make_iterator();
    int steps = 0;
    while (std::optional<PerReplica<Element>> step = it.get_next_as_optional()) {
      ++steps;
      for (const Element& e : *step) {
        if (e.tensor().num_elements() > 0) {
          EXPECT_TRUE(e.tensor().shares_buffer_with(source)) << e;
        }
      }
    }
    EXPECT_GT(steps, 0);
  }
}

TEST_P(DistributedDatasetTest, ReplicaValuesShareTheBufferOfTheirOwnGlobalBatch) {
  // Every global batch in its own buffer (the map copies): each replica's
  // rows lie inside one global batch and must be a view of that batch.
  constexpr std::int64_t kGlobal = 7;
  struct Seen {
    std::mutex mutex;
    std::vector<Tensor> batches;
  };
  auto seen = std::make_shared<Seen>();
  const Dataset dataset = Dataset::from_tensor_slices(iota(3 * kGlobal + 2)).batch(kGlobal).map([seen](const Element& e) {
    Tensor copy = e.tensor() * 1.f;
    std::lock_guard<std::mutex> lock(seen->mutex);
    seen->batches.push_back(copy);
    return Element(copy);
  });
  const std::vector<PerReplica<Element>> steps = [&] {
    std::vector<PerReplica<Element>> out;
    for (const PerReplica<Element>& step : strategy().experimental_distribute_dataset(dataset)) out.push_back(step);
    return out;
  }();
  std::lock_guard<std::mutex> lock(seen->mutex);
  ASSERT_EQ(seen->batches.size(), 4u);
  ASSERT_EQ(steps.size(), 4u);  // one step per global batch, on every replica count
  for (std::size_t k = 0; k < steps.size(); ++k) {
    for (const Element& e : steps[k]) {
      if (e.tensor().num_elements() == 0) continue;
      EXPECT_TRUE(e.tensor().shares_buffer_with(seen->batches[k])) << "step " << k << ": " << e;
      for (std::size_t other = 0; other < seen->batches.size(); ++other) {
        if (other != k) {
          EXPECT_FALSE(e.tensor().shares_buffer_with(seen->batches[other]));
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// The iterator.

Dataset batched_iota(std::int64_t rows, std::int64_t global) {
  return Dataset::from_tensor_slices(iota(rows)).batch(global);
}

TEST_P(DistributedDatasetTest, GetNextRaisesOutOfRangeAtTheEnd) {
  DistributedIterator it = strategy().experimental_distribute_dataset(batched_iota(2 * n(), n())).make_iterator();
  it.get_next();
  it.get_next();
  EXPECT_THAT(message_of<OutOfRangeError>([&] { it.get_next(); }), HasSubstr("End of sequence"));
  EXPECT_THROW(it.get_next(), OutOfRangeError);
  EXPECT_FALSE(it.get_next_as_optional().has_value());
}

TEST_P(DistributedDatasetTest, GetNextAsOptionalIsEmptyAtTheEndAndAfter) {
  DistributedIterator it = strategy().experimental_distribute_dataset(batched_iota(n() + 1, n())).make_iterator();
  EXPECT_TRUE(it.get_next_as_optional().has_value());
  EXPECT_TRUE(it.get_next_as_optional().has_value());
  EXPECT_FALSE(it.get_next_as_optional().has_value());
  EXPECT_FALSE(it.get_next_as_optional().has_value());
  EXPECT_THROW(it.get_next(), OutOfRangeError);
}

TEST_P(DistributedDatasetTest, EmptyDatasetHasNoSteps) {
  DistributedIterator it = strategy().experimental_distribute_dataset(batched_iota(0, 4)).make_iterator();
  EXPECT_FALSE(it.get_next_as_optional().has_value());
  EXPECT_THROW(it.get_next(), OutOfRangeError);
}

TEST_P(DistributedDatasetTest, RangeForYieldsPerReplicaStepsAndStartsOverEachTime) {
  const std::int64_t g = n() + 1;
  const DistributedDataset dataset = strategy().experimental_distribute_dataset(batched_iota(3 * g + 2, g));
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(*dataset.begin())>, PerReplica<Element>>);
  EXPECT_EQ(dataset.num_replicas_in_sync(), n());
  const Steps expected = expected_steps(3 * g + 2, g, n(), false);
  for (int epoch = 0; epoch < 2; ++epoch) {
    SCOPED_TRACE("epoch " + std::to_string(epoch));
    Steps actual;
    for (const PerReplica<Element>& step : dataset) {
      EXPECT_EQ(step.size(), n());
      actual.push_back(rows_of(step));
      if (static_cast<int>(actual.size()) > kMaxSteps) break;
    }
    EXPECT_EQ(actual, expected);
  }
  // Explicit iterators are independent too.
  EXPECT_EQ(collect(dataset, n()), expected);
}

TEST_P(DistributedDatasetTest, ReduceFoldsEveryStep) {
  for (std::int64_t g : {std::int64_t{1}, std::int64_t{n()}, std::int64_t{n() + 1}, std::int64_t{7}}) {
    SCOPED_TRACE("G=" + std::to_string(g));
    const std::int64_t rows = 3 * g + 2;
    const DistributedDataset dataset = strategy().experimental_distribute_dataset(batched_iota(rows, g));
    const auto [total, steps] = dataset.reduce(std::pair<double, int>{0.0, 0},
                                               [&](std::pair<double, int> state, const PerReplica<Element>& step) {
                                                 state.first +=
                                                     strategy().reduce(ReduceOp::SUM, step, 0).item<double>();
                                                 ++state.second;
                                                 return state;
                                               });
    EXPECT_EQ(total, static_cast<double>(rows * (rows - 1) / 2));
    EXPECT_EQ(steps, static_cast<int>(expected_steps(rows, g, n(), false).size()));
    // A second reduce starts over.
    const double again = dataset.reduce(0.0, [&](double s, const PerReplica<Element>& step) {
      return s + strategy().reduce(ReduceOp::SUM, step, 0).item<double>();
    });
    EXPECT_EQ(again, total);
  }
}

TEST_P(DistributedDatasetTest, GetNextInsideAReplicaFunctionFails) {
  DistributedIterator it = strategy().experimental_distribute_dataset(batched_iota(2 * n(), n())).make_iterator();
  auto outcome = strategy().run([&it] {
    std::pair<std::string, std::string> got;
    try {
      it.get_next();
      got.first = "no error";
    } catch (const FailedPreconditionError& e) {
      got.first = e.what();
    } catch (const std::exception& e) {
      got.first = std::string("wrong type: ") + e.what();
    }
    try {
      it.get_next_as_optional();
      got.second = "no error";
    } catch (const FailedPreconditionError& e) {
      got.second = e.what();
    } catch (const std::exception& e) {
      got.second = std::string("wrong type: ") + e.what();
    }
    return got;
  });
  // A pair result comes back regrouped: a pair of PerReplica.
  const auto& [get_next, as_optional] = outcome;
  ASSERT_EQ(get_next.size(), n());
  ASSERT_EQ(as_optional.size(), n());
  for (int r = 0; r < n(); ++r) {
    EXPECT_THAT(get_next[r], HasSubstr("outside of the replica function"));
    EXPECT_THAT(as_optional[r], HasSubstr("outside of the replica function"));
  }
  // Nothing was consumed: the first step is still the first.
  EXPECT_EQ(rows_of(it.get_next()), expected_steps(2 * n(), n(), n(), false)[0]);
}

TEST_P(DistributedDatasetTest, BufferSizeDoesNotChangeTheSteps) {
  const std::int64_t g = n() + 1;
  const Dataset dataset = batched_iota(3 * g + 2, g);
  const Steps expected = expected_steps(3 * g + 2, g, n(), false);
  for (int buffer : {0, 1, 3}) {
    SCOPED_TRACE("buffer " + std::to_string(buffer));
    EXPECT_EQ(collect(strategy().experimental_distribute_dataset(dataset, InputOptions{buffer}), n()), expected);
  }
}

TEST_P(DistributedDatasetTest, NegativeBufferSizeIsRejected) {
  EXPECT_THAT(message_of<InvalidArgumentError>(
                  [&] { strategy().experimental_distribute_dataset(batched_iota(4, 2), InputOptions{-1}); }),
              HasSubstr("experimental_per_replica_buffer_size"));
  EXPECT_THROW(strategy().distribute_datasets_from_function(
                   [](const InputContext&) { return batched_iota(4, 2); }, InputOptions{-2}),
               InvalidArgumentError);
}

TEST_P(DistributedDatasetTest, DestroyingAnIteratorMidEpochDoesNotHang) {
  // An endless dataset: the prefetch thread fills its queue of 3 steps and
  // then waits for room; destroying the iterator must stop it.
  auto produced = std::make_shared<std::atomic<int>>(0);
  const std::int64_t rows = n();
  const Dataset endless = Dataset::from_generator([produced, rows] {
    return Dataset::Generator([produced, rows]() -> std::optional<Element> {
      produced->fetch_add(1);
      return Element(iota(rows));
    });
  });
  auto it = std::make_shared<DistributedIterator>(
      strategy().experimental_distribute_dataset(endless, InputOptions{3}).make_iterator());
  // Each generated element (N rows) is one step of one row per replica.
  EXPECT_EQ(flatten({rows_of(it->get_next())}), seq(0, n()));
  EXPECT_EQ(flatten({rows_of(it->get_next())}), seq(0, n()));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (produced->load() < 5 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Two steps consumed, three buffered: the producer is now blocked.
  EXPECT_EQ(produced->load(), 5);

  auto destroyed = std::make_shared<std::atomic<bool>>(false);
  std::thread destroyer([it = std::move(it), destroyed]() mutable {
    it.reset();
    destroyed->store(true);
  });
  while (!destroyed->load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!destroyed->load()) {
    destroyer.detach();
    FAIL() << "destroying the iterator hangs";
  }
  destroyer.join();
  EXPECT_EQ(produced->load(), 5);  // nothing was produced past the buffer
}

// ---------------------------------------------------------------------------
// Errors raised inside the pipeline.

struct BadRow : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What one pass yields: a step, or a BadRow error.
struct Event {
  bool error = false;
  Step step;
  friend bool operator==(const Event&, const Event&) = default;
};

void PrintTo(const Event& e, std::ostream* os) {
  if (e.error) {
    *os << "BadRow";
    return;
  }
  *os << ::testing::PrintToString(e.step);
}

TEST_P(DistributedDatasetTest, PipelineErrorsSurfaceWithTheirTypeAtTheirStepAndIterationContinues) {
  for (std::int64_t g : {std::int64_t{1}, std::int64_t{n()}, std::int64_t{n() + 1}, std::int64_t{7}}) {
    const std::int64_t rows = 3 * g + 2;
    for (std::int64_t bad : {std::int64_t{0}, g + 1, rows - 1}) {
      for (bool drop : {false, true}) {
        SCOPED_TRACE("G=" + std::to_string(g) + " bad row " + std::to_string(bad) + (drop ? " drop_remainder" : ""));
        const Dataset dataset = Dataset::from_tensor_slices(iota(rows))
                                    .map([bad](const Element& e) -> Element {
                                      if (e.tensor().item<float>() == static_cast<float>(bad)) {
                                        throw BadRow("bad row " + std::to_string(bad));
                                      }
                                      return e;
                                    })
                                    .batch(g, drop);
        // The bad row is dropped; its error comes from the get_next of the
        // step its global batch belonged to (batch() then completes that
        // batch with the following rows).
        Rows kept = seq(0, rows);
        kept.erase(kept.begin() + bad);
        std::vector<Event> expected;
        for (const Step& s : expected_steps(kept, g, n(), drop)) expected.push_back({false, s});
        const auto error_at = static_cast<std::size_t>(bad / g);
        ASSERT_LE(error_at, expected.size());
        expected.insert(expected.begin() + static_cast<std::ptrdiff_t>(error_at), Event{true, {}});

        std::vector<Event> actual;
        DistributedIterator it = strategy().experimental_distribute_dataset(dataset).make_iterator();
        for (int i = 0; i < kMaxSteps; ++i) {
          try {
            std::optional<PerReplica<Element>> step = it.get_next_as_optional();
            if (!step.has_value()) break;
            actual.push_back({false, rows_of(*step)});
          } catch (const BadRow& e) {
            EXPECT_THAT(e.what(), HasSubstr("bad row"));
            actual.push_back({true, {}});
          }
        }
        EXPECT_EQ(actual, expected);
      }
    }
  }
}

TEST_P(DistributedDatasetTest, PipelineErrorsSurfaceFromGetNextWithoutBuffering) {
  const std::int64_t g = n();
  const Dataset dataset = Dataset::from_tensor_slices(iota(2 * g))
                              .batch(g)
                              .map([](const Element& e) -> Element {
                                if (e.tensor().data<float>()[0] == 0.f) throw BadRow("first batch");
                                return e;
                              });
  DistributedIterator it = strategy().experimental_distribute_dataset(dataset, InputOptions{0}).make_iterator();
  EXPECT_THROW(it.get_next(), BadRow);
  EXPECT_EQ(flatten({rows_of(it.get_next())}), seq(g, 2 * g));
  EXPECT_THROW(it.get_next(), OutOfRangeError);
}

// ---------------------------------------------------------------------------
// distribute_datasets_from_function

TEST_P(DistributedDatasetTest, DatasetFunctionReceivesTheInputContextOnce) {
  int calls = 0;
  std::optional<InputContext> seen;
  strategy().distribute_datasets_from_function([&](const InputContext& context) {
    ++calls;
    seen = context;
    return batched_iota(4, 2);
  });
  EXPECT_EQ(calls, 1);
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->num_input_pipelines(), 1);
  EXPECT_EQ(seen->input_pipeline_id(), 0);
  EXPECT_EQ(seen->num_replicas_in_sync(), n());
  EXPECT_EQ(seen->to_string(), "tf.distribute.InputContext(input pipeline id 0, total: 1)");
  if (8 % n() == 0) {
    EXPECT_EQ(seen->get_per_replica_batch_size(8), 8 / n());
  } else {
    EXPECT_THROW(seen->get_per_replica_batch_size(8), InvalidArgumentError);
  }
}

TEST_P(DistributedDatasetTest, DatasetFunctionElementsGoRoundRobinToReplicas) {
  // 7 per-replica batches of 2 (the last of 1): replica r of step k gets
  // element k*N + r; the replicas past the end get empty batches.
  const DistributedDataset dataset = strategy().distribute_datasets_from_function([](const InputContext& context) {
    return Dataset::range(13).batch(context.get_per_replica_batch_size(2 * context.num_replicas_in_sync()));
  });
  constexpr int kElements = 7;
  const int expected_steps_count = (kElements + n() - 1) / n();
  DistributedIterator it = dataset.make_iterator();
  for (int k = 0; k < expected_steps_count; ++k) {
    const PerReplica<Element> step = it.get_next();
    ASSERT_EQ(step.size(), n());
    for (int r = 0; r < n(); ++r) {
      const int element = k * n() + r;
      const Tensor& t = step[r];
      EXPECT_EQ(t.dtype(), DType::kInt64);
      ASSERT_EQ(t.rank(), 1);
      std::vector<std::int64_t> want;
      for (std::int64_t v = 2 * element; v < std::min(2 * element + 2, 13); ++v) want.push_back(v);
      EXPECT_EQ(std::vector<std::int64_t>(t.data<std::int64_t>().begin(), t.data<std::int64_t>().end()), want)
          << "step " << k << " replica " << r;
      if (element >= kElements) {
        EXPECT_EQ(t.shape(), Shape{0});
      }
    }
  }
  EXPECT_THROW(it.get_next(), OutOfRangeError);
  EXPECT_FALSE(it.get_next_as_optional().has_value());
}

// TF's partial-batch handling (input_lib's _enable_get_next_as_optional):
// with one worker and a fully known element_spec, TF makes no partial steps
// for a function's dataset: get_next (and `for`) end at a last step the
// data cannot fill, while get_next_as_optional (and reduce) give it, its
// missing replicas' batches empty. A dataset whose batch size varies gets
// the partial step either way.
TEST(DistributedDatasetSplitTest, AFunctionsStaticallyShapedDatasetEndsGetNextAtAPartialStep) {
  auto two = mirrored(2);
  const DistributedDataset fixed = two->distribute_datasets_from_function(
      [](const InputContext&) { return Dataset::range(10).batch(2, /*drop_remainder=*/true); });  // 5 batches
  int in_loop = 0;
  for (const PerReplica<Element>& step : fixed) {
    EXPECT_EQ(step[1][0].shape(), Shape{2});
    ++in_loop;
  }
  EXPECT_EQ(in_loop, 2);
  DistributedIterator by_get_next = fixed.make_iterator();
  by_get_next.get_next();
  by_get_next.get_next();
  EXPECT_THROW(by_get_next.get_next(), OutOfRangeError);
  EXPECT_THROW(by_get_next.get_next(), OutOfRangeError);
  DistributedIterator optional = fixed.make_iterator();
  int steps = 0;
  std::optional<PerReplica<Element>> last;
  while (std::optional<PerReplica<Element>> step = optional.get_next_as_optional()) {
    ++steps;
    last = std::move(step);
  }
  ASSERT_EQ(steps, 3);
  EXPECT_EQ((*last)[0][0].data<std::int64_t>()[1], 9);
  EXPECT_EQ((*last)[1][0].shape(), Shape{0});
  EXPECT_EQ(fixed.reduce(0, [](int n, const PerReplica<Element>&) { return n + 1; }), 3);

  const DistributedDataset varying = two->distribute_datasets_from_function(
      [](const InputContext&) { return Dataset::range(9).batch(3); });  // 3 batches, shape (None,)
  int varying_steps = 0;
  for (const PerReplica<Element>& step : varying) {
    (void)step;
    ++varying_steps;
  }
  EXPECT_EQ(varying_steps, 2);
}

TEST_P(DistributedDatasetTest, DatasetFunctionMustNotBeEmpty) {
  EXPECT_THROW(strategy().distribute_datasets_from_function(nullptr), InvalidArgumentError);
}

TEST(InputContextTest, DefaultsAndPerReplicaBatchSize) {
  const InputContext context;
  EXPECT_EQ(context.num_input_pipelines(), 1);
  EXPECT_EQ(context.input_pipeline_id(), 0);
  EXPECT_EQ(context.num_replicas_in_sync(), 1);
  EXPECT_EQ(context.to_string(), "tf.distribute.InputContext(input pipeline id 0, total: 1)");
  EXPECT_EQ(context.get_per_replica_batch_size(8), 8);
  EXPECT_EQ(InputContext(1, 0, 4).get_per_replica_batch_size(8), 2);
  EXPECT_THAT(message_of<InvalidArgumentError>([] { InputContext(1, 0, 3).get_per_replica_batch_size(8); }),
              HasSubstr("not divisible"));
  EXPECT_EQ(InputContext(3, 2, 6).to_string(), "tf.distribute.InputContext(input pipeline id 2, total: 3)");
}

TEST(InputContextTest, RejectsInvalidArguments) {
  EXPECT_THROW(InputContext(0, 0, 1), InvalidArgumentError);
  EXPECT_THROW(InputContext(1, 1, 1), InvalidArgumentError);
  EXPECT_THROW(InputContext(1, -1, 1), InvalidArgumentError);
  EXPECT_THROW(InputContext(2, 2, 4), InvalidArgumentError);
  EXPECT_THROW(InputContext(1, 0, 0), InvalidArgumentError);
}

}  // namespace
}  // namespace distribute
