#include "distribute/strategies.h"

#include <algorithm>
#include <limits>

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

OneDeviceStrategy::OneDeviceStrategy(const std::string& device)
    : Strategy(Kind::kOneDevice, {parse_device(device)}) {}

Strategy& get_default_strategy() {
  // Built on first use, never destroyed: replica contexts of the default
  // strategy stay valid during static destruction of other objects.
  static DefaultStrategy* const strategy = new DefaultStrategy();
  return *strategy;
}

}  // namespace distribute
