// parse_example (include/distribute/parsing.h) over tf.train.Example records
// written by tests/data/testdata/make_tf_files.py, an independent writer
// (hand-encoded protobuf wire format; EXPECTED.md lists the values), with
// the behaviour of TF's tf.io.parse_example for FixedLenFeature.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::message_of;

std::string tf_file(const std::string& name) { return std::string(DISTRIBUTE_TF_FILES_DIR) + "/" + name; }

// Every record of `file`, as one string vector.
Tensor records_of(const std::string& file) {
  std::vector<std::string> records;
  for (const Element& e : TFRecordDataset({tf_file(file)})) records.push_back(e.tensor().strings()[0]);
  return Tensor(records, {static_cast<std::int64_t>(records.size())});
}

const FeatureSpec& spec() {
  static const FeatureSpec s{
      {"id", {{1}, DType::kInt64, std::nullopt}},
      {"xy", {{2}, DType::kFloat32, std::nullopt}},
      {"label", {{}, DType::kInt64, std::nullopt}},
      {"name", {{1}, DType::kString, std::nullopt}},
  };
  return s;
}

TEST(ParseExampleTest, ParsesABatchIntoOneTensorPerFeature) {
  const auto f = parse_example(records_of("examples.tfrecord"), spec());
  ASSERT_EQ(f.size(), 4u);  // "extra" (example 3) is not in the spec: ignored
  EXPECT_EQ(f.at("id"), Tensor(std::vector<std::int64_t>{0, 1, 2, 3, 4}, {5, 1}));
  // Example 4 encodes xy unpacked; both encodings parse.
  EXPECT_EQ(f.at("xy"), Tensor(std::vector<float>{0, 0, .5f, -1.25f, 1, -2.5f, 1.5f, -3.75f, 2, -5}, {5, 2}));
  EXPECT_EQ(f.at("label"), Tensor(std::vector<std::int64_t>{-1, -4, -7, -10, -13}, {5}));  // 10-byte varints
  EXPECT_EQ(f.at("name"), Tensor(std::vector<std::string>{"ex0", "ex1", "ex2", "ex3", "ex4"}, {5, 1}));
}

TEST(ParseExampleTest, ParsesOneRecordWithTheFeatureShapesAlone) {
  const Tensor all = records_of("examples.tfrecord");
  const auto f = parse_single_example(all[3], spec());
  EXPECT_EQ(f.at("id"), Tensor(std::vector<std::int64_t>{3}, {1}));
  EXPECT_EQ(f.at("xy"), (Tensor{1.5f, -3.75f}));
  EXPECT_EQ(f.at("label"), Tensor(std::int64_t{-10}));
  const FeatureSpec extra{{"extra", {{}, DType::kFloat32, std::nullopt}}};
  EXPECT_EQ(parse_single_example(all[3], extra).at("extra"), Tensor(7.f));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { parse_single_example(all, spec()); }),
              HasSubstr("a string scalar"));
}

TEST(ParseExampleTest, AMissingFeatureTakesItsDefaultOrIsAnError) {
  const Tensor records = records_of("examples_missing.tfrecord");
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { parse_example(records, spec()); }),
              AllOf(HasSubstr("example 1"), HasSubstr("'xy'"), HasSubstr("required but could not be found")));
  FeatureSpec with_default = spec();
  with_default.at("xy").default_value = Tensor{9.f, 8.f};
  EXPECT_EQ(parse_example(records, with_default).at("xy"), Tensor(std::vector<float>{0, 0, 9, 8}, {2, 2}));
  // A default of any shape with the right count (TF reshapes it).
  with_default.at("xy").default_value = Tensor{{9.f}, {8.f}};
  EXPECT_EQ(parse_example(records, with_default).at("xy"), Tensor(std::vector<float>{0, 0, 9, 8}, {2, 2}));
}

TEST(ParseExampleTest, AValueCountOrTypeOtherThanTheSpecsIsAnErrorNamingTheExample) {
  const Tensor records = records_of("examples.tfrecord");
  FeatureSpec three = spec();
  three.at("xy").shape = {3};
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { parse_example(records, three); }),
              AllOf(HasSubstr("example 0"), HasSubstr("'xy' has 2 float value(s), expected 3")));
  FeatureSpec wrong_type = spec();
  wrong_type.at("xy").dtype = DType::kInt64;
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { parse_example(records, wrong_type); }),
              AllOf(HasSubstr("'xy' holds float values, expected int64")));
}

TEST(ParseExampleTest, RejectsABadSpecAndRecordsThatAreNotExamples) {
  const Tensor records = records_of("examples.tfrecord");
  FeatureSpec bad = spec();
  bad.at("id").dtype = DType::kInt32;
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { parse_example(records, bad); }),
              HasSubstr("expected dtype int64, float32 or string, got int32"));
  bad = spec();
  bad.at("id").default_value = Tensor{1.f};
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { parse_example(records, bad); }), HasSubstr("default_value"));
  bad = spec();
  bad.at("id").shape = {-1};
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { parse_example(records, bad); }), HasSubstr("fully defined"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { parse_example(Tensor{1.f}, spec()); }),
              HasSubstr("string scalar or vector"));
  const Tensor garbage(std::vector<std::string>{records.strings()[0], "\xff\xff\xff"}, {2});
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { parse_example(garbage, spec()); }),
              AllOf(HasSubstr("example 1"), HasSubstr("cannot parse a tf.train.Example from 3 bytes")));
  // An empty record is an Example without features.
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { parse_example(Tensor(std::string()), spec()); }),
              HasSubstr("required"));
}

TEST(ParseExampleTest, ParsesBatchesInsideADatasetPipeline) {
  const Dataset parsed = TFRecordDataset({tf_file("examples.tfrecord")}).batch(2).map([](const Element& batch) {
    auto f = parse_example(batch.tensor(), spec());
    return Element({f.at("xy"), f.at("label")});
  });
  std::vector<std::int64_t> labels;
  std::int64_t rows = 0;
  for (const Element& e : parsed) {
    EXPECT_EQ(e[0].dim(1), 2);
    rows += e[0].dim(0);
    for (std::int64_t v : e[1].data<std::int64_t>()) labels.push_back(v);
  }
  EXPECT_EQ(rows, 5);
  EXPECT_EQ(labels, (std::vector<std::int64_t>{-1, -4, -7, -10, -13}));
}

}  // namespace
}  // namespace distribute
