// Helpers shared by the benchmark programs.
#pragma once

#include <string>
#include <vector>

namespace distribute::bench {

// "CPU:0" ... "CPU:<n-1>": the devices of an n-replica MirroredStrategy.
inline std::vector<std::string> cpus(int n) {
  std::vector<std::string> devices;
  for (int i = 0; i < n; ++i) devices.push_back("CPU:" + std::to_string(i));
  return devices;
}

}  // namespace distribute::bench
