// Behavioural tests of load_csv and load_digits (include/distribute/dataset.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "data/dataset_node.h"
#include "distribute/dataset.h"
#include "distribute/errors.h"
#include "distribute/tensor.h"
#include "testing/strategy_matrix.h"

namespace distribute {
namespace {

using ::distribute::testing::message_of;
using ::testing::HasSubstr;
using i32 = std::int32_t;

// A file under the test temp dir, unique per test and process, removed at
// the end of the test.
class CsvTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const std::string& p : paths_) std::remove(p.c_str());
  }

  std::string Write(const std::string& name, const std::string& contents) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string dir = ::testing::TempDir();
    if (!dir.empty() && dir.back() != '/') dir += '/';
    const std::string path = dir + "distribute_csv_" + info->name() + "_" + std::to_string(::getpid()) + "_" + name;
    std::ofstream out(path, std::ios::binary);
    out << contents;
    out.close();
    EXPECT_TRUE(out.good()) << path;
    paths_.push_back(path);
    return path;
  }

 private:
  std::vector<std::string> paths_;
};

TEST_F(CsvTest, ValuesAndShapeAsFloat64) {
  const Tensor t = load_csv(Write("a.csv", "1,2,3\n4.5,-6,7e2\n"));
  EXPECT_EQ(t.dtype(), DType::kFloat64);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(testing::values_of<double>(t), (std::vector<double>{1, 2, 3, 4.5, -6, 700}));
}

TEST_F(CsvTest, LastLineWithoutNewline) {
  const Tensor t = load_csv(Write("a.csv", "1,2\n3,4"));
  EXPECT_EQ(t.shape(), (Shape{2, 2}));
  EXPECT_EQ(testing::values_of<double>(t), (std::vector<double>{1, 2, 3, 4}));
}

TEST_F(CsvTest, SingleColumn) {
  const Tensor t = load_csv(Write("a.csv", "0.25\n0.5\n0.75\n"));
  EXPECT_EQ(t.shape(), (Shape{3, 1}));
  EXPECT_EQ(testing::values_of<double>(t), (std::vector<double>{0.25, 0.5, 0.75}));
}

TEST_F(CsvTest, HeaderIsSkippedOnlyWhenAsked) {
  const std::string path = Write("h.csv", "x,y\n1,2\n3,4\n");
  CsvOptions options;
  options.header = true;
  const Tensor t = load_csv(path, options);
  EXPECT_EQ(t.shape(), (Shape{2, 2}));
  EXPECT_EQ(testing::values_of<double>(t), (std::vector<double>{1, 2, 3, 4}));
  // Without the option the column names are a malformed line 1.
  const std::string msg = message_of<InvalidArgumentError>([&] { load_csv(path); });
  EXPECT_THAT(msg, HasSubstr(path + ":1"));
  EXPECT_THAT(msg, HasSubstr("'x'"));
}

TEST_F(CsvTest, OtherDelimiter) {
  CsvOptions options;
  options.delimiter = ';';
  const Tensor t = load_csv(Write("s.csv", "1;2;3\n4;5;6\n"), options);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(testing::values_of<double>(t), (std::vector<double>{1, 2, 3, 4, 5, 6}));

  options.delimiter = '\t';
  const Tensor tabs = load_csv(Write("t.tsv", "1\t2\n3\t4\n"), options);
  EXPECT_EQ(testing::values_of<double>(tabs), (std::vector<double>{1, 2, 3, 4}));

  // A comma is not a delimiter then: "1,5" is not a number.
  options.delimiter = ';';
  EXPECT_THROW(load_csv(Write("c.csv", "1,5;2\n"), options), InvalidArgumentError);
}

TEST_F(CsvTest, ToleratesWhitespaceAndCrlf) {
  const Tensor t = load_csv(Write("w.csv", " 1 ,\t2\r\n3,  4 \r\n"));
  EXPECT_EQ(t.shape(), (Shape{2, 2}));
  EXPECT_EQ(testing::values_of<double>(t), (std::vector<double>{1, 2, 3, 4}));
}

TEST_F(CsvTest, SkipsBlankLines) {
  const Tensor t = load_csv(Write("b.csv", "\n1,2\n\n   \n3,4\r\n\r\n\n"));
  EXPECT_EQ(t.shape(), (Shape{2, 2}));
  EXPECT_EQ(testing::values_of<double>(t), (std::vector<double>{1, 2, 3, 4}));
}

TEST_F(CsvTest, MissingFileIsNotFoundNamingThePath) {
  const std::string path = ::testing::TempDir() + "/distribute_csv_no_such_file_" + std::to_string(::getpid()) + ".csv";
  EXPECT_THAT(message_of<NotFoundError>([&] { load_csv(path); }), HasSubstr(path));
  EXPECT_THROW(load_digits(path), NotFoundError);
}

TEST_F(CsvTest, NonNumberNamesFileLineAndField) {
  const std::string path = Write("n.csv", "1,2,3\n4,5,6\n7,abc,9\n");
  const std::string msg = message_of<InvalidArgumentError>([&] { load_csv(path); });
  EXPECT_THAT(msg, HasSubstr(path + ":3"));
  EXPECT_THAT(msg, HasSubstr("field 2"));
  EXPECT_THAT(msg, HasSubstr("'abc'"));
}

TEST_F(CsvTest, LineNumbersCountBlankAndHeaderLines) {
  CsvOptions options;
  options.header = true;
  const std::string path = Write("l.csv", "a,b\n1,2\n\n3,x\n");
  const std::string msg = message_of<InvalidArgumentError>([&] { load_csv(path, options); });
  EXPECT_THAT(msg, HasSubstr(path + ":4"));
  EXPECT_THAT(msg, HasSubstr("field 2"));
}

TEST_F(CsvTest, EmptyAndPartialNumbersAreErrors) {
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { load_csv(Write("e.csv", "1,,3\n")); }), HasSubstr("field 2"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { load_csv(Write("t.csv", "1,2,\n")); }), HasSubstr("field 3"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { load_csv(Write("p.csv", "1,2x\n")); }), HasSubstr("'2x'"));
}

TEST_F(CsvTest, RaggedRowNamesTheLine) {
  const std::string path = Write("r.csv", "1,2,3\n4,5,6\n7,8\n");
  const std::string msg = message_of<InvalidArgumentError>([&] { load_csv(path); });
  EXPECT_THAT(msg, HasSubstr(path + ":3"));
  EXPECT_THAT(msg, HasSubstr("3 fields"));
  EXPECT_THAT(msg, HasSubstr("got 2"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { load_csv(Write("r2.csv", "1\n2,3\n")); }), HasSubstr(":2"));
}

TEST_F(CsvTest, EmptyFileIsAnError) {
  EXPECT_THROW(load_csv(Write("empty.csv", "")), InvalidArgumentError);
  EXPECT_THROW(load_csv(Write("blank.csv", "\n \n\r\n")), InvalidArgumentError);
  CsvOptions options;
  options.header = true;
  const std::string path = Write("header_only.csv", "x,y\n");
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { load_csv(path, options); }), HasSubstr(path));
}

// ---------------------------------------------------------------------------
// load_digits

TEST(Digits, ShapesAndDtypes) {
  const Digits d = load_digits();
  EXPECT_EQ(d.images.dtype(), DType::kFloat32);
  EXPECT_EQ(d.images.shape(), (Shape{1797, 64}));
  EXPECT_EQ(d.labels.dtype(), DType::kInt32);
  EXPECT_EQ(d.labels.shape(), (Shape{1797}));
}

TEST(Digits, ValueRanges) {
  const Digits d = load_digits();
  for (float v : d.images.data<float>()) {
    ASSERT_GE(v, 0.f);
    ASSERT_LE(v, 16.f);
    ASSERT_EQ(v, static_cast<float>(static_cast<int>(v)));  // integer pixels
  }
  const auto pixels = d.images.data<float>();
  EXPECT_EQ(*std::max_element(pixels.begin(), pixels.end()), 16.f);
  for (i32 label : d.labels.data<i32>()) {
    ASSERT_GE(label, 0);
    ASSERT_LE(label, 9);
  }
}

TEST(Digits, FirstRow) {
  const Digits d = load_digits();
  const std::vector<float> first = testing::values_of<float>(d.images[0]);
  ASSERT_EQ(first.size(), 64u);
  EXPECT_EQ(std::vector<float>(first.begin(), first.begin() + 8),
            (std::vector<float>{0, 0, 5, 13, 9, 1, 0, 0}));
  EXPECT_EQ(std::vector<float>(first.begin() + 8, first.begin() + 16),
            (std::vector<float>{0, 0, 13, 15, 10, 15, 5, 0}));
  EXPECT_EQ(d.labels[0].item<i32>(), 0);
  EXPECT_EQ(d.labels[1].item<i32>(), 1);
}

TEST(Digits, EveryClassPresent) {
  const Digits d = load_digits();
  std::vector<int> counts(10, 0);
  for (i32 label : d.labels.data<i32>()) ++counts[static_cast<std::size_t>(label)];
  // The class sizes of the UCI test split as scikit-learn ships it.
  EXPECT_EQ(counts, (std::vector<int>{178, 182, 177, 183, 181, 182, 181, 179, 174, 180}));
}

TEST(Digits, DefaultPathIsTheShippedFile) {
  const std::string path = default_digits_path();
  EXPECT_THAT(path, HasSubstr("digits.csv"));
  const Digits d = load_digits(path);
  EXPECT_EQ(d.labels.dim(0), 1797);
}

TEST_F(CsvTest, DigitsFromAFile) {
  std::string row, row2;
  for (int i = 0; i < 64; ++i) row += std::to_string(i % 17) + ",";
  for (int i = 0; i < 64; ++i) row2 += "16,";
  const Digits d = load_digits(Write("digits.csv", row + "7\n" + row2 + "3\n"));
  EXPECT_EQ(d.images.shape(), (Shape{2, 64}));
  EXPECT_EQ(d.images[0][16].item<float>(), 16.f);
  EXPECT_EQ(d.images[0][17].item<float>(), 0.f);
  EXPECT_EQ(d.images[1][63].item<float>(), 16.f);
  EXPECT_EQ(testing::values_of<i32>(d.labels), (std::vector<i32>{7, 3}));
}

TEST_F(CsvTest, DigitsWithTheWrongColumnCountIsAnError) {
  const std::string path = Write("short.csv", "1,2,3\n4,5,6\n");
  const std::string msg = message_of<InvalidArgumentError>([&] { load_digits(path); });
  EXPECT_THAT(msg, HasSubstr("65"));
  EXPECT_THAT(msg, HasSubstr("got 3"));
  EXPECT_THAT(msg, HasSubstr(path));
}

TEST_F(CsvTest, DigitsWithABadLabelIsAnError) {
  std::string row;
  for (int i = 0; i < 64; ++i) row += "0,";
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { load_digits(Write("l10.csv", row + "10\n")); }),
              HasSubstr("label"));
  EXPECT_THROW(load_digits(Write("l15.csv", row + "1.5\n")), InvalidArgumentError);
  EXPECT_THROW(load_digits(Write("lneg.csv", row + "-1\n")), InvalidArgumentError);
}

TEST_F(CsvTest, FromCsvFilesReadsTheRowsOfEveryFileInOrder) {
  const std::string a = Write("a.csv", "1,2\n3,4\n");
  const std::string b = Write("b.csv", "5,6\n");
  std::vector<std::vector<double>> rows;
  for (const Element& e : Dataset::from_csv_files({a, b})) rows.push_back(testing::values_of<double>(e.tensor()));
  EXPECT_EQ(rows, (std::vector<std::vector<double>>{{1, 2}, {3, 4}, {5, 6}}));
  EXPECT_THAT(message_of<InvalidArgumentError>([] { Dataset::from_csv_files({}); }), HasSubstr("at least one file"));
  // A missing file is found when the iteration reaches it.
  auto it = Dataset::from_csv_files({a, a + ".missing"}).make_iterator();
  it.get_next();
  it.get_next();
  EXPECT_THROW(it.get_next(), NotFoundError);
}

TEST_F(CsvTest, ShardingByFilesKeepsEveryTransformation) {
  std::vector<std::string> files;
  for (int f = 0; f < 5; ++f) files.push_back(Write("f" + std::to_string(f) + ".csv", std::to_string(10 * f) + "\n" +
                                                                                   std::to_string(10 * f + 1) + "\n"));
  const Dataset pipeline =
      Dataset::from_csv_files(files).map([](const Element& e) { return Element(e.tensor() + 1.0); }).batch(3);
  ASSERT_NE(internal::find_file_source(pipeline), nullptr);
  EXPECT_EQ(internal::find_file_source(pipeline)->num_files(), 5u);
  EXPECT_EQ(internal::find_file_source(Dataset::range(4).batch(2)), nullptr);
  // Shard 1 of 2 reads files 1 and 3: rows 10, 11, 30, 31, plus one.
  std::vector<double> seen;
  std::vector<std::int64_t> batch_rows;
  for (const Element& e : internal::shard_by_files(pipeline, 2, 1)) {
    batch_rows.push_back(e.tensor().dim(0));
    for (double v : testing::values_of<double>(e.tensor())) seen.push_back(v);
  }
  EXPECT_EQ(seen, (std::vector<double>{11, 12, 31, 32}));
  EXPECT_EQ(batch_rows, (std::vector<std::int64_t>{3, 1}));
  EXPECT_EQ(internal::shard_by_files(pipeline, 2, 1).static_batch_size(), 3);
}

}  // namespace
}  // namespace distribute
