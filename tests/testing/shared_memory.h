// Whether this process maps the host's shared-memory segment of
// MultiWorkerMirroredStrategy (or one of its shared allocations): the
// workers' collectives go through it. Read from /proc/self/maps.
#pragma once

#include <fstream>
#include <string>

namespace distribute::testing {

inline bool segment_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/dev/shm/distribute-") != std::string::npos) return true;
  }
  return false;
}

}  // namespace distribute::testing
