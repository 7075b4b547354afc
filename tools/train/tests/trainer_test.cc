// distribute-train: data-parallel training equals single-replica training,
// it learns the digits, an interrupted and resumed run ends where an
// uninterrupted one does, and the program rejects bad input.
#include "trainer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <typeinfo>
#include <vector>

extern char** environ;

namespace distribute::train {
namespace {

namespace fs = std::filesystem;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// A fresh directory, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("distribute-train-" + std::string(info->name()) + "-" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str(const std::string& child = "") const { return (child.empty() ? path_ : path_ / child).string(); }

 private:
  fs::path path_;
};

TrainConfig small_config(OptimizerKind optimizer, int replicas) {
  TrainConfig config;
  config.strategy = StrategyKind::kMirrored;
  config.replicas = replicas;
  config.batch_size = 60;
  config.epochs = 1;
  config.max_steps_per_epoch = 12;
  config.optimizer = optimizer;
  config.seed = 7;
  return config;
}

void expect_same_parameters(const std::vector<Tensor>& expected, const std::vector<Tensor>& got, double rtol,
                            double atol, const std::string& what) {
  ASSERT_EQ(expected.size(), got.size()) << what;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(allclose(got[i], expected[i], rtol, atol)) << what << ": parameter " << i << " differs";
  }
}

bool any_differs(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!allclose(a[i], b[i], 0, 1e-4)) return true;
  }
  return false;
}

// Data-parallel SGD on N replicas with the loss scaled by the global batch
// is SGD on the global batch: the final weights agree with one replica's.
TEST(TrainerTest, ReplicaCountsGiveTheSameWeightsWithSgd) {
  TrainConfig initial = small_config(OptimizerKind::kSgd, 1);
  initial.max_steps_per_epoch = 0;
  const TrainResult untrained = train(initial);
  const TrainResult one = train(small_config(OptimizerKind::kSgd, 1));
  EXPECT_EQ(one.steps, 12);
  ASSERT_TRUE(any_differs(untrained.parameters, one.parameters)) << "training did not change the weights";
  for (int replicas : {2, 3, 4}) {
    const TrainResult many = train(small_config(OptimizerKind::kSgd, replicas));
    EXPECT_EQ(many.steps, 12);
    EXPECT_TRUE(many.diverged_variables.empty())
        << replicas << " replicas: copies differ, first " << many.diverged_variables.front();
    expect_same_parameters(one.parameters, many.parameters, 1e-4, 1e-5,
                           "SGD, " + std::to_string(replicas) + " replicas vs 1");
    EXPECT_NEAR(many.history.at(0).loss, one.history.at(0).loss, 1e-5);
    EXPECT_DOUBLE_EQ(many.history.at(0).accuracy, one.history.at(0).accuracy);
  }
}

TEST(TrainerTest, ReplicaCountsGiveTheSameWeightsWithAdam) {
  TrainConfig initial = small_config(OptimizerKind::kAdam, 1);
  initial.max_steps_per_epoch = 0;
  const TrainResult untrained = train(initial);
  const TrainResult one = train(small_config(OptimizerKind::kAdam, 1));
  EXPECT_EQ(one.steps, 12);
  ASSERT_TRUE(any_differs(untrained.parameters, one.parameters)) << "training did not change the weights";
  for (int replicas : {2, 3, 4}) {
    const TrainResult many = train(small_config(OptimizerKind::kAdam, replicas));
    EXPECT_EQ(many.steps, 12);
    EXPECT_TRUE(many.diverged_variables.empty())
        << replicas << " replicas: copies differ, first " << many.diverged_variables.front();
    expect_same_parameters(one.parameters, many.parameters, 1e-4, 1e-5,
                           "Adam, " + std::to_string(replicas) + " replicas vs 1");
  }
}

// A whole epoch, including its final partial batch (1438 rows, batch 60:
// 58 rows in the last, cut unevenly across 4 replicas), and the
// single-replica strategies.
TEST(TrainerTest, WholeEpochAgreesAcrossStrategies) {
  TrainConfig config = small_config(OptimizerKind::kSgd, 1);
  config.max_steps_per_epoch = -1;
  const TrainResult mirrored_one = train(config);
  EXPECT_EQ(mirrored_one.steps, 24);
  config.replicas = 4;
  expect_same_parameters(mirrored_one.parameters, train(config).parameters, 1e-4, 1e-5, "4 replicas vs 1");
  config.replicas = 1;
  config.strategy = StrategyKind::kOneDevice;
  expect_same_parameters(mirrored_one.parameters, train(config).parameters, 0, 0, "one_device vs mirrored(1)");
  config.strategy = StrategyKind::kDefault;
  expect_same_parameters(mirrored_one.parameters, train(config).parameters, 0, 0, "default vs mirrored(1)");
}

TEST(TrainerTest, DefaultSettingsLearnTheDigits) {
  TrainConfig config;  // mirrored, 2 replicas, SGD with momentum, batch 64, 20 epochs
  if (kSanitized) config.epochs = 5;
  const TrainResult result = train(config);
  ASSERT_EQ(result.history.size(), static_cast<std::size_t>(config.epochs));
  EXPECT_LT(result.history.back().loss, result.history.front().loss);
  EXPECT_GE(result.test_accuracy, kSanitized ? 0.9 : 0.95);
}

TEST(TrainerTest, AdamLearnsTheDigits) {
  TrainConfig config;
  config.optimizer = OptimizerKind::kAdam;
  config.epochs = kSanitized ? 5 : 10;
  EXPECT_GE(train(config).test_accuracy, kSanitized ? 0.9 : 0.95);
}

// Interrupted after epoch 2 and resumed: the same weights as 3 epochs in one go.
void check_resume(OptimizerKind optimizer, int replicas_before, int replicas_after, double tol) {
  TempDir dir;
  TrainConfig config = small_config(optimizer, replicas_before);
  config.max_steps_per_epoch = 5;
  config.epochs = 3;
  const TrainResult uninterrupted = train(config);

  config.checkpoint_dir = dir.str("ckpt");
  config.epochs = 2;
  const TrainResult first = train(config);
  EXPECT_EQ(first.resumed_from_epoch, 0);
  EXPECT_TRUE(latest_checkpoint(config.checkpoint_dir).has_value());

  config.epochs = 3;
  config.resume = true;
  config.replicas = replicas_after;
  const TrainResult resumed = train(config);
  EXPECT_EQ(resumed.resumed_from_epoch, 2);
  ASSERT_EQ(resumed.history.size(), 1u);
  EXPECT_EQ(resumed.history[0].epoch, 3);
  EXPECT_EQ(resumed.steps, uninterrupted.steps);
  expect_same_parameters(uninterrupted.parameters, resumed.parameters, tol, tol, "resumed vs uninterrupted");
  EXPECT_NEAR(resumed.history[0].loss, uninterrupted.history.back().loss, tol + 1e-7);
}

TEST(TrainerTest, ResumedSgdRunEqualsUninterrupted) { check_resume(OptimizerKind::kSgd, 2, 2, 0); }
TEST(TrainerTest, ResumedAdamRunEqualsUninterrupted) { check_resume(OptimizerKind::kAdam, 2, 2, 0); }
// A checkpoint holds cross-replica values: it resumes on another replica count.
TEST(TrainerTest, ResumesOnAnotherReplicaCount) { check_resume(OptimizerKind::kAdam, 2, 3, 1e-5); }

// Killed in the middle of an epoch (stop_after_steps), resumed from the
// last mid-epoch checkpoint: the same weights, bit for bit, and the same
// statistics for the interrupted epoch.
TEST(TrainerTest, ResumedFromTheMiddleOfAnEpochEqualsUninterrupted) {
  TempDir dir;
  TrainConfig config = small_config(OptimizerKind::kSgd, 2);
  config.max_steps_per_epoch = -1;  // whole epochs: 1438 rows / 60 = 24 steps
  config.epochs = 2;
  const TrainResult uninterrupted = train(config);
  ASSERT_EQ(uninterrupted.steps, 48);

  config.checkpoint_dir = dir.str("ckpt");
  config.checkpoint_every_steps = 5;
  config.stop_after_steps = 33;  // epoch 2, batch 9; the last save was at step 30
  const TrainResult killed = train(config);
  EXPECT_EQ(killed.steps, 33);
  const std::optional<std::string> latest = latest_checkpoint(config.checkpoint_dir);
  ASSERT_TRUE(latest.has_value());
  std::int64_t position = -1, saved_step = -1;
  for (const auto& [name, value] : load_checkpoint(*latest)) {
    if (name == "input_position") position = value.item<std::int64_t>();
    if (name == "step") saved_step = value.item<std::int64_t>();
  }
  EXPECT_EQ(saved_step, 30);
  EXPECT_EQ(position, 6);  // mid-epoch: 6 of epoch 2's 24 batches consumed

  config.stop_after_steps = -1;
  config.resume = true;
  const TrainResult resumed = train(config);
  EXPECT_EQ(resumed.resumed_from_epoch, 1);
  EXPECT_EQ(resumed.steps, 48);
  expect_same_parameters(uninterrupted.parameters, resumed.parameters, 0, 0, "resumed mid-epoch vs uninterrupted");
  ASSERT_EQ(resumed.history.size(), 1u);
  EXPECT_EQ(resumed.history[0].epoch, 2);
  EXPECT_EQ(resumed.history[0].loss, uninterrupted.history[1].loss);
  EXPECT_EQ(resumed.history[0].accuracy, uninterrupted.history[1].accuracy);
}

// Preempted (the termination watcher standing in for SIGTERM) in the middle
// of an epoch: a checkpoint is saved at that very step and train() throws
// Preempted; the same config with resume ends bit for bit as an
// uninterrupted run.
TEST(TrainerTest, PreemptedMidEpochSavesThatStepAndTheResumedRunEqualsUninterrupted) {
  TempDir dir;
  TrainConfig config = small_config(OptimizerKind::kSgd, 2);
  config.max_steps_per_epoch = -1;
  config.epochs = 2;
  const TrainResult uninterrupted = train(config);

  config.checkpoint_dir = dir.str("ckpt");
  config.resume = true;  // the command a restart reruns
  int polls = 0;
  config.termination_watcher = [&] { return ++polls == 29; };  // after step 29 (epoch 2, batch 5)
  try {
    train(config);
    FAIL() << "the preempted run returned";
  } catch (const Preempted& p) {
    EXPECT_EQ(p.step, 29);
    EXPECT_EQ(p.exit_code, 42);
    EXPECT_EQ(std::optional<std::string>(p.checkpoint), latest_checkpoint(config.checkpoint_dir));
  }
  std::int64_t saved_step = -1, position = -1;
  for (const auto& [name, value] : load_checkpoint(*latest_checkpoint(config.checkpoint_dir))) {
    if (name == "step") saved_step = value.item<std::int64_t>();
    if (name == "input_position") position = value.item<std::int64_t>();
  }
  EXPECT_EQ(saved_step, 29);
  EXPECT_EQ(position, 5);

  config.termination_watcher = [] { return false; };
  const TrainResult resumed = train(config);
  EXPECT_EQ(resumed.resumed_from_epoch, 1);
  EXPECT_EQ(resumed.steps, 48);
  expect_same_parameters(uninterrupted.parameters, resumed.parameters, 0, 0, "preempted and resumed vs uninterrupted");
  ASSERT_EQ(resumed.history.size(), 1u);
  EXPECT_EQ(resumed.history[0].loss, uninterrupted.history[1].loss);
  EXPECT_EQ(resumed.history[0].accuracy, uninterrupted.history[1].accuracy);
}

// A finished run resumed with as many epochs restores its last checkpoint
// (the next epoch's input included) and trains nothing more.
TEST(TrainerTest, AFinishedRunResumedTrainsNothingMore) {
  TempDir dir;
  TrainConfig config = small_config(OptimizerKind::kSgd, 2);
  config.epochs = 2;
  config.checkpoint_dir = dir.str("ckpt");
  const TrainResult finished = train(config);
  config.resume = true;
  const TrainResult again = train(config);
  EXPECT_EQ(again.resumed_from_epoch, 2);
  EXPECT_TRUE(again.history.empty());
  EXPECT_EQ(again.steps, finished.steps);
  expect_same_parameters(finished.parameters, again.parameters, 0, 0, "finished run resumed");
}

// Resuming with another seed would restore into another input order: the
// run refuses, naming both seeds, before anything is restored.
TEST(TrainerTest, ResumingWithAnotherSeedIsRefused) {
  TempDir dir;
  TrainConfig config = small_config(OptimizerKind::kSgd, 2);
  config.checkpoint_dir = dir.str("ckpt");
  train(config);
  config.seed = 8;
  config.resume = true;
  try {
    train(config);
    FAIL() << "resumed a checkpoint of seed 7 with seed 8";
  } catch (const FailedPreconditionError& e) {
    EXPECT_NE(std::string(e.what()).find("was written with --seed 7, not 8"), std::string::npos) << e.what();
  }
}

// drop_remainder (TF's batch(drop_remainder=True)): the epoch's last,
// partial batch is skipped; what is trained equals a run stopped just
// before it.
TEST(TrainerTest, DropRemainderSkipsTheLastPartialBatch) {
  TrainConfig config = small_config(OptimizerKind::kSgd, 2);
  config.max_steps_per_epoch = -1;  // 1438 rows / 60: 23 full batches and one of 58
  config.drop_remainder = true;
  const TrainResult dropped = train(config);
  EXPECT_EQ(dropped.steps, 23);
  config.drop_remainder = false;
  const TrainResult kept = train(config);
  EXPECT_EQ(kept.steps, 24);
  config.max_steps_per_epoch = 23;
  const TrainResult stopped = train(config);
  expect_same_parameters(stopped.parameters, dropped.parameters, 0, 0, "drop_remainder vs 23 steps");

  config.drop_remainder = true;
  config.max_steps_per_epoch = -1;
  config.batch_size = 5000;
  try {
    train(config);
    FAIL() << "a batch larger than the data with drop_remainder trained nothing silently";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("--batch-size 5000 trains nothing: the training split has only 1438 rows"),
              std::string::npos)
        << e.what();
  }
}

TEST(TrainerTest, ResumeWithoutCheckpointStartsFromScratch) {
  TempDir dir;
  TrainConfig config = small_config(OptimizerKind::kSgd, 2);
  const TrainResult fresh = train(config);
  config.checkpoint_dir = dir.str("empty");
  config.resume = true;
  const TrainResult resumed = train(config);
  EXPECT_EQ(resumed.resumed_from_epoch, 0);
  expect_same_parameters(fresh.parameters, resumed.parameters, 0, 0, "resume from nothing");
}

// Runs `fn`, which must throw E with a message containing every one of
// `parts`; says what was thrown otherwise.
template <class E, class Fn>
void expect_error(Fn&& fn, const std::vector<std::string_view>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected " << typeid(E).name() << ", nothing was thrown";
  } catch (const E& e) {
    const std::string what = e.what();
    for (std::string_view part : parts) {
      EXPECT_NE(what.find(part), std::string::npos) << "the message \"" << what << "\" does not name \"" << part << '"';
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected " << typeid(E).name() << ", got " << typeid(e).name() << ": " << e.what();
  }
}

TEST(TrainerTest, RejectsBadConfigsNamingTheField) {
  struct Case {
    const char* what;
    void (*edit)(TrainConfig&);
    std::vector<std::string_view> parts;
  };
  const Case cases[] = {
      {"batch 0", [](TrainConfig& c) { c.batch_size = 0; }, {"--batch-size", ">= 1", "got 0"}},
      {"replicas 0", [](TrainConfig& c) { c.replicas = 0; }, {"--replicas", ">= 1", "got 0"}},
      {"one_device with 2 replicas", [](TrainConfig& c) { c.strategy = StrategyKind::kOneDevice; },
       {"one_device", "one replica", "--replicas 2"}},
      {"epochs 0", [](TrainConfig& c) { c.epochs = 0; }, {"--epochs", "got 0"}},
      {"resume without a directory", [](TrainConfig& c) { c.resume = true; }, {"--resume", "--checkpoint-dir"}},
      {"negative learning rate", [](TrainConfig& c) { c.learning_rate = -1; }, {"--learning-rate", "> 0", "got -1"}},
      {"infinite learning rate", [](TrainConfig& c) { c.learning_rate = HUGE_VAL; }, {"--learning-rate", "got inf"}},
      {"momentum 1", [](TrainConfig& c) { c.momentum = 1; }, {"momentum", "[0, 1)", "got 1"}},
      {"a hidden layer of 0", [](TrainConfig& c) { c.hidden = {16, 0}; }, {"hidden layer", "got 0"}},
      {"negative checkpoint interval", [](TrainConfig& c) { c.checkpoint_every_steps = -3; },
       {"--checkpoint-every", "got -3"}},
      {"checkpoint interval without a directory", [](TrainConfig& c) { c.checkpoint_every_steps = 5; },
       {"--checkpoint-every", "--checkpoint-dir"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TrainConfig config;
    c.edit(config);
    expect_error<InvalidArgumentError>([&] { validate(config); }, c.parts);
  }
  TrainConfig missing;
  missing.data_path = "/nonexistent/digits.csv";
  expect_error<NotFoundError>([&] { train(missing); }, {"/nonexistent/digits.csv"});
  expect_error<InvalidArgumentError>([] { parse_strategy_kind("tpu"); }, {"'tpu'", "mirrored", "multi_worker"});
  expect_error<InvalidArgumentError>([] { parse_optimizer_kind("rmsprop"); }, {"'rmsprop'", "sgd", "adam"});
}

// --- The program ---------------------------------------------------------------

struct Output {
  int status;
  std::string text;  // stdout and stderr
};

// Runs `launcher` (e.g. "taskset -c 0", or empty) with the program and `args`.
Output run_program_under(const std::string& launcher, const std::string& args) {
  const std::string command = launcher + (launcher.empty() ? "" : " ") + DISTRIBUTE_TRAIN_PATH + " " + args + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string text;
  std::array<char, 4096> buffer{};
  std::size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) text.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}

Output run_program(const std::string& args) { return run_program_under("", args); }

// The default of --replicas as --help prints it ("--replicas,--threads INT=2").
std::optional<int> default_replicas(const std::string& help) {
  const std::string key = "--replicas,--threads INT=";
  const auto at = help.find(key);
  if (at == std::string::npos) return std::nullopt;
  return std::atoi(help.c_str() + at + key.size());
}

// The first CPU of this process's affinity mask.
int first_usable_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(static_cast<std::size_t>(c), &set)) return c;
  }
  return 0;
}

TEST(DistributeTrainProgramTest, DefaultReplicasAreTheUsableCpus) {
  const Output out = run_program("--help");
  ASSERT_EQ(out.status, 0) << out.text;
  EXPECT_EQ(default_replicas(out.text), usable_cpu_count()) << out.text;
}

// Under taskset -c N (or in a container with a one-CPU quota) the default is
// one replica, not one per core of the machine; and it trains with it.
TEST(DistributeTrainProgramTest, DefaultReplicasUnderTasksetIsOne) {
  if (std::system("command -v taskset >/dev/null 2>&1") != 0) GTEST_SKIP() << "no taskset";
  const std::string launcher = "taskset -c " + std::to_string(first_usable_cpu());
  const Output help = run_program_under(launcher, "--help");
  ASSERT_EQ(help.status, 0) << help.text;
  EXPECT_EQ(default_replicas(help.text), 1) << help.text;
  const Output trained = run_program_under(launcher, "--epochs 1");
  ASSERT_EQ(trained.status, 0) << trained.text;
  EXPECT_NE(trained.text.find("test accuracy "), std::string::npos) << trained.text;
}

TEST(DistributeTrainProgramTest, BadInputGivesOneLineAndNonZeroExit) {
  for (const std::string args :
       {"--bogus", "--batch-size 0", "--replicas 0", "--data /nonexistent/digits.csv", "--strategy tpu",
        "--optimizer rmsprop", "--epochs x", "--checkpoint-dir /proc/distribute-train-test", "--resume",
        "--checkpoint-every 3", "--checkpoint-every -1 --checkpoint-dir /tmp", "--plot /nonexistent/curve.png",
        "--drop-remainder --batch-size 5000", "--drop-remainder=maybe"}) {
    const Output out = run_program(args);
    EXPECT_NE(out.status, 0) << args;
    EXPECT_EQ(out.text.rfind("distribute-train: ", 0), 0u) << args << ": " << out.text;
    EXPECT_EQ(std::count(out.text.begin(), out.text.end(), '\n'), 1) << args << ": " << out.text;
  }
}

TEST(DistributeTrainProgramTest, TrainsAndWritesTheLearningCurve) {
  TempDir dir;
  const Output out = run_program("--epochs 2 --replicas 3 --optimizer adam --csv " + dir.str("curve.csv") +
                                 " --checkpoint-dir " + dir.str("ckpt") + " --plot " + dir.str("curve.png"));
  ASSERT_EQ(out.status, 0) << out.text;
  EXPECT_NE(out.text.find("epoch 1/2"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("epoch 2/2"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("samples/s"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("test accuracy "), std::string::npos) << out.text;
  std::ifstream csv(dir.str("curve.csv"));
  std::vector<std::string> lines;
  for (std::string line; std::getline(csv, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "epoch,loss,accuracy,test_accuracy,seconds,samples_per_second");
  EXPECT_EQ(lines[1].rfind("1,", 0), 0u);
  EXPECT_EQ(lines[2].rfind("2,", 0), 0u);
  EXPECT_TRUE(fs::exists(dir.str("ckpt/ckpt-2.dckpt")));
  // Output is not a terminal: no progress bar redraws.
  EXPECT_EQ(out.text.find('\r'), std::string::npos) << out.text;
  std::ifstream png(dir.str("curve.png"), std::ios::binary);
  std::string signature(8, '\0');
  png.read(signature.data(), 8);
  EXPECT_EQ(signature, std::string("\x89PNG\r\n\x1a\n", 8));

  const Output resumed = run_program("--epochs 3 --replicas 3 --optimizer adam --resume --checkpoint-dir " +
                                     dir.str("ckpt") + " --csv " + dir.str("curve.csv"));
  ASSERT_EQ(resumed.status, 0) << resumed.text;
  EXPECT_NE(resumed.text.find("resumed from"), std::string::npos) << resumed.text;
  EXPECT_EQ(resumed.text.find("epoch 1/3"), std::string::npos) << resumed.text;
  EXPECT_NE(resumed.text.find("epoch 3/3"), std::string::npos) << resumed.text;
  // The curve keeps the restored epochs' rows and adds the new one.
  std::ifstream csv_after(dir.str("curve.csv"));
  std::vector<std::string> after;
  for (std::string line; std::getline(csv_after, line);) after.push_back(line);
  ASSERT_EQ(after.size(), 4u);
  EXPECT_EQ(after[1], lines[1]);
  EXPECT_EQ(after[2], lines[2]);
  EXPECT_EQ(after[3].rfind("3,", 0), 0u);
}

// Resuming from a checkpoint older than the curve's last row drops the rows
// after it (they are trained again), so no epoch appears twice.
TEST(DistributeTrainProgramTest, ResumedCurveHasEachEpochOnce) {
  TempDir dir;
  const std::string common = "--replicas 2 --checkpoint-dir " + dir.str("ckpt") + " --csv " + dir.str("curve.csv");
  ASSERT_EQ(run_program("--epochs 3 " + common).status, 0);
  fs::remove(dir.str("ckpt/ckpt-3.dckpt"));  // as if killed before the last save
  const Output resumed = run_program("--epochs 3 --resume " + common);
  ASSERT_EQ(resumed.status, 0) << resumed.text;
  std::ifstream csv(dir.str("curve.csv"));
  std::vector<std::string> lines;
  for (std::string line; std::getline(csv, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u);
  for (int e = 1; e <= 3; ++e) EXPECT_EQ(lines[static_cast<std::size_t>(e)].rfind(std::to_string(e) + ",", 0), 0u);
}

// Starts the program with `args`, its output into `log`; returns its pid.
pid_t spawn_program(const std::vector<std::string>& args, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<std::string> all{DISTRIBUTE_TRAIN_PATH};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, DISTRIBUTE_TRAIN_PATH, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

std::map<std::string, Tensor> entries_of(const std::string& checkpoint) {
  std::map<std::string, Tensor> out;
  for (auto& [name, value] : load_checkpoint(checkpoint)) out.emplace(name, value);
  return out;
}

// Waits (up to 2 minutes) until `path` exists: a checkpoint the spawned
// program writes.
void wait_for_file(const std::string& path) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(path) && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Every entry of `expected` is in `got`, bitwise equal, and nothing else.
void expect_same_entries(const std::map<std::string, Tensor>& expected, const std::map<std::string, Tensor>& got,
                         const std::string& after) {
  ASSERT_EQ(got.size(), expected.size()) << after;
  for (const auto& [name, value] : expected) {
    ASSERT_TRUE(got.count(name)) << name << " is missing after " << after;
    EXPECT_EQ(got.at(name), value) << name << " differs after " << after;
  }
}

std::string join(const std::vector<std::string>& args) {
  std::string s;
  for (const std::string& a : args) s += a + " ";
  return s;
}

// The last checkpoint of an uninterrupted run of the program with `args`,
// saved in `ckpt`: what an interrupted and resumed run must end with.
std::map<std::string, Tensor> uninterrupted_entries(std::vector<std::string> args, const std::string& ckpt) {
  args.insert(args.end(), {"--checkpoint-dir", ckpt});
  const Output out = run_program(join(args));
  EXPECT_EQ(out.status, 0) << out.text;
  const std::optional<std::string> latest = latest_checkpoint(ckpt);
  if (!latest) {
    ADD_FAILURE() << "the uninterrupted run saved no checkpoint in " << ckpt;
    return {};
  }
  return entries_of(*latest);
}

// The process is killed with SIGKILL at an arbitrary point after its third
// checkpoint (every 7 steps, so most land inside epochs); --resume then ends
// with the weights and optimizer slots of an uninterrupted run, bit for bit
// (2 replicas: the gradient sum is taken in replica order).
TEST(DistributeTrainProgramTest, ResumeAfterSigkillMidEpochEqualsUninterrupted) {
  TempDir dir;
  const std::vector<std::string> common{"--epochs", "8", "--batch-size", "32", "--replicas", "2", "--seed", "3"};
  const std::map<std::string, Tensor> expected = uninterrupted_entries(common, dir.str("reference"));
  ASSERT_FALSE(expected.empty());
  constexpr std::int64_t kStepsPerEpoch = (1438 + 31) / 32;

  // A kill that lands right after an epoch's checkpoint resumes from the
  // epoch's end; try again until one resumes from inside an epoch.
  bool mid_epoch = false;
  for (int attempt = 0; attempt < 5 && !mid_epoch; ++attempt) {
    const std::string ckpt = dir.str("killed-" + std::to_string(attempt));
    std::vector<std::string> args = common;
    args.insert(args.end(), {"--checkpoint-dir", ckpt, "--checkpoint-every", "7"});
    const pid_t pid = spawn_program(args, dir.str("killed.log"));
    ASSERT_GT(pid, 0);
    wait_for_file(ckpt + "/ckpt-3.dckpt");
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the run ended before it was killed (status " << status << ")";
    const std::optional<std::string> latest = latest_checkpoint(ckpt);
    ASSERT_TRUE(latest.has_value());
    const std::int64_t saved_step = entries_of(*latest).at("step").item<std::int64_t>();
    ASSERT_LT(saved_step, 8 * kStepsPerEpoch);
    mid_epoch = saved_step % kStepsPerEpoch != 0;

    args.push_back("--resume");
    const Output resumed = run_program(join(args));
    ASSERT_EQ(resumed.status, 0) << resumed.text;
    EXPECT_NE(resumed.text.find("resumed from " + *latest), std::string::npos) << resumed.text;
    expect_same_entries(expected, entries_of(*latest_checkpoint(ckpt)), "resuming from step " + std::to_string(saved_step));
  }
  EXPECT_TRUE(mid_epoch) << "no kill landed inside an epoch in 5 attempts";
}

// SIGTERM (a scheduler's preemption notice) after the first epoch's
// checkpoint: the program saves at the step it is in and exits with 42,
// saying so; the same command then resumes and ends with the uninterrupted
// run's weights and optimizer slots, bit for bit.
TEST(DistributeTrainProgramTest, SigtermSavesAndExits42AndTheSameCommandResumes) {
  TempDir dir;
  const std::vector<std::string> common{"--epochs", "8", "--batch-size", "32", "--replicas", "2", "--seed", "3"};
  const std::map<std::string, Tensor> expected = uninterrupted_entries(common, dir.str("reference"));
  ASSERT_FALSE(expected.empty());

  const std::string ckpt = dir.str("preempted");
  std::vector<std::string> args = common;
  args.insert(args.end(), {"--checkpoint-dir", ckpt, "--resume"});
  const pid_t pid = spawn_program(args, dir.str("preempted.log"));
  ASSERT_GT(pid, 0);
  wait_for_file(ckpt + "/ckpt-1.dckpt");
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  std::ifstream log_file(dir.str("preempted.log"));
  const std::string log((std::istreambuf_iterator<char>(log_file)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 42) << "status " << status << ": " << log;
  const std::optional<std::string> latest = latest_checkpoint(ckpt);
  ASSERT_TRUE(latest.has_value());
  EXPECT_NE(log.find("preempted (SIGTERM): saved " + *latest + " at step "), std::string::npos) << log;
  EXPECT_NE(log.find("run the same command with --resume to continue (exit status 42)"), std::string::npos) << log;

  const Output resumed = run_program(join(args));
  ASSERT_EQ(resumed.status, 0) << resumed.text;
  EXPECT_NE(resumed.text.find("resumed from " + *latest), std::string::npos) << resumed.text;
  expect_same_entries(expected, entries_of(*latest_checkpoint(ckpt)), "resuming from " + *latest);
}

}  // namespace
}  // namespace distribute::train
