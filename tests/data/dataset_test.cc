// Behavioural tests of Dataset (include/distribute/dataset.h): sources,
// batch/unbatch/rebatch, element-wise and order transformations, prefetch,
// static_batch_size, iteration and the Element type.
#include "distribute/dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "distribute/element.h"
#include "distribute/errors.h"
#include "distribute/tensor.h"
#include "testing/helpers.h"
#include "testing/strategy_matrix.h"

namespace distribute {
namespace {

using ::distribute::testing::message_of;
using ::testing::HasSubstr;
using i32 = std::int32_t;
using i64 = std::int64_t;

// A user exception type, to check that get_next() preserves it.
struct BadElement : std::runtime_error {
  explicit BadElement(i64 v) : std::runtime_error("bad element " + std::to_string(v)), value(v) {}
  i64 value;
};

// 0, 1, ..., n-1 as int32 in `shape`.
Tensor Iota(i64 n, Shape shape) {
  std::vector<i32> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return Tensor(std::move(v), std::move(shape));
}

// start, start + 1, ..., stop - 1.
std::vector<i64> Seq(i64 start, i64 stop) {
  std::vector<i64> v;
  for (i64 i = start; i < stop; ++i) v.push_back(i);
  return v;
}

i64 Int(const Element& e) { return e.tensor().item<i64>(); }

// The int64 scalars of one iteration.
std::vector<i64> Scalars(const Dataset& ds) {
  std::vector<i64> out;
  for (const Element& e : ds) out.push_back(Int(e));
  return out;
}

// The int64 vectors (batches) of one iteration.
std::vector<std::vector<i64>> Batches(const Dataset& ds) {
  std::vector<std::vector<i64>> out;
  for (const Element& e : ds) out.push_back(testing::values_of<i64>(e.tensor()));
  return out;
}

// Square of an int64 scalar element.
Element Square(const Element& e) {
  const i64 x = Int(e);
  return Tensor(x * x);
}

// Identity, except that element `bad` raises BadElement.
std::function<Element(const Element&)> ThrowAt(i64 bad) {
  return [bad](const Element& e) -> Element {
    if (Int(e) == bad) throw BadElement(bad);
    return e;
  };
}

// ---------------------------------------------------------------------------
// Sources

TEST(FromTensorSlices, OneDimensionalGivesScalarViews) {
  const Tensor t{10, 20, 30};
  auto it = Dataset::from_tensor_slices(t).make_iterator();
  for (i32 expected : {10, 20, 30}) {
    const Element e = it.get_next();
    EXPECT_FALSE(e.is_tuple());
    EXPECT_EQ(e.tensor().shape(), Shape{});
    EXPECT_EQ(e.tensor().dtype(), DType::kInt32);
    EXPECT_EQ(e.tensor().item<i32>(), expected);
    EXPECT_TRUE(e.tensor().shares_buffer_with(t));
  }
  EXPECT_FALSE(it.get_next_as_optional().has_value());
}

TEST(FromTensorSlices, TwoDimensionalGivesRowViews) {
  const Tensor t = Iota(6, {3, 2});
  std::vector<std::vector<i32>> rows;
  for (const Element& e : Dataset::from_tensor_slices(t)) {
    EXPECT_EQ(e.tensor().shape(), (Shape{2}));
    EXPECT_TRUE(e.tensor().shares_buffer_with(t));
    rows.push_back(testing::values_of<i32>(e.tensor()));
  }
  EXPECT_EQ(rows, (std::vector<std::vector<i32>>{{0, 1}, {2, 3}, {4, 5}}));
}

TEST(FromTensorSlices, EmptyTensorGivesNoElements) {
  const Tensor t(std::vector<i32>{}, {0, 3});
  EXPECT_FALSE(Dataset::from_tensor_slices(t).make_iterator().get_next_as_optional().has_value());
}

TEST(FromTensorSlices, TupleSlicesEveryComponent) {
  const Tensor features = Iota(6, {3, 2});
  const Tensor labels{7.5, 8.5, 9.5};
  auto it = Dataset::from_tensor_slices({features, labels}).make_iterator();
  for (i32 i = 0; i < 3; ++i) {
    const Element e = it.get_next();
    ASSERT_TRUE(e.is_tuple());
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(testing::values_of<i32>(e[0]), (std::vector<i32>{2 * i, 2 * i + 1}));
    EXPECT_EQ(e[1].shape(), Shape{});
    EXPECT_EQ(e[1].item<double>(), 7.5 + i);
    EXPECT_TRUE(e[0].shares_buffer_with(features));
    EXPECT_TRUE(e[1].shares_buffer_with(labels));
  }
  EXPECT_THROW(it.get_next(), OutOfRangeError);
}

TEST(FromTensorSlices, MismatchedFirstDimensionsNameBothShapes) {
  const std::string msg = message_of<InvalidArgumentError>(
      [] { Dataset::from_tensor_slices({Iota(6, {3, 2}), Iota(4, {4})}); });
  EXPECT_THAT(msg, HasSubstr("(3, 2)"));
  EXPECT_THAT(msg, HasSubstr("(4,)"));
}

TEST(FromTensorSlices, ScalarIsAnError) {
  EXPECT_THAT(message_of<InvalidArgumentError>([] { Dataset::from_tensor_slices(Tensor(5)); }),
              HasSubstr("scalar"));
  EXPECT_THAT(message_of<InvalidArgumentError>([] { Dataset::from_tensor_slices({Tensor{1, 2}, Tensor(3)}); }),
              HasSubstr("component 1"));
  EXPECT_THROW(Dataset::from_tensor_slices(std::vector<Tensor>{}), InvalidArgumentError);
}

TEST(FromTensors, YieldsTheElementOnce) {
  const Tensor t = Iota(4, {2, 2});
  auto it = Dataset::from_tensors(t).make_iterator();
  const Element e = it.get_next();
  EXPECT_EQ(e.tensor(), t);
  EXPECT_TRUE(e.tensor().shares_buffer_with(t));
  EXPECT_FALSE(it.get_next_as_optional().has_value());

  const Element pair = Element::tuple({Tensor{1, 2}, Tensor(3.f)});
  auto it2 = Dataset::from_tensors(pair).make_iterator();
  EXPECT_EQ(it2.get_next(), pair);
  EXPECT_FALSE(it2.get_next_as_optional().has_value());
}

TEST(Range, Stop) {
  const Dataset ds = Dataset::range(5);
  EXPECT_EQ(Scalars(ds), (std::vector<i64>{0, 1, 2, 3, 4}));
  const Element first = ds.make_iterator().get_next();
  EXPECT_EQ(first.tensor().dtype(), DType::kInt64);
  EXPECT_EQ(first.tensor().shape(), Shape{});
}

TEST(Range, StartStopStep) {
  EXPECT_EQ(Scalars(Dataset::range(2, 10, 3)), (std::vector<i64>{2, 5, 8}));
  EXPECT_EQ(Scalars(Dataset::range(2, 11, 3)), (std::vector<i64>{2, 5, 8}));
  EXPECT_TRUE(Scalars(Dataset::range(3, 3)).empty());
  EXPECT_TRUE(Scalars(Dataset::range(5, 2)).empty());
}

TEST(Range, NegativeStep) {
  EXPECT_EQ(Scalars(Dataset::range(5, 0, -2)), (std::vector<i64>{5, 3, 1}));
  EXPECT_EQ(Scalars(Dataset::range(0, -3, -1)), (std::vector<i64>{0, -1, -2}));
  EXPECT_TRUE(Scalars(Dataset::range(0, 5, -1)).empty());
}

TEST(Range, ZeroStepIsAnError) {
  EXPECT_THAT(message_of<InvalidArgumentError>([] { Dataset::range(0, 5, 0); }), HasSubstr("step"));
}

// A make() for from_generator that yields 0, 1, 2 and counts its calls.
std::function<Dataset::Generator()> CountingMake(std::shared_ptr<int> calls) {
  return [calls] {
    ++*calls;
    auto next = std::make_shared<i64>(0);
    return Dataset::Generator([next]() -> std::optional<Element> {
      if (*next >= 3) return std::nullopt;
      return Element(Tensor((*next)++));
    });
  };
}

TEST(FromGenerator, RestartsEachIteration) {
  auto calls = std::make_shared<int>(0);
  const Dataset ds = Dataset::from_generator(CountingMake(calls));
  EXPECT_EQ(*calls, 0);
  EXPECT_EQ(Scalars(ds), (std::vector<i64>{0, 1, 2}));
  EXPECT_EQ(*calls, 1);
  EXPECT_EQ(Scalars(ds), (std::vector<i64>{0, 1, 2}));
  EXPECT_EQ(*calls, 2);
  EXPECT_EQ(Scalars(ds.repeat(2)), (std::vector<i64>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(*calls, 4);
}

TEST(FromGenerator, StaysAtTheEndAfterNullopt) {
  auto calls = std::make_shared<int>(0);
  auto it = Dataset::from_generator(CountingMake(calls)).make_iterator();
  for (i64 i = 0; i < 3; ++i) EXPECT_EQ(Int(it.get_next()), i);
  EXPECT_FALSE(it.get_next_as_optional().has_value());
  EXPECT_FALSE(it.get_next_as_optional().has_value());
}

TEST(FromGenerator, EmptyFunctionIsAnError) {
  EXPECT_THROW(Dataset::from_generator(nullptr), InvalidArgumentError);
  const Dataset ds = Dataset::from_generator([] { return Dataset::Generator(); });
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { ds.make_iterator(); }), HasSubstr("empty function"));
}

TEST(FromGenerator, GeneratorExceptionSurfacesAndIterationContinues) {
  const Dataset ds = Dataset::from_generator([] {
    auto next = std::make_shared<i64>(0);
    return Dataset::Generator([next]() -> std::optional<Element> {
      const i64 v = (*next)++;
      if (v == 1) throw BadElement(v);
      if (v >= 3) return std::nullopt;
      return Element(Tensor(v));
    });
  });
  auto it = ds.make_iterator();
  EXPECT_EQ(Int(it.get_next()), 0);
  EXPECT_THROW(it.get_next(), BadElement);
  EXPECT_EQ(Int(it.get_next()), 2);
  EXPECT_FALSE(it.get_next_as_optional().has_value());
}

// ---------------------------------------------------------------------------
// batch / unbatch

TEST(Batch, PartialLastBatch) {
  const Dataset ds = Dataset::range(7).batch(3);
  EXPECT_EQ(Batches(ds), (std::vector<std::vector<i64>>{{0, 1, 2}, {3, 4, 5}, {6}}));
  auto it = ds.make_iterator();
  EXPECT_EQ(it.get_next().tensor().shape(), (Shape{3}));
  EXPECT_EQ(it.get_next().tensor().shape(), (Shape{3}));
  EXPECT_EQ(it.get_next().tensor().shape(), (Shape{1}));
}

TEST(Batch, ExactMultiple) {
  EXPECT_EQ(Batches(Dataset::range(6).batch(3)), (std::vector<std::vector<i64>>{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_EQ(Batches(Dataset::range(2).batch(5)), (std::vector<std::vector<i64>>{{0, 1}}));
  EXPECT_TRUE(Batches(Dataset::range(0).batch(5)).empty());
}

TEST(Batch, DropRemainder) {
  EXPECT_EQ(Batches(Dataset::range(7).batch(3, /*drop_remainder=*/true)),
            (std::vector<std::vector<i64>>{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_TRUE(Batches(Dataset::range(2).batch(3, true)).empty());
}

TEST(Batch, ConsecutiveSlicesAreZeroCopy) {
  const Tensor t = Iota(10, {5, 2});
  std::vector<Element> batches;
  for (const Element& e : Dataset::from_tensor_slices(t).batch(2)) batches.push_back(e);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].tensor().shape(), (Shape{2, 2}));
  EXPECT_EQ(batches[2].tensor().shape(), (Shape{1, 2}));
  EXPECT_EQ(testing::values_of<i32>(batches[0].tensor()), (std::vector<i32>{0, 1, 2, 3}));
  EXPECT_EQ(testing::values_of<i32>(batches[1].tensor()), (std::vector<i32>{4, 5, 6, 7}));
  EXPECT_EQ(testing::values_of<i32>(batches[2].tensor()), (std::vector<i32>{8, 9}));
  for (const Element& b : batches) EXPECT_TRUE(b.tensor().shares_buffer_with(t));
}

TEST(Batch, TupleBatchesComponentWise) {
  const Tensor features = Iota(8, {4, 2});
  const Tensor labels{0.5f, 1.5f, 2.5f, 3.5f};
  auto it = Dataset::from_tensor_slices({features, labels}).batch(3).make_iterator();
  const Element first = it.get_next();
  ASSERT_TRUE(first.is_tuple());
  EXPECT_EQ(first[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(first[1].shape(), (Shape{3}));
  EXPECT_EQ(testing::values_of<i32>(first[0]), (std::vector<i32>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(testing::values_of<float>(first[1]), (std::vector<float>{0.5f, 1.5f, 2.5f}));
  EXPECT_TRUE(first[0].shares_buffer_with(features));
  EXPECT_TRUE(first[1].shares_buffer_with(labels));
  const Element second = it.get_next();
  EXPECT_EQ(second[0].shape(), (Shape{1, 2}));
  EXPECT_EQ(testing::values_of<i32>(second[0]), (std::vector<i32>{6, 7}));
  EXPECT_EQ(testing::values_of<float>(second[1]), (std::vector<float>{3.5f}));
  EXPECT_FALSE(it.get_next_as_optional().has_value());
}

TEST(Batch, StackingSeparateBuffersCopiesValues) {
  auto it = Dataset::range(4).map([](const Element& e) -> Element {
              const i64 x = Int(e);
              return Tensor{x, 10 * x};
            }).batch(3).make_iterator();
  const Element b = it.get_next();
  EXPECT_EQ(b.tensor().shape(), (Shape{3, 2}));
  EXPECT_EQ(testing::values_of<i64>(b.tensor()), (std::vector<i64>{0, 0, 1, 10, 2, 20}));
}

TEST(Batch, DifferentShapesNameElementsAndIterationContinues) {
  // Element 3 has shape (2,), every other element shape (1,).
  const Dataset ds = Dataset::range(6)
                         .map([](const Element& e) -> Element {
                           const i64 x = Int(e);
                           if (x == 3) return Tensor{x, x};
                           return Tensor{x};
                         })
                         .batch(2);
  auto it = ds.make_iterator();
  const Element first = it.get_next();
  EXPECT_EQ(first.tensor().shape(), (Shape{2, 1}));
  EXPECT_EQ(testing::values_of<i64>(first.tensor()), (std::vector<i64>{0, 1}));
  const std::string msg = message_of<InvalidArgumentError>([&] { it.get_next(); });
  EXPECT_THAT(msg, HasSubstr("element 2"));
  EXPECT_THAT(msg, HasSubstr("element 3"));
  EXPECT_THAT(msg, HasSubstr("(1,)"));
  EXPECT_THAT(msg, HasSubstr("(2,)"));
  // The failed batch (elements 2 and 3) is dropped; the next one follows.
  const Element third = it.get_next();
  EXPECT_EQ(testing::values_of<i64>(third.tensor()), (std::vector<i64>{4, 5}));
  EXPECT_FALSE(it.get_next_as_optional().has_value());
}

TEST(Batch, DifferentDtypesAreAnError) {
  const Dataset ds = Dataset::range(2)
                         .map([](const Element& e) -> Element {
                           if (Int(e) == 1) return Tensor(1.0);
                           return e;
                         })
                         .batch(2);
  const std::string msg = message_of<InvalidArgumentError>([&] { ds.make_iterator().get_next(); });
  EXPECT_THAT(msg, HasSubstr("int64"));
  EXPECT_THAT(msg, HasSubstr("float64"));
}

TEST(Batch, NonPositiveBatchSizeIsAnError) {
  EXPECT_THAT(message_of<InvalidArgumentError>([] { Dataset::range(3).batch(0); }), HasSubstr("got 0"));
  EXPECT_THAT(message_of<InvalidArgumentError>([] { Dataset::range(3).batch(-2); }), HasSubstr("got -2"));
}

TEST(Unbatch, InvertsBatch) {
  EXPECT_EQ(Scalars(Dataset::range(7).batch(3).unbatch()), Seq(0, 7));
  const Tensor t = Iota(12, {6, 2});
  std::vector<Element> rows;
  for (const Element& e : Dataset::from_tensor_slices(t).batch(4).unbatch()) rows.push_back(e);
  ASSERT_EQ(rows.size(), 6u);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].tensor(), t[static_cast<i64>(i)]);
    EXPECT_TRUE(rows[i].tensor().shares_buffer_with(t));
  }
}

TEST(Unbatch, Tuple) {
  const Tensor features = Iota(6, {3, 2});
  const Tensor labels{4, 5, 6};
  auto it = Dataset::from_tensors(Element::tuple({features, labels})).unbatch().make_iterator();
  for (i32 i = 0; i < 3; ++i) {
    const Element e = it.get_next();
    ASSERT_TRUE(e.is_tuple());
    EXPECT_EQ(testing::values_of<i32>(e[0]), (std::vector<i32>{2 * i, 2 * i + 1}));
    EXPECT_EQ(e[1].item<i32>(), 4 + i);
  }
  EXPECT_FALSE(it.get_next_as_optional().has_value());
}

TEST(Unbatch, ScalarsAreAnError) {
  EXPECT_THROW(Dataset::range(3).unbatch().make_iterator().get_next(), InvalidArgumentError);
}

// ---------------------------------------------------------------------------
// map / filter

class MapParallelism : public ::testing::TestWithParam<i64> {};

TEST_P(MapParallelism, KeepsOrderOf200Elements) {
  const Dataset ds = Dataset::range(200).map(
      [](const Element& e) -> Element {
        // Uneven work so that parallel calls finish out of order.
        const i64 x = Int(e);
        std::this_thread::sleep_for(std::chrono::microseconds((x * 7) % 5 * 20));
        return Tensor(x * x);
      },
      GetParam());
  std::vector<i64> expected;
  for (i64 x = 0; x < 200; ++x) expected.push_back(x * x);
  EXPECT_EQ(Scalars(ds), expected);
}

TEST_P(MapParallelism, ExceptionKeepsItsTypeAndIterationContinues) {
  auto it = Dataset::range(6).map(ThrowAt(2), GetParam()).make_iterator();
  EXPECT_EQ(Int(it.get_next()), 0);
  EXPECT_EQ(Int(it.get_next()), 1);
  try {
    it.get_next();
    ADD_FAILURE() << "expected BadElement";
  } catch (const BadElement& e) {
    EXPECT_EQ(e.value, 2);
  }
  EXPECT_EQ(Int(it.get_next()), 3);
  EXPECT_EQ(Int(it.get_next()), 4);
  EXPECT_EQ(Int(it.get_next()), 5);
  EXPECT_THROW(it.get_next(), OutOfRangeError);
}

TEST_P(MapParallelism, BatchAfterFailedMapKeepsTheRowsGatheredBefore) {
  // Element 3 fails while batch is building [2, 3]: row 2 stays gathered and
  // the batch is completed with element 4 (see BatchNode).
  auto it = Dataset::range(6).map(ThrowAt(3), GetParam()).batch(2).make_iterator();
  EXPECT_EQ(testing::values_of<i64>(it.get_next().tensor()), (std::vector<i64>{0, 1}));
  EXPECT_THROW(it.get_next(), BadElement);
  EXPECT_EQ(testing::values_of<i64>(it.get_next().tensor()), (std::vector<i64>{2, 4}));
  EXPECT_EQ(testing::values_of<i64>(it.get_next().tensor()), (std::vector<i64>{5}));
  EXPECT_FALSE(it.get_next_as_optional().has_value());
}

TEST_P(MapParallelism, RestartsEachIteration) {
  const Dataset ds = Dataset::range(10).map(Square, GetParam());
  const std::vector<i64> first = Scalars(ds);
  EXPECT_EQ(first, Scalars(ds));
  EXPECT_EQ(first.size(), 10u);
  // Stopping early and destroying the iterator with calls in flight is fine.
  auto it = ds.make_iterator();
  EXPECT_EQ(Int(it.get_next()), 0);
}

std::string CallsName(const ::testing::TestParamInfo<i64>& param_info) {
  return param_info.param == Dataset::kAutotune ? std::string("Autotune") : "P" + std::to_string(param_info.param);
}

INSTANTIATE_TEST_SUITE_P(Calls, MapParallelism, ::testing::Values(i64{1}, i64{4}, Dataset::kAutotune), CallsName);

TEST(Map, ToTuple) {
  auto it = Dataset::range(3)
                .map([](const Element& e) -> Element {
                  const i64 x = Int(e);
                  return Element::tuple({Tensor(x), Tensor(static_cast<double>(x) / 2)});
                })
                .make_iterator();
  it.get_next();
  const Element e = it.get_next();
  ASSERT_TRUE(e.is_tuple());
  EXPECT_EQ(e[0].item<i64>(), 1);
  EXPECT_EQ(e[1].item<double>(), 0.5);
}

TEST(Map, BadArgumentsAreErrors) {
  EXPECT_THROW(Dataset::range(3).map(nullptr), InvalidArgumentError);
  EXPECT_THAT(message_of<InvalidArgumentError>([] { Dataset::range(3).map(Square, 0); }), HasSubstr("got 0"));
  EXPECT_THAT(message_of<InvalidArgumentError>([] { Dataset::range(3).map(Square, -2); }), HasSubstr("got -2"));
}

TEST(Filter, KeepsMatchingElements) {
  const Dataset ds = Dataset::range(10).filter([](const Element& e) { return Int(e) % 2 == 0; });
  EXPECT_EQ(Scalars(ds), (std::vector<i64>{0, 2, 4, 6, 8}));
  EXPECT_TRUE(Scalars(Dataset::range(10).filter([](const Element&) { return false; })).empty());
  EXPECT_THROW(Dataset::range(3).filter(nullptr), InvalidArgumentError);
}

TEST(Filter, PredicateExceptionSurfacesAndIterationContinues) {
  auto it = Dataset::range(4)
                .filter([](const Element& e) {
                  if (Int(e) == 1) throw BadElement(1);
                  return true;
                })
                .make_iterator();
  EXPECT_EQ(Int(it.get_next()), 0);
  EXPECT_THROW(it.get_next(), BadElement);
  EXPECT_EQ(Int(it.get_next()), 2);
  EXPECT_EQ(Int(it.get_next()), 3);
  EXPECT_FALSE(it.get_next_as_optional().has_value());
}

// ---------------------------------------------------------------------------
// shuffle

std::vector<i64> Sorted(std::vector<i64> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(Shuffle, SameSeedSameOrderAcrossDatasets) {
  const std::vector<i64> a = Scalars(Dataset::range(50).shuffle(50, std::uint64_t{42}));
  const std::vector<i64> b = Scalars(Dataset::range(50).shuffle(50, std::uint64_t{42}));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, Seq(0, 50));
  EXPECT_EQ(Sorted(a), Seq(0, 50));
}

TEST(Shuffle, IsAPermutationWithinTheBufferWindow) {
  const std::vector<i64> out = Scalars(Dataset::range(100).shuffle(10, std::uint64_t{3}));
  EXPECT_EQ(Sorted(out), Seq(0, 100));
  EXPECT_NE(out, Seq(0, 100));
  // Output k is drawn from a buffer that has seen at most inputs 0..k+9.
  for (std::size_t k = 0; k < out.size(); ++k) EXPECT_LE(out[k], static_cast<i64>(k) + 9) << "at " << k;
}

TEST(Shuffle, UnseededIsAPermutation) {
  EXPECT_EQ(Sorted(Scalars(Dataset::range(40).shuffle(8))), Seq(0, 40));
}

TEST(Shuffle, ReshuffleEachIterationIsDeterministicPerSeed) {
  const Dataset a = Dataset::range(30).shuffle(30, std::uint64_t{7}, /*reshuffle_each_iteration=*/true);
  const Dataset b = Dataset::range(30).shuffle(30, std::uint64_t{7}, true);
  const std::vector<i64> a1 = Scalars(a), a2 = Scalars(a), a3 = Scalars(a);
  EXPECT_NE(a1, a2);
  EXPECT_NE(a2, a3);
  EXPECT_EQ(Sorted(a2), Seq(0, 30));
  const std::vector<i64> b1 = Scalars(b), b2 = Scalars(b), b3 = Scalars(b);
  EXPECT_EQ(a1, b1);
  EXPECT_EQ(a2, b2);
  EXPECT_EQ(a3, b3);
}

TEST(Shuffle, WithoutReshuffleEveryIterationHasTheSameOrder) {
  const Dataset ds = Dataset::range(30).shuffle(30, std::uint64_t{7}, /*reshuffle_each_iteration=*/false);
  const std::vector<i64> first = Scalars(ds);
  EXPECT_NE(first, Seq(0, 30));
  EXPECT_EQ(Scalars(ds), first);
  EXPECT_EQ(Scalars(ds), first);
  // Also within one pipeline: repeat() iterates the shuffle again.
  std::vector<i64> twice = first;
  twice.insert(twice.end(), first.begin(), first.end());
  EXPECT_EQ(Scalars(ds.repeat(2)), twice);
}

TEST(Shuffle, BufferOfOneKeepsOrder) {
  EXPECT_EQ(Scalars(Dataset::range(20).shuffle(1, std::uint64_t{5})), Seq(0, 20));
}

// Over from_tensor_slices the shuffle moves row indices and batches gather
// rows; the order must be exactly that of shuffling the elements.
Tensor Longs(i64 n) {
  std::vector<i64> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), i64{0});
  return Tensor(std::move(v), Shape{n});
}

TEST(Shuffle, OverTensorSlicesDrawsTheOrderOfShufflingElements) {
  for (const i64 buffer : {i64{1}, i64{7}, i64{53}, i64{200}}) {
    for (const bool reshuffle : {false, true}) {
      const Dataset rows = Dataset::from_tensor_slices(Longs(53)).shuffle(buffer, std::uint64_t{11}, reshuffle);
      const Dataset elements = Dataset::range(53).shuffle(buffer, std::uint64_t{11}, reshuffle);
      for (int iteration = 0; iteration < 2; ++iteration) {
        EXPECT_EQ(Scalars(rows), Scalars(elements)) << "buffer " << buffer << " iteration " << iteration;
      }
      const Dataset rows_batched = Dataset::from_tensor_slices(Longs(53)).shuffle(buffer, std::uint64_t{5}).batch(8);
      const Dataset elements_batched = Dataset::range(53).shuffle(buffer, std::uint64_t{5}).batch(8);
      EXPECT_EQ(Batches(rows_batched), Batches(elements_batched)) << "buffer " << buffer;
    }
  }
}

TEST(Shuffle, GatheredTupleBatchesKeepRowsTogether) {
  // Rows of a [n, 3] feature matrix and their labels: a gathered batch takes
  // whole rows of every component, in the order the element path draws.
  const i64 n = 41;
  std::vector<float> x(static_cast<std::size_t>(n * 3));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  const Tensor features(std::move(x), Shape{n, 3});
  const Tensor labels = Longs(n);
  const Dataset fast = Dataset::from_tensor_slices({features, labels}).shuffle(n, std::uint64_t{9}).batch(16);
  // map() between the source and the shuffle keeps the element path.
  const Dataset slow = Dataset::from_tensor_slices({features, labels})
                           .map([](const Element& e) { return e; })
                           .shuffle(n, std::uint64_t{9})
                           .batch(16);
  std::vector<Element> a, b;
  for (const Element& e : fast) a.push_back(e);
  for (const Element& e : slow) b.push_back(e);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k], b[k]) << "batch " << k;
    ASSERT_EQ(a[k][0].shape(), (Shape{k < 2 ? 16 : 9, 3}));
    const auto f = a[k][0].data<float>();
    const auto l = a[k][1].data<i64>();
    for (std::size_t r = 0; r < l.size(); ++r) EXPECT_EQ(f[r * 3], static_cast<float>(l[r] * 3)) << "row " << r;
  }
}

TEST(Shuffle, SkipAndTakePassBatchesThrough) {
  const Dataset ds = Dataset::from_tensor_slices(Longs(20));
  EXPECT_EQ(Batches(ds.skip(3).take(7).batch(4)), (std::vector<std::vector<i64>>{{3, 4, 5, 6}, {7, 8, 9}}));
  EXPECT_EQ(Batches(ds.take(-1).skip(18).batch(4)), (std::vector<std::vector<i64>>{{18, 19}}));
  EXPECT_EQ(Batches(ds.skip(25).batch(4)), (std::vector<std::vector<i64>>{}));
  EXPECT_EQ(Batches(ds.take(0).batch(4)), (std::vector<std::vector<i64>>{}));
  // After a shuffle: the same rows as skipping and taking shuffled elements.
  const std::vector<i64> order = Scalars(Dataset::range(20).shuffle(20, std::uint64_t{4}));
  const auto batches = Batches(ds.shuffle(20, std::uint64_t{4}).skip(5).take(9).batch(4));
  ASSERT_EQ(batches.size(), 3u);
  std::vector<i64> flat;
  for (const auto& b : batches) flat.insert(flat.end(), b.begin(), b.end());
  EXPECT_EQ(flat, std::vector<i64>(order.begin() + 5, order.begin() + 14));
  EXPECT_EQ(batches[2].size(), 1u);
}

TEST(Shuffle, NonPositiveBufferIsAnError) {
  EXPECT_THAT(message_of<InvalidArgumentError>([] { Dataset::range(3).shuffle(0); }), HasSubstr("got 0"));
  EXPECT_THAT(message_of<InvalidArgumentError>([] { Dataset::range(3).shuffle(-4); }), HasSubstr("got -4"));
}

// ---------------------------------------------------------------------------
// repeat / take / skip / shard

TEST(Repeat, Count) {
  EXPECT_EQ(Scalars(Dataset::range(3).repeat(3)), (std::vector<i64>{0, 1, 2, 0, 1, 2, 0, 1, 2}));
  EXPECT_TRUE(Scalars(Dataset::range(3).repeat(0)).empty());
  EXPECT_THROW(Dataset::range(3).repeat(-2), InvalidArgumentError);
}

TEST(Repeat, ForeverWithTake) {
  EXPECT_EQ(Scalars(Dataset::range(3).repeat().take(7)), (std::vector<i64>{0, 1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(Scalars(Dataset::range(3).repeat(-1).take(4)), (std::vector<i64>{0, 1, 2, 0}));
}

TEST(Repeat, EmptyDatasetEnds) {
  EXPECT_TRUE(Scalars(Dataset::range(0).repeat()).empty());
  EXPECT_TRUE(Scalars(Dataset::range(0).repeat(5)).empty());
  auto it = Dataset::range(0).repeat().make_iterator();
  EXPECT_FALSE(it.get_next_as_optional().has_value());
  EXPECT_FALSE(it.get_next_as_optional().has_value());
}

// A finite repeat goes through every pass, empty ones included (TF's
// FiniteIterator); only a forever repeat stops at an empty pass.
TEST(Repeat, FiniteCountGoesOnPastAnEmptyPass) {
  // The filter keeps passes 0 and 2 of range(2) and empties passes 1 and 3
  // (it counts its calls: two a pass).
  auto calls = std::make_shared<int>(0);
  const Dataset odd_passes_empty =
      Dataset::range(2).filter([calls](const Element&) { return ((*calls)++ / 2) % 2 == 0; });
  EXPECT_EQ(Scalars(odd_passes_empty.repeat(4)), (std::vector<i64>{0, 1, 0, 1}));
  EXPECT_EQ(*calls, 8);
  *calls = 0;
  EXPECT_EQ(Scalars(odd_passes_empty.repeat().take(10)), (std::vector<i64>{0, 1}));  // forever: stops at pass 1
}

TEST(Take, Counts) {
  EXPECT_EQ(Scalars(Dataset::range(10).take(3)), (std::vector<i64>{0, 1, 2}));
  EXPECT_TRUE(Scalars(Dataset::range(10).take(0)).empty());
  EXPECT_EQ(Scalars(Dataset::range(10).take(-1)), Seq(0, 10));
  EXPECT_EQ(Scalars(Dataset::range(4).take(20)), Seq(0, 4));
  EXPECT_THROW(Dataset::range(3).take(-2), InvalidArgumentError);
}

TEST(Skip, Counts) {
  EXPECT_EQ(Scalars(Dataset::range(10).skip(7)), (std::vector<i64>{7, 8, 9}));
  EXPECT_EQ(Scalars(Dataset::range(10).skip(0)), Seq(0, 10));
  EXPECT_TRUE(Scalars(Dataset::range(10).skip(-1)).empty());
  EXPECT_TRUE(Scalars(Dataset::range(4).skip(20)).empty());
  EXPECT_THROW(Dataset::range(3).skip(-2), InvalidArgumentError);
}

TEST(Shard, EveryNthFromIndex) {
  EXPECT_EQ(Scalars(Dataset::range(10).shard(3, 1)), (std::vector<i64>{1, 4, 7}));
  EXPECT_EQ(Scalars(Dataset::range(10).shard(3, 0)), (std::vector<i64>{0, 3, 6, 9}));
  EXPECT_EQ(Scalars(Dataset::range(10).shard(1, 0)), Seq(0, 10));
}

TEST(Shard, BadArgumentsAreErrors) {
  EXPECT_THAT(message_of<InvalidArgumentError>([] { Dataset::range(10).shard(0, 0); }), HasSubstr("num_shards"));
  EXPECT_THAT(message_of<InvalidArgumentError>([] { Dataset::range(10).shard(3, 3); }), HasSubstr("got 3"));
  EXPECT_THAT(message_of<InvalidArgumentError>([] { Dataset::range(10).shard(3, -1); }), HasSubstr("got -1"));
}

// ---------------------------------------------------------------------------
// prefetch

TEST(Prefetch, YieldsTheSameSequence) {
  EXPECT_EQ(Scalars(Dataset::range(100).prefetch(2)), Seq(0, 100));
  EXPECT_EQ(Scalars(Dataset::range(100).prefetch(Dataset::kAutotune)), Seq(0, 100));
  const Dataset ds = Dataset::range(3).batch(2).prefetch(1);
  EXPECT_EQ(Batches(ds), (std::vector<std::vector<i64>>{{0, 1}, {2}}));
  EXPECT_EQ(Batches(ds), (std::vector<std::vector<i64>>{{0, 1}, {2}}));
}

TEST(Prefetch, PropagatesExceptionsInOrder) {
  auto it = Dataset::range(6).map(ThrowAt(2)).prefetch(2).make_iterator();
  EXPECT_EQ(Int(it.get_next()), 0);
  EXPECT_EQ(Int(it.get_next()), 1);
  EXPECT_THROW(it.get_next(), BadElement);
  EXPECT_EQ(Int(it.get_next()), 3);
  EXPECT_EQ(Int(it.get_next()), 4);
  EXPECT_EQ(Int(it.get_next()), 5);
  EXPECT_THROW(it.get_next(), OutOfRangeError);
  EXPECT_FALSE(it.get_next_as_optional().has_value());
}

TEST(Prefetch, DestroyingTheIteratorStopsABlockedThread) {
  const auto start = std::chrono::steady_clock::now();
  {
    auto it = Dataset::range(1000).prefetch(1).make_iterator();
    EXPECT_EQ(Int(it.get_next()), 0);
    // Let the background thread fill the buffer and block on it.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(Prefetch, ZeroIsPassThrough) {
  const Dataset base = Dataset::range(5).batch(2);
  const Dataset ds = base.prefetch(0);
  EXPECT_EQ(ds.describe(), base.describe());
  EXPECT_EQ(Batches(ds), (std::vector<std::vector<i64>>{{0, 1}, {2, 3}, {4}}));
}

TEST(Prefetch, NegativeBufferOtherThanAutotuneIsAnError) {
  EXPECT_THAT(message_of<InvalidArgumentError>([] { Dataset::range(3).prefetch(-2); }), HasSubstr("got -2"));
}

// ---------------------------------------------------------------------------
// rebatch

TEST(Rebatch, CyclesSizesWithinInputBatches) {
  EXPECT_EQ(Batches(Dataset::range(8).batch(4).rebatch({2, 1, 1})),
            (std::vector<std::vector<i64>>{{0, 1}, {2}, {3}, {4, 5}, {6}, {7}}));
}

TEST(Rebatch, FinalSmallerInputBatch) {
  EXPECT_EQ(Batches(Dataset::range(6).batch(4).rebatch({2, 1, 1})),
            (std::vector<std::vector<i64>>{{0, 1}, {2}, {3}, {4, 5}}));
}

TEST(Rebatch, CrossesInputBatchBoundaries) {
  // Like unbatch().batch(3).
  EXPECT_EQ(Batches(Dataset::range(10).batch(4).rebatch(3)),
            (std::vector<std::vector<i64>>{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9}}));
  EXPECT_EQ(Batches(Dataset::range(10).batch(4).rebatch(3, /*drop_remainder=*/true)),
            (std::vector<std::vector<i64>>{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}}));
}

TEST(Rebatch, ZeroSizesGiveEmptyBatches) {
  auto it = Dataset::range(4).batch(4).rebatch({2, 0}).make_iterator();
  EXPECT_EQ(testing::values_of<i64>(it.get_next().tensor()), (std::vector<i64>{0, 1}));
  const Element empty = it.get_next();
  EXPECT_EQ(empty.tensor().shape(), (Shape{0}));
  EXPECT_EQ(empty.tensor().dtype(), DType::kInt64);
  EXPECT_EQ(testing::values_of<i64>(it.get_next().tensor()), (std::vector<i64>{2, 3}));
}

TEST(Rebatch, ZeroSizeAtTheEndOfTheInputAsInTF) {
  // tf.data's rebatch_test: range(8).batch(4, drop_remainder=True) rebatched
  // with [1, 1, 1, 1, 0] gives [0], [1], [2], [3], [], [4], [5], [6], [7], [].
  EXPECT_EQ(Batches(Dataset::range(8).batch(4, true).rebatch({1, 1, 1, 1, 0})),
            (std::vector<std::vector<i64>>{{0}, {1}, {2}, {3}, {}, {4}, {5}, {6}, {7}, {}}));
}

TEST(Rebatch, ZeroSizesKeepInnerDimensions) {
  const Tensor t = Iota(8, {4, 2});
  auto it = Dataset::from_tensors(t).rebatch({0, 3}).make_iterator();
  EXPECT_EQ(it.get_next().tensor().shape(), (Shape{0, 2}));
  EXPECT_EQ(it.get_next().tensor().shape(), (Shape{3, 2}));
  EXPECT_EQ(it.get_next().tensor().shape(), (Shape{0, 2}));
  EXPECT_EQ(testing::values_of<i32>(it.get_next().tensor()), (std::vector<i32>{6, 7}));
}

TEST(Rebatch, DropRemainder) {
  EXPECT_EQ(Batches(Dataset::range(5).batch(5).rebatch(2, /*drop_remainder=*/true)),
            (std::vector<std::vector<i64>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(Batches(Dataset::range(5).batch(5).rebatch(2)), (std::vector<std::vector<i64>>{{0, 1}, {2, 3}, {4}}));
  EXPECT_EQ(Batches(Dataset::range(6).batch(4).rebatch({2, 1, 1}, true)),
            (std::vector<std::vector<i64>>{{0, 1}, {2}, {3}, {4, 5}}));
}

TEST(Rebatch, SlicesWithinOneInputBatchAreZeroCopy) {
  const Tensor t = Iota(8, {8});
  std::vector<Element> out;
  for (const Element& e : Dataset::from_tensors(t).rebatch({3, 1})) out.push_back(e);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(testing::values_of<i32>(out[0].tensor()), (std::vector<i32>{0, 1, 2}));
  EXPECT_EQ(testing::values_of<i32>(out[1].tensor()), (std::vector<i32>{3}));
  EXPECT_EQ(testing::values_of<i32>(out[2].tensor()), (std::vector<i32>{4, 5, 6}));
  EXPECT_EQ(testing::values_of<i32>(out[3].tensor()), (std::vector<i32>{7}));
  for (const Element& e : out) EXPECT_TRUE(e.tensor().shares_buffer_with(t));
}

TEST(Rebatch, Tuple) {
  const Tensor features = Iota(8, {4, 2});
  const Tensor labels{0, 1, 2, 3};
  auto it = Dataset::from_tensor_slices({features, labels}).batch(3).rebatch(2).make_iterator();
  const Element a = it.get_next();
  ASSERT_TRUE(a.is_tuple());
  EXPECT_EQ(testing::values_of<i32>(a[0]), (std::vector<i32>{0, 1, 2, 3}));
  EXPECT_EQ(testing::values_of<i32>(a[1]), (std::vector<i32>{0, 1}));
  const Element b = it.get_next();  // crosses the input batches [0, 3) and [3, 4)
  EXPECT_EQ(b[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(testing::values_of<i32>(b[0]), (std::vector<i32>{4, 5, 6, 7}));
  EXPECT_EQ(testing::values_of<i32>(b[1]), (std::vector<i32>{2, 3}));
  EXPECT_FALSE(it.get_next_as_optional().has_value());
}

TEST(Rebatch, RecoversAfterAnUnbatchedElement) {
  // A scalar (not a batch) first, then the batch [0, 1].
  const Dataset ds = Dataset::from_generator([] {
    auto next = std::make_shared<int>(0);
    return Dataset::Generator([next]() -> std::optional<Element> {
      switch ((*next)++) {
        case 0:
          return Element(Tensor(i64{9}));
        case 1:
          return Element(Tensor{i64{0}, i64{1}});
        default:
          return std::nullopt;
      }
    });
  });
  auto it = ds.rebatch({0, 1}).make_iterator();
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { it.get_next(); }), HasSubstr("scalar"));
  EXPECT_EQ(it.get_next().tensor().shape(), (Shape{0}));
  EXPECT_EQ(testing::values_of<i64>(it.get_next().tensor()), (std::vector<i64>{0}));
  EXPECT_EQ(it.get_next().tensor().shape(), (Shape{0}));
  EXPECT_EQ(testing::values_of<i64>(it.get_next().tensor()), (std::vector<i64>{1}));
  EXPECT_EQ(it.get_next().tensor().shape(), (Shape{0}));
  EXPECT_FALSE(it.get_next_as_optional().has_value());
}

TEST(Rebatch, BadSizesAreErrors) {
  const Dataset ds = Dataset::range(8).batch(4);
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { ds.rebatch(std::vector<i64>{}); }), HasSubstr("none"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { ds.rebatch({2, -1}); }), HasSubstr("got -1"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { ds.rebatch({0, 0}); }), HasSubstr("zeros"));
  EXPECT_THROW(ds.rebatch(0), InvalidArgumentError);
  EXPECT_THROW(ds.rebatch(-3), InvalidArgumentError);
}

TEST(Rebatch, UnbatchedInputIsAnError) {
  EXPECT_THAT(message_of<InvalidArgumentError>([] { Dataset::range(3).rebatch(2).make_iterator().get_next(); }),
              HasSubstr("Dataset::rebatch: expected a batched dataset (elements of rank >= 1), got a scalar element; "
                        "call the batch method"));
}

// ---------------------------------------------------------------------------
// static_batch_size / describe

TEST(StaticBatchSize, FollowsTheLastBatch) {
  const Dataset batched = Dataset::range(10).batch(4);
  EXPECT_EQ(batched.static_batch_size(), std::optional<i64>(4));
  EXPECT_EQ(batched.map([](const Element& e) { return e; }).static_batch_size(), std::optional<i64>(4));
  EXPECT_EQ(batched.prefetch(2).static_batch_size(), std::optional<i64>(4));
  EXPECT_EQ(batched.shuffle(3).static_batch_size(), std::optional<i64>(4));
  EXPECT_EQ(batched.unbatch().static_batch_size(), std::nullopt);
  EXPECT_EQ(batched.unbatch().batch(5).static_batch_size(), std::optional<i64>(5));
  EXPECT_EQ(Dataset::range(10).static_batch_size(), std::nullopt);
  EXPECT_EQ(Dataset::range(10).map(Square).static_batch_size(), std::nullopt);
  EXPECT_EQ(batched.rebatch(3).static_batch_size(), std::optional<i64>(3));
  EXPECT_EQ(batched.rebatch({2, 1}).static_batch_size(), std::nullopt);
}

TEST(Describe, NamesTheChain) {
  const std::string d = Dataset::range(10).batch(2).describe();
  EXPECT_THAT(d, HasSubstr("Batch(2)"));
  EXPECT_THAT(d, HasSubstr("Range"));
}

// ---------------------------------------------------------------------------
// Iteration

TEST(Iteration, RangeForStartsOverEachTime) {
  const Dataset ds = Dataset::range(4).map(Square);
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<i64> seen;
    for (const Element& e : ds) seen.push_back(Int(e));
    EXPECT_EQ(seen, (std::vector<i64>{0, 1, 4, 9})) << "pass " << pass;
  }
}

TEST(Iteration, TransformationsLeaveTheOriginalUnchanged) {
  const Dataset base = Dataset::range(4);
  const Dataset batched = base.batch(2);
  const Dataset taken = base.take(1);
  EXPECT_EQ(Scalars(base), Seq(0, 4));
  EXPECT_EQ(Batches(batched).size(), 2u);
  EXPECT_EQ(Scalars(taken), (std::vector<i64>{0}));
}

TEST(Iteration, GetNextRaisesOutOfRangeAtTheEnd) {
  auto it = Dataset::range(2).make_iterator();
  EXPECT_EQ(Int(it.get_next()), 0);
  EXPECT_EQ(Int(it.get_next()), 1);
  EXPECT_THAT(message_of<OutOfRangeError>([&] { it.get_next(); }), HasSubstr("End of sequence"));
  EXPECT_THROW(it.get_next(), OutOfRangeError);
}

TEST(Iteration, GetNextAsOptionalIsNulloptAtAndAfterTheEnd) {
  auto it = Dataset::range(1).make_iterator();
  const std::optional<Element> e = it.get_next_as_optional();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(Int(*e), 0);
  EXPECT_FALSE(it.get_next_as_optional().has_value());
  EXPECT_FALSE(it.get_next_as_optional().has_value());
  EXPECT_FALSE(it.get_next_as_optional().has_value());
}

TEST(Iteration, IteratorOutlivesTheTemporaryDataset) {
  auto it = Dataset::range(3).batch(2).make_iterator();
  EXPECT_EQ(testing::values_of<i64>(it.get_next().tensor()), (std::vector<i64>{0, 1}));
  EXPECT_EQ(testing::values_of<i64>(it.get_next().tensor()), (std::vector<i64>{2}));
  EXPECT_FALSE(it.get_next_as_optional().has_value());

  auto chain = Dataset::range(10)
                   .map(Square, 2)
                   .filter([](const Element& e) { return Int(e) % 2 == 0; })
                   .shuffle(4, std::uint64_t{1})
                   .repeat(2)
                   .prefetch(2)
                   .make_iterator();
  std::vector<i64> seen;
  while (auto e = chain.get_next_as_optional()) seen.push_back(Int(*e));
  EXPECT_EQ(Sorted(seen), (std::vector<i64>{0, 0, 4, 4, 16, 16, 36, 36, 64, 64}));
}

TEST(Iteration, MovedIteratorKeepsPosition) {
  auto a = Dataset::range(3).make_iterator();
  EXPECT_EQ(Int(a.get_next()), 0);
  Dataset::Iterator b = std::move(a);
  EXPECT_EQ(Int(b.get_next()), 1);
}

TEST(Iteration, OneDatasetIteratedFromTwoThreads) {
  const Dataset ds = Dataset::range(50).map(Square, 2).shuffle(8, std::uint64_t{9}).prefetch(2);
  std::vector<i64> a, b;
  std::thread ta([&] { a = Scalars(ds); });
  std::thread tb([&] { b = Scalars(ds); });
  ta.join();
  tb.join();
  std::vector<i64> squares;
  for (i64 x = 0; x < 50; ++x) squares.push_back(x * x);
  EXPECT_EQ(Sorted(a), squares);
  EXPECT_EQ(Sorted(b), squares);
}

// ---------------------------------------------------------------------------
// Element

TEST(ElementTest, SingleTensorToString) {
  const Tensor t{1, 2};
  const Element e(t);
  EXPECT_EQ(e.to_string(), "Tensor([1 2], shape=(2,), dtype=int32)");
  EXPECT_EQ(e.to_string(), t.to_string());
  EXPECT_FALSE(e.is_tuple());
  EXPECT_EQ(e.size(), 1u);
}

TEST(ElementTest, TupleToString) {
  const Element e = Element::tuple({Tensor{1, 2}, Tensor(i64{3})});
  EXPECT_EQ(e.to_string(),
            "(Tensor([1 2], shape=(2,), dtype=int32), Tensor(3, shape=(), dtype=int64))");
  EXPECT_EQ(Element::tuple({Tensor(i64{3})}).to_string(), "(Tensor(3, shape=(), dtype=int64),)");
}

i64 CountOf(const Tensor& t) { return t.num_elements(); }

TEST(ElementTest, ConvertsToItsTensor) {
  const Tensor t = Iota(6, {2, 3});
  const Element e(t);
  const Tensor& ref = e;
  EXPECT_EQ(ref, t);
  EXPECT_EQ(CountOf(e), 6);
  EXPECT_EQ(&e.tensor(), &e[0]);
}

TEST(ElementTest, TupleHasNoSingleTensor) {
  const Element e = Element::tuple({Tensor{1}, Tensor{2}});
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { e.tensor(); }), HasSubstr("tuple"));
  EXPECT_THROW(CountOf(e), InvalidArgumentError);
  EXPECT_THROW(e[2], InvalidArgumentError);
  EXPECT_THROW(Element::tuple({}), InvalidArgumentError);
}

TEST(ElementTest, Equality) {
  EXPECT_EQ(Element(Tensor{1, 2}), Element(Tensor{1, 2}));
  EXPECT_NE(Element(Tensor{1, 2}), Element(Tensor{1, 3}));
  EXPECT_NE(Element(Tensor{1, 2}), Element::tuple({Tensor{1, 2}}));
}


// ---- cardinality (TF's Dataset.cardinality()) ----

// The elements a finite dataset really yields.
i64 count_by_iterating(const Dataset& d) {
  i64 n = 0;
  for (auto it = d.make_iterator(); it.get_next_as_optional().has_value();) ++n;
  return n;
}

// TF's docstring example: range(42) has 42; repeated, INFINITE; filtered
// after that, UNKNOWN.
TEST(Cardinality, TheDocstringExample) {
  Dataset d = Dataset::range(42);
  EXPECT_EQ(d.cardinality(), 42);
  d = d.repeat();
  EXPECT_EQ(d.cardinality(), Dataset::kInfiniteCardinality);
  d = d.filter([](const Element&) { return true; });
  EXPECT_EQ(d.cardinality(), Dataset::kUnknownCardinality);
}

TEST(Cardinality, EachTransformationAgreesWithIteration) {
  const Dataset ten = Dataset::range(10);
  struct Case {
    const char* what;
    Dataset dataset;
    i64 expected;
  };
  const Case cases[] = {
      {"range(10)", ten, 10},
      {"range(10, 0, -3)", Dataset::range(10, 0, -3), 4},
      {"range(5, 5)", Dataset::range(5, 5), 0},
      {"from_tensor_slices of 7 rows", Dataset::from_tensor_slices(Iota(14, {7, 2})), 7},
      {"from_tensors", Dataset::from_tensors(Iota(6, {2, 3})), 1},
      {"batch(3)", ten.batch(3), 4},
      {"batch(3, drop_remainder)", ten.batch(3, true), 3},
      {"take(5)", ten.take(5), 5},
      {"take(15)", ten.take(15), 10},
      {"take(-1)", ten.take(-1), 10},
      {"skip(5)", ten.skip(5), 5},
      {"skip(15)", ten.skip(15), 0},
      {"skip(-1)", ten.skip(-1), 0},
      {"shard(3, 0)", ten.shard(3, 0), 4},
      {"shard(3, 2)", ten.shard(3, 2), 3},
      {"repeat(3)", ten.repeat(3), 30},
      {"repeat(0)", ten.repeat(0), 0},
      {"an empty dataset repeated", Dataset::range(0).repeat(), 0},
      {"repeat().take(5)", ten.repeat().take(5), 5},
      {"map, shuffle, prefetch", ten.map([](const Element& e) { return e; }).shuffle(4, 1).prefetch(2), 10},
      {"batch(4).repeat(2).skip(3)", ten.batch(4).repeat(2).skip(3), 3},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(c.dataset.cardinality(), c.expected);
    EXPECT_EQ(count_by_iterating(c.dataset), c.expected);
  }
  EXPECT_EQ(ten.repeat().skip(5).cardinality(), Dataset::kInfiniteCardinality);
  EXPECT_EQ(ten.repeat().batch(3).cardinality(), Dataset::kInfiniteCardinality);
  EXPECT_EQ(ten.batch(3).unbatch().cardinality(), Dataset::kUnknownCardinality);
  EXPECT_EQ(ten.filter([](const Element&) { return true; }).take(3).cardinality(), Dataset::kUnknownCardinality);
  EXPECT_EQ(ten.batch(4).rebatch(2).cardinality(), Dataset::kUnknownCardinality);
}

// Ranges near the ends of int64: no overflow (undefined in C++), the
// count and the elements agree.
TEST(DatasetRange, NearTheEndsOfInt64TheCountAndTheElementsAgree) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  const auto elements = [](const Dataset& d) {
    std::vector<std::int64_t> out;
    for (const Element& e : d) out.push_back(e[0].item<std::int64_t>());
    return out;
  };
  const Dataset last = Dataset::range(kMax - 1, kMax, 5);
  EXPECT_EQ(last.cardinality(), 1);
  EXPECT_EQ(elements(last), std::vector<std::int64_t>{kMax - 1});
  const Dataset wide = Dataset::range(kMin, kMax, kMax);
  EXPECT_EQ(wide.cardinality(), 3);
  EXPECT_EQ(elements(wide), (std::vector<std::int64_t>{kMin, -1, kMax - 1}));
  const Dataset down = Dataset::range(kMin + 1, kMin, -5);
  EXPECT_EQ(down.cardinality(), 1);
  EXPECT_EQ(elements(down), std::vector<std::int64_t>{kMin + 1});
  // More elements than an int64 counts: the count stops at its largest,
  // also through the transformations that multiply or round it up.
  EXPECT_EQ(Dataset::range(-5, kMax).cardinality(), kMax);
  EXPECT_EQ(Dataset::range(0, kMax).batch(2).cardinality(), kMax / 2 + 1);
  EXPECT_EQ(Dataset::range(0, kMax).repeat(3).cardinality(), kMax);
  EXPECT_EQ(Dataset::range(kMin, kMax, kMin).cardinality(), 0);
}

}  // namespace
}  // namespace distribute
