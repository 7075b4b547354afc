// The strategy matrix every behaviour test runs over (TF's combinations):
// the default strategy, OneDeviceStrategy, and MirroredStrategy with 1, 2, 3
// and 4 replicas (3 catches uneven-split bugs; 4 oversubscribes 2 cores),
// and with 5 replicas as fibers (ReplicaExecution::FIBERS: on 2 cores, 3
// replicas on one thread and 2 on the other; under run_on_one_cpu.sh all 5
// on one thread).
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "distribute/strategies.h"
#include "testing/helpers.h"

namespace distribute::testing {

struct StrategyCase {
  std::string name;
  std::function<std::shared_ptr<Strategy>()> make;
};

// So that gtest prints "Mirrored3" rather than the object's bytes.
inline void PrintTo(const StrategyCase& c, std::ostream* os) { *os << c.name; }

inline std::vector<StrategyCase> strategy_matrix() {
  auto mirrored = [](int n, ReplicaExecution execution = ReplicaExecution::THREADS) {
    return [n, execution] {
      std::vector<std::string> devices;
      for (int i = 0; i < n; ++i) devices.push_back("CPU:" + std::to_string(i));
      return std::shared_ptr<Strategy>(std::make_shared<MirroredStrategy>(devices, CommunicationOptions{}, execution));
    };
  };
  return {
      {"Default", [] { return std::shared_ptr<Strategy>(&get_default_strategy(), [](Strategy*) {}); }},
      {"OneDevice", [] { return std::shared_ptr<Strategy>(std::make_shared<OneDeviceStrategy>("CPU:0")); }},
      {"Mirrored1", mirrored(1)},
      {"Mirrored2", mirrored(2)},
      {"Mirrored3", mirrored(3)},
      {"Mirrored4", mirrored(4)},
      {"Fibers5", mirrored(5, ReplicaExecution::FIBERS)},
  };
}

// Fixture for TEST_P over the matrix: `strategy()` is fresh for every test.
class StrategyTest : public ::testing::TestWithParam<StrategyCase> {
 protected:
  void SetUp() override { strategy_ = GetParam().make(); }
  Strategy& strategy() { return *strategy_; }
  int n() { return strategy_->num_replicas_in_sync(); }
  // The replicas run as fibers (they share threads, and meet only in the
  // library's waits).
  bool fibers() const { return GetParam().name.rfind("Fibers", 0) == 0; }

 private:
  std::shared_ptr<Strategy> strategy_;
};

inline std::string case_name(const ::testing::TestParamInfo<StrategyCase>& info) { return info.param.name; }

#define DISTRIBUTE_INSTANTIATE_STRATEGY_MATRIX(Fixture)                                                 \
  INSTANTIATE_TEST_SUITE_P(Strategies, Fixture, ::testing::ValuesIn(::distribute::testing::strategy_matrix()), \
                           ::distribute::testing::case_name)

}  // namespace distribute::testing
