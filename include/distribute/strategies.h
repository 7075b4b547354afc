// The concrete strategies.
#pragma once

#include <string>
#include <vector>

#include "distribute/strategy.h"

namespace distribute {

// N replicas in this process, one per local device, each run on its own
// thread. Devices are logical: more replicas than cores work (the replicas
// then share the cores). Replica threads wait for work by spinning briefly,
// then sleeping, so idle replicas use no CPU.
class MirroredStrategy : public Strategy {
 public:
  // One replica per hardware thread ("CPU:0" ... "CPU:<n-1>").
  MirroredStrategy();
  // One replica per listed device, in order: "CPU:0", "/device:CPU:1",
  // "/job:localhost/replica:0/task:0/device:CPU:2", ... Raises
  // InvalidArgumentError for an empty list and for duplicate, malformed or
  // unknown devices.
  explicit MirroredStrategy(const std::vector<std::string>& devices);
  // With strategy-wide collective options (e.g. the default timeout).
  MirroredStrategy(const std::vector<std::string>& devices, const CommunicationOptions& options);
};

// One replica on one device; run() calls fn on the calling thread and values
// are never split. Raises InvalidArgumentError for a malformed or unknown
// device.
class OneDeviceStrategy : public Strategy {
 public:
  explicit OneDeviceStrategy(const std::string& device);
};

// The default strategy: what get_strategy() returns outside any scope. One
// replica on the calling thread; reduce() returns plain values unchanged. A
// process-wide singleton, usable from any thread.
Strategy& get_default_strategy();

}  // namespace distribute
