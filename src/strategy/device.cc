#include "distribute/device.h"

#include <cctype>
#include <charconv>
#include <vector>

#include "distribute/errors.h"

namespace distribute {
namespace {

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

[[noreturn]] void malformed(std::string_view name, std::string_view why) {
  throw InvalidArgumentError("malformed device name '" + std::string(name) + "': " + std::string(why) +
                             "; expected \"CPU:<index>\", \"/device:CPU:<index>\" or "
                             "\"/job:localhost/replica:0/task:0/device:CPU:<index>\"");
}

int parse_index(std::string_view name, std::string_view text) {
  int value = -1;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < 0) {
    malformed(name, "expected a non-negative integer, got '" + std::string(text) + "'");
  }
  return value;
}

// Parses "TYPE:INDEX".
DeviceSpec parse_type_index(std::string_view name, std::string_view text) {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos) malformed(name, "expected TYPE:INDEX, got '" + std::string(text) + "'");
  DeviceSpec d{upper(text.substr(0, colon)), parse_index(name, text.substr(colon + 1))};
  if (d.type == "GPU") {
    throw InvalidArgumentError("unknown device '" + std::string(name) + "': this build has no GPU support; " +
                               "expected a CPU device such as \"CPU:0\"");
  }
  if (d.type != "CPU") {
    throw InvalidArgumentError("unknown device '" + std::string(name) + "': expected device type CPU, got '" +
                               std::string(text.substr(0, colon)) + "'");
  }
  return d;
}

}  // namespace

std::string DeviceSpec::short_name() const { return type + ":" + std::to_string(index); }

std::string DeviceSpec::full_name() const { return "/job:localhost/replica:0/task:0/device:" + short_name(); }

DeviceSpec parse_device(std::string_view name) {
  if (name.empty()) malformed(name, "the name is empty");
  if (name.front() != '/') return parse_type_index(name, name);
  // "/key:value/key:value/...": job, replica, task and device, or a legacy
  // "/cpu:0" component.
  std::vector<std::string_view> parts;
  std::string_view rest = name.substr(1);
  while (true) {
    const auto slash = rest.find('/');
    parts.push_back(rest.substr(0, slash));
    if (slash == std::string_view::npos) break;
    rest = rest.substr(slash + 1);
  }
  bool have_device = false;
  DeviceSpec device;
  for (std::string_view part : parts) {
    const auto colon = part.find(':');
    if (part.empty() || colon == std::string_view::npos) malformed(name, "empty or unkeyed component '" + std::string(part) + "'");
    const std::string key(part.substr(0, colon));
    const std::string_view value = part.substr(colon + 1);
    if (key == "job") {
      if (value != "localhost") {
        throw InvalidArgumentError("unknown device '" + std::string(name) + "': expected job 'localhost' (a " +
                                   "MirroredStrategy runs in one process), got job '" + std::string(value) + "'");
      }
    } else if (key == "replica" || key == "task") {
      if (parse_index(name, value) != 0) {
        throw InvalidArgumentError("unknown device '" + std::string(name) + "': expected " + key +
                                   " 0 (a MirroredStrategy runs in one process), got " + key + " " +
                                   std::string(value));
      }
    } else if (have_device) {
      malformed(name, "more than one device component");
    } else if (key == "device") {
      device = parse_type_index(name, value);
      have_device = true;
    } else {
      device = parse_type_index(name, part);  // legacy "/cpu:0"
      have_device = true;
    }
  }
  if (!have_device) malformed(name, "no device component");
  return device;
}

}  // namespace distribute
