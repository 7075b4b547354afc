// Behavioural tests of Tensor: construction, zero-copy views, arithmetic,
// reductions, concat/stack, comparison and TF's printed form.
#include "distribute/tensor.h"

#include "testing/helpers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor_access.h"
#include "distribute/errors.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using i32 = std::int32_t;
using i64 = std::int64_t;

// 0, 1, ..., n-1 as int32 in `shape`.
Tensor Iota(i64 n, Shape shape) {
  std::vector<i32> v(static_cast<std::size_t>(n));
  for (i64 i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<i32>(i);
  return Tensor(std::move(v), std::move(shape));
}

// ---------------------------------------------------------------------------
// Construction

TEST(TensorConstruct, InitializerList1D) {
  const Tensor f{5.f, 6.f};
  EXPECT_EQ(f.dtype(), DType::kFloat32);
  EXPECT_EQ(f.shape(), (Shape{2}));
  EXPECT_EQ(f.rank(), 1);
  EXPECT_EQ(f.num_elements(), 2);
  EXPECT_THAT(testing::values_of<float>(f), ElementsAre(5.f, 6.f));

  const Tensor d{1.5, 2.5, 3.5};
  EXPECT_EQ(d.dtype(), DType::kFloat64);
  EXPECT_EQ(d.shape(), (Shape{3}));
  EXPECT_THAT(testing::values_of<double>(d), ElementsAre(1.5, 2.5, 3.5));

  const Tensor i{1, 2};
  EXPECT_EQ(i.dtype(), DType::kInt32);
  EXPECT_THAT(testing::values_of<i32>(i), ElementsAre(1, 2));

  const Tensor l{i64{1}, i64{-9000000000}};
  EXPECT_EQ(l.dtype(), DType::kInt64);
  EXPECT_THAT(testing::values_of<i64>(l), ElementsAre(1, -9000000000));

  // Braces pick the list constructor: one element, shape (1,).
  const Tensor one{5.f};
  EXPECT_EQ(one.shape(), (Shape{1}));
  EXPECT_EQ(one.rank(), 1);
}

TEST(TensorConstruct, InitializerList2D) {
  const Tensor f{{1.f, 2.f, 3.f}, {4.f, 5.f, 6.f}};
  EXPECT_EQ(f.dtype(), DType::kFloat32);
  EXPECT_EQ(f.shape(), (Shape{2, 3}));
  EXPECT_EQ(f.rank(), 2);
  EXPECT_EQ(f.num_elements(), 6);
  EXPECT_THAT(testing::values_of<float>(f), ElementsAre(1.f, 2.f, 3.f, 4.f, 5.f, 6.f));

  const Tensor d{{1.0}, {2.0}};
  EXPECT_EQ(d.dtype(), DType::kFloat64);
  EXPECT_EQ(d.shape(), (Shape{2, 1}));
  EXPECT_THAT(testing::values_of<double>(d), ElementsAre(1.0, 2.0));

  const Tensor i{{1, 2}, {3, 4}};
  EXPECT_EQ(i.dtype(), DType::kInt32);
  EXPECT_EQ(i.shape(), (Shape{2, 2}));
  EXPECT_THAT(testing::values_of<i32>(i), ElementsAre(1, 2, 3, 4));

  const Tensor l{{i64{7}, i64{8}, i64{9}}};
  EXPECT_EQ(l.dtype(), DType::kInt64);
  EXPECT_EQ(l.shape(), (Shape{1, 3}));
  EXPECT_THAT(testing::values_of<i64>(l), ElementsAre(7, 8, 9));
}

TEST(TensorConstruct, RaggedRowsError) {
  EXPECT_THROW((Tensor{{1, 2}, {3}}), InvalidArgumentError);
  EXPECT_THROW((Tensor{{1.f}, {2.f, 3.f}}), InvalidArgumentError);
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([] { Tensor t{{1, 2, 3}, {4, 5, 6}, {7}}; }),
              HasSubstr("expected every row of the initializer to have 3 elements, got a row of 1"));
}

TEST(TensorConstruct, VectorAndShape) {
  const Tensor t(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.dtype(), DType::kFloat64);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_THAT(testing::values_of<double>(t), ElementsAre(1, 2, 3, 4, 5, 6));

  const Tensor s(std::vector<i64>{42}, {});
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(s.item<i64>(), 42);

  const Tensor e(std::vector<float>{}, {0, 4});
  EXPECT_EQ(e.shape(), (Shape{0, 4}));
  EXPECT_EQ(e.num_elements(), 0);
  EXPECT_TRUE(e.data<float>().empty());
}

TEST(TensorConstruct, CountMismatchError) {
  EXPECT_THROW(Tensor(std::vector<float>{1, 2, 3, 4, 5}, {2, 3}), InvalidArgumentError);
  EXPECT_THROW(Tensor(std::vector<i32>{1, 2, 3}, {2, 2}), InvalidArgumentError);
  EXPECT_THROW(Tensor(std::vector<i32>{1, 2}, {}), InvalidArgumentError);
  EXPECT_NO_THROW(Tensor(std::vector<i32>{1}, {}));
}

TEST(TensorConstruct, CountMismatchMessage) {
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([] { Tensor(std::vector<float>{1, 2, 3, 4, 5}, {2, 3}); }),
              HasSubstr("expected 6 values for shape (2, 3), got 5"));
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([] { Tensor(std::vector<i32>{1, 2}, {}); }),
              HasSubstr("expected 1 values for shape (), got 2"));
}

TEST(TensorConstruct, NegativeDimsError) {
  EXPECT_THROW(Tensor(std::vector<float>{}, {2, -1}), InvalidArgumentError);
  EXPECT_THROW(Tensor::zeros(DType::kInt32, {-3}), InvalidArgumentError);
  const std::string msg = testing::message_of<InvalidArgumentError>([] { Tensor(std::vector<float>{1, 2}, {-2, -1}); });
  EXPECT_THAT(msg, HasSubstr("non-negative"));
  EXPECT_THAT(msg, HasSubstr("(-2, -1)"));
}

// Every running product must fit in int64 (as TF's TensorShape), and so must
// the bytes: 2^61 float64s used to wrap to a 0-byte buffer.
TEST(TensorConstruct, TooManyElementsOrBytesError) {
  EXPECT_THAT(testing::message_of<InvalidArgumentError>(
                  [] { Tensor::zeros(DType::kFloat32, {i64{1} << 31, i64{1} << 32, 0}); }),
              AllOf(HasSubstr("shape (2147483648, 4294967296, 0) has too many elements"),
                    HasSubstr("first 2 dimensions")));
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([] { Tensor::zeros(DType::kFloat64, {i64{1} << 61}); }),
              AllOf(HasSubstr("dtype float64 has too many elements"), HasSubstr("2^63 - 1 bytes")));
  EXPECT_THROW(Tensor::zeros(DType::kInt32, {i64{1} << 62}), InvalidArgumentError);
  EXPECT_EQ(Tensor::zeros(DType::kInt32, {i64{1} << 62, 0}).num_elements(), 0);
}

TEST(TensorConstruct, ScalarConstructorAndFactory) {
  const Tensor a(5.f);
  EXPECT_EQ(a.dtype(), DType::kFloat32);
  EXPECT_EQ(a.shape(), Shape{});
  EXPECT_EQ(a.rank(), 0);
  EXPECT_EQ(a.num_elements(), 1);
  EXPECT_EQ(a.item<float>(), 5.f);

  const Tensor b = Tensor::scalar(2.25);
  EXPECT_EQ(b.dtype(), DType::kFloat64);
  EXPECT_EQ(b.rank(), 0);
  EXPECT_EQ(b.item<double>(), 2.25);

  const Tensor c = Tensor::scalar(i32{-4});
  EXPECT_EQ(c.dtype(), DType::kInt32);
  EXPECT_EQ(c.item<i32>(), -4);

  const Tensor d = Tensor::scalar(i64{1} << 40);
  EXPECT_EQ(d.dtype(), DType::kInt64);
  EXPECT_EQ(d.item<i64>(), i64{1} << 40);

  EXPECT_EQ(Tensor(7), Tensor::scalar(7));
}

TEST(TensorConstruct, Zeros) {
  const Tensor z = Tensor::zeros(DType::kInt64, {2, 3});
  EXPECT_EQ(z.dtype(), DType::kInt64);
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_THAT(testing::values_of<i64>(z), ElementsAre(0, 0, 0, 0, 0, 0));

  const Tensor f = Tensor::zeros(DType::kFloat32, {});
  EXPECT_EQ(f.rank(), 0);
  EXPECT_EQ(f.item<float>(), 0.f);

  const Tensor e = Tensor::zeros(DType::kFloat64, {3, 0});
  EXPECT_EQ(e.num_elements(), 0);
  EXPECT_EQ(e.shape(), (Shape{3, 0}));
}

TEST(TensorConstruct, GenerateWritesTheNewBufferOnce) {
  int calls = 0;
  const Tensor t = Tensor::generate<float>({2, 3}, [&](std::span<float> out) {
    ++calls;
    ASSERT_EQ(out.size(), 6u);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(i) * 0.5f;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(t.dtype(), DType::kFloat32);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_THAT(testing::values_of<float>(t), ElementsAre(0.f, 0.5f, 1.f, 1.5f, 2.f, 2.5f));

  const Tensor i = Tensor::generate<i64>({}, [](std::span<i64> out) { out[0] = -7; });
  EXPECT_EQ(i.dtype(), DType::kInt64);
  EXPECT_EQ(i.item<i64>(), -7);

  const Tensor empty = Tensor::generate<double>({0, 4}, [](std::span<double> out) { EXPECT_TRUE(out.empty()); });
  EXPECT_EQ(empty.num_elements(), 0);
}

TEST(TensorConstruct, GenerateRejectsBadShapesAndPropagatesTheFillersError) {
  EXPECT_THROW(Tensor::generate<float>({-1}, [](std::span<float>) {}), InvalidArgumentError);
  EXPECT_THROW(Tensor::generate<float>({2}, [](std::span<float>) { throw std::runtime_error("fill failed"); }),
               std::runtime_error);
}

TEST(TensorConstruct, DefaultIsFloat32ScalarZero) {
  const Tensor t;
  EXPECT_EQ(t.dtype(), DType::kFloat32);
  EXPECT_EQ(t.shape(), Shape{});
  EXPECT_EQ(t.rank(), 0);
  EXPECT_EQ(t.num_elements(), 1);
  EXPECT_EQ(t.item<float>(), 0.f);
  EXPECT_EQ(t, Tensor(0.f));
}

TEST(TensorConstruct, Dim) {
  const Tensor t = Iota(24, {2, 3, 4});
  EXPECT_EQ(t.dim(0), 2);
  EXPECT_EQ(t.dim(1), 3);
  EXPECT_EQ(t.dim(2), 4);
  EXPECT_EQ(t.dim(-1), 4);
  EXPECT_EQ(t.dim(-3), 2);
  EXPECT_THROW(t.dim(3), InvalidArgumentError);
  EXPECT_THROW(t.dim(-4), InvalidArgumentError);
  EXPECT_THROW(Tensor(1.f).dim(0), InvalidArgumentError);
}

TEST(TensorConstruct, BytesView) {
  const Tensor t{1, 2, 3};
  EXPECT_EQ(t.bytes().size(), 3 * sizeof(i32));
  EXPECT_EQ(static_cast<const void*>(t.bytes().data()), static_cast<const void*>(t.data<i32>().data()));
}

// ---------------------------------------------------------------------------
// Sharing and zero-copy views

TEST(TensorShare, CopySharesBuffer) {
  const Tensor a{1.f, 2.f, 3.f};
  const Tensor b = a;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_TRUE(b.shares_buffer_with(a));
  EXPECT_TRUE(a.shares_buffer_with(b));
  EXPECT_EQ(b.data<float>().data(), a.data<float>().data());
  EXPECT_EQ(a, b);

  Tensor c;
  c = a;
  EXPECT_TRUE(c.shares_buffer_with(a));
  EXPECT_EQ(c.data<float>().data(), a.data<float>().data());

  // Equal values built separately are separate buffers.
  const Tensor d{1.f, 2.f, 3.f};
  EXPECT_EQ(a, d);
  EXPECT_FALSE(d.shares_buffer_with(a));
  EXPECT_NE(d.data<float>().data(), a.data<float>().data());
}

TEST(TensorShare, CopyOutlivesOriginal) {
  Tensor b;
  {
    const Tensor a{{1, 2}, {3, 4}};
    b = a.slice(1, 2);
  }
  EXPECT_THAT(testing::values_of<i32>(b), ElementsAre(3, 4));
}

TEST(TensorSlice, RowsAreZeroCopy) {
  const Tensor m = Iota(12, {4, 3});
  const Tensor s = m.slice(1, 3);
  EXPECT_EQ(s.dtype(), DType::kInt32);
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  EXPECT_EQ(s.num_elements(), 6);
  EXPECT_THAT(testing::values_of<i32>(s), ElementsAre(3, 4, 5, 6, 7, 8));
  EXPECT_TRUE(s.shares_buffer_with(m));
  EXPECT_EQ(s.data<i32>().data(), m.data<i32>().data() + 3);

  const Tensor all = m.slice(0, 4);
  EXPECT_EQ(all, m);
  EXPECT_EQ(all.data<i32>().data(), m.data<i32>().data());

  // A slice of a slice keeps counting from the original buffer.
  const Tensor ss = m.slice(1, 4).slice(1, 2);
  EXPECT_EQ(ss.shape(), (Shape{1, 3}));
  EXPECT_THAT(testing::values_of<i32>(ss), ElementsAre(6, 7, 8));
  EXPECT_EQ(ss.data<i32>().data(), m.data<i32>().data() + 6);
}

TEST(TensorSlice, ToEmpty) {
  const Tensor m = Iota(12, {4, 3});
  for (i64 at : {i64{0}, i64{2}, i64{4}}) {
    const Tensor e = m.slice(at, at);
    EXPECT_EQ(e.shape(), (Shape{0, 3}));
    EXPECT_EQ(e.num_elements(), 0);
    EXPECT_TRUE(e.data<i32>().empty());
    EXPECT_TRUE(e.shares_buffer_with(m));
  }
  const Tensor v{1.0, 2.0};
  EXPECT_EQ(v.slice(1, 1).shape(), (Shape{0}));
  // Slicing an empty tensor to empty.
  const Tensor z = Tensor::zeros(DType::kFloat32, {0, 2});
  EXPECT_EQ(z.slice(0, 0).shape(), (Shape{0, 2}));
}

TEST(TensorSlice, OutOfRangeErrors) {
  const Tensor m = Iota(12, {4, 3});
  EXPECT_THROW(m.slice(-1, 2), InvalidArgumentError);
  EXPECT_THROW(m.slice(3, 2), InvalidArgumentError);
  EXPECT_THROW(m.slice(0, 5), InvalidArgumentError);
  EXPECT_THROW(m.slice(5, 5), InvalidArgumentError);
  EXPECT_THROW(Tensor(1.f).slice(0, 0), InvalidArgumentError);
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([&] { m.slice(0, 5); }),
              HasSubstr("expected 0 <= begin <= end <= 4, got [0, 5)"));
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([] { Tensor(1.f).slice(0, 1); }), HasSubstr("rank >= 1"));
}

TEST(TensorIndex, RowsAreZeroCopyWithRankOneLess) {
  const Tensor m = Iota(12, {4, 3});
  const Tensor r = m[2];
  EXPECT_EQ(r.shape(), (Shape{3}));
  EXPECT_EQ(r.rank(), 1);
  EXPECT_THAT(testing::values_of<i32>(r), ElementsAre(6, 7, 8));
  EXPECT_TRUE(r.shares_buffer_with(m));
  EXPECT_EQ(r.data<i32>().data(), m.data<i32>().data() + 6);

  const Tensor e = m[1][2];
  EXPECT_EQ(e.rank(), 0);
  EXPECT_EQ(e.item<i32>(), 5);
  EXPECT_EQ(e.data<i32>().data(), m.data<i32>().data() + 5);

  const Tensor t = Iota(24, {2, 3, 4});
  EXPECT_EQ(t[1].shape(), (Shape{3, 4}));
  EXPECT_EQ(t[1][2], (Tensor{20, 21, 22, 23}));
}

TEST(TensorIndex, OutOfRangeErrors) {
  const Tensor v{1.f, 2.f};
  EXPECT_THROW(v[2], InvalidArgumentError);
  EXPECT_THROW(v[-1], InvalidArgumentError);
  EXPECT_THROW(Tensor(1.f)[0], InvalidArgumentError);
  EXPECT_THROW(Tensor::zeros(DType::kFloat32, {0})[0], InvalidArgumentError);
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([&] { v[2]; }), HasSubstr("expected an index in [0, 2), got 2"));
}

TEST(TensorReshape, ZeroCopy) {
  const Tensor m = Iota(12, {4, 3});
  const Tensor r = m.reshape({2, 6});
  EXPECT_EQ(r.shape(), (Shape{2, 6}));
  EXPECT_TRUE(r.shares_buffer_with(m));
  EXPECT_EQ(r.data<i32>().data(), m.data<i32>().data());
  EXPECT_EQ(testing::values_of<i32>(r), testing::values_of<i32>(m));
  EXPECT_EQ(r[1], (Tensor{6, 7, 8, 9, 10, 11}));

  // Reshaping a slice keeps the slice's offset.
  const Tensor s = m.slice(2, 4).reshape({6});
  EXPECT_EQ(s, (Tensor{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(s.data<i32>().data(), m.data<i32>().data() + 6);

  EXPECT_EQ(Tensor{3.5}.reshape({}).rank(), 0);
  EXPECT_EQ(Tensor(3.5).reshape({1, 1}).shape(), (Shape{1, 1}));
}

TEST(TensorReshape, Errors) {
  const Tensor m = Iota(12, {4, 3});
  EXPECT_THROW(m.reshape({5}), InvalidArgumentError);
  EXPECT_THROW(m.reshape({}), InvalidArgumentError);
  EXPECT_THROW(m.reshape({-3, -4}), InvalidArgumentError);
  const std::string msg = testing::message_of<InvalidArgumentError>([&] { m.reshape({5}); });
  EXPECT_THAT(msg, HasSubstr("12 elements"));
  EXPECT_THAT(msg, HasSubstr("(4, 3)"));
  EXPECT_THAT(msg, HasSubstr("(5,)"));
}

// ---------------------------------------------------------------------------
// Element access

TEST(TensorData, DtypeMismatchError) {
  const Tensor f{1.f};
  EXPECT_THROW(f.data<double>(), InvalidArgumentError);
  EXPECT_THROW(f.data<i32>(), InvalidArgumentError);
  EXPECT_THROW(Tensor{1}.data<i64>(), InvalidArgumentError);
  EXPECT_NO_THROW(f.data<float>());
  const std::string msg = testing::message_of<InvalidArgumentError>([&] { f.data<double>(); });
  EXPECT_THAT(msg, HasSubstr("float64"));
  EXPECT_THAT(msg, HasSubstr("float32"));
}

TEST(TensorItem, SingleElement) {
  EXPECT_EQ(Tensor(2.5).item<double>(), 2.5);
  EXPECT_EQ(Tensor{7}.item<i32>(), 7);
  EXPECT_EQ((Tensor{{9.f}}).item<float>(), 9.f);
  // Converted as static_cast does.
  EXPECT_EQ(Tensor(2.75f).item<i64>(), 2);
  EXPECT_EQ(Tensor(-2.75).item<i32>(), -2);
  EXPECT_EQ(Tensor(3).item<double>(), 3.0);
  EXPECT_EQ(Tensor(i64{1} << 40).item<double>(), 1099511627776.0);
  // A row of a larger tensor.
  EXPECT_EQ(Iota(6, {3, 2})[2][1].item<i32>(), 5);
}

TEST(TensorItem, NotOneElementError) {
  EXPECT_THROW((Tensor{1.f, 2.f}).item<float>(), InvalidArgumentError);
  EXPECT_THROW(Tensor::zeros(DType::kFloat32, {0}).item<float>(), InvalidArgumentError);
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([] { (Tensor{1.f, 2.f}).item<float>(); }),
              HasSubstr("shape (2,)"));
}

// ---------------------------------------------------------------------------
// Arithmetic

TEST(TensorArith, SameShape) {
  const Tensor a{1.f, 2.f, 3.f};
  const Tensor b{10.f, 20.f, 40.f};
  EXPECT_EQ(a + b, (Tensor{11.f, 22.f, 43.f}));
  EXPECT_EQ(b - a, (Tensor{9.f, 18.f, 37.f}));
  EXPECT_EQ(a * b, (Tensor{10.f, 40.f, 120.f}));
  EXPECT_EQ(b / a, (Tensor{10.f, 10.f, 40.f / 3.f}));

  const Tensor x{{1, 2}, {3, 4}};
  const Tensor y{{5, 6}, {7, 8}};
  EXPECT_EQ(x + y, (Tensor{{6, 8}, {10, 12}}));
  EXPECT_EQ(x - y, (Tensor{{-4, -4}, {-4, -4}}));
  EXPECT_EQ(x * y, (Tensor{{5, 12}, {21, 32}}));

  const Tensor l{i64{1} << 40, i64{3}};
  EXPECT_EQ(l + l, (Tensor{i64{1} << 41, i64{6}}));
}

TEST(TensorArith, ResultIsANewBuffer) {
  const Tensor a{1.0, 2.0};
  const Tensor b = a + a;
  EXPECT_FALSE(b.shares_buffer_with(a));
  EXPECT_EQ(a, (Tensor{1.0, 2.0}));  // operands unchanged
}

TEST(TensorArith, WithRankZeroTensor) {
  const Tensor a{1.f, 2.f, 3.f};
  const Tensor s(10.f);
  EXPECT_EQ(a + s, (Tensor{11.f, 12.f, 13.f}));
  EXPECT_EQ(s + a, (Tensor{11.f, 12.f, 13.f}));
  EXPECT_EQ(s - a, (Tensor{9.f, 8.f, 7.f}));
  EXPECT_EQ(a - s, (Tensor{-9.f, -8.f, -7.f}));
  EXPECT_EQ(a * s, (Tensor{10.f, 20.f, 30.f}));
  EXPECT_EQ(s / a, (Tensor{10.f, 5.f, 10.f / 3.f}));
  EXPECT_EQ(a / s, (Tensor{0.1f, 0.2f, 0.3f}));

  const Tensor r = Tensor(2.0) * Tensor(3.0);
  EXPECT_EQ(r.rank(), 0);
  EXPECT_EQ(r.item<double>(), 6.0);

  const Tensor m{{1, 2}, {3, 4}};
  EXPECT_EQ(m * Tensor(3), (Tensor{{3, 6}, {9, 12}}));

  // Broadcasting against an empty tensor gives an empty tensor.
  const Tensor e = Tensor::zeros(DType::kFloat32, {0, 2}) + Tensor(1.f);
  EXPECT_EQ(e.shape(), (Shape{0, 2}));
}

TEST(TensorArith, WithCppScalarsOnBothSides) {
  const Tensor a{1.f, 2.f, 4.f};
  EXPECT_EQ(a + 1, (Tensor{2.f, 3.f, 5.f}));
  EXPECT_EQ(1 + a, (Tensor{2.f, 3.f, 5.f}));
  EXPECT_EQ(a - 0.5, (Tensor{0.5f, 1.5f, 3.5f}));
  EXPECT_EQ(10.f - a, (Tensor{9.f, 8.f, 6.f}));
  EXPECT_EQ(a * 2, (Tensor{2.f, 4.f, 8.f}));
  EXPECT_EQ(2.0 * a, (Tensor{2.f, 4.f, 8.f}));
  EXPECT_EQ(a / 2, (Tensor{0.5f, 1.f, 2.f}));
  EXPECT_EQ(8 / a, (Tensor{8.f, 4.f, 2.f}));
  EXPECT_EQ((a + 1).dtype(), DType::kFloat32);  // the scalar takes the tensor's dtype

  const Tensor i{1, 2, 3};
  EXPECT_EQ(i + 1, (Tensor{2, 3, 4}));
  EXPECT_EQ(10 - i, (Tensor{9, 8, 7}));
  EXPECT_EQ(i * i64{3}, (Tensor{3, 6, 9}));
  EXPECT_EQ(i + 2.0, (Tensor{3, 4, 5}));  // 2.0 is exactly an int32

  const Tensor l{i64{5}};
  EXPECT_EQ(l - 7, (Tensor{i64{-2}}));
  EXPECT_EQ(l * (i64{1} << 40), (Tensor{i64{5} << 40}));
}

TEST(TensorArith, OnSlices) {
  const Tensor m = Iota(6, {3, 2});
  EXPECT_EQ(m[1] + m[2], (Tensor{6, 8}));
  EXPECT_EQ(m.slice(1, 3) - m.slice(0, 2), (Tensor{{2, 2}, {2, 2}}));
  EXPECT_EQ(m[2][1] * m[1], (Tensor{10, 15}));
}

TEST(TensorArith, DtypeMismatchError) {
  EXPECT_THROW((Tensor{1.f}) + (Tensor{1.0}), InvalidArgumentError);
  EXPECT_THROW((Tensor{1}) * (Tensor{i64{1}}), InvalidArgumentError);
  EXPECT_THROW(Tensor(1.f) - (Tensor{1, 2}), InvalidArgumentError);
  const std::string msg = testing::message_of<InvalidArgumentError>([] { Tensor{1.f, 2.f} + Tensor{1.0}; });
  EXPECT_THAT(msg, HasSubstr("operator+"));
  EXPECT_THAT(msg, HasSubstr("shape (2,) dtype float32"));
  EXPECT_THAT(msg, HasSubstr("shape (1,) dtype float64"));
}

TEST(TensorArith, ShapeMismatchErrorNamesBothShapes) {
  const Tensor a{1.f, 2.f};
  const Tensor b{1.f, 2.f, 3.f};
  EXPECT_THROW(a + b, InvalidArgumentError);
  EXPECT_THROW(a - b, InvalidArgumentError);
  EXPECT_THROW(a * b, InvalidArgumentError);
  EXPECT_THROW(a / b, InvalidArgumentError);
  // Only rank 0 broadcasts: shape (1,) does not.
  EXPECT_THROW((Tensor{1.f}) + b, InvalidArgumentError);
  // Same element count, different shapes.
  EXPECT_THROW((Tensor{{1, 2}, {3, 4}}) + (Tensor{1, 2, 3, 4}), InvalidArgumentError);

  const std::string msg = testing::message_of<InvalidArgumentError>([&] { a * b; });
  EXPECT_THAT(msg, HasSubstr("operator*"));
  EXPECT_THAT(msg, HasSubstr("(2,)"));
  EXPECT_THAT(msg, HasSubstr("(3,)"));
  const std::string msg2 =
      testing::message_of<InvalidArgumentError>([] { Tensor{{1, 2, 3}, {4, 5, 6}} - Tensor{{1, 2}, {3, 4}}; });
  EXPECT_THAT(msg2, HasSubstr("(2, 3)"));
  EXPECT_THAT(msg2, HasSubstr("(2, 2)"));
}

TEST(TensorArith, ScalarNotRepresentableError) {
  const Tensor i{1, 2};
  EXPECT_THROW(i + 1.5, InvalidArgumentError);
  EXPECT_THROW(1.5 + i, InvalidArgumentError);
  EXPECT_THROW(i * 0.5f, InvalidArgumentError);
  EXPECT_THROW(i - std::numeric_limits<double>::quiet_NaN(), InvalidArgumentError);
  EXPECT_THROW(i + std::numeric_limits<double>::infinity(), InvalidArgumentError);
  EXPECT_THROW(i * (i64{1} << 40), InvalidArgumentError);    // 2^40 is not an int32
  EXPECT_THROW(i + 4294967296.0, InvalidArgumentError);      // 2^32 as a double
  EXPECT_THROW((Tensor{i64{1}}) + 0.25, InvalidArgumentError);
  // 2^63 is one past the largest int64.
  EXPECT_THROW((Tensor{i64{1}}) + 9223372036854775808.0, InvalidArgumentError);
  EXPECT_NO_THROW((Tensor{i64{1}}) + -9223372036854775808.0);  // -2^63 is the smallest int64
  EXPECT_THROW(i + 2147483648.0, InvalidArgumentError);  // 2^31
  EXPECT_EQ(Tensor{0} + 2147483647, Tensor{std::numeric_limits<i32>::max()});
  EXPECT_EQ(Tensor{0} + -2147483648.0, Tensor{std::numeric_limits<i32>::min()});

  const std::string msg = testing::message_of<InvalidArgumentError>([&] { i + 1.5; });
  EXPECT_THAT(msg, HasSubstr("int32"));
  EXPECT_THAT(msg, HasSubstr("1.5"));
}

TEST(TensorArith, IntegerDivisionIsTrueDivisionToFloat64) {
  const Tensor q = Tensor{1, 2, 3} / Tensor{2, 2, 2};
  EXPECT_EQ(q.dtype(), DType::kFloat64);
  EXPECT_EQ(q, (Tensor{0.5, 1.0, 1.5}));

  EXPECT_EQ((Tensor{7, -7} / 2), (Tensor{3.5, -3.5}));
  EXPECT_EQ((1 / Tensor{4, 8}), (Tensor{0.25, 0.125}));
  EXPECT_EQ((Tensor{i64{9}}) / (Tensor{i64{4}}), (Tensor{2.25}));
  EXPECT_EQ(Tensor(3) / Tensor(4), Tensor(0.75));
  EXPECT_EQ((Tensor{{1, 2}, {3, 4}} / 4).shape(), (Shape{2, 2}));

  // Division of floats keeps the dtype.
  EXPECT_EQ((Tensor{1.f} / Tensor{4.f}).dtype(), DType::kFloat32);
  EXPECT_EQ((Tensor{1.0} / Tensor{4.0}).dtype(), DType::kFloat64);
  // Other integer operations keep the dtype.
  EXPECT_EQ((Tensor{1} * Tensor{4}).dtype(), DType::kInt32);
}

// ---------------------------------------------------------------------------
// Reductions

TEST(TensorReduce, SumAllAndAlongAxis) {
  const Tensor m{{1, 2, 3}, {4, 5, 6}};
  EXPECT_EQ(m.sum(), Tensor(21));
  EXPECT_EQ(m.sum().rank(), 0);
  EXPECT_EQ(m.sum(0), (Tensor{5, 7, 9}));
  EXPECT_EQ(m.sum(1), (Tensor{6, 15}));
  EXPECT_EQ(m.sum(-1), (Tensor{6, 15}));
  EXPECT_EQ(m.sum(-2), (Tensor{5, 7, 9}));

  const Tensor v{1.5, 2.5, 4.0};
  EXPECT_EQ(v.sum(), Tensor(8.0));
  EXPECT_EQ(v.sum(0), Tensor(8.0));
  EXPECT_EQ(v.sum(0).rank(), 0);

  EXPECT_EQ(Tensor(5.f).sum(), Tensor(5.f));
  EXPECT_EQ((Tensor{i64{1} << 40, i64{1} << 40}).sum(), Tensor(i64{1} << 41));

  // On a view.
  EXPECT_EQ(Iota(12, {4, 3}).slice(1, 3).sum(), Tensor(3 + 4 + 5 + 6 + 7 + 8));
  EXPECT_EQ(Iota(12, {4, 3})[3].sum(), Tensor(9 + 10 + 11));
}

TEST(TensorReduce, SumKeepsDtype) {
  EXPECT_EQ((Tensor{1.f, 2.f}).sum().dtype(), DType::kFloat32);
  EXPECT_EQ((Tensor{1.0, 2.0}).sum().dtype(), DType::kFloat64);
  EXPECT_EQ((Tensor{1, 2}).sum().dtype(), DType::kInt32);
  EXPECT_EQ((Tensor{i64{1}, i64{2}}).sum(0).dtype(), DType::kInt64);
  EXPECT_EQ((Tensor{1, 2}).mean().dtype(), DType::kInt32);
}

TEST(TensorReduce, ThreeDimensional) {
  // x[o][k][i] = 12 o + 4 k + i.
  const Tensor t = Iota(24, {2, 3, 4});
  const Tensor s1 = t.sum(1);  // 36 o + 12 + 3 i
  EXPECT_EQ(s1.shape(), (Shape{2, 4}));
  EXPECT_EQ(s1, (Tensor{{12, 15, 18, 21}, {48, 51, 54, 57}}));
  const Tensor s0 = t.sum(0);  // 24 + 8 k + 2 i
  EXPECT_EQ(s0.shape(), (Shape{3, 4}));
  EXPECT_EQ(s0, (Tensor{{12, 14, 16, 18}, {20, 22, 24, 26}, {28, 30, 32, 34}}));
  const Tensor s2 = t.sum(2);  // 48 o + 16 k + 6
  EXPECT_EQ(s2, (Tensor{{6, 22, 38}, {54, 70, 86}}));
  EXPECT_EQ(t.sum(-2), s1);
  EXPECT_EQ(t.sum(), Tensor(23 * 24 / 2));
  EXPECT_EQ(t.mean(1), (Tensor{{4, 5, 6, 7}, {16, 17, 18, 19}}));  // 12 o + 4 + i
}

TEST(TensorReduce, AxisOutOfRangeError) {
  const Tensor m{{1, 2, 3}, {4, 5, 6}};
  EXPECT_THROW(m.sum(2), InvalidArgumentError);
  EXPECT_THROW(m.sum(-3), InvalidArgumentError);
  EXPECT_THROW(m.mean(2), InvalidArgumentError);
  EXPECT_THROW(m.mean(-3), InvalidArgumentError);
  EXPECT_THROW(Tensor(1.f).sum(0), InvalidArgumentError);
  const std::string msg = testing::message_of<InvalidArgumentError>([&] { m.sum(2); });
  EXPECT_THAT(msg, HasSubstr("[-2, 2)"));
  EXPECT_THAT(msg, HasSubstr("axis 2"));
}

TEST(TensorReduce, FloatSumsAccumulateInDouble) {
  // In float32, 1e8 + 1 rounds back to 1e8 (the spacing there is 8).
  const Tensor f{1e8f, 1.f, -1e8f};
  EXPECT_EQ(f.sum(), Tensor(1.f));
  EXPECT_EQ(f.mean(), Tensor(1.f / 3.f));
  EXPECT_EQ(f.reshape({3, 1}).sum(0), (Tensor{1.f}));
  EXPECT_EQ(f.reshape({1, 3}).sum(1), (Tensor{1.f}));
  // 2^24 + 1 + 1: each step alone would round away in float32.
  EXPECT_EQ((Tensor{16777216.f, 1.f, 1.f}).sum(), Tensor(16777218.f));
}

TEST(TensorReduce, Mean) {
  EXPECT_EQ((Tensor{1.f, 2.f}).mean(), Tensor(1.5f));
  EXPECT_EQ((Tensor{{1.0, 2.0}, {3.0, 5.0}}).mean(0), (Tensor{2.0, 3.5}));
  EXPECT_EQ((Tensor{{1.0, 2.0}, {3.0, 5.0}}).mean(-1), (Tensor{1.5, 4.0}));
  EXPECT_EQ((Tensor{{1.0, 2.0}, {3.0, 5.0}}).mean(), Tensor(2.75));
}

TEST(TensorReduce, IntegerMeanTruncates) {
  const Tensor m{{1, 2, 3}, {4, 5, 6}};
  EXPECT_EQ(m.mean(), Tensor(3));          // 21 / 6 = 3.5
  EXPECT_EQ(m.mean(0), (Tensor{2, 3, 4}));  // 5/2, 7/2, 9/2
  EXPECT_EQ(m.mean(1), (Tensor{2, 5}));     // 6/3, 15/3
  EXPECT_EQ((Tensor{1, 2}).mean(), Tensor(1));
  EXPECT_EQ((Tensor{-3, -4}).mean(), Tensor(-3));  // truncation toward zero
  EXPECT_EQ((Tensor{i64{7}, i64{8}}).mean(), Tensor(i64{7}));
}

TEST(TensorReduce, EmptyTensors) {
  const Tensor ef = Tensor::zeros(DType::kFloat32, {0});
  EXPECT_EQ(ef.sum(), Tensor(0.f));
  EXPECT_EQ(Tensor::zeros(DType::kFloat64, {0, 3}).sum(0), (Tensor{0.0, 0.0, 0.0}));
  EXPECT_EQ(Tensor::zeros(DType::kInt32, {0}).sum(), Tensor(0));
  EXPECT_EQ(Tensor::zeros(DType::kFloat32, {2, 0}).sum(1), (Tensor{0.f, 0.f}));
  // Reducing a non-empty axis of an empty tensor gives an empty result.
  EXPECT_EQ(Tensor::zeros(DType::kInt32, {2, 0}).sum(0).shape(), (Shape{0}));
  EXPECT_EQ(Tensor::zeros(DType::kInt32, {2, 0}).mean(0).shape(), (Shape{0}));
  // The mean of no floats is NaN, as in TF.
  const Tensor nan = ef.mean();
  EXPECT_EQ(nan.rank(), 0);
  EXPECT_TRUE(std::isnan(nan.item<float>()));
}

TEST(TensorReduce, EmptyIntegerMeanError) {
  EXPECT_THROW(Tensor::zeros(DType::kInt32, {0}).mean(), InvalidArgumentError);
  EXPECT_THROW(Tensor::zeros(DType::kInt64, {0}).mean(0), InvalidArgumentError);
  EXPECT_THROW(Tensor::zeros(DType::kInt32, {3, 0}).mean(1), InvalidArgumentError);
  EXPECT_THROW(Tensor::zeros(DType::kInt32, {0, 3}).mean(0), InvalidArgumentError);
  const std::string msg = testing::message_of<InvalidArgumentError>([] { Tensor::zeros(DType::kInt32, {0}).mean(); });
  EXPECT_THAT(msg, HasSubstr("mean"));
  EXPECT_THAT(msg, HasSubstr("int32"));
}

// ---------------------------------------------------------------------------
// Cast, concat, stack

TEST(TensorCast, ConvertsAsStaticCast) {
  EXPECT_EQ((Tensor{1.5f, -2.7f, 3.f}).cast(DType::kInt32), (Tensor{1, -2, 3}));
  EXPECT_EQ((Tensor{1, 2}).cast(DType::kFloat64), (Tensor{1.0, 2.0}));
  EXPECT_EQ((Tensor{i64{1} << 40}).cast(DType::kFloat64), (Tensor{1099511627776.0}));
  EXPECT_EQ((Tensor{0.1}).cast(DType::kFloat32), (Tensor{0.1f}));
  EXPECT_EQ((Tensor{{1, 2}, {3, 4}}).cast(DType::kInt64), (Tensor{{i64{1}, i64{2}}, {i64{3}, i64{4}}}));
  EXPECT_EQ(Tensor(7.9).cast(DType::kInt64), Tensor(i64{7}));
  EXPECT_EQ(Iota(6, {3, 2})[1].cast(DType::kFloat32), (Tensor{2.f, 3.f}));
  const Tensor same = Tensor{1.f, 2.f}.cast(DType::kFloat32);
  EXPECT_EQ(same, (Tensor{1.f, 2.f}));
  EXPECT_EQ(same.dtype(), DType::kFloat32);
}

TEST(TensorConcat, AlongAxis0) {
  const Tensor c = concat({Tensor{{1, 2}, {3, 4}}, Tensor{{5, 6}}});
  EXPECT_EQ(c, (Tensor{{1, 2}, {3, 4}, {5, 6}}));
  EXPECT_EQ(concat({Tensor{1.0, 2.0}, Tensor{3.0}, Tensor::zeros(DType::kFloat64, {0})}), (Tensor{1.0, 2.0, 3.0}));
  // Of views.
  const Tensor m = Iota(8, {4, 2});
  EXPECT_EQ(concat({m.slice(2, 4), m.slice(0, 1)}), (Tensor{{4, 5}, {6, 7}, {0, 1}}));
  EXPECT_FALSE(concat({m.slice(2, 4), m.slice(0, 1)}).shares_buffer_with(m));
}

TEST(TensorConcat, SingleTensorIsReturnedAsIs) {
  const Tensor a{1.f, 2.f};
  const Tensor c = concat({a});
  EXPECT_EQ(c, a);
  EXPECT_TRUE(c.shares_buffer_with(a));
  EXPECT_EQ(c.data<float>().data(), a.data<float>().data());
}

TEST(TensorConcat, Errors) {
  EXPECT_THROW(concat({}), InvalidArgumentError);
  EXPECT_THROW(concat({Tensor(1.f)}), InvalidArgumentError);
  EXPECT_THROW(concat({Tensor(1.f), Tensor(2.f)}), InvalidArgumentError);
  EXPECT_THROW(concat({Tensor{1.f}, Tensor(2.f)}), InvalidArgumentError);
  EXPECT_THROW(concat({Tensor{{1, 2}}, Tensor{{1, 2, 3}}}), InvalidArgumentError);
  EXPECT_THROW(concat({Tensor{1.f}, Tensor{1.0}}), InvalidArgumentError);
  EXPECT_THROW(concat({Tensor{{1, 2}}, Tensor{1, 2}}), InvalidArgumentError);  // rank differs

  EXPECT_THAT(testing::message_of<InvalidArgumentError>([] { concat({}); }), HasSubstr("at least one tensor"));
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([] { concat({Tensor(1.f)}); }), HasSubstr("rank >= 1"));
  const std::string msg =
      testing::message_of<InvalidArgumentError>([] { concat({Tensor{{1, 2}}, Tensor{{3, 4}}, Tensor{{1, 2, 3}}}); });
  EXPECT_THAT(msg, HasSubstr("tensor 2"));
  EXPECT_THAT(msg, HasSubstr("(1, 3)"));
  EXPECT_THAT(msg, HasSubstr("(1, 2)"));
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([] { concat({Tensor{1.f}, Tensor{1.0}}); }),
              HasSubstr("tensor 1"));
}

TEST(TensorStack, AlongNewAxis0) {
  EXPECT_EQ(stack({Tensor{1, 2}, Tensor{3, 4}, Tensor{5, 6}}), (Tensor{{1, 2}, {3, 4}, {5, 6}}));
  EXPECT_EQ(stack({Tensor(1.f), Tensor(2.f), Tensor(3.f)}), (Tensor{1.f, 2.f, 3.f}));
  const Tensor one = stack({Tensor{7.0, 8.0}});
  EXPECT_EQ(one.shape(), (Shape{1, 2}));
  EXPECT_EQ(one, (Tensor{{7.0, 8.0}}));
  const Tensor s = stack({Iota(4, {2, 2}), Iota(4, {2, 2}) * 10});
  EXPECT_EQ(s.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(s[1], (Tensor{{0, 10}, {20, 30}}));
}

TEST(TensorStack, Errors) {
  EXPECT_THROW(stack({}), InvalidArgumentError);
  EXPECT_THROW(stack({Tensor{1, 2}, Tensor{1, 2, 3}}), InvalidArgumentError);
  EXPECT_THROW(stack({Tensor{1, 2}, Tensor{1.f, 2.f}}), InvalidArgumentError);
  EXPECT_THROW(stack({Tensor(1), Tensor{1}}), InvalidArgumentError);
  const std::string msg = testing::message_of<InvalidArgumentError>([] { stack({Tensor{1, 2}, Tensor{1, 2}, Tensor{1}}); });
  EXPECT_THAT(msg, HasSubstr("tensor 2"));
  EXPECT_THAT(msg, HasSubstr("(1,)"));
}

// ---------------------------------------------------------------------------
// Comparison

TEST(TensorEquality, DtypeShapeAndValues) {
  EXPECT_TRUE((Tensor{1.f, 2.f}) == (Tensor{1.f, 2.f}));
  EXPECT_FALSE((Tensor{1.f, 2.f}) == (Tensor{1.0, 2.0}));   // dtype
  EXPECT_FALSE((Tensor{1, 2}) == (Tensor{i64{1}, i64{2}}));  // dtype
  EXPECT_FALSE((Tensor{1.f, 2.f}) == (Tensor{{1.f, 2.f}}));  // shape (2,) vs (1, 2)
  EXPECT_FALSE(Tensor(1.f) == (Tensor{1.f}));                // shape () vs (1,)
  EXPECT_FALSE((Tensor{1.f, 2.f}) == (Tensor{1.f, 3.f}));    // values
  EXPECT_TRUE((Tensor{1.f, 2.f}) != (Tensor{2.f, 1.f}));
  EXPECT_TRUE(Tensor(0.f) == Tensor(-0.f));
  EXPECT_TRUE(Tensor::zeros(DType::kInt32, {0, 2}) == Tensor::zeros(DType::kInt32, {0, 2}));
  EXPECT_FALSE(Tensor::zeros(DType::kInt32, {0, 2}) == Tensor::zeros(DType::kInt32, {2, 0}));
  // A view equals a separately built tensor of the same values.
  EXPECT_EQ(Iota(6, {3, 2})[1], (Tensor{2, 3}));
}

TEST(TensorEquality, NanIsNotEqualToItself) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor a{1.f, nan};
  EXPECT_FALSE(a == a);
  EXPECT_TRUE(a != a);
  EXPECT_FALSE(Tensor(nan) == Tensor(nan));
}

TEST(TensorAllclose, Tolerances) {
  EXPECT_TRUE(allclose(Tensor{1.0, 2.0}, Tensor{1.0 + 1e-9, 2.0}));
  EXPECT_FALSE(allclose(Tensor{1.0, 2.0}, Tensor{1.1, 2.0}));
  // Default rtol 1e-5: 100 +- 5e-4 is close, 100 +- 2e-3 is not.
  EXPECT_TRUE(allclose(Tensor{100.0}, Tensor{100.0005}));
  EXPECT_FALSE(allclose(Tensor{100.0}, Tensor{100.002}));
  // The tolerance is relative to b, as in numpy: |1 - 2| <= 0.5 * 2 but not <= 0.5 * 1.
  EXPECT_TRUE(allclose(Tensor{1.0}, Tensor{2.0}, 0.5, 0.0));
  EXPECT_FALSE(allclose(Tensor{2.0}, Tensor{1.0}, 0.5, 0.0));
  // atol alone.
  EXPECT_TRUE(allclose(Tensor{0.0}, Tensor{0.05}, 0.0, 0.1));
  EXPECT_FALSE(allclose(Tensor{0.0}, Tensor{0.2}, 0.0, 0.1));
  EXPECT_TRUE(allclose(Tensor{1.f, 2.f}, Tensor{1.f, 2.000001f}));
  EXPECT_TRUE(allclose(Tensor{1, 2}, Tensor{1, 2}));
  EXPECT_FALSE(allclose(Tensor{1, 2}, Tensor{1, 3}));
}

TEST(TensorAllclose, DtypeShapeAndNonFinite) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(allclose(Tensor{1.f}, Tensor{1.0}));
  EXPECT_FALSE(allclose(Tensor{1.0, 2.0}, Tensor{{1.0, 2.0}}));
  EXPECT_TRUE(allclose(Tensor{inf, -inf}, Tensor{inf, -inf}));
  EXPECT_FALSE(allclose(Tensor{inf}, Tensor{-inf}));
  EXPECT_FALSE(allclose(Tensor{nan}, Tensor{nan}));
  EXPECT_FALSE(allclose(Tensor{1.0}, Tensor{inf}));
}

// ---------------------------------------------------------------------------
// Printing

TEST(TensorToString, TfLayout) {
  EXPECT_EQ((Tensor{5.f, 6.f}).to_string(), "Tensor([5. 6.], shape=(2,), dtype=float32)");
  EXPECT_EQ(Tensor(11.f).to_string(), "Tensor(11.0, shape=(), dtype=float32)");
  EXPECT_EQ((Tensor{1, 2}).to_string(), "Tensor([1 2], shape=(2,), dtype=int32)");
  EXPECT_EQ((Tensor{{1, 2}, {3, 4}}).to_string(), "Tensor(\n[[1 2]\n [3 4]], shape=(2, 2), dtype=int32)");
  EXPECT_EQ((Tensor{i64{3}}).to_string(), "Tensor([3], shape=(1,), dtype=int64)");
  EXPECT_EQ((Tensor{0.5, 1.0}).to_string(), "Tensor([0.5 1. ], shape=(2,), dtype=float64)");
  EXPECT_EQ(Tensor().to_string(), "Tensor(0.0, shape=(), dtype=float32)");
  EXPECT_EQ(Tensor::zeros(DType::kFloat32, {0}).to_string(), "Tensor([], shape=(0,), dtype=float32)");
  // A one-row matrix prints on one line: no leading newline.
  EXPECT_EQ((Tensor{{5.0, 6.0}}).to_string(), "Tensor([[5. 6.]], shape=(1, 2), dtype=float64)");
  // A view prints its own elements.
  EXPECT_EQ(Iota(6, {3, 2})[2].to_string(), "Tensor([4 5], shape=(2,), dtype=int32)");
}

TEST(TensorToString, StreamMatches) {
  const Tensor t{{1, 2}, {3, 4}};
  std::ostringstream os;
  os << t;
  EXPECT_EQ(os.str(), t.to_string());
}

TEST(ShapeString, TfSpelling) {
  EXPECT_EQ(shape_string({}), "()");
  EXPECT_EQ(shape_string({2}), "(2,)");
  EXPECT_EQ(shape_string({2, 3}), "(2, 3)");
  EXPECT_EQ(shape_string({0}), "(0,)");
  EXPECT_EQ(shape_string({1, 2, 3}), "(1, 2, 3)");
}

// ---------------------------------------------------------------------------
// Thread safety (run under TSan too)

TEST(TensorThreads, ConcurrentReadsAndCopiesOfOneTensor) {
  const Tensor shared = Iota(64, {8, 8});
  const i32 want_sum = 63 * 64 / 2;
  constexpr int kThreads = 4;
  constexpr int kIters = 500;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&shared, &failures, t] {
      for (int i = 0; i < kIters; ++i) {
        const Tensor copy = shared;  // refcount traffic on the shared buffer
        const i64 row = (t + i) % 8;
        const Tensor r = copy[row];
        const Tensor s = shared.slice(row, 8).reshape({(8 - row) * 8});
        bool ok = copy.shares_buffer_with(shared) && r.shares_buffer_with(shared) &&
                  r.data<i32>()[0] == static_cast<i32>(row * 8) && shared.sum().item<i32>() == want_sum &&
                  s.num_elements() == (8 - row) * 8 && (r + 1).sum().item<i32>() == 8 * static_cast<i32>(row) * 8 + 28 + 8;
        if (i % 50 == 0) ok = ok && shared.to_string() == copy.to_string();
        if (!ok) failures.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(shared, Iota(64, {8, 8}));  // never written
}

}  // namespace
}  // namespace distribute

// --- Zero-copy wrapping of a caller's buffer (Tensor::wrap) -----------------

namespace distribute {
namespace {

TEST(TensorWrap, SharesTheCallersBufferAndKeepsTheOwnerAlive) {
  auto owner = std::make_shared<std::vector<float>>(std::vector<float>{1.f, 2.f, 3.f, 4.f, 5.f, 6.f});
  const float* data = owner->data();
  std::weak_ptr<std::vector<float>> watch = owner;
  Tensor t = Tensor::wrap(DType::kFloat32, Shape{2, 3}, data, owner);
  owner.reset();
  EXPECT_FALSE(watch.expired());  // the tensor keeps it
  EXPECT_EQ(t.data<float>().data(), data);  // no copy
  EXPECT_EQ(t, (Tensor{{1.f, 2.f, 3.f}, {4.f, 5.f, 6.f}}));
  Tensor row = t[1];
  t = Tensor();
  EXPECT_FALSE(watch.expired());  // a view keeps it too
  EXPECT_EQ(row, (Tensor{4.f, 5.f, 6.f}));
  row = Tensor();
  EXPECT_TRUE(watch.expired());  // released with the last view
}

TEST(TensorWrap, AMovedVectorIsNotCopied) {
  std::vector<double> values(1 << 20, 2.0);
  const double* data = values.data();
  const Tensor t = Tensor::wrap(std::move(values), Shape{1 << 10, 1 << 10});
  EXPECT_EQ(t.data<double>().data(), data);
  EXPECT_EQ(t.dtype(), DType::kFloat64);
  EXPECT_THROW(Tensor::wrap(std::vector<float>(5), Shape{2, 3}), InvalidArgumentError);
}

TEST(TensorWrap, BadBuffersRaise) {
  alignas(8) static const std::byte raw[16] = {};
  EXPECT_THROW(Tensor::wrap(DType::kFloat32, Shape{2}, nullptr, nullptr), InvalidArgumentError);
  EXPECT_THAT(testing::message_of<InvalidArgumentError>(
                  [] { Tensor::wrap(DType::kFloat32, Shape{2}, raw + 1, nullptr); }),
              ::testing::HasSubstr("aligned to 4 bytes"));
  EXPECT_NO_THROW(Tensor::wrap(DType::kFloat32, Shape{0}, nullptr, nullptr));
}

TEST(TensorWrap, ReadOnlyBuffersAreNeverDonatedWritableOnesAre) {
  auto ro = std::make_shared<std::vector<float>>(4, 1.f);
  const Tensor read_only = Tensor::wrap(DType::kFloat32, Shape{4}, ro->data(), ro);
  EXPECT_EQ(internal::exclusive_bytes(read_only), nullptr);
  EXPECT_EQ(internal::exclusive_bytes(read_only.reshape(Shape{2, 2})), nullptr);  // nor a view of it
  auto rw = std::make_shared<std::vector<float>>(4, 1.f);
  float* data = rw->data();
  const Tensor writable = Tensor::wrap(DType::kFloat32, Shape{4}, data, rw, /*writable=*/true);
  EXPECT_EQ(internal::exclusive_bytes(writable), nullptr);  // the caller still shares the owner
  rw.reset();
  EXPECT_EQ(internal::exclusive_bytes(writable), reinterpret_cast<std::byte*>(data));
}

// Integer arithmetic wraps in two's complement as TF's (signed overflow is
// undefined in C++); float to int conversions are
// defined for every value (NaN 0, beyond the range its nearest end).
TEST(TensorIntegers, ArithmeticWraps) {
  const i32 max32 = std::numeric_limits<i32>::max(), min32 = std::numeric_limits<i32>::min();
  EXPECT_EQ(Tensor(max32) + Tensor(i32{1}), Tensor(min32));
  EXPECT_EQ(Tensor(min32) - Tensor(i32{1}), Tensor(max32));
  EXPECT_EQ(Tensor(max32) * Tensor(i32{2}), Tensor(i32{-2}));
  EXPECT_EQ(Tensor(std::numeric_limits<i64>::max()) + Tensor(i64{1}), Tensor(std::numeric_limits<i64>::min()));
  // Integer operator/ is TF's true division: float64, so min / -1 and / 0
  // are defined (2^31, inf).
  EXPECT_EQ(Tensor(min32) / Tensor(i32{-1}), Tensor(2147483648.0));
  EXPECT_EQ(Tensor(i32{7}) / Tensor(i32{-2}), Tensor(-3.5));
  EXPECT_TRUE(std::isinf((Tensor(i32{1}) / Tensor(i32{0})).item<double>()));
}

TEST(TensorIntegers, FloatToIntConversionsAreDefinedForEveryValue) {
  const Tensor f(std::vector<float>{std::nanf(""), 1e20f, -1e20f, 2.9f, -2.9f}, Shape{5});
  EXPECT_EQ(f.cast(DType::kInt32), Tensor(std::vector<i32>{0, std::numeric_limits<i32>::max(),
                                                          std::numeric_limits<i32>::min(), 2, -2},
                                          Shape{5}));
  const Tensor d(std::vector<double>{std::nan(""), 1e300, -1e300}, Shape{3});
  EXPECT_EQ(d.cast(DType::kInt64),
            Tensor(std::vector<i64>{0, std::numeric_limits<i64>::max(), std::numeric_limits<i64>::min()}, Shape{3}));
  EXPECT_EQ(Tensor(std::nanf("")).item<i32>(), 0);
  EXPECT_EQ(Tensor(3e9).item<i32>(), std::numeric_limits<i32>::max());
}

}  // namespace
}  // namespace distribute
