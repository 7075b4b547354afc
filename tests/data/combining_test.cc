// Dataset transformations that combine datasets or elements: zip,
// enumerate, padded_batch, flat_map, interleave and cache. Expected values
// are the ones of TF's docstrings (tensorflow/python/data/ops/
// dataset_ops.py) and interleave_test.py where noted.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "distribute/dataset.h"
#include "distribute/errors.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

using ::distribute::testing::message_of;
using ::distribute::testing::values_of;
using ::testing::HasSubstr;
using i32 = std::int32_t;
using i64 = std::int64_t;

Tensor int64s(std::vector<i64> values, Shape shape) { return Tensor(std::move(values), std::move(shape)); }
Tensor int64s(std::vector<i64> values) {
  const auto n = static_cast<i64>(values.size());
  return Tensor(std::move(values), Shape{n});
}

// Every element, each as the values of its components.
std::vector<std::vector<std::vector<i64>>> rows_of(const Dataset& d) {
  std::vector<std::vector<std::vector<i64>>> out;
  for (const Element& e : d) {
    std::vector<std::vector<i64>> components;
    for (const Tensor& c : e.components()) components.push_back(values_of<i64>(c.cast(DType::kInt64)));
    out.push_back(components);
  }
  return out;
}

// The elements of a dataset of int64 scalars.
std::vector<i64> scalars(const Dataset& d) {
  std::vector<i64> out;
  for (const Element& e : d) out.push_back(e.tensor().item<i64>());
  return out;
}

TEST(Zip, PairsElementsAndEndsWithTheShortestInput) {
  const Dataset a = Dataset::range(1, 4), b = Dataset::range(4, 7);
  EXPECT_EQ(rows_of(Dataset::zip({a, b})),
            (std::vector<std::vector<std::vector<i64>>>{{{1}, {4}}, {{2}, {5}}, {{3}, {6}}}));
  const Dataset c = Dataset::range(7, 13).batch(2);
  EXPECT_EQ(rows_of(Dataset::zip({a, b, c})), (std::vector<std::vector<std::vector<i64>>>{
                                                  {{1}, {4}, {7, 8}}, {{2}, {5}, {9, 10}}, {{3}, {6}, {11, 12}}}));
  const Dataset d = Dataset::range(13, 15);
  EXPECT_EQ(rows_of(Dataset::zip({a, d})), (std::vector<std::vector<std::vector<i64>>>{{{1}, {13}}, {{2}, {14}}}));
  EXPECT_EQ(Dataset::zip({a, d}).cardinality(), 2);
  EXPECT_EQ(Dataset::zip({a, d.repeat()}).cardinality(), 3);
  EXPECT_EQ(Dataset::zip({a.repeat(), d.repeat()}).cardinality(), Dataset::kInfiniteCardinality);
  EXPECT_EQ(Dataset::zip({a, d.filter([](const Element&) { return true; })}).cardinality(),
            Dataset::kUnknownCardinality);
  const Element first = Dataset::zip({a}).make_iterator().get_next();
  EXPECT_TRUE(first.is_tuple());
  EXPECT_EQ(first.size(), 1u);
}

TEST(Zip, FlattensTupleInputsAndKeepsInputsAlignedAfterAnError) {
  const Tensor x{1, 2, 3}, y{10, 20, 30};
  const Dataset pairs = Dataset::from_tensor_slices(std::vector<Tensor>{x, y});
  const Element e = Dataset::zip({pairs, Dataset::range(3)}).make_iterator().get_next();
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0], Tensor(1));
  EXPECT_EQ(e[1], Tensor(10));
  EXPECT_EQ(e[2], Tensor(i64{0}));
  // The second input fails on its element 1, which it drops: that step
  // raises, keeping the first input's element, and the next step pairs it
  // with the second input's next element (the streams pair up by position).
  const Dataset failing = Dataset::range(3).map([](const Element& v) -> Element {
    if (v.tensor().item<i64>() == 1) throw std::runtime_error("bad 1");
    return v;
  });
  Dataset::Iterator it = Dataset::zip({Dataset::range(100, 103), failing}).make_iterator();
  EXPECT_EQ(it.get_next()[0], Tensor(i64{100}));
  EXPECT_THROW(it.get_next(), std::runtime_error);
  const Element after = it.get_next();
  EXPECT_EQ(after[0], Tensor(i64{101}));
  EXPECT_EQ(after[1], Tensor(i64{2}));
  EXPECT_FALSE(it.get_next_as_optional().has_value());
  EXPECT_THAT(message_of<InvalidArgumentError>([] { Dataset::zip({}); }), HasSubstr("at least one dataset"));
}

TEST(Zip, KeepsACommonBatchSizeSoStrategiesCanSplitIt) {
  const Dataset images = Dataset::range(8).batch(4), labels = Dataset::range(8).batch(4);
  EXPECT_EQ(Dataset::zip({images, labels}).static_batch_size(), 4);
  EXPECT_EQ(Dataset::zip({images, Dataset::range(8).batch(2)}).static_batch_size(), std::nullopt);
  EXPECT_EQ(Dataset::zip({images, labels}).describe(), "Zip(Batch(4) <- Range(0, 8, 1), Batch(4) <- Range(0, 8, 1))");
}

TEST(Enumerate, PrefixesAnIndexFromStart) {
  // TF: from_tensor_slices([1, 2, 3]).enumerate(start=5) gives (5, 1), (6, 2), (7, 3).
  EXPECT_EQ(rows_of(Dataset::from_tensor_slices(Tensor{1, 2, 3}).enumerate(5)),
            (std::vector<std::vector<std::vector<i64>>>{{{5}, {1}}, {{6}, {2}}, {{7}, {3}}}));
  // TF: from_tensor_slices([(7, 8), (9, 10)]).enumerate() gives (0, [7, 8]), (1, [9, 10]).
  const Dataset d = Dataset::from_tensor_slices(Tensor{{7, 8}, {9, 10}}).enumerate();
  EXPECT_EQ(rows_of(d), (std::vector<std::vector<std::vector<i64>>>{{{0}, {7, 8}}, {{1}, {9, 10}}}));
  const Element e = d.make_iterator().get_next();
  EXPECT_EQ(e[0].dtype(), DType::kInt64);
  EXPECT_EQ(e[1].dtype(), DType::kInt32);
  EXPECT_EQ(d.cardinality(), 2);
  // Each iteration counts from start again.
  EXPECT_EQ(rows_of(d), rows_of(d));
}

// TF's docstring: A = range(1, 5, output_type=int32).map(lambda x: fill([x], x)).
Dataset fills() {
  return Dataset::range(1, 5).map([](const Element& e) -> Element {
    const i64 x = e.tensor().item<i64>();
    return Tensor(std::vector<i32>(static_cast<std::size_t>(x), static_cast<i32>(x)), Shape{x});
  });
}

TEST(PaddedBatch, PadsToTheLargestElementOfEachBatch) {
  std::vector<Tensor> got;
  for (const Element& e : fills().padded_batch(2)) got.push_back(e.tensor());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], (Tensor{{1, 0}, {2, 2}}));
  EXPECT_EQ(got[1], (Tensor{{3, 3, 3, 0}, {4, 4, 4, 4}}));
}

TEST(PaddedBatch, PadsToAFixedShapeWithAValue) {
  std::vector<Tensor> got;
  for (const Element& e : fills().padded_batch(2, {{5}})) got.push_back(e.tensor());
  EXPECT_EQ(got[0], (Tensor{{1, 0, 0, 0, 0}, {2, 2, 0, 0, 0}}));
  EXPECT_EQ(got[1], (Tensor{{3, 3, 3, 0, 0}, {4, 4, 4, 4, 0}}));
  got.clear();
  for (const Element& e : fills().padded_batch(2, {{5}}, {-1})) got.push_back(e.tensor());
  EXPECT_EQ(got[0], (Tensor{{1, -1, -1, -1, -1}, {2, 2, -1, -1, -1}}));
  EXPECT_EQ(got[1], (Tensor{{3, 3, 3, -1, -1}, {4, 4, 4, 4, -1}}));
}

TEST(PaddedBatch, PadsTheComponentsOfATupleIndependently) {
  // TF: elements ([1, 2, 3], [10]), ([4, 5], [11, 12]) padded to ([4], [None])
  // with (-1, 100).
  const std::vector<Element> elements{Element::tuple({Tensor{1, 2, 3}, Tensor{10}}),
                                      Element::tuple({Tensor{4, 5}, Tensor{11, 12}})};
  const Dataset d = Dataset::from_generator([elements] {
    auto i = std::make_shared<std::size_t>(0);
    return [elements, i]() -> std::optional<Element> {
      if (*i == elements.size()) return std::nullopt;
      return elements[(*i)++];
    };
  });
  const Element batch = d.padded_batch(2, {{4}, {-1}}, {-1, 100}).make_iterator().get_next();
  EXPECT_EQ(batch[0], (Tensor{{1, 2, 3, -1}, {4, 5, -1, -1}}));
  EXPECT_EQ(batch[1], (Tensor{{10, 100}, {11, 12}}));
}

TEST(PaddedBatch, PadsEveryDimensionOfMatricesAndKeepsDtypes) {
  const Dataset d = Dataset::range(1, 4).map([](const Element& e) -> Element {
    const i64 x = e.tensor().item<i64>();
    std::vector<double> v(static_cast<std::size_t>(x * (4 - x)));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(10 * x + static_cast<i64>(i));
    return Tensor(v, Shape{x, 4 - x});  // 1x3, 2x2, 3x1
  });
  const Tensor batch = d.padded_batch(3, {}, {0.5}).make_iterator().get_next().tensor();
  EXPECT_EQ(batch.shape(), (Shape{3, 3, 3}));
  EXPECT_EQ(batch, (Tensor(std::vector<double>{10, 11, 12, .5, .5, .5, .5, .5, .5,  //
                                               20, 21, .5, 22, 23, .5, .5, .5, .5,  //
                                               30, .5, .5, 31, .5, .5, 32, .5, .5},
                           Shape{3, 3, 3})));
  EXPECT_EQ(fills().padded_batch(3, {}, {}, /*drop_remainder=*/true).cardinality(), 1);
  EXPECT_EQ(fills().padded_batch(3).cardinality(), 2);
}

TEST(PaddedBatch, RejectsBadShapesAndElementsLargerThanTheirPadding) {
  EXPECT_THAT(message_of<InvalidArgumentError>([] { fills().padded_batch(0); }), HasSubstr("batch size > 0"));
  EXPECT_THAT(message_of<InvalidArgumentError>([] { fills().padded_batch(2, {{-2}}); }), HasSubstr(">= 0"));
  EXPECT_THAT(message_of<InvalidArgumentError>([] {
                Dataset::Iterator it = fills().padded_batch(2, {{3}}).make_iterator();
                it.get_next();
                it.get_next();
              }),
              HasSubstr("batch starting at element 2 has size 4 in dimension 0, more than the padded shape (3,)"));
  EXPECT_THAT(message_of<InvalidArgumentError>([] {
                fills().padded_batch(2, {{3, 3}}).make_iterator().get_next();
              }),
              HasSubstr("padded shape of rank 1"));
  EXPECT_THAT(message_of<InvalidArgumentError>([] {
                fills().padded_batch(2, {{5}, {5}}).make_iterator().get_next();
              }),
              HasSubstr("expected 1 padded shape(s)"));
  const Dataset ranks = Dataset::range(2).map([](const Element& e) -> Element {
    return e.tensor().item<i64>() == 0 ? Tensor(i64{1}) : int64s({1, 2});
  });
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { ranks.padded_batch(2).make_iterator().get_next(); }),
              HasSubstr("same dtype and rank"));
  // A failing batch is dropped; the iterator goes on with the next one.
  Dataset::Iterator it = fills().padded_batch(2, {{3}}).make_iterator();
  EXPECT_EQ(it.get_next().tensor(), (Tensor{{1, 0, 0}, {2, 2, 0}}));
  EXPECT_THROW(it.get_next(), InvalidArgumentError);
  EXPECT_FALSE(it.get_next_as_optional().has_value());
}

TEST(FlatMap, ConcatenatesTheDatasetsOfEveryElement) {
  // TF: from_tensor_slices([[1, 2, 3], [4, 5, 6], [7, 8, 9]]).flat_map(from_tensor_slices).
  const Dataset d =
      Dataset::from_tensor_slices(int64s({1, 2, 3, 4, 5, 6, 7, 8, 9}, Shape{3, 3})).flat_map([](const Element& e) {
        return Dataset::from_tensor_slices(e.tensor());
      });
  EXPECT_EQ(scalars(d), (std::vector<i64>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(d.cardinality(), Dataset::kUnknownCardinality);
  // Empty inner datasets are skipped.
  const Dataset some = Dataset::range(4).flat_map([](const Element& e) {
    const i64 x = e.tensor().item<i64>();
    return Dataset::range(x % 2 == 0 ? 0 : x);
  });
  EXPECT_EQ(scalars(some), (std::vector<i64>{0, 0, 1, 2}));
  EXPECT_THAT(message_of<InvalidArgumentError>([] { Dataset::range(1).flat_map(nullptr); }), HasSubstr("function"));
}

// x repeated x times.
Dataset repeated(const Element& e) { return Dataset::from_tensors(e).repeat(e.tensor().item<i64>()); }

TEST(Interleave, CyclesThroughBlocksInTFsOrder) {
  // TF's docstring: range(1, 6) interleaved over from_tensors(x).repeat(6),
  // cycle_length=2, block_length=4.
  const auto six = [](const Element& e) { return Dataset::from_tensors(e).repeat(6); };
  const std::vector<i64> expected{1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3,
                                  3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5};
  EXPECT_EQ(scalars(Dataset::range(1, 6).interleave(six, 2, 4)), expected);
  // TF's interleave_test: inputs [4, 5, 6], x repeated x times, cycle 2, block 1.
  EXPECT_EQ(scalars(Dataset::from_tensor_slices(int64s({4, 5, 6})).interleave(repeated, 2, 1)),
            (std::vector<i64>{4, 5, 4, 5, 4, 5, 4, 5, 5, 6, 6, 6, 6, 6, 6}));
  // cycle_length 1 is flat_map.
  EXPECT_EQ(scalars(Dataset::range(1, 4).interleave(repeated, 1, 2)), (std::vector<i64>{1, 2, 2, 3, 3, 3}));
}

TEST(Interleave, ParallelReadingKeepsTheOrder) {
  const auto slow = [](const Element& e) {
    return Dataset::from_tensors(e).repeat(e.tensor().item<i64>()).map([](const Element& v) -> Element {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      return v;
    });
  };
  const Dataset input = Dataset::from_tensor_slices(int64s({4, 5, 6, 1, 3, 2, 7}));
  for (i64 cycle : {1, 2, 3, 8}) {
    for (i64 block : {1, 2, 3}) {
      EXPECT_EQ(scalars(input.interleave(slow, cycle, block, Dataset::kAutotune)),
                scalars(input.interleave(repeated, cycle, block)))
          << "cycle " << cycle << " block " << block;
    }
  }
}

TEST(Interleave, RejectsBadArgumentsAndRaisesTheFunctionsErrors) {
  const Dataset d = Dataset::range(3);
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { d.interleave(repeated, 0); }), HasSubstr("cycle_length >= 1"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { d.interleave(repeated, 2, 0); }), HasSubstr("block_length >= 1"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { d.interleave(repeated, 2, 1, -5); }),
              HasSubstr("num_parallel_calls >= 1"));
  // A failing fn loses its input element; the others follow.
  Dataset::Iterator it = Dataset::range(1, 4)
                             .interleave(
                                 [](const Element& e) {
                                   if (e.tensor().item<i64>() == 2) throw OutOfRangeError("no 2");
                                   return Dataset::from_tensors(e);
                                 },
                                 2)
                             .make_iterator();
  EXPECT_EQ(it.get_next().tensor().item<i64>(), 1);
  EXPECT_THROW(it.get_next(), OutOfRangeError);
  EXPECT_EQ(it.get_next().tensor().item<i64>(), 3);
  EXPECT_FALSE(it.get_next_as_optional().has_value());
}

TEST(Cache, SecondIterationReadsTheCacheNotTheInput) {
  // TF: range(5).map(lambda x: x**2).cache() gives [0, 1, 4, 9, 16] twice.
  auto calls = std::make_shared<std::atomic<int>>(0);
  const Dataset d = Dataset::range(5)
                        .map([calls](const Element& e) -> Element {
                          ++*calls;
                          const i64 x = e.tensor().item<i64>();
                          return Tensor(x * x);
                        })
                        .cache();
  EXPECT_EQ(scalars(d), (std::vector<i64>{0, 1, 4, 9, 16}));
  EXPECT_EQ(scalars(d), (std::vector<i64>{0, 1, 4, 9, 16}));
  EXPECT_EQ(calls->load(), 5);
  EXPECT_EQ(d.cardinality(), 5);
}

TEST(Cache, APartialIterationFillsNothingAndAShuffleIsFrozen) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  const Dataset d = Dataset::range(4)
                        .map([calls](const Element& e) -> Element {
                          ++*calls;
                          return e;
                        })
                        .cache();
  {
    Dataset::Iterator it = d.make_iterator();
    it.get_next();
    it.get_next();
  }
  EXPECT_EQ(scalars(d), (std::vector<i64>{0, 1, 2, 3}));
  EXPECT_EQ(calls->load(), 6);
  EXPECT_EQ(scalars(d), (std::vector<i64>{0, 1, 2, 3}));
  EXPECT_EQ(calls->load(), 6);
  // A reshuffling shuffle under the cache: every epoch repeats the first
  // one's order (as TF).
  const Dataset shuffled = Dataset::range(50).shuffle(50, 7).cache();
  const std::vector<i64> first = scalars(shuffled);
  EXPECT_EQ(scalars(shuffled), first);
  EXPECT_NE(scalars(Dataset::range(50).shuffle(50, 7).repeat(2).skip(50)), first);  // without the cache it changes
}

TEST(Cache, ConcurrentIterationsEachSeeEveryElement) {
  const Dataset d = Dataset::range(1000).cache();
  std::vector<std::vector<i64>> seen(4);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < seen.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int epoch = 0; epoch < 3; ++epoch) seen[t] = scalars(d);
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<i64> all(1000);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<i64>(i);
  for (const auto& s : seen) EXPECT_EQ(s, all);
}

}  // namespace
}  // namespace distribute
