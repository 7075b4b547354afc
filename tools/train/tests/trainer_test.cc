// distribute-train: data-parallel training equals single-replica training,
// it learns the digits, an interrupted and resumed run ends where an
// uninterrupted one does, and the program rejects bad input.
#include "trainer.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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
    expect_same_parameters(one.parameters, many.parameters, 1e-4, 1e-5,
                           "SGD, " + std::to_string(replicas) + " replicas vs 1");
    EXPECT_NEAR(many.history.at(0).loss, one.history.at(0).loss, 1e-5);
    EXPECT_DOUBLE_EQ(many.history.at(0).accuracy, one.history.at(0).accuracy);
  }
}

TEST(TrainerTest, ReplicaCountsGiveTheSameWeightsWithAdam) {
  const TrainResult one = train(small_config(OptimizerKind::kAdam, 1));
  for (int replicas : {2, 3, 4}) {
    const TrainResult many = train(small_config(OptimizerKind::kAdam, replicas));
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

TEST(TrainerTest, RejectsBadConfigs) {
  TrainConfig config;
  config.batch_size = 0;
  EXPECT_THROW(validate(config), InvalidArgumentError);
  config = {};
  config.replicas = 0;
  EXPECT_THROW(validate(config), InvalidArgumentError);
  config = {};
  config.strategy = StrategyKind::kOneDevice;  // replicas = 2
  EXPECT_THROW(validate(config), InvalidArgumentError);
  config = {};
  config.resume = true;
  EXPECT_THROW(validate(config), InvalidArgumentError);
  config = {};
  config.learning_rate = -1;
  EXPECT_THROW(validate(config), InvalidArgumentError);
  config = {};
  config.data_path = "/nonexistent/digits.csv";
  EXPECT_THROW(train(config), NotFoundError);
  EXPECT_THROW(parse_strategy_kind("tpu"), InvalidArgumentError);
  EXPECT_THROW(parse_optimizer_kind("rmsprop"), InvalidArgumentError);
}

// --- The program ---------------------------------------------------------------

struct Output {
  int status;
  std::string text;  // stdout and stderr
};

Output run_program(const std::string& args) {
  const std::string command = std::string(DISTRIBUTE_TRAIN_PATH) + " " + args + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string text;
  std::array<char, 4096> buffer{};
  std::size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) text.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}

TEST(DistributeTrainProgramTest, BadInputGivesOneLineAndNonZeroExit) {
  for (const std::string args :
       {"--bogus", "--batch-size 0", "--replicas 0", "--data /nonexistent/digits.csv", "--strategy tpu",
        "--optimizer rmsprop", "--epochs x", "--checkpoint-dir /proc/distribute-train-test", "--resume"}) {
    const Output out = run_program(args);
    EXPECT_NE(out.status, 0) << args;
    EXPECT_EQ(out.text.rfind("distribute-train: ", 0), 0u) << args << ": " << out.text;
    EXPECT_EQ(std::count(out.text.begin(), out.text.end(), '\n'), 1) << args << ": " << out.text;
  }
}

TEST(DistributeTrainProgramTest, TrainsAndWritesTheLearningCurve) {
  TempDir dir;
  const Output out = run_program("--epochs 2 --replicas 3 --optimizer adam --csv " + dir.str("curve.csv") +
                                 " --checkpoint-dir " + dir.str("ckpt"));
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

  const Output resumed = run_program("--epochs 3 --replicas 3 --optimizer adam --resume --checkpoint-dir " +
                                     dir.str("ckpt") + " --csv " + dir.str("curve.csv"));
  ASSERT_EQ(resumed.status, 0) << resumed.text;
  EXPECT_NE(resumed.text.find("resumed from"), std::string::npos) << resumed.text;
  EXPECT_EQ(resumed.text.find("epoch 1/3"), std::string::npos) << resumed.text;
  EXPECT_NE(resumed.text.find("epoch 3/3"), std::string::npos) << resumed.text;
}

}  // namespace
}  // namespace distribute::train
