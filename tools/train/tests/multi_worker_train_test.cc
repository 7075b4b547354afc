// distribute-train under mpirun: M workers x N replicas end with the weights
// of one process of M*N replicas (data-parallel SGD on the same global
// batches), to float tolerance. Run by CTest with the label mpi.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "trainer.h"

namespace distribute::train {
namespace {

namespace fs = std::filesystem;

struct Output {
  int status;
  std::string text;
};

Output run(const std::string& command) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string text;
  std::array<char, 4096> buffer{};
  std::size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) text.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}

void expect_workers_equal_one_process(int workers, int replicas_per_worker) {
  const fs::path dir = fs::temp_directory_path() / ("distribute-train-mpi-" + std::to_string(::getpid()) + "-" +
                                                    std::to_string(workers) + "x" +
                                                    std::to_string(replicas_per_worker));
  fs::remove_all(dir);
  // For mpirun and the workers (set here: gtest_discover_tests cannot pass
  // a list of variables): Open MPI refuses root without the first two; the
  // workers' MPI allocations outlive main(), so LeakSanitizer is off for them.
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  ::setenv("ASAN_OPTIONS", "detect_leaks=0:halt_on_error=1", 1);
  ::setenv("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1", 1);

  TrainConfig config;
  config.strategy = StrategyKind::kMirrored;
  config.replicas = workers * replicas_per_worker;
  config.epochs = 2;
  config.batch_size = 64;
  config.seed = 5;
  const TrainResult local = train(config);

  const std::string command = std::string(DISTRIBUTE_MPIEXEC) + " -np " + std::to_string(workers) + " " +
                              DISTRIBUTE_MPIRUN_FLAGS + " " + DISTRIBUTE_TRAIN_PATH +
                              " --strategy multi_worker --replicas " + std::to_string(replicas_per_worker) +
                              " --epochs 2 --batch-size 64 --seed 5 --checkpoint-dir " + dir.string();
  const Output out = run(command);
  ASSERT_EQ(out.status, 0) << command << "\n" << out.text;
  const std::optional<std::string> latest = latest_checkpoint(dir.string());
  ASSERT_TRUE(latest.has_value()) << out.text;

  // model/dense<l>/kernel and /bias, in the order of TrainResult::parameters.
  std::vector<Tensor> saved;
  for (const auto& [name, value] : load_checkpoint(*latest)) {
    if (name.rfind("model/", 0) == 0) saved.push_back(value);
  }
  ASSERT_EQ(saved.size(), local.parameters.size());
  for (std::size_t i = 0; i < saved.size(); ++i) {
    ASSERT_EQ(saved[i].shape(), local.parameters[i].shape()) << "parameter " << i;
    EXPECT_TRUE(allclose(saved[i], local.parameters[i], 1e-5, 1e-6))
        << workers << " workers x " << replicas_per_worker << " replicas vs " << config.replicas
        << " local replicas: parameter " << i << " differs";
  }
  // And the run did learn: its final test accuracy is printed by the chief.
  EXPECT_NE(out.text.find("test accuracy 0.9"), std::string::npos) << out.text;
  fs::remove_all(dir);
}

TEST(DistributeTrainMultiWorkerTest, TwoWorkersOfTwoReplicasEqualFourLocalReplicas) {
  expect_workers_equal_one_process(2, 2);
}

TEST(DistributeTrainMultiWorkerTest, TwoWorkersOfOneReplicaEqualTwoLocalReplicas) {
  expect_workers_equal_one_process(2, 1);
}

}  // namespace
}  // namespace distribute::train
