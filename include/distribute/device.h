// Device names, parsed and canonicalized as TF does.
#pragma once

#include <string>
#include <string_view>

namespace distribute {

// A local device. Replicas are logical: "CPU:7" is valid on a 2-core machine
// and names the replica's thread, not a core.
struct DeviceSpec {
  std::string type;  // "CPU"
  int index = 0;

  // "CPU:0"
  std::string short_name() const;
  // "/job:localhost/replica:0/task:0/device:CPU:0"
  std::string full_name() const;

  friend bool operator==(const DeviceSpec&, const DeviceSpec&) = default;
};

// Parses "CPU:0", "cpu:0", "/cpu:0", "/device:CPU:0" and
// "/job:localhost/replica:0/task:0/device:CPU:0" (each of job, replica, task
// optional). Raises InvalidArgumentError naming the text and what was expected
// for malformed names, and for devices this build cannot run on (GPU, TPU,
// another job or task).
DeviceSpec parse_device(std::string_view name);

}  // namespace distribute
