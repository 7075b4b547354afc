// Tests of format_numpy against strings numpy's str() produces with default
// print options (worked out from numpy's arrayprint algorithm).
#include "core/tensor_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

namespace distribute::internal {
namespace {

template <class T>
std::string Fmt(std::vector<std::int64_t> shape, const std::vector<T>& values) {
  return format_numpy(dtype_of_v<T>, shape, values.data());
}

template <class T>
std::string Scalar(T value) {
  return format_numpy(dtype_of_v<T>, {}, &value);
}

template <class T>
std::vector<T> Arange(std::int64_t n) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<T>(i);
  return v;
}

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(TensorFormatScalar, Float32) {
  EXPECT_EQ(Scalar(11.0f), "11.0");
  EXPECT_EQ(Scalar(0.1f), "0.1");
  EXPECT_EQ(Scalar(1e20f), "1e+20");
  EXPECT_EQ(Scalar(-2.5f), "-2.5");
  EXPECT_EQ(Scalar(3.14159265f), "3.1415927");
  EXPECT_EQ(Scalar(1e16f), "1e+16");
  EXPECT_EQ(Scalar(1e15f), "1000000000000000.0");
}

TEST(TensorFormatScalar, Float64) {
  EXPECT_EQ(Scalar(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(Scalar(1.5e-5), "1.5e-05");
  EXPECT_EQ(Scalar(1e-4), "0.0001");
  EXPECT_EQ(Scalar(1e100), "1e+100");
  EXPECT_EQ(Scalar(-1.25e-300), "-1.25e-300");
  EXPECT_EQ(Scalar(123456.0), "123456.0");
  EXPECT_EQ(Scalar(0.0), "0.0");
  EXPECT_EQ(Scalar(-0.0), "-0.0");
  EXPECT_EQ(Scalar(-0.0f), "-0.0");
}

TEST(TensorFormatScalar, NonFinite) {
  EXPECT_EQ(Scalar(kNan), "nan");
  EXPECT_EQ(Scalar(-kNan), "nan");
  EXPECT_EQ(Scalar(kInf), "inf");
  EXPECT_EQ(Scalar(-kInf), "-inf");
  EXPECT_EQ(Scalar(std::numeric_limits<float>::infinity()), "inf");
}

TEST(TensorFormatScalar, Integers) {
  EXPECT_EQ(Scalar(std::int32_t{5}), "5");
  EXPECT_EQ(Scalar(std::int32_t{-7}), "-7");
  EXPECT_EQ(Scalar(std::int64_t{-9000000000}), "-9000000000");
}

TEST(TensorFormatFloat, Positional) {
  EXPECT_EQ(Fmt<float>({2}, {5, 6}), "[5. 6.]");
  EXPECT_EQ(Fmt<float>({1}, {5}), "[5.]");
  EXPECT_EQ(Fmt<float>({2}, {1.5f, 2}), "[1.5 2. ]");
  EXPECT_EQ(Fmt<float>({2}, {0.1f, 0.25f}), "[0.1  0.25]");
  EXPECT_EQ(Fmt<float>({2}, {0.1f, 0.2f}), "[0.1 0.2]");
  EXPECT_EQ(Fmt<float>({1}, {3.14159265f}), "[3.1415927]");
  EXPECT_EQ(Fmt<double>({1}, {3.141592653589793}), "[3.14159265]");
  EXPECT_EQ(Fmt<double>({2}, {-1.5, 10}), "[-1.5 10. ]");
  EXPECT_EQ(Fmt<double>({2}, {12345678.9, 1e7}), "[12345678.9 10000000. ]");
  EXPECT_EQ(Fmt<double>({3}, {0.1 * 3, 2.0 / 3, 0.5}), "[0.3        0.66666667 0.5       ]");
  std::vector<double> tenths;
  for (int i = 0; i <= 10; ++i) tenths.push_back(i / 10.0);
  tenths[3] = 0.1 * 3;  // 0.30000000000000004 prints as 0.3 at 8 digits
  EXPECT_EQ(Fmt<double>({11}, tenths), "[0.  0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9 1. ]");
}

TEST(TensorFormatFloat, NegativeZero) {
  EXPECT_EQ(Fmt<double>({2}, {-0.0, 1.0}), "[-0.  1.]");
  EXPECT_EQ(Fmt<float>({1}, {-0.0f}), "[-0.]");
  EXPECT_EQ(Fmt<double>({2}, {0.0, 0.0}), "[0. 0.]");
}

TEST(TensorFormatFloat, ExponentFormat) {
  EXPECT_EQ(Fmt<double>({2}, {1, 1e4}), "[1.e+00 1.e+04]");
  EXPECT_EQ(Fmt<double>({2}, {1e-5, 1}), "[1.e-05 1.e+00]");
  EXPECT_EQ(Fmt<double>({2}, {1.5e-5, 1e4}), "[1.5e-05 1.0e+04]");
  EXPECT_EQ(Fmt<double>({1}, {1e8}), "[1.e+08]");
  EXPECT_EQ(Fmt<float>({2}, {1e10f, 1}), "[1.e+10 1.e+00]");
  EXPECT_EQ(Fmt<double>({2}, {0, 1e-5}), "[0.e+00 1.e-05]");
  EXPECT_EQ(Fmt<double>({2}, {-1e-5, 1}), "[-1.e-05  1.e+00]");
  EXPECT_EQ(Fmt<double>({2}, {1e100, 1e-100}), "[1.e+100 1.e-100]");
  EXPECT_EQ(Fmt<double>({2}, {1.0 / 3, 1e-5}), "[3.33333333e-01 1.00000000e-05]");
}

TEST(TensorFormatFloat, NanInf) {
  EXPECT_EQ(Fmt<double>({3}, {1, kNan, kInf}), "[ 1. nan inf]");
  EXPECT_EQ(Fmt<double>({3}, {1.5, kNan, -kInf}), "[ 1.5  nan -inf]");
  EXPECT_EQ(Fmt<double>({2}, {kNan, kNan}), "[nan nan]");
  EXPECT_EQ(Fmt<double>({2}, {kNan, -kInf}), "[ nan -inf]");
  EXPECT_EQ(Fmt<double>({2}, {kNan, 1e-5}), "[   nan 1.e-05]");
  EXPECT_EQ(Fmt<float>({3}, {100.5f, std::numeric_limits<float>::quiet_NaN(), 2}),
            "[100.5   nan   2. ]");
}

TEST(TensorFormatInt, OneDim) {
  EXPECT_EQ(Fmt<std::int32_t>({2}, {1, 2}), "[1 2]");
  EXPECT_EQ(Fmt<std::int32_t>({2}, {1, 10}), "[ 1 10]");
  EXPECT_EQ(Fmt<std::int32_t>({2}, {-1, 2}), "[-1  2]");
  EXPECT_EQ(Fmt<std::int32_t>({3}, {-10, 5, 0}), "[-10   5   0]");
  EXPECT_EQ(Fmt<std::int32_t>({1}, {7}), "[7]");
}

TEST(TensorFormatInt, Int64) {
  EXPECT_EQ(Fmt<std::int64_t>({2}, {1, -9000000000}), "[          1 -9000000000]");
  EXPECT_EQ(Fmt<std::int64_t>({3}, {3, 4, 5}), "[3 4 5]");
}

TEST(TensorFormatMultiDim, TwoDim) {
  EXPECT_EQ(Fmt<std::int32_t>({2, 2}, {1, 2, 3, 4}), "[[1 2]\n [3 4]]");
  EXPECT_EQ(Fmt<std::int32_t>({2, 3}, {1, -2, 3, 40, 5, 6}), "[[ 1 -2  3]\n [40  5  6]]");
  EXPECT_EQ(Fmt<float>({2, 2}, {1.5f, 2, 3, 4.25f}), "[[1.5  2.  ]\n [3.   4.25]]");
  EXPECT_EQ(Fmt<double>({1, 2}, {5, 6}), "[[5. 6.]]");
  EXPECT_EQ(Fmt<double>({2, 1}, {5, 6}), "[[5.]\n [6.]]");
}

TEST(TensorFormatMultiDim, ThreeDim) {
  EXPECT_EQ(Fmt<std::int32_t>({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}),
            "[[[1 2]\n  [3 4]]\n\n [[5 6]\n  [7 8]]]");
  EXPECT_EQ(Fmt<double>({1, 1, 2}, {0.5, 1}), "[[[0.5 1. ]]]");
}

TEST(TensorFormatEmpty, AnyZeroDim) {
  EXPECT_EQ(Fmt<float>({0}, {}), "[]");
  EXPECT_EQ(Fmt<std::int32_t>({2, 0}, {}), "[]");
  EXPECT_EQ(Fmt<double>({0, 3, 4}, {}), "[]");
}

TEST(TensorFormatWrap, LongRows) {
  EXPECT_EQ(Fmt<double>({20}, Arange<double>(20)),
            "[ 0.  1.  2.  3.  4.  5.  6.  7.  8.  9. 10. 11. 12. 13. 14. 15. 16. 17.\n"
            " 18. 19.]");
  EXPECT_EQ(Fmt<std::int32_t>({30}, Arange<std::int32_t>(30)),
            "[ 0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16 17 18 19 20 21 22 23\n"
            " 24 25 26 27 28 29]");
  EXPECT_EQ(Fmt<std::int32_t>({2, 30}, Arange<std::int32_t>(60)),
            "[[ 0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16 17 18 19 20 21 22 23\n"
            "  24 25 26 27 28 29]\n"
            " [30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53\n"
            "  54 55 56 57 58 59]]");
}

TEST(TensorFormatSummary, OneDim) {
  EXPECT_EQ(Fmt<std::int32_t>({2000}, Arange<std::int32_t>(2000)),
            "[   0    1    2 ... 1997 1998 1999]");
  EXPECT_EQ(Fmt<double>({2000}, Arange<double>(2000)),
            "[0.000e+00 1.000e+00 2.000e+00 ... 1.997e+03 1.998e+03 1.999e+03]");
  // Exactly at the threshold nothing is summarized: 1000 elements print in full.
  const std::string full = Fmt<std::int32_t>({1000}, Arange<std::int32_t>(1000));
  EXPECT_EQ(full.find("..."), std::string::npos);
  EXPECT_EQ(full.substr(0, 8), "[  0   1");
  EXPECT_EQ(full.substr(full.size() - 9), " 998 999]");
}

TEST(TensorFormatSummary, FormatterUsesEdgeItemsOnly) {
  // The middle element 1e9 is not shown, so it does not force exponent format.
  std::vector<double> v = Arange<double>(1001);
  for (double& x : v) x = 1;
  v[500] = 1e9;
  EXPECT_EQ(Fmt<double>({1001}, v), "[1. 1. 1. ... 1. 1. 1.]");
}

TEST(TensorFormatSummary, TwoDim) {
  EXPECT_EQ(Fmt<std::int64_t>({40, 50}, Arange<std::int64_t>(2000)),
            "[[   0    1    2 ...   47   48   49]\n"
            " [  50   51   52 ...   97   98   99]\n"
            " [ 100  101  102 ...  147  148  149]\n"
            " ...\n"
            " [1850 1851 1852 ... 1897 1898 1899]\n"
            " [1900 1901 1902 ... 1947 1948 1949]\n"
            " [1950 1951 1952 ... 1997 1998 1999]]");
}

TEST(TensorFormatSummary, ThreeDim) {
  // Only the first axis is long; the row blocks are separated by blank lines.
  EXPECT_EQ(Fmt<std::int32_t>({501, 1, 2}, Arange<std::int32_t>(1002)),
            "[[[   0    1]]\n\n [[   2    3]]\n\n [[   4    5]]\n\n ...\n\n"
            " [[ 996  997]]\n\n [[ 998  999]]\n\n [[1000 1001]]]");
}

}  // namespace
}  // namespace distribute::internal
