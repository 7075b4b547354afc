// String tensors (DType::kString): construction, views, joins, equality,
// printing as TF prints them, and clear errors where numbers are needed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

using ::testing::HasSubstr;

Tensor words() { return Tensor(std::vector<std::string>{"alpha", "", "b\nc", "d'e"}, {2, 2}); }

TEST(StringTensorTest, HoldsTheStringsInRowMajorOrder) {
  const Tensor t = words();
  EXPECT_EQ(t.dtype(), DType::kString);
  EXPECT_EQ(t.shape(), (Shape{2, 2}));
  EXPECT_EQ(dtype_name(t.dtype()), "string");
  ASSERT_EQ(t.strings().size(), 4u);
  EXPECT_EQ(t.strings()[0], "alpha");
  EXPECT_EQ(t.strings()[1], "");
  EXPECT_EQ(t.strings()[3], "d'e");
  const Tensor scalar(std::string("hi\0there", 8));
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.strings()[0].size(), 8u);  // embedded NUL bytes are kept
}

TEST(StringTensorTest, ViewsShareTheBufferAndOutliveTheOriginal) {
  Tensor row;
  {
    const Tensor t = words();
    row = t[1];
    EXPECT_TRUE(row.shares_buffer_with(t));
  }
  EXPECT_EQ(row, Tensor(std::vector<std::string>{"b\nc", "d'e"}, {2}));
  EXPECT_EQ(words().reshape({4}).slice(1, 3), Tensor(std::vector<std::string>{"", "b\nc"}, {2}));
}

TEST(StringTensorTest, ConcatAndStackCopyTheStrings) {
  const Tensor a(std::vector<std::string>{"x", "yy"}, {2});
  const Tensor b(std::vector<std::string>{std::string(100, 'z')}, {1});
  const Tensor joined = concat({a, b});
  EXPECT_FALSE(joined.shares_buffer_with(a));
  EXPECT_EQ(joined, Tensor(std::vector<std::string>{"x", "yy", std::string(100, 'z')}, {3}));
  const Tensor stacked = stack({Tensor(std::string("p")), Tensor(std::string("q"))});
  EXPECT_EQ(stacked, Tensor(std::vector<std::string>{"p", "q"}, {2}));
  // Adjacent rows of one buffer join as a view, as for numbers.
  const Tensor t = words().reshape({4});
  EXPECT_TRUE(concat({t.slice(0, 1), t.slice(1, 3)}).shares_buffer_with(t));
}

TEST(StringTensorTest, EqualityComparesEveryByte) {
  EXPECT_EQ(words(), words());
  EXPECT_FALSE(Tensor(std::string("a")) == Tensor(std::string("b")));
  EXPECT_FALSE(Tensor(std::string("a")) == Tensor(std::string("a\0", 2)));
  EXPECT_FALSE(Tensor(std::string("1")) == Tensor(1));
  EXPECT_TRUE(allclose(words(), words()));
  EXPECT_EQ(Tensor::zeros(DType::kString, {2}), Tensor(std::vector<std::string>{"", ""}, {2}));
}

TEST(StringTensorTest, PrintsAsTfPrintsBytes) {
  // tf.constant(b"hello") and tf.constant([[b"alpha", b""], [b"b\nc", b"d'e"]]).
  EXPECT_EQ(Tensor(std::string("hello")).to_string(), "Tensor(b'hello', shape=(), dtype=string)");
  EXPECT_EQ(words().to_string(), "Tensor(\n[[b'alpha' b'']\n [b'b\\nc' b\"d'e\"]], shape=(2, 2), dtype=string)");
  EXPECT_EQ(Tensor(std::string("\x00\xff\t\\'\"", 6)).to_string(),
            "Tensor(b'\\x00\\xff\\t\\\\\\'\"', shape=(), dtype=string)");
  EXPECT_EQ(Tensor(std::vector<std::string>{}, {0}).to_string(), "Tensor([], shape=(0,), dtype=string)");
}

TEST(StringTensorTest, NumberOperationsRaiseNamingTheDtype) {
  const Tensor s(std::string("a"));
  auto expect_invalid = [](auto&& f, const char* what) {
    try {
      f();
      ADD_FAILURE() << what << " did not throw";
    } catch (const InvalidArgumentError& e) {
      EXPECT_THAT(e.what(), HasSubstr("string")) << what;
    }
  };
  expect_invalid([&] { (void)(s + s); }, "operator+");
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([&] { (void)(s * 2); }),
              HasSubstr("arithmetic with a number: expected a tensor of a number dtype"));
  expect_invalid([&] { (void)s.sum(); }, "sum");
  expect_invalid([&] { (void)s.mean(); }, "mean");
  expect_invalid([&] { (void)s.cast(DType::kFloat32); }, "cast");
  expect_invalid([&] { (void)Tensor(1.f).cast(DType::kString); }, "cast to string");
  expect_invalid([&] { (void)s.item<float>(); }, "item");
  expect_invalid([&] { (void)s.data<float>(); }, "data");
  expect_invalid([&] { (void)Tensor(1.f).strings(); }, "strings");
  expect_invalid([&] { (void)Tensor::wrap(DType::kString, {1}, &s, nullptr); }, "wrap");
  expect_invalid([&] { (void)Variable(s); }, "Variable");
}

TEST(StringTensorTest, ShapeMustMatchTheValues) {
  EXPECT_THROW(Tensor(std::vector<std::string>{"a", "b"}, {3}), InvalidArgumentError);
  EXPECT_THROW(Tensor(std::vector<std::string>{"a"}, {-1}), InvalidArgumentError);
}

}  // namespace
}  // namespace distribute
