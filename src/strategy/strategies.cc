#include "distribute/strategies.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>

#include "distribute/internal/owner_process.h"
#include "runtime/cpu_count.h"

namespace distribute {
namespace {

std::vector<DeviceSpec> parse_devices(const std::vector<std::string>& names) {
  std::vector<DeviceSpec> devices;
  devices.reserve(names.size());
  for (const std::string& name : names) devices.push_back(parse_device(name));
  return devices;
}

std::vector<DeviceSpec> all_local_cpus() {
  const int n = usable_cpu_count();
  std::vector<DeviceSpec> devices;
  for (int i = 0; i < n; ++i) devices.push_back({"CPU", i});
  return devices;
}

class DefaultStrategy final : public Strategy {
 public:
  DefaultStrategy() : Strategy(Kind::kDefault, {{"CPU", 0}}) {}
};

}  // namespace

int usable_cpu_count() {
  return static_cast<int>(std::min<unsigned>(internal::usable_cores(), std::numeric_limits<int>::max()));
}

MirroredStrategy::MirroredStrategy() : Strategy(Kind::kMirrored, all_local_cpus()) {}

MirroredStrategy::MirroredStrategy(const std::vector<std::string>& devices)
    : Strategy(Kind::kMirrored, parse_devices(devices)) {}

MirroredStrategy::MirroredStrategy(const std::vector<std::string>& devices, const CommunicationOptions& options)
    : Strategy(Kind::kMirrored, parse_devices(devices), options) {}

MirroredStrategy::MirroredStrategy(const std::vector<std::string>& devices, const CommunicationOptions& options,
                                   ReplicaExecution execution)
    : Strategy(Kind::kMirrored, parse_devices(devices), options, nullptr, execution) {}

OneDeviceStrategy::OneDeviceStrategy(const std::string& device)
    : Strategy(Kind::kOneDevice, {parse_device(device)}) {}

namespace {
// The default strategy and the process that built it.
struct DefaultOfProcess {
  internal::OwnerProcess owner;
  DefaultStrategy strategy;
};
}  // namespace

Strategy& get_default_strategy() {
  // Built on first use, never destroyed: replica contexts of the default
  // strategy stay valid during static destruction of other objects.
  static std::atomic<DefaultOfProcess*> current{new DefaultOfProcess()};
  DefaultOfProcess* mine = current.load(std::memory_order_acquire);
  if (!mine->owner.forked_child()) return mine->strategy;
  // A child forked (without exec) from the process that built it: the copy
  // belongs to the parent (distribute/internal/owner_process.h) and is
  // left; the child gets one of its own.
  static std::mutex replacing;
  std::lock_guard<std::mutex> lock(replacing);
  mine = current.load(std::memory_order_acquire);
  if (mine->owner.forked_child()) {
    mine = new DefaultOfProcess();
    current.store(mine, std::memory_order_release);
  }
  return mine->strategy;
}

}  // namespace distribute
