// Parsing tf.train.Example records (TF's tf.io.parse_example): the records
// of a TFRecordDataset into tensors.
//
//   const FeatureSpec spec{{"x", {{2}, DType::kFloat32}}, {"label", {{}, DType::kInt64}}};
//   Dataset parsed = TFRecordDataset({"train.tfrecord"}).batch(32).map([&](const Element& records) {
//     std::map<std::string, Tensor> f = parse_example(records.tensor(), spec);
//     return Element({f.at("x"), f.at("label")});
//   });
#pragma once

#include <map>
#include <optional>
#include <string>

#include "distribute/tensor.h"

namespace distribute {

// TF's tf.io.FixedLenFeature: a feature with the same number of values in
// every example.
struct FixedLenFeature {
  // The shape of one example's values (their count is its element count).
  Shape shape;
  // kInt64 (an Int64List), kFloat32 (a FloatList) or kString (a BytesList).
  DType dtype = DType::kFloat32;
  // Used for an example without the feature (or with it but no list); of
  // `dtype` with shape's element count of values (any shape). Without it
  // the feature is required.
  std::optional<Tensor> default_value;
};

// Feature name -> how to parse it (TF's `features` dict).
using FeatureSpec = std::map<std::string, FixedLenFeature>;

// TF's tf.io.parse_example. `serialized`: a string vector of B serialized
// tf.train.Example messages (or a string scalar: one example, as TF). Returns
// one tensor per feature of `features`, of shape serialized.shape() +
// feature.shape; features of the examples not in `features` are ignored.
// InvalidArgumentError, naming the example's index and the feature, for a
// record that is not an Example, a required feature that is missing, a
// feature of another type, or a value count other than the shape's; and
// for a bad spec (dtype other than the three, a default value of another
// dtype or count) or `serialized` not a string scalar or vector.
std::map<std::string, Tensor> parse_example(const Tensor& serialized, const FeatureSpec& features);

// TF's tf.io.parse_single_example: parse_example of one string scalar.
std::map<std::string, Tensor> parse_single_example(const Tensor& serialized, const FeatureSpec& features);

}  // namespace distribute
