// TF's tf.io.parse_example over the message definitions of example.proto.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/describe.h"
#include "data/example.pb.h"
#include "distribute/errors.h"
#include "distribute/parsing.h"

namespace distribute {
namespace {

const char* list_type(proto::Feature::KindCase kind) {
  switch (kind) {
    case proto::Feature::kBytesList: return "bytes";
    case proto::Feature::kFloatList: return "float";
    case proto::Feature::kInt64List: return "int64";
    case proto::Feature::KIND_NOT_SET: break;
  }
  return "no";
}

proto::Feature::KindCase kind_for(DType dtype) {
  if (dtype == DType::kInt64) return proto::Feature::kInt64List;
  if (dtype == DType::kFloat32) return proto::Feature::kFloatList;
  return proto::Feature::kBytesList;
}

std::string quoted(const std::string& name) { return "'" + name + "'"; }

// The element count of one example's values; InvalidArgumentError for a
// bad spec.
std::int64_t check_spec(const std::string& name, const FixedLenFeature& f) {
  if (f.dtype != DType::kInt64 && f.dtype != DType::kFloat32 && f.dtype != DType::kString) {
    throw InvalidArgumentError("parse_example: feature " + quoted(name) +
                               ": expected dtype int64, float32 or string, got " + std::string(dtype_name(f.dtype)));
  }
  std::int64_t count = 1;
  for (std::int64_t d : f.shape) {
    if (d < 0) {
      throw InvalidArgumentError("parse_example: feature " + quoted(name) +
                                 ": expected a fully defined shape, got " + shape_string(f.shape));
    }
    count *= d;
  }
  if (f.default_value.has_value()) {
    const Tensor& v = *f.default_value;
    if (v.dtype() != f.dtype || v.num_elements() != count) {
      throw InvalidArgumentError("parse_example: feature " + quoted(name) + ": expected a default_value of " +
                                 std::to_string(count) + " " + std::string(dtype_name(f.dtype)) +
                                 " value(s) for shape " + shape_string(f.shape) + ", got " + internal::describe(v));
    }
  }
  return count;
}

// One feature's output: example i's values go to elements [i * count, (i + 1) * count).
class Column {
 public:
  Column(const std::string& name, const FixedLenFeature& spec, const Shape& batch_shape)
      : name_(name), spec_(spec), count_(check_spec(name, spec)) {
    Shape shape = batch_shape;
    for (std::int64_t d : spec.shape) shape.push_back(d);
    void* data = nullptr;
    result_ = internal::allocate_tensor(spec.dtype, std::move(shape), &data);
    data_ = data;
  }

  // Example `where`'s feature (nullptr: the example does not have it).
  void fill(std::int64_t i, const std::string& where, const proto::Feature* feature) {
    if (feature == nullptr || feature->kind_case() == proto::Feature::KIND_NOT_SET) {
      if (!spec_.default_value.has_value()) {
        throw InvalidArgumentError("parse_example: " + where + ": feature " + quoted(name_) + " (data type: " +
                                   std::string(dtype_name(spec_.dtype)) +
                                   ") is required but could not be found (no default_value given)");
      }
      copy_default(i);
      return;
    }
    if (feature->kind_case() != kind_for(spec_.dtype)) {
      throw InvalidArgumentError("parse_example: " + where + ": feature " + quoted(name_) + " holds " +
                                 list_type(feature->kind_case()) + " values, expected " +
                                 list_type(kind_for(spec_.dtype)) + " for dtype " +
                                 std::string(dtype_name(spec_.dtype)));
    }
    switch (spec_.dtype) {
      case DType::kInt64: copy(i, where, feature->int64_list().value(), static_cast<std::int64_t*>(data_)); break;
      case DType::kFloat32: copy(i, where, feature->float_list().value(), static_cast<float*>(data_)); break;
      default: copy(i, where, feature->bytes_list().value(), static_cast<std::string*>(data_)); break;
    }
  }

  Tensor result() && { return std::move(result_); }

 private:
  template <class Values, class T>
  void copy(std::int64_t i, const std::string& where, const Values& values, T* out) {
    if (values.size() != count_) {
      throw InvalidArgumentError("parse_example: " + where + ": feature " + quoted(name_) + " has " +
                                 std::to_string(values.size()) + " " + list_type(kind_for(spec_.dtype)) +
                                 " value(s), expected " + std::to_string(count_) + " for shape " +
                                 shape_string(spec_.shape));
    }
    std::copy(values.begin(), values.end(), out + i * count_);
  }

  void copy_default(std::int64_t i) {
    const Tensor& v = *spec_.default_value;
    switch (spec_.dtype) {
      case DType::kInt64: std::ranges::copy(v.data<std::int64_t>(), static_cast<std::int64_t*>(data_) + i * count_); break;
      case DType::kFloat32: std::ranges::copy(v.data<float>(), static_cast<float*>(data_) + i * count_); break;
      default: std::ranges::copy(v.strings(), static_cast<std::string*>(data_) + i * count_); break;
    }
  }

  const std::string& name_;
  const FixedLenFeature& spec_;
  std::int64_t count_;
  Tensor result_;
  void* data_ = nullptr;
};

}  // namespace

std::map<std::string, Tensor> parse_example(const Tensor& serialized, const FeatureSpec& features) {
  if (serialized.dtype() != DType::kString || serialized.rank() > 1) {
    throw InvalidArgumentError("parse_example: expected serialized records as a string scalar or vector, got " +
                               internal::describe(serialized));
  }
  std::vector<Column> columns;
  columns.reserve(features.size());
  for (const auto& [name, spec] : features) columns.emplace_back(name, spec, serialized.shape());
  const auto records = serialized.strings();
  proto::Example example;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const std::string where = serialized.rank() == 0 ? "the example" : "example " + std::to_string(i);
    if (!example.ParseFromString(records[i])) {
      throw InvalidArgumentError("parse_example: " + where + ": cannot parse a tf.train.Example from " +
                                 std::to_string(records[i].size()) + " bytes");
    }
    const auto& by_name = example.features().feature();
    std::size_t c = 0;
    for (const auto& [name, spec] : features) {
      const auto it = by_name.find(name);
      columns[c++].fill(static_cast<std::int64_t>(i), where, it == by_name.end() ? nullptr : &it->second);
    }
  }
  std::map<std::string, Tensor> out;
  std::size_t c = 0;
  for (const auto& entry : features) out.emplace(entry.first, std::move(columns[c++]).result());
  return out;
}

std::map<std::string, Tensor> parse_single_example(const Tensor& serialized, const FeatureSpec& features) {
  if (serialized.dtype() != DType::kString || serialized.rank() != 0) {
    throw InvalidArgumentError("parse_single_example: expected one serialized record (a string scalar), got " +
                               internal::describe(serialized));
  }
  return parse_example(serialized, features);
}

}  // namespace distribute
