// TextLineDataset and TFRecordDataset (include/distribute/dataset.h) over
// files written by tests/data/testdata/make_tf_files.py, an independent
// writer of TF's formats (standard-library Python; EXPECTED.md beside the
// files lists their contents), and over damaged copies of them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <iterator>
#include <string>
#include <vector>

#include "distribute/distribute.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::message_of;

std::string tf_file(const std::string& name) { return std::string(DISTRIBUTE_TF_FILES_DIR) + "/" + name; }

// Every element's string, in order (elements must be string scalars).
std::vector<std::string> strings_of(const Dataset& dataset) {
  std::vector<std::string> out;
  for (const Element& e : dataset) {
    EXPECT_EQ(e.tensor().rank(), 0);
    out.push_back(e.tensor().strings()[0]);
  }
  return out;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(TextLineDatasetTest, GivesTheLinesAsTfDoes) {
  EXPECT_THAT(strings_of(TextLineDataset({tf_file("lines_a.txt")})), ElementsAre("alpha", "beta", "", "gamma"));
  // CRLF: every '\r' is dropped.
  EXPECT_THAT(strings_of(TextLineDataset({tf_file("lines_b.txt")})), ElementsAre("one", "two"));
  EXPECT_THAT(strings_of(TextLineDataset({tf_file("lines_c.txt")})), ElementsAre());
  // File after file, an empty one in the middle.
  EXPECT_THAT(strings_of(TextLineDataset({tf_file("lines_b.txt"), tf_file("lines_c.txt"), tf_file("lines_a.txt")})),
              ElementsAre("one", "two", "alpha", "beta", "", "gamma"));
}

TEST(TextLineDatasetTest, DropsEveryCarriageReturnAndKeepsOtherBytes) {
  testing::TempDir dir("distribute_lines");
  write_all(dir / "x.txt", std::string("a\rb\n\t \0z\n\r", 10));
  EXPECT_THAT(strings_of(TextLineDataset({dir / "x.txt"})), ElementsAre("ab", std::string("\t \0z", 4)));
}

TEST(TextLineDatasetTest, HasAStringElementSpecAndBatchesIntoStringVectors) {
  const Dataset lines = TextLineDataset({tf_file("lines_a.txt")});
  EXPECT_EQ(lines.element_spec().to_string(), "TensorSpec(shape=(), dtype=tf.string, name=None)");
  std::vector<Tensor> batches;
  for (const Element& e : lines.batch(3)) batches.push_back(e.tensor());
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0], Tensor(std::vector<std::string>{"alpha", "beta", ""}, {3}));
  EXPECT_EQ(batches[1], Tensor(std::vector<std::string>{"gamma"}, {1}));
  EXPECT_EQ(batches[0].to_string(), "Tensor([b'alpha' b'beta' b''], shape=(3,), dtype=string)");
}

// String elements through the transformations that copy rows: a shuffle
// gathering rows of from_tensor_slices into batches, and padded_batch.
TEST(StringElementsTest, ShuffleBatchAndPaddedBatchCopyTheStrings) {
  std::vector<std::string> words;
  for (int i = 0; i < 20; ++i) words.push_back("word-" + std::to_string(i) + std::string(static_cast<std::size_t>(i), 'x'));
  const Tensor all(words, {20});
  std::vector<std::string> seen;
  for (const Element& e : Dataset::from_tensor_slices(all).shuffle(20, /*seed=*/5).batch(6)) {
    for (const std::string& w : e.tensor().strings()) seen.push_back(w);
  }
  EXPECT_NE(seen, words);  // shuffled (seed 5 moves them)
  std::sort(seen.begin(), seen.end());
  std::vector<std::string> sorted = words;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(seen, sorted);

  const Dataset ragged = Dataset::from_generator([] {
    return [i = 0]() mutable -> std::optional<Element> {
      if (i == 3) return std::nullopt;
      ++i;
      return Element(Tensor(std::vector<std::string>(static_cast<std::size_t>(i), std::string(static_cast<std::size_t>(i), 'a')),
                            {i}));
    };
  });
  std::vector<Tensor> padded;
  for (const Element& e : ragged.padded_batch(3)) padded.push_back(e.tensor());
  ASSERT_EQ(padded.size(), 1u);
  EXPECT_EQ(padded[0], Tensor(std::vector<std::string>{"a", "", "", "aa", "aa", "", "aaa", "aaa", "aaa"}, {3, 3}));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] {
                for (const Element& e : ragged.padded_batch(3, {}, {1, 2})) (void)e;
              }),
              HasSubstr("expected 1 padding value(s)"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] {
                for (const Element& e : Dataset::zip({ragged, ragged}).padded_batch(3, {}, {0, 7})) (void)e;
              }),
              HasSubstr("string components are padded with empty strings"));
}

TEST(TFRecordDatasetTest, ReadsTheRecordsOfAnIndependentWriter) {
  std::string long_record;
  for (int j = 0; j < 1000; ++j) long_record.push_back(static_cast<char>(j % 251));
  EXPECT_THAT(strings_of(TFRecordDataset({tf_file("records.tfrecord")})),
              ElementsAre("hello", "", std::string("\0\xff" "binary\n", 9), long_record));
}

TEST(TFRecordDatasetTest, ReadsFilesInOrderOrInterleavedAsTfDoes) {
  std::vector<std::string> shards;
  for (int k = 0; k < 4; ++k) shards.push_back(tf_file("shard-" + std::to_string(k) + ".tfrecord"));
  EXPECT_THAT(strings_of(TFRecordDataset(shards)),
              ElementsAre("k0-r0", "k0-r1", "k0-r2", "k1-r0", "k1-r1", "k1-r2", "k2-r0", "k2-r1", "k2-r2", "k3-r0",
                          "k3-r1", "k3-r2"));
  // num_parallel_reads=2: TF's interleave with cycle_length 2, block_length 1.
  ReaderOptions two;
  two.num_parallel_reads = 2;
  EXPECT_THAT(strings_of(TFRecordDataset(shards, two)),
              ElementsAre("k0-r0", "k1-r0", "k0-r1", "k1-r1", "k0-r2", "k1-r2", "k2-r0", "k3-r0", "k2-r1", "k3-r1",
                          "k2-r2", "k3-r2"));
  ReaderOptions small_buffer;
  small_buffer.buffer_size = 3;
  EXPECT_EQ(strings_of(TFRecordDataset(shards, small_buffer)), strings_of(TFRecordDataset(shards)));
}

// records.tfrecord: records at offsets 0 (5 bytes), 21 (empty), 37 (9
// bytes) and 62 (1000 bytes); a record takes 16 bytes besides its data.
class DamagedTFRecordTest : public ::testing::Test {
 protected:
  std::string damaged(std::string bytes) {
    const std::string path = dir_ / "damaged.tfrecord";
    write_all(path, bytes);
    return path;
  }
  // Reads `path`, expecting the first three records, then DataLossError.
  std::string error_after_three_records(const std::string& path) {
    auto it = TFRecordDataset({path}).make_iterator();
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(it.get_next_as_optional().has_value()) << i;
    return message_of<DataLossError>([&] { it.get_next(); });
  }
  const std::string original_ = read_all(tf_file("records.tfrecord"));
  testing::TempDir dir_{"distribute_tfrecord"};
};

TEST_F(DamagedTFRecordTest, AChangedDataByteIsReportedWithTheFileAndOffset) {
  ASSERT_EQ(original_.size(), 1078u);
  std::string bytes = original_;
  bytes[62 + 12 + 500] ^= 1;
  const std::string path = damaged(bytes);
  EXPECT_THAT(error_after_three_records(path),
              AllOf(HasSubstr("corrupted record at offset 62"), HasSubstr(path), HasSubstr("data's checksum")));
}

TEST_F(DamagedTFRecordTest, AChangedLengthIsReportedAtItsRecord) {
  std::string bytes = original_;
  bytes[62 + 1] ^= 0x40;  // a length of 1000 + 2^14 would run past the end without the check
  EXPECT_THAT(error_after_three_records(damaged(bytes)),
              AllOf(HasSubstr("corrupted record at offset 62"), HasSubstr("length's checksum")));
  bytes = original_;
  bytes[62 + 9] ^= 0x10;  // the length's checksum itself
  EXPECT_THAT(error_after_three_records(damaged(bytes)), HasSubstr("length's checksum"));
}

TEST_F(DamagedTFRecordTest, AFileCutInsideARecordIsDataLoss) {
  EXPECT_THAT(error_after_three_records(damaged(original_.substr(0, 62 + 12 + 999))),
              AllOf(HasSubstr("offset 62"), HasSubstr("truncated"), HasSubstr("1000 bytes")));
  EXPECT_THAT(error_after_three_records(damaged(original_.substr(0, 62 + 12 + 1000 + 2))),
              AllOf(HasSubstr("offset 62"), HasSubstr("truncated")));
  // Inside the 12-byte header (TF would end the file silently there).
  EXPECT_THAT(error_after_three_records(damaged(original_.substr(0, 62 + 7))),
              AllOf(HasSubstr("offset 62"), HasSubstr("7 of 12 bytes")));
  // Cut between records: a clean end.
  EXPECT_EQ(strings_of(TFRecordDataset({damaged(original_.substr(0, 62))})).size(), 3u);
}

TEST_F(DamagedTFRecordTest, AfterDataLossTheIterationGoesOnWithTheNextFile) {
  std::string bytes = original_;
  bytes[62 + 12 + 500] ^= 1;
  const std::string path = damaged(bytes);
  auto it = TFRecordDataset({path, tf_file("shard-0.tfrecord")}).make_iterator();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(it.get_next_as_optional().has_value()) << i;
  EXPECT_THROW(it.get_next(), DataLossError);
  EXPECT_EQ(it.get_next().tensor().strings()[0], "k0-r0");
  // Damaged compressed data too: nothing of the failed read is returned later.
  std::string gz = read_all(tf_file("records.tfrecord.gz"));
  gz[20] = static_cast<char>(gz[20] ^ 0x55);
  write_all(dir_ / "damaged.gz", gz);
  ReaderOptions gzip;
  gzip.compression_type = "GZIP";
  auto lines = TextLineDataset({dir_ / "damaged.gz", tf_file("lines_b.txt.gz")}, gzip).make_iterator();
  std::vector<std::string> seen;
  for (int i = 0; i < 10; ++i) {
    try {
      const std::optional<Element> e = lines.get_next_as_optional();
      if (!e.has_value()) break;
      seen.push_back(e->tensor().strings()[0]);
    } catch (const DataLossError&) {
      seen.push_back("<data loss>");
    }
  }
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), "two");
  EXPECT_EQ(seen[seen.size() - 2], "one");
  EXPECT_EQ(seen[seen.size() - 3], "<data loss>");
}

TEST_F(DamagedTFRecordTest, ATextFileIsNotATFRecordFile) {
  EXPECT_THAT(message_of<DataLossError>([&] { strings_of(TFRecordDataset({tf_file("lines_a.txt")})); }),
              AllOf(HasSubstr("offset 0"), HasSubstr("lines_a.txt")));
}

TEST(FileReadersTest, RejectBadArgumentsAndNameMissingFiles) {
  EXPECT_THAT(message_of<InvalidArgumentError>([] { TFRecordDataset({}); }), HasSubstr("at least one file"));
  ReaderOptions bad;
  bad.compression_type = "BZ2";
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { TFRecordDataset({tf_file("records.tfrecord")}, bad); }),
              HasSubstr("unsupported compression_type 'BZ2'"));
  bad = {};
  bad.buffer_size = (std::int64_t{1} << 30) + 1;
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { TFRecordDataset({tf_file("records.tfrecord")}, bad); }),
              HasSubstr("buffer_size <= 2^30"));
  bad = {};
  bad.num_parallel_reads = -5;
  EXPECT_THROW(TFRecordDataset({tf_file("records.tfrecord")}, bad), InvalidArgumentError);
  // A missing file is found missing when the iteration reaches it.
  const Dataset missing = TextLineDataset({tf_file("lines_b.txt"), "/nonexistent/dir/x.txt"});
  auto it = missing.make_iterator();
  EXPECT_TRUE(it.get_next_as_optional().has_value());
  EXPECT_TRUE(it.get_next_as_optional().has_value());
  EXPECT_THAT(message_of<NotFoundError>([&] { it.get_next(); }),
              AllOf(HasSubstr("TextLineDataset"), HasSubstr("/nonexistent/dir/x.txt")));
}

ReaderOptions compressed(const char* type, std::int64_t buffer_size = 0) {
  ReaderOptions options;
  options.compression_type = type;
  options.buffer_size = buffer_size;
  return options;
}

TEST(CompressedFilesTest, GzipAndZlibFilesGiveTheSameRecordsAndLines) {
  const std::vector<std::string> plain = strings_of(TFRecordDataset({tf_file("records.tfrecord")}));
  ASSERT_EQ(plain.size(), 4u);
  // A 7-byte buffer: records and the compressed stream cross many refills.
  for (std::int64_t buffer : {0, 7}) {
    EXPECT_EQ(strings_of(TFRecordDataset({tf_file("records.tfrecord.gz")}, compressed("GZIP", buffer))), plain);
    EXPECT_EQ(strings_of(TFRecordDataset({tf_file("records.tfrecord.zlib")}, compressed("ZLIB", buffer))), plain);
    EXPECT_THAT(strings_of(TextLineDataset({tf_file("lines_b.txt.gz")}, compressed("GZIP", buffer))),
                ElementsAre("one", "two"));
    // gzip members one after the other are one stream.
    EXPECT_THAT(strings_of(TextLineDataset({tf_file("two_members.txt.gz")}, compressed("GZIP", buffer))),
                ElementsAre("a", "b", "c"));
  }
  // An empty file is an empty stream.
  EXPECT_THAT(strings_of(TextLineDataset({tf_file("lines_c.txt")}, compressed("GZIP"))), ElementsAre());
}

TEST(CompressedFilesTest, DamagedOrCutCompressedDataIsDataLossNamingTheFile) {
  testing::TempDir dir("distribute_compressed");
  const std::string gz = read_all(tf_file("records.tfrecord.gz"));
  write_all(dir / "cut.gz", gz.substr(0, gz.size() / 2));
  EXPECT_THAT(message_of<DataLossError>([&] { strings_of(TFRecordDataset({dir / "cut.gz"}, compressed("GZIP"))); }),
              AllOf(HasSubstr(dir / "cut.gz"), HasSubstr("ends early")));
  std::string damaged = gz;
  damaged[20] = static_cast<char>(damaged[20] ^ 0x55);
  write_all(dir / "damaged.gz", damaged);
  EXPECT_THAT(message_of<DataLossError>([&] { strings_of(TFRecordDataset({dir / "damaged.gz"}, compressed("GZIP"))); }),
              HasSubstr(dir / "damaged.gz"));
  // The wrong compression type: not GZIP data.
  EXPECT_THAT(message_of<DataLossError>([&] {
                strings_of(TFRecordDataset({tf_file("records.tfrecord.zlib")}, compressed("GZIP")));
              }),
              HasSubstr("not valid GZIP data"));
  // Uncompressed reading of a compressed file fails at the framing.
  EXPECT_THROW(strings_of(TFRecordDataset({tf_file("records.tfrecord.gz")})), DataLossError);
}

TEST(FileReadersTest, MirroredStrategySplitsStringBatchesAcrossReplicas) {
  MirroredStrategy strategy(testing::cpu_devices(2));
  std::vector<std::string> shards;
  for (int k = 0; k < 2; ++k) shards.push_back(tf_file("shard-" + std::to_string(k) + ".tfrecord"));
  std::vector<std::vector<std::string>> per_replica(2);
  for (const PerReplica<Element>& step : strategy.experimental_distribute_dataset(TFRecordDataset(shards).batch(4))) {
    for (int r = 0; r < 2; ++r) {
      for (const std::string& s : step[r].tensor().strings()) per_replica[static_cast<std::size_t>(r)].push_back(s);
    }
  }
  // Global batches of 4 split 2/2; the last, partial batch of 2 fills
  // replica 0's share of 2 first (TF's rebatch), replica 1 gets none.
  EXPECT_THAT(per_replica[0], ElementsAre("k0-r0", "k0-r1", "k1-r1", "k1-r2"));
  EXPECT_THAT(per_replica[1], ElementsAre("k0-r2", "k1-r0"));
}

}  // namespace
}  // namespace distribute
