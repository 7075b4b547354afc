// Reimplementation of numpy's default str() for scalars and ndarrays
// (numpy's arrayprint.py and scalar str, default options, non-legacy mode).
//
// Scalars: integers print in plain decimal. Floats print "nan"/"inf"/"-inf"
// when not finite; else, when x == 0 or 1e-4 <= |x| < 1e16, positionally with
// the shortest round-trip digits of their own type, keeping one zero after the
// point ("11.0", "-0.0"); otherwise in scientific notation with the shortest
// digits, no bare point and an exponent of >= 2 digits ("1e+20", "1.5e-05").
//
// Arrays: no elements -> "[]". Over `threshold` (1000) elements the array is
// summarized: each axis longer than 2*edgeitems shows its first and last
// `edgeitems` (3) entries around "...". One element formatter is sized from
// the elements actually shown, so all elements have the same width:
//   - integers are right-aligned to the wider of str(max) and str(min);
//   - floats use the finite values and switch to exponent format when the
//     largest non-zero |x| >= 1e8, the smallest non-zero |x| < 1e-4, or their
//     ratio > 1000. Digits are the shortest round-trip ones, cut to at most 8
//     after the point (rounding the exact binary value), trailing zeros
//     dropped ("2." keeps its point). Positional: integer parts left-padded
//     and fractions right-padded with spaces to the widest. Exponent:
//     fractions zero-padded to the longest, exponents zero-padded to the
//     widest. nan/inf are right-aligned to the element width, which grows
//     if "nan", "inf" or "-inf" would not fit.
// Layout is recursive: the innermost axis is words joined by ' ', wrapped when
// a line would pass the width (75, less one column per nesting level and one
// for the closing ']'), except that a line holding only its indent is never
// wrapped; continuation lines are indented one space per level. Outer axes put
// each sub-array on its own line, separated by (remaining axes - 1) newlines.
#include "core/tensor_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <string_view>
#include <type_traits>
#include <vector>

namespace distribute::internal {
namespace {

constexpr int kPrecision = 8;               // max digits after the point
constexpr std::int64_t kThreshold = 1000;   // summarize above this many elements
constexpr std::int64_t kEdgeItems = 3;      // items kept at each end when summarizing
constexpr std::int64_t kLineWidth = 75;

// A float split into sign, significant digits and decimal exponent:
// value = digits[0] . digits[1..] x 10^exponent.
struct Decimal {
  bool negative = false;
  std::string digits;
  int exponent = 0;
};

// Scientific digits of x: shortest round-trip ones (precision < 0) or the
// exact value rounded to `precision` digits after the first one.
template <class T>
Decimal to_decimal(T x, int precision) {
  char buf[64];
  const std::to_chars_result r =
      precision < 0 ? std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific)
                    : std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific,
                                    precision);
  const std::string_view s(buf, static_cast<std::size_t>(r.ptr - buf));
  Decimal d;
  std::size_t i = 0;
  if (s[i] == '-') {
    d.negative = true;
    ++i;
  }
  for (; s[i] != 'e'; ++i) {
    if (s[i] != '.') d.digits += s[i];
  }
  ++i;  // 'e'
  const bool negative_exponent = s[i] == '-';
  ++i;  // exponent sign
  for (; i < s.size(); ++i) d.exponent = d.exponent * 10 + (s[i] - '0');
  if (negative_exponent) d.exponent = -d.exponent;
  return d;
}

// Text pieces of one formatted float: "int_part.frac" or "int_part.frac e exponent".
// int_part carries the '-' sign; frac never has trailing zeros.
struct Pieces {
  std::string int_part;
  std::string frac;
  int exponent = 0;
};

void trim_zeros(std::string& frac) {
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
}

// Positional form of x with shortest digits; if they need more than `cap`
// (>= 0) fractional digits, the exact value rounded to `cap` digits instead.
template <class T>
Pieces positional(T x, int cap) {
  const Decimal d = to_decimal(x, -1);
  Pieces p;
  const std::size_t n = d.digits.size();
  if (d.exponent >= 0) {
    const std::size_t int_len = static_cast<std::size_t>(d.exponent) + 1;
    p.int_part = d.digits.substr(0, std::min(n, int_len));
    p.int_part.resize(int_len, '0');
    if (n > int_len) p.frac = d.digits.substr(int_len);
  } else {
    p.int_part = "0";
    p.frac = std::string(static_cast<std::size_t>(-d.exponent - 1), '0') + d.digits;
  }
  if (d.negative) p.int_part.insert(0, 1, '-');
  if (cap >= 0 && p.frac.size() > static_cast<std::size_t>(cap)) {
    // Only reached for |x| < 1e17 (larger values have no fraction digits).
    char buf[64];
    const std::to_chars_result r =
        std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed, cap);
    const std::string_view s(buf, static_cast<std::size_t>(r.ptr - buf));
    const std::size_t dot = s.find('.');
    p.int_part = std::string(s.substr(0, dot));
    p.frac = dot == std::string_view::npos ? std::string() : std::string(s.substr(dot + 1));
  }
  trim_zeros(p.frac);
  return p;
}

// Scientific form of x with shortest digits, rounded to at most `cap` (>= 0)
// digits after the point.
template <class T>
Pieces scientific(T x, int cap) {
  Decimal d = to_decimal(x, -1);
  if (cap >= 0 && d.digits.size() - 1 > static_cast<std::size_t>(cap)) d = to_decimal(x, cap);
  Pieces p;
  p.int_part = std::string(d.negative ? "-" : "") + d.digits[0];
  p.frac = d.digits.substr(1);
  trim_zeros(p.frac);
  p.exponent = d.exponent;
  return p;
}

std::size_t exponent_digits(int exponent) {
  return std::to_string(exponent < 0 ? -exponent : exponent).size();
}

// "e+05": sign and at least max(2, min_digits) digits.
std::string exponent_text(int exponent, std::size_t min_digits) {
  std::string digits = std::to_string(exponent < 0 ? -exponent : exponent);
  const std::size_t width = std::max<std::size_t>(2, min_digits);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return std::string(exponent < 0 ? "e-" : "e+") + digits;
}

std::string pad_left(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

// numpy scalar str() of a float.
template <class T>
std::string scalar_str(T x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  const long double a = std::fabs(static_cast<long double>(x));
  if (x == 0 || (1e-4L <= a && a < 1e16L)) {
    const Pieces p = positional(x, -1);
    return p.int_part + "." + (p.frac.empty() ? "0" : p.frac);
  }
  const Pieces p = scientific(x, -1);
  return p.int_part + (p.frac.empty() ? "" : "." + p.frac) + exponent_text(p.exponent, 2);
}

// Element formatter of a float array, sized from the elements to be shown.
template <class T>
class FloatFormatter {
 public:
  explicit FloatFormatter(const std::vector<T>& values) {
    std::vector<T> finite;
    for (T x : values) {
      if (std::isfinite(x)) finite.push_back(x);
    }
    T max_abs = 0;
    T min_abs = std::numeric_limits<T>::infinity();
    for (T x : finite) {
      if (x == 0) continue;
      max_abs = std::max(max_abs, std::fabs(x));
      min_abs = std::min(min_abs, std::fabs(x));
    }
    if (max_abs > 0) {
      // The ratio is computed in T, as numpy does (overflow gives inf).
      exp_format_ = static_cast<double>(max_abs) >= 1e8 ||
                    static_cast<double>(min_abs) < 1e-4 || max_abs / min_abs > T(1000);
    }
    if (exp_format_) {
      precision_ = 0;
      for (T x : finite) {
        const Pieces p = scientific(x, kPrecision);
        pad_left_ = std::max(pad_left_, p.int_part.size());
        precision_ = std::max(precision_, p.frac.size());
        exp_size_ = std::max(exp_size_, exponent_digits(p.exponent));
      }
      pad_right_ = finite.empty() ? 0 : exp_size_ + 2 + precision_;
    } else {
      for (T x : finite) {
        const Pieces p = positional(x, kPrecision);
        pad_left_ = std::max(pad_left_, p.int_part.size());
        pad_right_ = std::max(pad_right_, p.frac.size());
      }
    }
    if (finite.size() != values.size()) {
      // Make room for "nan", "inf" and "-inf" (right-aligned to the element).
      bool neg_inf = false;
      for (T x : values) neg_inf = neg_inf || (std::isinf(x) && x < 0);
      const std::size_t needed = neg_inf ? 4 : 3;
      const std::size_t offset = pad_right_ + 1;  // fraction and point
      if (needed > offset) pad_left_ = std::max(pad_left_, needed - offset);
    }
  }

  std::string operator()(T x) const {
    if (!std::isfinite(x)) {
      const char* text = std::isnan(x) ? "nan" : (x < 0 ? "-inf" : "inf");
      return pad_left(text, pad_left_ + pad_right_ + 1);
    }
    if (exp_format_) {
      Pieces p = scientific(x, static_cast<int>(precision_));
      p.frac.resize(precision_, '0');
      return pad_left(p.int_part, pad_left_) + "." + p.frac + exponent_text(p.exponent, exp_size_);
    }
    const Pieces p = positional(x, kPrecision);
    return pad_left(p.int_part, pad_left_) + "." + p.frac +
           std::string(pad_right_ - p.frac.size(), ' ');
  }

 private:
  bool exp_format_ = false;
  std::size_t pad_left_ = 0;
  std::size_t pad_right_ = 0;
  std::size_t precision_ = kPrecision;  // fraction digits in exponent format
  std::size_t exp_size_ = 2;            // exponent digits in exponent format
};

// Element formatter of an integer array: right-aligned to the widest extreme.
template <class T>
class IntFormatter {
 public:
  explicit IntFormatter(const std::vector<T>& values) {
    const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
    width_ = std::max(std::to_string(*lo).size(), std::to_string(*hi).size());
  }
  std::string operator()(T x) const { return pad_left(std::to_string(x), width_); }

 private:
  std::size_t width_ = 0;
};

// Walks the array in numpy's _formatArray order and produces the text.
class ArrayPrinter {
 public:
  ArrayPrinter(std::span<const std::int64_t> shape, bool summarize)
      : shape_(shape), strides_(shape.size(), 1), summarize_(summarize) {
    for (std::size_t axis = shape.size() - 1; axis > 0; --axis) {
      strides_[axis - 1] = strides_[axis] * shape[axis];
    }
  }

  // Flat offsets of the elements that will be printed, in print order.
  std::vector<std::int64_t> shown_offsets() const {
    std::vector<std::int64_t> out;
    collect(0, 0, out);
    return out;
  }

  std::string print(const std::function<std::string(std::int64_t)>& format) const {
    return recurse(format, 0, 0, " ", kLineWidth);
  }

 private:
  // Indices along an axis; -1 stands for the "..." marker.
  std::vector<std::int64_t> indices(std::size_t axis) const {
    const std::int64_t n = shape_[axis];
    std::vector<std::int64_t> idx;
    if (summarize_ && n > 2 * kEdgeItems) {
      for (std::int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
      idx.push_back(-1);
      for (std::int64_t i = n - kEdgeItems; i < n; ++i) idx.push_back(i);
    } else {
      for (std::int64_t i = 0; i < n; ++i) idx.push_back(i);
    }
    return idx;
  }

  void collect(std::size_t axis, std::int64_t offset, std::vector<std::int64_t>& out) const {
    if (axis == shape_.size()) {
      out.push_back(offset);
      return;
    }
    for (std::int64_t i : indices(axis)) {
      if (i >= 0) collect(axis + 1, offset + i * strides_[axis], out);
    }
  }

  // Appends `word` to `line`, first moving `line` into `s` and starting a new
  // line with `indent` when the word would pass `width`, unless the line holds
  // nothing but its indent (wrapping would not help).
  static void extend_line(std::string& s, std::string& line, const std::string& word,
                          std::int64_t width, const std::string& indent) {
    const bool too_long = static_cast<std::int64_t>(line.size() + word.size()) > width;
    if (too_long && line.size() > indent.size()) {
      while (!line.empty() && line.back() == ' ') line.pop_back();
      s += line;
      s += '\n';
      line = indent;
    }
    line += word;
  }

  // Text of the sub-array at `axis` starting at `offset`. The text is built
  // with `indent` in front of the first line too; that indent is replaced by
  // '[' at the end. `width` is the room left on a line at this depth.
  std::string recurse(const std::function<std::string(std::int64_t)>& format, std::size_t axis,
                      std::int64_t offset, const std::string& indent, std::int64_t width) const {
    if (axis == shape_.size()) return format(offset);
    const std::string next_indent = indent + ' ';
    const std::int64_t next_width = width - 1;  // room for this level's ']'
    const std::vector<std::int64_t> idx = indices(axis);
    auto item = [&](std::size_t k) {
      return idx[k] < 0 ? std::string("...")
                        : recurse(format, axis + 1, offset + idx[k] * strides_[axis],
                                  next_indent, next_width);
    };
    std::string s;
    if (axis + 1 == shape_.size()) {
      // Innermost axis: words on wrapped lines, keeping a column for ']'.
      std::string line = indent;
      for (std::size_t k = 0; k < idx.size(); ++k) {
        extend_line(s, line, item(k), width - 1, indent);
        if (k + 1 < idx.size()) line += ' ';
      }
      s += line;
    } else {
      // Outer axes: one sub-array per line, blank lines between deeper blocks.
      const std::string separator(shape_.size() - axis - 1, '\n');
      for (std::size_t k = 0; k < idx.size(); ++k) {
        s += indent + item(k);
        if (k + 1 < idx.size()) s += separator;
      }
    }
    return "[" + s.substr(indent.size()) + "]";
  }

  std::span<const std::int64_t> shape_;
  std::vector<std::int64_t> strides_;
  bool summarize_;
};

template <class T>
std::string format_array(std::span<const std::int64_t> shape, const T* values, bool summarize) {
  const ArrayPrinter printer(shape, summarize);
  std::vector<T> shown;
  for (std::int64_t off : printer.shown_offsets()) shown.push_back(values[off]);
  if constexpr (std::is_floating_point_v<T>) {
    const FloatFormatter<T> fmt(shown);
    return printer.print([&](std::int64_t off) { return fmt(values[off]); });
  } else {
    const IntFormatter<T> fmt(shown);
    return printer.print([&](std::int64_t off) { return fmt(values[off]); });
  }
}

template <class T>
std::string format_typed(std::span<const std::int64_t> shape, const void* data) {
  const T* values = static_cast<const T*>(data);
  if (shape.empty()) {
    if constexpr (std::is_floating_point_v<T>) {
      return scalar_str(values[0]);
    } else {
      return std::to_string(values[0]);
    }
  }
  std::int64_t size = 1;
  for (std::int64_t dim : shape) {
    if (dim <= 0) return "[]";
    size *= dim;
  }
  return format_array(shape, values, size > kThreshold);
}

// Python's repr() of a bytes object: b'...' (b"..." when the bytes hold a '
// and no "), with \\, \t, \n, \r and the quote escaped and other bytes
// outside printable ASCII as \xhh.
std::string bytes_repr(const std::string& bytes) {
  const bool double_quote = bytes.find('\'') != std::string::npos && bytes.find('"') == std::string::npos;
  const char quote = double_quote ? '"' : '\'';
  std::string out = "b";
  out += quote;
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\' || c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += ch;
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c >= 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  out += quote;
  return out;
}

// numpy's str() of an array of bytes objects: each element's repr, unpadded.
std::string format_strings(std::span<const std::int64_t> shape, const std::string* values) {
  if (shape.empty()) return bytes_repr(values[0]);
  std::int64_t size = 1;
  for (std::int64_t dim : shape) {
    if (dim <= 0) return "[]";
    size *= dim;
  }
  const ArrayPrinter printer(shape, size > kThreshold);
  return printer.print([&](std::int64_t off) { return bytes_repr(values[off]); });
}

}  // namespace

std::string format_numpy(DType dtype, std::span<const std::int64_t> shape, const void* data) {
  switch (dtype) {
    case DType::kFloat32:
      return format_typed<float>(shape, data);
    case DType::kFloat64:
      return format_typed<double>(shape, data);
    case DType::kInt32:
      return format_typed<std::int32_t>(shape, data);
    case DType::kInt64:
      return format_typed<std::int64_t>(shape, data);
    case DType::kString:
      return format_strings(shape, static_cast<const std::string*>(data));
  }
  return {};
}

}  // namespace distribute::internal
