// CheckpointManager (TF's tf.train.CheckpointManager) and the Checkpoint
// pieces it rests on: write(path) and restore with expect_partial. The
// interval case follows TF's checkpoint_management_test.py
// (testCheckpointInterval).
#include "distribute/checkpoint_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "distribute/errors.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::message_of;
using testing::TempDir;

std::vector<std::string> names(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const std::string& p : paths) out.push_back(fs::path(p).filename().string());
  return out;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Sets the file's modification time (its save time, for the manager) to
// `seconds` after `base`.
void set_saved_at(const std::string& path, std::chrono::system_clock::time_point base, double seconds) {
  const auto t =
      base + std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(seconds));
  fs::last_write_time(path, std::chrono::file_clock::from_sys(t));
}

class CheckpointManagerTest : public ::testing::Test {
 protected:
  TempDir temp_{"checkpoint_manager_test"};
  std::string dir_ = temp_ / "run";  // created by the first save
  std::int64_t step_ = 0;
};

TEST_F(CheckpointManagerTest, NumbersFilesAndKeepsTheNewest) {
  Checkpoint ckpt;
  ckpt.track("step", &step_);
  CheckpointManager manager(ckpt, dir_, {.max_to_keep = 2});
  EXPECT_EQ(manager.latest_checkpoint(), std::nullopt);
  for (int i = 1; i <= 3; ++i) {
    step_ = 10 * i;
    EXPECT_EQ(manager.save(), temp_ / ("run/ckpt-" + std::to_string(i) + ".dckpt"));
  }
  EXPECT_EQ(names(manager.checkpoints()), (std::vector<std::string>{"ckpt-2.dckpt", "ckpt-3.dckpt"}));
  EXPECT_EQ(files_in(dir_), (std::vector<std::string>{"ckpt-2.dckpt", "ckpt-3.dckpt"}));
  EXPECT_EQ(manager.latest_checkpoint(), temp_ / "run/ckpt-3.dckpt");
  EXPECT_EQ(manager.directory(), dir_);
  // An explicit number (TF: the step); equal overwrites, below the latest is refused.
  EXPECT_EQ(manager.save(30), temp_ / "run/ckpt-30.dckpt");
  EXPECT_EQ(manager.save(30), temp_ / "run/ckpt-30.dckpt");
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { manager.save(7); }),
              HasSubstr("checkpoint_number 7 is below the latest checkpoint's"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { manager.save(-1); }), HasSubstr(">= 0"));
  EXPECT_EQ(files_in(dir_), (std::vector<std::string>{"ckpt-3.dckpt", "ckpt-30.dckpt"}));
  // Another name: its own files, numbered apart.
  CheckpointManager other(ckpt, dir_, {.max_to_keep = std::nullopt, .checkpoint_name = "model"});
  EXPECT_EQ(other.save(), temp_ / "run/model-1.dckpt");
  EXPECT_EQ(manager.latest_checkpoint(), temp_ / "run/ckpt-30.dckpt");
}

TEST_F(CheckpointManagerTest, SavesEveryIntervalOfTheStepCounterAsTF) {
  Checkpoint ckpt;
  ckpt.track("step", &step_);
  CheckpointManager manager(
      ckpt, dir_, {.max_to_keep = std::nullopt, .step_counter = [this] { return step_; }, .checkpoint_interval = 2});
  EXPECT_EQ(manager.checkpoint_interval(), 2);
  EXPECT_TRUE(manager.save().has_value());  // step 0: the first save
  step_ = 1;
  EXPECT_FALSE(manager.save().has_value());  // 1 step since
  step_ = 2;
  EXPECT_TRUE(manager.save().has_value());
  EXPECT_FALSE(manager.save().has_value());  // the same step again
  step_ = 3;
  EXPECT_FALSE(manager.save().has_value());
  EXPECT_TRUE(manager.save(std::nullopt, /*check_interval=*/false).has_value());
  EXPECT_EQ(names(manager.checkpoints()), (std::vector<std::string>{"ckpt-1.dckpt", "ckpt-2.dckpt", "ckpt-3.dckpt"}));
}

TEST_F(CheckpointManagerTest, RestoreOrInitializeRestoresTheLatestOrInitializes) {
  int initialized = 0;
  {
    Checkpoint ckpt;
    ckpt.track("step", &step_);
    CheckpointManager manager(ckpt, dir_, {.init_fn = [&] { ++initialized; }});
    EXPECT_EQ(manager.restore_or_initialize(), std::nullopt);
    EXPECT_EQ(initialized, 1);
    step_ = 41;
    manager.save();
    step_ = 42;
    manager.save();
  }
  std::int64_t restored = 0;
  Checkpoint ckpt;
  ckpt.track("step", &restored);
  CheckpointManager manager(
      ckpt, dir_,
      {.step_counter = [&] { return restored; }, .checkpoint_interval = 5, .init_fn = [&] { ++initialized; }});
  EXPECT_EQ(manager.restore_or_initialize(), temp_ / "run/ckpt-2.dckpt");
  EXPECT_EQ(restored, 42);
  EXPECT_EQ(initialized, 1);
  // The restored step counts as the last save's.
  restored = 46;
  EXPECT_FALSE(manager.save().has_value());
  restored = 47;
  EXPECT_EQ(manager.save(), temp_ / "run/ckpt-3.dckpt");
}

TEST_F(CheckpointManagerTest, KeepsOneFileEveryNHoursForGoodAcrossRestarts) {
  Checkpoint ckpt;
  ckpt.track("step", &step_);
  const auto base = std::chrono::system_clock::now();
  const CheckpointManagerOptions options{.max_to_keep = 1, .keep_checkpoint_every_n_hours = 1.0};
  CheckpointManager manager(ckpt, dir_, options);
  const auto path = [&](int n) { return temp_ / ("run/ckpt-" + std::to_string(n) + ".dckpt"); };
  manager.save();
  set_saved_at(path(1), base, 600);  // 10 minutes after the manager was made: not an hour
  manager.save();
  EXPECT_FALSE(fs::exists(path(1)));
  set_saved_at(path(2), base, 2 * 3600);  // two hours: kept for good
  manager.save();
  set_saved_at(path(3), base, 2.5 * 3600);  // half an hour after the last kept
  manager.save();
  set_saved_at(path(4), base, 3.1 * 3600);  // 1.1 hours after it: kept
  manager.save();
  EXPECT_EQ(files_in(dir_), (std::vector<std::string>{"ckpt-2.dckpt", "ckpt-4.dckpt", "ckpt-5.dckpt"}));
  EXPECT_EQ(names(manager.checkpoints()), std::vector<std::string>{"ckpt-5.dckpt"});

  // A restarted job: files 2 and 4 stay kept, 4 the last one kept.
  CheckpointManager restarted(ckpt, dir_, options);
  EXPECT_EQ(names(restarted.checkpoints()), std::vector<std::string>{"ckpt-5.dckpt"});
  set_saved_at(path(5), base, 3.5 * 3600);  // 0.4 hours after file 4
  restarted.save();
  set_saved_at(path(6), base, 4.2 * 3600);  // 1.1 hours after file 4
  restarted.save();
  EXPECT_EQ(files_in(dir_), (std::vector<std::string>{"ckpt-2.dckpt", "ckpt-4.dckpt", "ckpt-6.dckpt", "ckpt-7.dckpt"}));
}

TEST_F(CheckpointManagerTest, BadOptionsAreNamed) {
  Checkpoint ckpt;
  const auto made = [&](CheckpointManagerOptions o, std::string dir = "d") {
    return message_of<InvalidArgumentError>([&] { CheckpointManager m(ckpt, dir, std::move(o)); });
  };
  EXPECT_THAT(made({.max_to_keep = 0}), HasSubstr("max_to_keep >= 1"));
  EXPECT_THAT(made({.keep_checkpoint_every_n_hours = -1.0}), HasSubstr("keep_checkpoint_every_n_hours > 0"));
  EXPECT_THAT(made({.checkpoint_name = "a/b"}), HasSubstr("checkpoint_name without '/'"));
  EXPECT_THAT(made({.checkpoint_interval = 5}), HasSubstr("needs a step_counter"));
  EXPECT_THAT(made({.step_counter = [] { return std::int64_t{0}; }, .checkpoint_interval = 0}),
              HasSubstr("checkpoint_interval > 0"));
  EXPECT_THAT(made({}, ""), HasSubstr("expected a directory"));
}

TEST_F(CheckpointManagerTest, AFailedSaveChangesNothingAndIsRetried) {
  Checkpoint ckpt;
  ckpt.track("step", &step_);
  CheckpointManager manager(
      ckpt, dir_, {.max_to_keep = 2, .step_counter = [this] { return step_; }, .checkpoint_interval = 10});
  step_ = 0;
  EXPECT_EQ(manager.save(5), temp_ / "run/ckpt-5.dckpt");
  step_ = 10;
  EXPECT_THROW(manager.save(3), InvalidArgumentError);  // refused before anything is written
  EXPECT_EQ(files_in(dir_), std::vector<std::string>{"ckpt-5.dckpt"});
  // The failed save did not count as step 10's: the same step saves now.
  EXPECT_EQ(manager.save(12), temp_ / "run/ckpt-12.dckpt");
  // A file where the directory should be: nothing is created anywhere.
  CheckpointManager blocked(ckpt, temp_ / "run/ckpt-5.dckpt/sub", {});
  EXPECT_THROW(blocked.save(), FailedPreconditionError);
  EXPECT_EQ(files_in(dir_), (std::vector<std::string>{"ckpt-12.dckpt", "ckpt-5.dckpt"}));
}

TEST_F(CheckpointManagerTest, WithoutKeepHoursARestartedManagerDeletesOldFilesAtItsFirstSave) {
  Checkpoint ckpt({.max_to_keep = std::nullopt});
  ckpt.track("step", &step_);
  fs::create_directories(dir_);
  for (int i = 0; i < 3; ++i) ckpt.save(dir_);  // e.g. left by a job with a larger max_to_keep
  CheckpointManager manager(ckpt, dir_, {.max_to_keep = 1});
  EXPECT_EQ(names(manager.checkpoints()),
            (std::vector<std::string>{"ckpt-1.dckpt", "ckpt-2.dckpt", "ckpt-3.dckpt"}));
  manager.save();
  EXPECT_EQ(files_in(dir_), std::vector<std::string>{"ckpt-4.dckpt"});
}

TEST(CheckpointWrite, WritesExactlyThePathAndDeletesNothing) {
  TempDir temp("checkpoint_write_test");
  std::int64_t step = 5;
  Checkpoint ckpt({.max_to_keep = 1});
  ckpt.track("step", &step);
  ckpt.save(temp.path());
  EXPECT_EQ(ckpt.write(temp / "custom.dckpt"), temp / "custom.dckpt");
  EXPECT_EQ(ckpt.write(temp / "other.bin"), temp / "other.bin");
  EXPECT_EQ(files_in(temp.path()), (std::vector<std::string>{"ckpt-1.dckpt", "custom.dckpt", "other.bin"}));
  step = 0;
  ckpt.restore(temp / "other.bin");
  EXPECT_EQ(step, 5);
  EXPECT_THROW(ckpt.write(temp / "missing/x.dckpt"), NotFoundError);
}

TEST(CheckpointRestore, ExpectPartialLeavesUntrackedEntriesOutAndStillChecksTheRest) {
  TempDir temp("checkpoint_partial_test");
  std::int64_t step = 7;
  Tensor weights{1.f, 2.f};
  Checkpoint full;
  full.track("step", &step);
  full.track("weights", &weights);
  const std::string path = full.save(temp.path());

  std::int64_t only_step = 0;
  Checkpoint part;
  part.track("step", &only_step);
  EXPECT_THAT(message_of<InvalidArgumentError>([&] { part.restore(path); }),
              HasSubstr("RestoreOptions::expect_partial"));
  EXPECT_EQ(only_step, 0);
  part.restore(path, {.expect_partial = true});
  EXPECT_EQ(only_step, 7);

  // A tracked name the file lacks, or a wrong shape, still fails with nothing changed.
  std::int64_t missing = 3;
  only_step = 0;
  Checkpoint wider;
  wider.track("step", &only_step);
  wider.track("epoch", &missing);
  EXPECT_THROW(wider.restore(path, {.expect_partial = true}), NotFoundError);
  EXPECT_EQ(only_step, 0);
  Tensor wrong{1.f, 2.f, 3.f};
  Checkpoint shaped;
  shaped.track("weights", &wrong);
  EXPECT_THROW(shaped.restore(path, {.expect_partial = true}), InvalidArgumentError);
  EXPECT_EQ(wrong, (Tensor{1.f, 2.f, 3.f}));
}

}  // namespace
}  // namespace distribute
