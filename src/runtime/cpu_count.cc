#include "runtime/cpu_count.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

namespace distribute::internal {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::vector<std::string_view> split_words(std::string_view text) {
  std::vector<std::string_view> words;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_space(text[i])) ++i;
    const std::size_t start = i;
    while (i < text.size() && !is_space(text[i])) ++i;
    if (i > start) words.push_back(text.substr(start, i - start));
  }
  return words;
}

// The whole of `word` as a number, else nullopt.
template <class Int>
std::optional<Int> parse_number(std::string_view word) {
  Int value{};
  const char* end = word.data() + word.size();
  const auto [ptr, ec] = std::from_chars(word.data(), end, value);
  if (word.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// ceil(quota / period), at least 1; nullopt unless both are positive.
std::optional<unsigned> cpus_of(std::uint64_t quota, std::uint64_t period) {
  if (quota == 0 || period == 0) return std::nullopt;
  const std::uint64_t cpus = quota / period + (quota % period != 0 ? 1 : 0);
  return static_cast<unsigned>(std::min<std::uint64_t>(cpus, std::numeric_limits<unsigned>::max()));
}

std::optional<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return std::nullopt;
  return text;
}

void keep_smaller(std::optional<unsigned>& best, std::optional<unsigned> candidate) {
  if (candidate && (!best || *candidate < *best)) best = candidate;
}

// Calls visit(dir) for base/<cgroup path>, each of its parents, and base.
// A path with a ".." component visits base only.
template <class Visit>
void walk_up(const std::filesystem::path& base, std::string_view cgroup_path, Visit visit) {
  std::string rel(cgroup_path);
  while (!rel.empty() && rel.front() == '/') rel.erase(0, 1);
  while (!rel.empty() && rel.back() == '/') rel.pop_back();
  for (const auto& part : std::filesystem::path(rel)) {
    if (part == "..") rel.clear();
  }
  while (true) {
    visit(rel.empty() ? base : base / rel);
    if (rel.empty()) break;
    const auto slash = rel.rfind('/');
    rel.erase(slash == std::string::npos ? 0 : slash);
  }
}

}  // namespace

std::optional<unsigned> parse_cgroup_v2_cpu_max(std::string_view contents) {
  const auto words = split_words(contents);
  if (words.size() != 2) return std::nullopt;
  const auto period = parse_number<std::uint64_t>(words[1]);
  if (!period || words[0] == "max") return std::nullopt;
  const auto quota = parse_number<std::uint64_t>(words[0]);
  if (!quota) return std::nullopt;
  return cpus_of(*quota, *period);
}

std::optional<unsigned> parse_cgroup_v1_cfs(std::string_view quota_us, std::string_view period_us) {
  const auto quota_words = split_words(quota_us);
  const auto period_words = split_words(period_us);
  if (quota_words.size() != 1 || period_words.size() != 1) return std::nullopt;
  const auto quota = parse_number<std::int64_t>(quota_words[0]);
  const auto period = parse_number<std::int64_t>(period_words[0]);
  // -1 is "no quota"; any other negative number is malformed.
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;
  return cpus_of(static_cast<std::uint64_t>(*quota), static_cast<std::uint64_t>(*period));
}

std::optional<unsigned> cgroup_cpu_limit(std::string_view proc_self_cgroup, const std::filesystem::path& root) {
  std::optional<unsigned> limit;
  std::size_t pos = 0;
  while (pos < proc_self_cgroup.size()) {
    auto end = proc_self_cgroup.find('\n', pos);
    if (end == std::string_view::npos) end = proc_self_cgroup.size();
    const std::string_view line = proc_self_cgroup.substr(pos, end - pos);
    pos = end + 1;
    // "<hierarchy id>:<controller list>:<path>"; the path may hold colons.
    const auto first = line.find(':');
    if (first == std::string_view::npos) continue;
    const auto second = line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, first);
    const std::string_view controllers = line.substr(first + 1, second - first - 1);
    const std::string_view path = line.substr(second + 1);
    if (path.empty() || path.front() != '/') continue;

    if (id == "0" && controllers.empty()) {
      // cgroup v2: the unified hierarchy, at root (v2 only) or root/unified (hybrid).
      for (const std::filesystem::path& base : {root, root / "unified"}) {
        walk_up(base, path, [&](const std::filesystem::path& dir) {
          if (const auto text = read_file(dir / "cpu.max")) keep_smaller(limit, parse_cgroup_v2_cpu_max(*text));
        });
      }
      continue;
    }
    // cgroup v1: the hierarchy holding the cpu controller.
    bool has_cpu = false;
    for (std::size_t c = 0; c <= controllers.size();) {
      auto comma = controllers.find(',', c);
      if (comma == std::string_view::npos) comma = controllers.size();
      if (controllers.substr(c, comma - c) == "cpu") has_cpu = true;
      c = comma + 1;
    }
    if (!has_cpu) continue;
    std::vector<std::filesystem::path> bases{root / std::string(controllers)};
    if (controllers != "cpu") bases.push_back(root / "cpu");
    for (const auto& base : bases) {
      walk_up(base, path, [&](const std::filesystem::path& dir) {
        const auto quota = read_file(dir / "cpu.cfs_quota_us");
        if (!quota) return;
        const auto period = read_file(dir / "cpu.cfs_period_us");
        if (period) keep_smaller(limit, parse_cgroup_v1_cfs(*quota, *period));
      });
    }
  }
  return limit;
}

std::optional<unsigned> process_cgroup_cpu_limit() noexcept {
  static const std::optional<unsigned> limit = []() noexcept -> std::optional<unsigned> {
    try {
      const auto self = read_file("/proc/self/cgroup");
      if (!self) return std::nullopt;
      return cgroup_cpu_limit(*self, "/sys/fs/cgroup");
    } catch (...) {
      return std::nullopt;  // out of memory, a file system error: no quota seen
    }
  }();
  return limit;
}

unsigned affinity_cpu_count() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return static_cast<unsigned>(count);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

unsigned usable_cores() noexcept {
  const unsigned cpus = affinity_cpu_count();
  const auto quota = process_cgroup_cpu_limit();
  return std::max(1u, quota ? std::min(cpus, *quota) : cpus);
}

std::optional<unsigned> parse_loadavg_running(std::string_view loadavg) noexcept {
  // "0.52 0.58 0.59 2/383 12345": the fourth field, up to its '/'.
  std::size_t pos = 0;
  for (int field = 0; field < 3; ++field) {
    pos = loadavg.find(' ', pos);
    if (pos == std::string_view::npos) return std::nullopt;
    ++pos;
  }
  const std::size_t slash = loadavg.find('/', pos);
  if (slash == std::string_view::npos) return std::nullopt;
  unsigned running = 0;
  const auto [ptr, error] = std::from_chars(loadavg.data() + pos, loadavg.data() + slash, running);
  if (error != std::errc() || ptr != loadavg.data() + slash) return std::nullopt;
  return running;
}

bool runnable_threads_fit_cpus() noexcept {
  const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[128];
  const ssize_t n = ::read(fd, text, sizeof text);
  ::close(fd);
  if (n <= 0) return false;
  const std::optional<unsigned> running = parse_loadavg_running(std::string_view(text, static_cast<std::size_t>(n)));
  static const long online = ::sysconf(_SC_NPROCESSORS_ONLN);  // read once (sysconf reads sysfs)
  return running.has_value() && online > 0 && static_cast<long>(*running) <= online;
}

}  // namespace distribute::internal
