// Checkpoint: round trips (also across replica counts), the file layout,
// retention, and every way a restore can fail without changing anything.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_files.h"
#include "core/crc32c.h"
#include "distribute/distribute.h"
#include "testing/helpers.h"

// g++ 12 warns (-Wextra) about members a designated initializer leaves to
// their defaults, which is how the options structs are meant to be used.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace distribute {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::message_of;

using Sync = VariableSynchronization;
using Agg = VariableAggregation;

std::vector<std::string> cpus(int n) {
  std::vector<std::string> devices;
  for (int i = 0; i < n; ++i) devices.push_back("CPU:" + std::to_string(i));
  return devices;
}

int replica_id() { return get_replica_context()->replica_id_in_sync_group(); }

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::uint32_t le32(const std::vector<char>& b, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<std::size_t>(i)]);
  return v;
}

std::uint64_t le64(const std::vector<char>& b, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<std::size_t>(i)]);
  return v;
}

// Offset of the first occurrence of `text` in `bytes` (fails the test if none).
std::size_t find(const std::vector<char>& bytes, const std::string& text) {
  const auto it = std::search(bytes.begin(), bytes.end(), text.begin(), text.end());
  EXPECT_NE(it, bytes.end()) << "'" << text << "' not in the file";
  return static_cast<std::size_t>(it - bytes.begin());
}

// The file names in `dir`, sorted.
std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class CheckpointTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return temp_ / name; }

  testing::TempDir temp_{"checkpoint_test"};
  const std::string dir_ = temp_.path();
};

// ---- CRC32C ----

TEST(Crc32cTest, KnownValuesAndChaining) {
  const std::string check = "123456789";
  const auto bytes = std::as_bytes(std::span<const char>(check.data(), check.size()));
  EXPECT_EQ(internal::crc32c(bytes), 0xE3069283u);  // the CRC-32C check value
  EXPECT_EQ(internal::crc32c(bytes.first(0)), 0u);
  EXPECT_EQ(internal::crc32c(bytes.subspan(4), internal::crc32c(bytes.first(4))), 0xE3069283u);
  // 32 zero bytes (RFC 3720, B.4).
  const std::vector<std::byte> zeros(32, std::byte{0});
  EXPECT_EQ(internal::crc32c(zeros), 0x8A9136AAu);
}

// ---- Round trips ----

TEST_F(CheckpointTest, RoundTripsPlainVariablesScalarsAndTensors) {
  Variable kernel(Tensor({1.f, 2.f, 3.f}), {.name = "kernel"});
  Variable counts(Tensor({{1, 2}, {3, 4}}), {.name = "counts"});
  std::int64_t step = 41;
  std::uint64_t seed = 0xFEDCBA9876543210ull;  // high bit set: kept bit for bit
  Tensor rng(std::vector<std::int64_t>{7, -8, 9, 10}, Shape{2, 2});
  Tensor position = Tensor(std::int64_t{12});

  Checkpoint ckpt;
  ckpt.track("dense/kernel", kernel);
  ckpt.track("counts", counts);
  ckpt.track("step", &step);
  ckpt.track("seed", &seed);
  ckpt.track("rng", &rng);
  ckpt.track("iterator/position", &position);
  EXPECT_THAT(ckpt.tracked_names(),
              ::testing::ElementsAre("dense/kernel", "counts", "step", "seed", "rng", "iterator/position"));
  const std::string saved = ckpt.save(dir_);
  EXPECT_EQ(saved, path("ckpt-1.dckpt"));

  kernel.assign(Tensor({0.f, 0.f, 0.f}));
  counts.assign(Tensor({{0, 0}, {0, 0}}));
  step = 0;
  seed = 1;
  rng = Tensor::zeros(DType::kInt64, Shape{2, 2});
  position = Tensor(std::int64_t{0});

  ckpt.restore(saved);
  EXPECT_EQ(kernel.value(), Tensor({1.f, 2.f, 3.f}));
  EXPECT_EQ(counts.value(), Tensor({{1, 2}, {3, 4}}));
  EXPECT_EQ(step, 41);
  EXPECT_EQ(seed, 0xFEDCBA9876543210ull);
  EXPECT_EQ(rng, Tensor(std::vector<std::int64_t>{7, -8, 9, 10}, Shape{2, 2}));
  EXPECT_EQ(position, Tensor(std::int64_t{12}));
}

// An int (int32_t) counter: saved as an int64 scalar like the other
// counters, so it reads back into any of them and they into it.
TEST_F(CheckpointTest, StringTensorsAreRefusedAtTrackAndAtSave) {
  Tensor words(std::vector<std::string>{"a", "b"}, {2});
  Checkpoint ckpt;
  EXPECT_THAT(message_of<UnimplementedError>([&] { ckpt.track("words", &words); }),
              HasSubstr("holds number tensors, got dtype string"));
  // A tracked tensor that becomes a string one later is refused by save,
  // which writes nothing.
  Tensor t{1.f};
  ckpt.track("t", &t);
  t = words;
  EXPECT_THAT(message_of<UnimplementedError>([&] { ckpt.save(dir_); }), HasSubstr("cannot save 't'"));
  EXPECT_EQ(latest_checkpoint(dir_), std::nullopt);
}

TEST_F(CheckpointTest, Int32CounterRoundTripsAndExchangesWithInt64) {
  int epoch = -2147483647 - 1;  // the lowest int32: kept exactly
  std::int32_t batch = 2147483647;
  Checkpoint ckpt;
  ckpt.track("epoch", &epoch);
  ckpt.track("batch", &batch);
  const std::string saved = ckpt.save(dir_);
  const auto entries = load_checkpoint(saved);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].second, Tensor(std::int64_t{-2147483648}));
  EXPECT_EQ(entries[1].second, Tensor(std::int64_t{2147483647}));
  epoch = 0;
  batch = 0;
  ckpt.restore(saved);
  EXPECT_EQ(epoch, -2147483647 - 1);
  EXPECT_EQ(batch, 2147483647);

  // Saved from int64_t counters, restored into int32 ones (and back).
  std::int64_t wide_epoch = 5;
  std::int64_t wide_batch = -6;
  Checkpoint wide;
  wide.track("epoch", &wide_epoch);
  wide.track("batch", &wide_batch);
  ckpt.restore(wide.save(dir_));
  EXPECT_EQ(epoch, 5);
  EXPECT_EQ(batch, -6);
  epoch = 70;
  wide.restore(ckpt.save(dir_));
  EXPECT_EQ(wide_epoch, 70);
  EXPECT_EQ(wide_batch, -6);
}

TEST_F(CheckpointTest, Int32CounterRejectsAValueBeyond32BitsAndChangesNothing) {
  std::int64_t wide_epoch = 1;
  std::int64_t wide_batch = std::int64_t{1} << 31;  // one beyond int32
  Checkpoint wide;
  wide.track("epoch", &wide_epoch);
  wide.track("batch", &wide_batch);
  const std::string saved = wide.save(dir_);
  int epoch = 7;
  int batch = 8;
  Checkpoint ckpt;
  ckpt.track("epoch", &epoch);
  ckpt.track("batch", &batch);
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { ckpt.restore(saved); }),
              AllOf(HasSubstr("checkpoint " + saved), HasSubstr("'batch' holds 2147483648"),
                    HasSubstr("int32"), HasSubstr("[-2147483648, 2147483647]")));
  EXPECT_EQ(epoch, 7);  // nothing changed, not even the entry before
  EXPECT_EQ(batch, 8);
  wide_batch = -(std::int64_t{1} << 31) - 1;
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { ckpt.restore(wide.save(dir_)); }),
              HasSubstr("'batch' holds -2147483649"));
  std::int32_t* null = nullptr;
  EXPECT_THROW(ckpt.track("null", null), InvalidArgumentError);
}

TEST_F(CheckpointTest, EmptyCheckpointRoundTrips) {
  Checkpoint ckpt;
  const std::string saved = ckpt.save(dir_);
  EXPECT_TRUE(std::filesystem::is_regular_file(saved)) << saved;
  EXPECT_EQ(latest_checkpoint(dir_), std::optional<std::string>(saved));
  EXPECT_TRUE(load_checkpoint(saved).empty());
  EXPECT_NO_THROW(ckpt.restore(saved));
}

// Saves the state of a job on a MirroredStrategy of 2: a mirrored weight,
// sync-on-read metrics with each aggregation (components [3, 4]), a step.
std::string save_on_two_replicas(const std::string& dir) {
  MirroredStrategy strategy(cpus(2));
  auto scope = strategy.scope();
  Variable w(Tensor({0.f, 0.f}), {.name = "w"});
  Variable total(Tensor(0.f), {.name = "total", .synchronization = Sync::ON_READ, .aggregation = Agg::SUM});
  Variable mean(Tensor(0.f), {.name = "mean", .synchronization = Sync::ON_READ, .aggregation = Agg::MEAN});
  Variable first(Tensor(0.f),
                 {.name = "first", .synchronization = Sync::ON_READ, .aggregation = Agg::ONLY_FIRST_REPLICA});
  Variable count(Tensor(std::int64_t{0}), {.name = "count", .synchronization = Sync::ON_READ, .aggregation = Agg::SUM});
  w.assign(Tensor({1.5f, -2.f}));
  strategy.run([&] {
    const auto r = static_cast<float>(replica_id());
    total.assign(Tensor(3.f + r));
    mean.assign(Tensor(3.f + r));
    first.assign(Tensor(3.f + r));
    count.assign(Tensor(std::int64_t{3} + replica_id()));
  });
  std::int64_t step = 100;
  Checkpoint ckpt;
  ckpt.track("w", w);
  ckpt.track("total", total);
  ckpt.track("mean", mean);
  ckpt.track("first", first);
  ckpt.track("count", count);
  ckpt.track("step", &step);
  return ckpt.save(dir);
}

// Restores into `replicas` replicas of a MirroredStrategy (0: the default
// strategy, plain variables).
class CrossReplicaCountTest : public CheckpointTest, public ::testing::WithParamInterface<int> {};

TEST_P(CrossReplicaCountTest, SavedWithTwoReplicasRestoresIntoAnyCount) {
  const std::string saved = save_on_two_replicas(dir_);
  const int replicas = GetParam();
  std::unique_ptr<MirroredStrategy> strategy;
  if (replicas > 0) strategy = std::make_unique<MirroredStrategy>(cpus(replicas));
  // Created in the strategy's scope (plain variables for the default one).
  auto make = [&](Tensor init, VariableOptions options) {
    if (strategy == nullptr) return Variable(std::move(init), std::move(options));
    auto scope = strategy->scope();
    return Variable(std::move(init), std::move(options));
  };
  Variable w = make(Tensor({9.f, 9.f}), {.name = "w"});
  Variable total = make(Tensor(9.f), {.name = "total", .synchronization = Sync::ON_READ, .aggregation = Agg::SUM});
  Variable mean = make(Tensor(9.f), {.name = "mean", .synchronization = Sync::ON_READ, .aggregation = Agg::MEAN});
  Variable first =
      make(Tensor(9.f), {.name = "first", .synchronization = Sync::ON_READ, .aggregation = Agg::ONLY_FIRST_REPLICA});
  Variable count =
      make(Tensor(std::int64_t{9}), {.name = "count", .synchronization = Sync::ON_READ, .aggregation = Agg::SUM});
  std::int64_t step = 0;
  Checkpoint ckpt;
  ckpt.track("w", w);
  ckpt.track("total", total);
  ckpt.track("mean", mean);
  ckpt.track("first", first);
  ckpt.track("count", count);
  ckpt.track("step", &step);
  ckpt.restore(saved);  // in the default state, outside any scope

  const int n = std::max(replicas, 1);
  EXPECT_EQ(w.num_components(), n);
  for (const Tensor& c : w.values()) EXPECT_EQ(c, Tensor({1.5f, -2.f}));
  // SUM keeps the total (3 + 4): each of the N components holds 7 / N.
  EXPECT_FLOAT_EQ(total.value().item<float>(), 7.f);
  for (const Tensor& c : total.values()) EXPECT_FLOAT_EQ(c.item<float>(), 7.f / static_cast<float>(n));
  EXPECT_FLOAT_EQ(mean.value().item<float>(), 3.5f);
  for (const Tensor& c : mean.values()) EXPECT_FLOAT_EQ(c.item<float>(), 3.5f);
  EXPECT_FLOAT_EQ(first.value().item<float>(), 3.f);
  for (const Tensor& c : first.values()) EXPECT_FLOAT_EQ(c.item<float>(), 3.f);
  // An integer SUM total of 7 gives each of the N components 7 / N,
  // rounded toward zero, and the first also the remainder 7 % N: the total
  // reads 7 again with any N (TF's truncating cast would read 6 with 3 or 4
  // replicas, losing 1).
  const std::vector<Tensor> counts = count.values();
  for (std::size_t i = 0; i < counts.size(); ++i) {
    EXPECT_EQ(counts[i].item<std::int64_t>(), 7 / n + (i == 0 ? 7 % n : 0)) << "component " << i;
  }
  EXPECT_EQ(count.value().item<std::int64_t>(), 7);
  EXPECT_EQ(step, 100);
}

INSTANTIATE_TEST_SUITE_P(Replicas, CrossReplicaCountTest, ::testing::Values(0, 1, 3, 4),
                         [](const ::testing::TestParamInfo<int>& param_info) {
                           return param_info.param == 0 ? std::string("Default")
                                                        : "Mirrored" + std::to_string(param_info.param);
                         });

TEST_F(CheckpointTest, PlainVariableRestoresIntoSyncOnRead) {
  Variable plain(Tensor(2.f), {.name = "v"});
  Checkpoint source;
  source.track("v", plain);
  const std::string saved = source.save(dir_);

  MirroredStrategy strategy(cpus(2));
  Variable sum = [&] {
    auto scope = strategy.scope();
    return Variable(Tensor(0.f), {.name = "v", .synchronization = Sync::ON_READ, .aggregation = Agg::SUM});
  }();
  Checkpoint target;
  target.track("v", sum);
  target.restore(saved);
  for (const Tensor& c : sum.values()) EXPECT_EQ(c, Tensor(1.f));  // TF: 2.0 into two SUM components -> 1.0 each
}

TEST_F(CheckpointTest, SaveAndRestoreWorkInsideTheStrategyScope) {
  MirroredStrategy strategy(cpus(3));
  auto scope = strategy.scope();
  Variable m(Tensor(0.f), {.name = "m", .synchronization = Sync::ON_READ, .aggregation = Agg::SUM});
  strategy.run([&] { m.assign(Tensor(static_cast<float>(replica_id() + 1))); });  // 1 + 2 + 3
  Checkpoint ckpt;
  ckpt.track("m", m);
  const std::string saved = ckpt.save(dir_);
  m.assign(Tensor(0.f));
  ckpt.restore(saved);
  EXPECT_FLOAT_EQ(m.value().item<float>(), 6.f);
}

// ---- Calls that are wrong ----

TEST_F(CheckpointTest, RejectsDuplicateAndEmptyNamesAndBadOptions) {
  std::int64_t a = 0;
  Tensor t;
  Checkpoint ckpt;
  ckpt.track("a", &a);
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { ckpt.track("a", &t); }),
              AllOf(HasSubstr("'a'"), HasSubstr("already tracked")));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { ckpt.track("", &t); }), HasSubstr("non-empty name"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { ckpt.track("n", static_cast<Tensor*>(nullptr)); }),
              HasSubstr("null pointer"));
  EXPECT_THAT(ckpt.tracked_names(), ::testing::ElementsAre("a"));
  EXPECT_THAT(message_of<InvalidArgumentError>([] { Checkpoint bad({.max_to_keep = 0}); }),
              AllOf(HasSubstr("max_to_keep"), HasSubstr("got 0")));
}

TEST_F(CheckpointTest, RaisesInsideAReplicaFunction) {
  MirroredStrategy strategy(cpus(2));
  Variable w = [&] {
    auto scope = strategy.scope();
    return Variable(Tensor(1.f), {.name = "w"});
  }();
  Checkpoint ckpt;
  ckpt.track("w", w);
  const std::string saved = ckpt.save(dir_);
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { strategy.run([&] { ckpt.save(dir_); }); }),
              AllOf(HasSubstr("Checkpoint::save"), HasSubstr("replica function")));
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { strategy.run([&] { ckpt.restore(saved); }); }),
              HasSubstr("Checkpoint::restore"));
  EXPECT_EQ(files_in(dir_), std::vector<std::string>{"ckpt-1.dckpt"});
}

TEST_F(CheckpointTest, RejectsVariablesOfTwoStrategies) {
  MirroredStrategy a(cpus(2));
  MirroredStrategy b(cpus(3));
  auto make = [](Strategy& s, const char* name) {
    auto scope = s.scope();
    return Variable(Tensor(1.f), {.name = name});
  };
  Checkpoint ckpt;
  ckpt.track("x", make(a, "x"));
  ckpt.track("y", make(b, "y"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { ckpt.save(dir_); }),
              AllOf(HasSubstr("different strategies"), HasSubstr("'x'"), HasSubstr("'y'")));
  EXPECT_TRUE(files_in(dir_).empty());
}

// ---- Files: numbering, retention, latest_checkpoint, atomic writes ----

TEST_F(CheckpointTest, KeepsTheLastMaxToKeep) {
  std::int64_t step = 0;
  Checkpoint ckpt({.max_to_keep = 2});
  ckpt.track("step", &step);
  for (int i = 1; i <= 4; ++i) {
    step = i;
    EXPECT_EQ(ckpt.save(dir_), path("ckpt-" + std::to_string(i) + ".dckpt"));
  }
  EXPECT_EQ(files_in(dir_), (std::vector<std::string>{"ckpt-3.dckpt", "ckpt-4.dckpt"}));
  ckpt.restore(path("ckpt-3.dckpt"));
  EXPECT_EQ(step, 3);
  ckpt.restore(*latest_checkpoint(dir_));
  EXPECT_EQ(step, 4);
}

TEST_F(CheckpointTest, KeepsEveryCheckpointWithoutMaxToKeep) {
  std::int64_t step = 0;
  Checkpoint ckpt({.max_to_keep = std::nullopt});
  ckpt.track("step", &step);
  for (int i = 0; i < 7; ++i) ckpt.save(dir_);
  EXPECT_EQ(files_in(dir_).size(), 7u);
}

TEST_F(CheckpointTest, LatestCheckpointAndNumberingFollowTheHighestNumber) {
  EXPECT_EQ(latest_checkpoint(dir_), std::nullopt);
  EXPECT_EQ(latest_checkpoint(path("missing")), std::nullopt);
  std::int64_t step = 5;
  Checkpoint ckpt({.max_to_keep = 3});
  ckpt.track("step", &step);
  ckpt.save(dir_);
  // Numeric order (9 < 10), and names that are not ckpt-<N>.dckpt are ignored
  // (and never deleted).
  fs::copy_file(path("ckpt-1.dckpt"), path("ckpt-9.dckpt"));
  for (const char* other : {"ckpt-07.dckpt", "ckpt-99.dckpt.tmp", "ckpt-x.dckpt", "notes.txt", "ckpt-+5.dckpt"}) {
    write_bytes(path(other), {'x'});
  }
  EXPECT_EQ(latest_checkpoint(dir_), path("ckpt-9.dckpt"));
  EXPECT_EQ(ckpt.save(dir_), path("ckpt-10.dckpt"));
  EXPECT_EQ(latest_checkpoint(dir_), path("ckpt-10.dckpt"));
  EXPECT_EQ(ckpt.save(dir_), path("ckpt-11.dckpt"));
  EXPECT_EQ(files_in(dir_),
            (std::vector<std::string>{"ckpt-+5.dckpt", "ckpt-07.dckpt", "ckpt-10.dckpt", "ckpt-11.dckpt",
                                      "ckpt-9.dckpt", "ckpt-99.dckpt.tmp", "ckpt-x.dckpt", "notes.txt"}));
}

TEST_F(CheckpointTest, LeavesNoTemporaryFileAfterSuccess) {
  Tensor t({1.0, 2.0});
  Checkpoint ckpt;
  ckpt.track("t", &t);
  ckpt.save(dir_);
  ckpt.save(dir_);
  EXPECT_EQ(files_in(dir_), (std::vector<std::string>{"ckpt-1.dckpt", "ckpt-2.dckpt"}));
}

TEST_F(CheckpointTest, UnwritableOrMissingDirectoryRaisesAndLeavesNothing) {
  std::int64_t step = 1;
  Checkpoint ckpt;
  ckpt.track("step", &step);
  // A path whose parent is a regular file (root ignores chmod, not this).
  write_bytes(path("file"), {'a', 'b'});
  const std::string under_file = path("file/sub");
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { ckpt.save(under_file); }),
              AllOf(HasSubstr(under_file), HasSubstr("Not a directory")));
  // The directory is a regular file itself.
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { ckpt.save(path("file")); }), HasSubstr(path("file")));
  const std::string missing = path("missing");
  EXPECT_THAT(message_of<NotFoundError>([&] { ckpt.save(missing); }),
              AllOf(HasSubstr(missing), HasSubstr("No such file or directory")));
  EXPECT_EQ(files_in(dir_), std::vector<std::string>{"file"});
  EXPECT_EQ(read_bytes(path("file")), (std::vector<char>{'a', 'b'}));
  EXPECT_EQ(latest_checkpoint(dir_), std::nullopt);
}

TEST_F(CheckpointTest, FailedCreateOfTheTemporaryFileRaises) {
  // A directory in which nobody, root included, may create a file.
  if (!fs::is_directory("/sys")) GTEST_SKIP() << "no /sys";
  std::int64_t step = 1;
  Checkpoint ckpt;
  ckpt.track("step", &step);
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { ckpt.save("/sys"); }),
              AllOf(HasSubstr("cannot create a temporary file"), HasSubstr("'/sys/.dckpt-")));
}

// Temporary files are created exclusively: another writer's (here, files
// named as this process names its next ones, as a crashed process with the
// same id would have left them) are neither written into nor removed.
TEST_F(CheckpointTest, AnotherWritersTemporaryFilesAreLeftAlone) {
  std::int64_t step = 1;
  Checkpoint ckpt;
  ckpt.track("step", &step);
  ckpt.save(dir_);
  // This process's counter, from the name of a temporary file of its own.
  std::uint64_t k = 0;
  {
    internal::TemporaryFile probe(dir_, {});
    const std::string name = fs::path(probe.name()).filename().string();  // .dckpt-<pid>-<k>.tmp
    const std::size_t dash = name.rfind('-');
    k = std::stoull(name.substr(dash + 1, name.size() - dash - 1 - 4));
  }
  std::vector<std::string> others;
  for (std::uint64_t next = k + 1; next <= k + 500; ++next) {  // the retry gives up after 1,000
    others.push_back(".dckpt-" + std::to_string(::getpid()) + "-" + std::to_string(next) + ".tmp");
    write_bytes(path(others.back()), {'x', 'y'});
  }
  step = 2;
  EXPECT_EQ(ckpt.save(dir_), path("ckpt-2.dckpt"));
  for (const std::string& other : others) EXPECT_EQ(read_bytes(path(other)), (std::vector<char>{'x', 'y'})) << other;
  step = 0;
  ckpt.restore(path("ckpt-2.dckpt"));
  EXPECT_EQ(step, 2);
  EXPECT_EQ(files_in(dir_).size(), others.size() + 2);
}

// Two threads saving into one directory at once: every save gets a number
// of its own and a whole file (before, both wrote one shared temporary file
// and one save could rename the other's half-written bytes into place).
TEST_F(CheckpointTest, ConcurrentSavesEachGetTheirOwnNumberAndAWholeFile) {
  constexpr int kThreads = 2, kSaves = 20;
  std::vector<std::vector<std::string>> paths(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread's own values, large enough that writes take a while.
      Tensor values = Tensor::generate<double>(Shape{1 << 16}, [t](std::span<double> out) {
        for (double& v : out) v = t;
      });
      Checkpoint ckpt({.max_to_keep = std::nullopt});
      ckpt.track("values", &values);
      for (int i = 0; i < kSaves; ++i) paths[static_cast<std::size_t>(t)].push_back(ckpt.save(dir_));
    });
  }
  for (std::thread& t : threads) t.join();
  std::set<std::string> all;
  for (int t = 0; t < kThreads; ++t) {
    for (const std::string& p : paths[static_cast<std::size_t>(t)]) {
      EXPECT_TRUE(all.insert(p).second) << p << " returned twice";
      Tensor values = Tensor::zeros(DType::kFloat64, Shape{1 << 16});
      Checkpoint ckpt;
      ckpt.track("values", &values);
      ckpt.restore(p);  // a whole file: every CRC checks
      EXPECT_EQ(values.data<double>()[0], t) << p;
      EXPECT_EQ(values.data<double>().back(), t) << p;
    }
  }
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kThreads * kSaves));
  EXPECT_EQ(files_in(dir_).size(), all.size());  // no temporary file left
}

// Restoring from something that is not a regular file raises at once (a
// FIFO would otherwise block the open until a writer appeared).
TEST_F(CheckpointTest, RestoringFromAFifoOrADirectoryRaisesAtOnce) {
  std::int64_t step = 1;
  Checkpoint ckpt;
  ckpt.track("step", &step);
  const std::string fifo = path("ckpt-1.dckpt");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { ckpt.restore(fifo); }),
              AllOf(HasSubstr("expected a regular file, got a special file"), HasSubstr(fifo)));
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { load_checkpoint(fifo); }), HasSubstr(fifo));
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { ckpt.restore(dir_); }),
              AllOf(HasSubstr("expected a regular file, got a directory"), HasSubstr(dir_)));
  EXPECT_EQ(step, 1);
}

// A directory that exists but cannot be listed raises: read as "no
// checkpoint", a resumed job would start again from scratch.
TEST_F(CheckpointTest, LatestCheckpointOfAnUnlistableDirectoryRaises) {
  write_bytes(path("file"), {'a'});
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { latest_checkpoint(path("file")); }),
              AllOf(HasSubstr("latest_checkpoint: cannot list the directory"), HasSubstr(path("file")),
                    HasSubstr("Not a directory")));
  std::int64_t step = 1;
  Checkpoint ckpt;
  ckpt.track("step", &step);
  CheckpointManager over_a_file(ckpt, path("file"));
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { over_a_file.latest_checkpoint(); }),
              AllOf(HasSubstr("CheckpointManager: cannot list the directory"), HasSubstr(path("file"))));
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { over_a_file.checkpoints(); }),
              HasSubstr("cannot list the directory"));
  // A missing directory is no checkpoint yet, for both.
  EXPECT_EQ(latest_checkpoint(path("missing")), std::nullopt);
  CheckpointManager manager(ckpt, path("missing"));
  EXPECT_EQ(manager.latest_checkpoint(), std::nullopt);
  // With one worker, the strategy's answer is the directory's own.
  MirroredStrategy two(cpus(2));
  EXPECT_EQ(latest_checkpoint(dir_, two), std::nullopt);
  ckpt.save(dir_);
  EXPECT_EQ(latest_checkpoint(dir_, two), path("ckpt-1.dckpt"));
  // A collective over workers: not from inside a replica function.
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { two.run([&] { latest_checkpoint(dir_, two); }); }),
              HasSubstr("latest_checkpoint: called inside a replica function"));
}

// The temporary file: renamed without replacing (false, nothing changed,
// when the name is taken), again under another name, or over a file;
// removed when never renamed.
TEST_F(CheckpointTest, ATemporaryFileRenamesExclusivelyOrReplaces) {
  const std::vector<std::byte> data{std::byte{1}, std::byte{2}, std::byte{3}};
  write_bytes(path("taken"), {'x'});
  {
    internal::TemporaryFile file(dir_, data);
    EXPECT_EQ(files_in(dir_), (std::vector<std::string>{fs::path(file.name()).filename().string(), "taken"}));
    EXPECT_FALSE(file.commit(path("taken"), /*replace=*/false));
    EXPECT_EQ(read_bytes(path("taken")), std::vector<char>{'x'});
    EXPECT_TRUE(file.commit(path("free"), /*replace=*/false));
  }
  EXPECT_EQ(read_bytes(path("free")), (std::vector<char>{1, 2, 3}));
  {
    internal::TemporaryFile file(dir_, data);
    EXPECT_TRUE(file.commit(path("taken"), /*replace=*/true));
  }
  EXPECT_EQ(read_bytes(path("taken")), (std::vector<char>{1, 2, 3}));
  { internal::TemporaryFile never_renamed(dir_, data); }
  EXPECT_EQ(files_in(dir_), (std::vector<std::string>{"free", "taken"}));
}

// A numbered save's names: above every listed number and above every name
// given before, so a listing that lags behind a number just taken (or a
// file removed since) never names a number twice.
TEST_F(CheckpointTest, NumberedNamesRiseAboveTheListingAndEveryNameGiven) {
  internal::NumberedNames fresh(path("missing"), "ckpt", "test");
  EXPECT_EQ(fresh(), "ckpt-1.dckpt");  // a missing directory lists as empty
  write_bytes(path("ckpt-3.dckpt"), {'x'});
  write_bytes(path("other-7.dckpt"), {'x'});  // another name's numbers do not count
  internal::NumberedNames next(dir_, "ckpt", "test");
  EXPECT_EQ(next(), "ckpt-4.dckpt");
  EXPECT_EQ(next(), "ckpt-5.dckpt");  // 4 is not listed (yet): still not given again
  write_bytes(path("ckpt-9.dckpt"), {'x'});
  EXPECT_EQ(next(), "ckpt-10.dckpt");
  fs::remove(path("ckpt-9.dckpt"));
  fs::remove(path("ckpt-3.dckpt"));
  EXPECT_EQ(next(), "ckpt-11.dckpt");
  // A directory that cannot be listed raises, naming the call.
  internal::NumberedNames not_a_directory(path("ckpt-10.dckpt.file"), "ckpt", "Checkpoint::save");
  write_bytes(path("ckpt-10.dckpt.file"), {'x'});
  EXPECT_THAT(message_of<FailedPreconditionError>([&] { not_a_directory(); }),
              HasSubstr("Checkpoint::save: cannot list the directory"));
}

// Names are stored with a 32-bit length but read back only up to 64 KiB:
// a longer one is refused when tracked, not found unreadable at restore.
TEST_F(CheckpointTest, ANameLongerThanTheFormatAllowsIsRefusedAtTrack) {
  std::int64_t a = 0;
  Checkpoint ckpt;
  const std::string longest(std::size_t{1} << 16, 'n');
  ckpt.track(longest, &a);
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { ckpt.track(longest + "n", &a); }),
              AllOf(HasSubstr("at most 65536 bytes"), HasSubstr("got one of 65537 bytes")));
  a = 3;
  const std::string saved = ckpt.save(dir_);
  a = 0;
  ckpt.restore(saved);
  EXPECT_EQ(a, 3);
}

// ---- The file layout (docs/checkpoint_format.md) ----

TEST_F(CheckpointTest, FileLayoutIsTheDocumentedOne) {
  Tensor t(std::vector<std::int32_t>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  std::int64_t step = -2;
  Checkpoint ckpt;
  ckpt.track("t", &t);
  ckpt.track("step", &step);
  const std::vector<char> b = read_bytes(ckpt.save(dir_));
  ASSERT_GE(b.size(), 28u);
  EXPECT_EQ(std::string(b.data(), 8), "DISTCKPT");
  EXPECT_EQ(le32(b, 8), Checkpoint::kFormatVersion);
  EXPECT_EQ(le32(b, 12), 2u);        // entries
  EXPECT_EQ(le64(b, 16), b.size());  // file length
  EXPECT_EQ(le32(b, 24), internal::crc32c(std::as_bytes(std::span<const char>(b.data(), 24))));
  // Entry 0: name length, name, dtype (2 = int32), rank, dims, data length, data, CRC32C.
  std::size_t at = 28;
  EXPECT_EQ(le32(b, at), 1u);
  EXPECT_EQ(b[at + 4], 't');
  at += 5;
  EXPECT_EQ(le32(b, at), 2u);
  EXPECT_EQ(le32(b, at + 4), 2u);
  EXPECT_EQ(le64(b, at + 8), 2u);
  EXPECT_EQ(le64(b, at + 16), 3u);
  EXPECT_EQ(le64(b, at + 24), 24u);
  EXPECT_EQ(le32(b, at + 32), 1u);  // first element
  EXPECT_EQ(le32(b, at + 32 + 20), 6u);
  const std::size_t end = at + 32 + 24;
  EXPECT_EQ(le32(b, end), internal::crc32c(std::as_bytes(std::span<const char>(b.data() + 28, end - 28))));
  // Entry 1: "step", int64 (3), rank 0, 8 bytes.
  at = end + 4;
  EXPECT_EQ(le32(b, at), 4u);
  EXPECT_EQ(std::string(b.data() + at + 4, 4), "step");
  EXPECT_EQ(le32(b, at + 8), 3u);
  EXPECT_EQ(le32(b, at + 12), 0u);
  EXPECT_EQ(le64(b, at + 16), 8u);
  EXPECT_EQ(static_cast<std::int64_t>(le64(b, at + 24)), -2);
  EXPECT_EQ(at + 32 + 4, b.size());
}

// ---- Failed restores change nothing ----

// A job's state, a checkpoint of it, and then different values in memory:
// every failed restore must leave those values as they are.
class FailedRestoreTest : public CheckpointTest {
 protected:
  void SetUp() override {
    CheckpointTest::SetUp();
    ckpt_.track("dense/kernel", kernel_);
    ckpt_.track("metric", metric_);
    ckpt_.track("step", &step_);
    ckpt_.track("rng", &rng_);
    saved_ = ckpt_.save(dir_);
    bytes_ = read_bytes(saved_);
    kernel_.assign(Tensor({-1.f, -1.f, -1.f}));
    metric_.assign(Tensor(-5.0));
    step_ = -7;
    rng_ = Tensor({-9, -9});
  }

  void expect_untouched() {
    EXPECT_EQ(kernel_.value(), Tensor({-1.f, -1.f, -1.f}));
    EXPECT_EQ(metric_.value(), Tensor(-5.0));
    EXPECT_EQ(step_, -7);
    EXPECT_EQ(rng_, Tensor({-9, -9}));
  }

  // Writes `bytes` as a new file and restores from it, expecting error E.
  template <class E>
  std::string restore_bytes(const std::vector<char>& bytes) {
    const std::string p = path("damaged.dckpt");
    write_bytes(p, bytes);
    std::string message = message_of<E>([&] { ckpt_.restore(p); });
    expect_untouched();
    return message;
  }

  // Offset of the first data byte of the entry named `name` (rank `rank`).
  std::size_t data_offset(const std::string& name, std::size_t rank) {
    return find(bytes_, name) + name.size() + 4 + 4 + 8 * rank + 8;
  }

  Variable kernel_{Tensor({1.f, 2.f, 3.f}), {.name = "kernel"}};
  Variable metric_{Tensor(0.5), {.name = "metric"}};
  std::int64_t step_ = 3;
  Tensor rng_{11, 12};
  Checkpoint ckpt_;
  std::string saved_;
  std::vector<char> bytes_;
};

TEST_F(FailedRestoreTest, TheUndamagedFileRestores) {
  ckpt_.restore(saved_);
  EXPECT_EQ(kernel_.value(), Tensor({1.f, 2.f, 3.f}));
  EXPECT_EQ(metric_.value(), Tensor(0.5));
  EXPECT_EQ(step_, 3);
  EXPECT_EQ(rng_, Tensor({11, 12}));
}

TEST_F(FailedRestoreTest, LoadCheckpointListsEveryEntryInSavedOrder) {
  const auto entries = load_checkpoint(saved_);
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[0].first, "dense/kernel");
  EXPECT_EQ(entries[0].second, Tensor({1.f, 2.f, 3.f}));
  EXPECT_EQ(entries[1].first, "metric");
  EXPECT_EQ(entries[1].second, Tensor(0.5));
  EXPECT_EQ(entries[2].first, "step");
  EXPECT_EQ(entries[2].second, Tensor(std::int64_t{3}));
  EXPECT_EQ(entries[3].first, "rng");
  EXPECT_EQ(entries[3].second, Tensor({11, 12}));
  // It checks the file as restore() does.
  std::vector<char> damaged = bytes_;
  damaged[data_offset("rng", 1) + 1] ^= 0x10;
  write_bytes(path("damaged.dckpt"), damaged);
  EXPECT_THAT(message_of<DataLossError>([&] { load_checkpoint(path("damaged.dckpt")); }),
              AllOf(HasSubstr("entry 3 ('rng')"), HasSubstr("CRC32C")));
  EXPECT_THROW(load_checkpoint(path("missing.dckpt")), NotFoundError);
}

TEST_F(FailedRestoreTest, Truncated) {
  const std::size_t size = bytes_.size();
  const std::size_t mid_kernel_data = data_offset("dense/kernel", 1) + 5;
  for (const std::size_t keep : {std::size_t{0}, std::size_t{4}, std::size_t{20}, std::size_t{27}}) {
    SCOPED_TRACE("truncated to " + std::to_string(keep));
    const std::string m = restore_bytes<DataLossError>({bytes_.begin(), bytes_.begin() + static_cast<long>(keep)});
    EXPECT_THAT(m, AllOf(HasSubstr("truncated"), HasSubstr("header"), HasSubstr("got " + std::to_string(keep))));
  }
  for (const std::size_t keep : {std::size_t{28}, std::size_t{33}, mid_kernel_data, size / 2, size - 1}) {
    SCOPED_TRACE("truncated to " + std::to_string(keep));
    const std::string m = restore_bytes<DataLossError>({bytes_.begin(), bytes_.begin() + static_cast<long>(keep)});
    EXPECT_THAT(m, AllOf(HasSubstr("truncated"), HasSubstr("expected " + std::to_string(size) + " bytes"),
                         HasSubstr("got " + std::to_string(keep)), HasSubstr(path("damaged.dckpt"))));
  }
}

TEST_F(FailedRestoreTest, TrailingBytes) {
  std::vector<char> longer = bytes_;
  longer.push_back('\0');
  EXPECT_THAT(restore_bytes<DataLossError>(longer),
              AllOf(HasSubstr("longer than written"), HasSubstr("got " + std::to_string(longer.size()))));
}

TEST_F(FailedRestoreTest, FlippedDataByteNamesTheEntry) {
  std::vector<char> damaged = bytes_;
  damaged[data_offset("rng", 1) + 1] ^= 0x10;
  EXPECT_THAT(restore_bytes<DataLossError>(damaged), AllOf(HasSubstr("entry 3 ('rng')"), HasSubstr("CRC32C")));
  damaged = bytes_;
  damaged[data_offset("dense/kernel", 1)] ^= 0x01;
  EXPECT_THAT(restore_bytes<DataLossError>(damaged), AllOf(HasSubstr("'dense/kernel'"), HasSubstr("corrupted")));
}

TEST_F(FailedRestoreTest, FlippedNameOrLengthByte) {
  std::vector<char> damaged = bytes_;
  damaged[find(bytes_, "metric") + 2] = 'X';
  EXPECT_THAT(restore_bytes<DataLossError>(damaged), AllOf(HasSubstr("entry 1 ('meXric')"), HasSubstr("CRC32C")));
  // The name length of entry 0: the entry no longer parses or checks.
  damaged = bytes_;
  damaged[28] ^= 0x02;
  EXPECT_THAT(restore_bytes<DataLossError>(damaged), HasSubstr("entry 0"));
  // The rank of "step": 0 -> 0x40.
  damaged = bytes_;
  damaged[find(bytes_, "step") + 4 + 4] = 0x40;
  EXPECT_THAT(restore_bytes<DataLossError>(damaged), AllOf(HasSubstr("'step'"), HasSubstr("rank 64")));
}

TEST_F(FailedRestoreTest, FlippedHeaderByte) {
  for (const std::size_t at : {std::size_t{12}, std::size_t{17}, std::size_t{25}}) {
    SCOPED_TRACE("byte " + std::to_string(at));
    std::vector<char> damaged = bytes_;
    damaged[at] ^= 0x04;
    EXPECT_THAT(restore_bytes<DataLossError>(damaged), AllOf(HasSubstr("header is corrupted"), HasSubstr("CRC32C")));
  }
}

TEST_F(FailedRestoreTest, WrongMagicOrNotACheckpoint) {
  std::vector<char> damaged = bytes_;
  damaged[0] = 'X';
  EXPECT_THAT(restore_bytes<DataLossError>(damaged), HasSubstr("not a distribute checkpoint"));
  const std::string text = "step: 3\n";
  EXPECT_THAT(restore_bytes<DataLossError>({text.begin(), text.end()}), HasSubstr("not a distribute checkpoint"));
}

TEST_F(FailedRestoreTest, WrongVersion) {
  std::vector<char> newer = bytes_;
  newer[8] = 2;
  EXPECT_THAT(restore_bytes<FailedPreconditionError>(newer),
              AllOf(HasSubstr("format version 2"), HasSubstr("reads version 1")));
  std::vector<char> older = bytes_;
  older[8] = 0;
  EXPECT_THAT(restore_bytes<FailedPreconditionError>(older), HasSubstr("format version 0"));
}

TEST_F(FailedRestoreTest, MissingFile) {
  const std::string missing = path("ckpt-77.dckpt");
  EXPECT_THAT(message_of<NotFoundError>([&] { ckpt_.restore(missing); }),
              AllOf(HasSubstr(missing), HasSubstr("No such file or directory")));
  expect_untouched();
}

// A checkpoint of other names, shapes or dtypes, with valid CRCs.
TEST_F(FailedRestoreTest, MismatchedNames) {
  Variable other(Tensor({0.f, 0.f, 0.f}), {.name = "other"});
  Variable metric(Tensor(1.0), {.name = "metric"});
  std::int64_t step = 1;
  Tensor rng({1, 2});
  {
    Checkpoint renamed;  // "dense/kernel" saved as "dense/kernel_1"
    renamed.track("dense/kernel_1", other);
    renamed.track("metric", metric);
    renamed.track("step", &step);
    renamed.track("rng", &rng);
    const std::vector<char> file = read_bytes(renamed.save(dir_));
    EXPECT_THAT(restore_bytes<NotFoundError>(file), AllOf(HasSubstr("no entry"), HasSubstr("'dense/kernel'")));
  }
  {
    Checkpoint fewer;  // no "rng"
    fewer.track("dense/kernel", other);
    fewer.track("metric", metric);
    fewer.track("step", &step);
    const std::vector<char> file = read_bytes(fewer.save(dir_));
    EXPECT_THAT(restore_bytes<NotFoundError>(file), HasSubstr("'rng'"));
  }
  {
    Checkpoint more;  // an extra "epoch"
    std::int64_t epoch = 2;
    more.track("dense/kernel", other);
    more.track("metric", metric);
    more.track("step", &step);
    more.track("rng", &rng);
    more.track("epoch", &epoch);
    const std::vector<char> file = read_bytes(more.save(dir_));
    EXPECT_THAT(restore_bytes<InvalidArgumentError>(file), AllOf(HasSubstr("'epoch'"), HasSubstr("does not track")));
  }
}

TEST_F(FailedRestoreTest, MismatchedShapesAndDtypes) {
  std::int64_t step = 1;
  Tensor rng({1, 2});
  auto file_with = [&](Variable kernel, Variable metric, Tensor* rng_value) {
    Checkpoint c;
    c.track("dense/kernel", std::move(kernel));
    c.track("metric", std::move(metric));
    c.track("step", &step);
    c.track("rng", rng_value);
    return read_bytes(c.save(dir_));
  };
  const Variable metric(Tensor(1.0), {.name = "metric"});
  EXPECT_THAT(restore_bytes<InvalidArgumentError>(file_with(Variable(Tensor({1.f, 2.f})), metric, &rng)),
              AllOf(HasSubstr("'dense/kernel'"), HasSubstr("saved with shape (2,) dtype float32"),
                    HasSubstr("tracked value has shape (3,) dtype float32")));
  EXPECT_THAT(restore_bytes<InvalidArgumentError>(file_with(Variable(Tensor({1.0, 2.0, 3.0})), metric, &rng)),
              AllOf(HasSubstr("'dense/kernel'"), HasSubstr("dtype float64"), HasSubstr("dtype float32")));
  Tensor rng64(std::vector<std::int64_t>{1, 2}, Shape{2});
  EXPECT_THAT(restore_bytes<InvalidArgumentError>(file_with(Variable(Tensor({1.f, 2.f, 3.f})), metric, &rng64)),
              AllOf(HasSubstr("'rng'"), HasSubstr("dtype int64"), HasSubstr("dtype int32")));
  Tensor matrix({{1, 2}});
  EXPECT_THAT(restore_bytes<InvalidArgumentError>(file_with(Variable(Tensor({1.f, 2.f, 3.f})), metric, &matrix)),
              AllOf(HasSubstr("'rng'"), HasSubstr("(1, 2)"), HasSubstr("(2,)")));
}

// ---- Crafted files: valid CRCs around contents no writer produces ----

struct CraftedEntry {
  std::string name;
  std::uint32_t dtype;  // the format's code: 0 float32, 1 float64, 2 int32, 3 int64
  std::vector<std::uint64_t> dims;
  std::vector<char> data;
};

void put_le(std::vector<char>& b, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

std::uint32_t crc_of(const std::vector<char>& b, std::size_t from, std::size_t to) {
  return internal::crc32c(std::as_bytes(std::span<const char>(b.data() + from, to - from)));
}

// A version-1 file of `entries` (docs/checkpoint_format.md) whose length and
// CRC32Cs are right, whatever the entries hold.
std::vector<char> crafted_checkpoint(const std::vector<CraftedEntry>& entries) {
  std::vector<char> b(std::begin("DISTCKPT"), std::end("DISTCKPT") - 1);
  put_le(b, Checkpoint::kFormatVersion, 4);
  put_le(b, entries.size(), 4);
  put_le(b, 0, 8);  // the length, set below
  put_le(b, 0, 4);  // the header CRC, set below
  for (const CraftedEntry& e : entries) {
    const std::size_t start = b.size();
    put_le(b, e.name.size(), 4);
    b.insert(b.end(), e.name.begin(), e.name.end());
    put_le(b, e.dtype, 4);
    put_le(b, e.dims.size(), 4);
    for (const std::uint64_t d : e.dims) put_le(b, d, 8);
    put_le(b, e.data.size(), 8);
    b.insert(b.end(), e.data.begin(), e.data.end());
    put_le(b, crc_of(b, start, b.size()), 4);
  }
  std::vector<char> length;
  put_le(length, b.size(), 8);
  std::copy(length.begin(), length.end(), b.begin() + 16);
  std::vector<char> crc;
  put_le(crc, crc_of(b, 0, 24), 4);
  std::copy(crc.begin(), crc.end(), b.begin() + 24);
  return b;
}

TEST_F(CheckpointTest, CraftedFileReads) {
  const std::string p = path("crafted.dckpt");
  write_bytes(p, crafted_checkpoint({{"x", 2, {2}, {1, 0, 0, 0, 2, 0, 0, 0}}}));
  const auto entries = load_checkpoint(p);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].first, "x");
  EXPECT_EQ(entries[0].second, Tensor({1, 2}));
}

// A shape whose running product overflows int64 before a 0 makes it empty:
// the file check and Tensor's are one (core/element_count.h), so this is the
// checkpoint's DataLossError naming file and entry, not Tensor's
// InvalidArgumentError (issue 12, item 14).
TEST_F(CheckpointTest, CraftedShapeWithTooManyElementsIsDataLoss) {
  const std::string p = path("crafted.dckpt");
  write_bytes(p, crafted_checkpoint({{"ok", 3, {}, std::vector<char>(8)},
                                     {"huge", 0, {std::uint64_t{1} << 31, std::uint64_t{1} << 32, 0}, {}}}));
  std::int64_t ok = 0;
  Tensor huge;
  Checkpoint ckpt;
  ckpt.track("ok", &ok);
  ckpt.track("huge", &huge);
  for (const std::string& m : {message_of<DataLossError>([&] { load_checkpoint(p); }),
                               message_of<DataLossError>([&] { ckpt.restore(p); })}) {
    EXPECT_THAT(m, AllOf(HasSubstr("checkpoint " + p), HasSubstr("entry 1 ('huge')"),
                         HasSubstr("impossible shape (2147483648, 4294967296, 0)"),
                         HasSubstr("at most 2^63 - 1 elements")));
  }
  // Elements that fit, bytes that do not: 2^61 float64s.
  write_bytes(p, crafted_checkpoint({{"big", 1, {std::uint64_t{1} << 61}, {}}}));
  EXPECT_THAT(message_of<DataLossError>([&] { load_checkpoint(p); }),
              AllOf(HasSubstr("entry 0 ('big')"), HasSubstr("needs more than 2^63 - 1 bytes")));
  // A dimension beyond int64.
  write_bytes(p, crafted_checkpoint({{"neg", 2, {~std::uint64_t{0}}, {}}}));
  EXPECT_THAT(message_of<DataLossError>([&] { load_checkpoint(p); }),
              AllOf(HasSubstr("entry 0 ('neg')"), HasSubstr("impossible dimension 18446744073709551615")));
}

}  // namespace
}  // namespace distribute
