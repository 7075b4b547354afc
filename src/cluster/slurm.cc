// SlurmClusterResolver and Slurm's compressed lists (distribute/cluster_resolver.h).
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <utility>

#include "distribute/cluster_resolver.h"
#include "distribute/errors.h"

namespace distribute {
namespace {

std::string quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

// A non-negative decimal number of at most 9 digits (host-name ranges and
// task counts), or nullopt.
std::optional<int> small_number(std::string_view text) {
  if (text.empty() || text.size() > 9 || text[0] == '-') return std::nullopt;  // ("-0" too)
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

[[noreturn]] void bad_hostlist(std::string_view list, std::size_t at, const std::string& what) {
  throw InvalidArgumentError("Slurm host list " + quoted(list) + ": at offset " + std::to_string(at) + ", " + what);
}

// The values of one bracket's text ("01-03,7"), zero-padded to the width of
// each range's start when that start is padded.
std::vector<std::string> expand_ranges(std::string_view list, std::string_view ranges, std::size_t at) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (begin <= ranges.size()) {
    const std::size_t end = std::min(ranges.find(',', begin), ranges.size());
    const std::string_view part = ranges.substr(begin, end - begin);
    const std::size_t dash = part.find('-');
    const std::string_view low_text = part.substr(0, dash);
    const std::string_view high_text = dash == std::string_view::npos ? low_text : part.substr(dash + 1);
    const std::optional<int> low = small_number(low_text), high = small_number(high_text);
    if (!low || !high) {
      bad_hostlist(list, at + begin, "expected a number or a range like 01-03 inside [], got " + quoted(part));
    }
    if (*high < *low) bad_hostlist(list, at + begin, "expected an ascending range, got " + quoted(part));
    if (out.size() + static_cast<std::size_t>(*high - *low) >= kMaxSlurmHosts) {
      bad_hostlist(list, at + begin, "expected at most " + std::to_string(kMaxSlurmHosts) + " hosts");
    }
    const std::size_t width = low_text.size() > 1 && low_text[0] == '0' ? low_text.size() : 0;
    for (int v = *low; v <= *high; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
      out.push_back(std::move(digits));
    }
    begin = end + 1;
  }
  return out;
}

// One host expression ("r[1-2]n[01-02]"), starting at `at` in `list`.
void expand_host(std::string_view list, std::string_view host, std::size_t at, std::vector<std::string>& out) {
  if (host.empty()) bad_hostlist(list, at, "expected a host name, got an empty one");
  std::vector<std::string> names{""};
  std::size_t i = 0;
  int groups = 0;
  while (i < host.size()) {
    const std::size_t open = host.find('[', i);
    const std::size_t close = host.find(']', i);
    if (close < open) bad_hostlist(list, at + close, "expected '[' before ']'");
    const std::string_view literal = host.substr(i, open - i);
    // Bounded work and memory whatever the text: names of at most
    // kMaxSlurmHostName characters, a few bracket groups each.
    if (names[0].size() + literal.size() + (open == std::string_view::npos ? 0 : 9) > kMaxSlurmHostName) {
      bad_hostlist(list, at + i, "expected host names of at most " + std::to_string(kMaxSlurmHostName) + " characters");
    }
    for (std::string& n : names) n += literal;
    if (open == std::string_view::npos) break;
    if (++groups > kMaxSlurmRangeGroups) {
      bad_hostlist(list, at + open, "expected at most " + std::to_string(kMaxSlurmRangeGroups) +
                                        " bracketed ranges in one host name");
    }
    if (close == std::string_view::npos) bad_hostlist(list, at + open, "expected ']' to close '['");
    const std::string_view inner = host.substr(open + 1, close - open - 1);
    if (inner.find('[') != std::string_view::npos) bad_hostlist(list, at + open, "expected no '[' inside []");
    const std::vector<std::string> values = expand_ranges(list, inner, at + open + 1);
    if (names.size() * values.size() + out.size() > kMaxSlurmHosts) {  // (each at most 2^20: no overflow)
      bad_hostlist(list, at + open, "expected at most " + std::to_string(kMaxSlurmHosts) + " hosts");
    }
    std::vector<std::string> next;
    next.reserve(names.size() * values.size());
    for (const std::string& n : names) {
      for (const std::string& v : values) next.push_back(n + v);
    }
    names = std::move(next);
    i = close + 1;
  }
  out.insert(out.end(), names.begin(), names.end());
}

std::string variable_of(const EnvironmentLookup& lookup, std::initializer_list<const char*> names,
                        std::string* which) {
  for (const char* name : names) {
    if (std::optional<std::string> value = lookup(name)) {
      *which = name;
      return *value;
    }
  }
  std::string list;
  for (const char* name : names) list += (list.empty() ? "" : " or ") + std::string(name);
  throw FailedPreconditionError("SlurmClusterResolver: " + list +
                                " not found in the environment (not running inside a Slurm job step?)");
}

int number_of(const std::string& variable, const std::string& value, int low, int high, const std::string& range) {
  const std::optional<int> n = small_number(value);
  if (!n || *n < low || *n >= high) {
    throw InvalidArgumentError("SlurmClusterResolver: " + variable + ": expected an integer in " + range + ", got " +
                               quoted(value));
  }
  return *n;
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(std::string_view hostlist) {
  std::vector<std::string> hosts;
  std::size_t begin = 0;
  bool in_brackets = false;
  for (std::size_t i = 0; i <= hostlist.size(); ++i) {
    const char c = i < hostlist.size() ? hostlist[i] : ',';
    if (c == '[') in_brackets = true;
    if (c == ']') in_brackets = false;
    if (c != ',' || (in_brackets && i < hostlist.size())) continue;
    expand_host(hostlist, hostlist.substr(begin, i - begin), begin, hosts);
    begin = i + 1;
  }
  return hosts;
}

std::vector<int> expand_slurm_tasks_per_node(std::string_view tasks_per_node) {
  std::vector<int> counts;
  std::size_t begin = 0;
  while (begin <= tasks_per_node.size()) {
    const std::size_t end = std::min(tasks_per_node.find(',', begin), tasks_per_node.size());
    const std::string_view part = tasks_per_node.substr(begin, end - begin);
    // "N" or "N(xR)".
    const std::size_t paren = part.find('(');
    const std::optional<int> count = small_number(part.substr(0, paren));
    std::optional<int> repeat = 1;
    if (paren != std::string_view::npos) {
      const bool shaped = part.size() > paren + 3 && part.substr(paren, 2) == "(x" && part.back() == ')';
      repeat = shaped ? small_number(part.substr(paren + 2, part.size() - paren - 3)) : std::nullopt;
    }
    if (!count || *count < 1 || !repeat || *repeat < 1 ||
        counts.size() + static_cast<std::size_t>(*repeat) > kMaxSlurmHosts) {
      throw InvalidArgumentError("Slurm tasks-per-node list " + quoted(tasks_per_node) +
                                 ": expected parts like 3 or 3(x2) with counts >= 1 (at most " +
                                 std::to_string(kMaxSlurmHosts) + " nodes), got " + quoted(part));
    }
    counts.insert(counts.end(), static_cast<std::size_t>(*repeat), *count);
    begin = end + 1;
  }
  return counts;
}

SlurmClusterResolver SlurmClusterResolver::from_environment(const EnvironmentLookup& lookup) {
  SlurmClusterResolver r;
  std::string name;
  const std::string nodelist = variable_of(lookup, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"},
                                           &name);
  r.hosts_ = expand_slurm_hostlist(nodelist);
  const std::string nodelist_name = name;
  {
    std::vector<std::string> sorted = r.hosts_;
    std::sort(sorted.begin(), sorted.end());
    const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
    if (twice != sorted.end()) {
      throw InvalidArgumentError("SlurmClusterResolver: " + name + " " + quoted(nodelist) + ": host " + quoted(*twice) +
                                 " is listed twice; expected each host once (Slurm's node lists are)");
    }
  }
  const std::string per_node = variable_of(lookup, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}, &name);
  r.tasks_per_node_ = expand_slurm_tasks_per_node(per_node);
  if (r.tasks_per_node_.size() != r.hosts_.size()) {
    throw InvalidArgumentError("SlurmClusterResolver: " + name + " " + quoted(per_node) + " gives " +
                               std::to_string(r.tasks_per_node_.size()) + " node(s), expected one per host of " +
                               nodelist_name + " " + quoted(nodelist) + " (" + std::to_string(r.hosts_.size()) +
                               ")");
  }
  std::int64_t total = 0;
  for (int n : r.tasks_per_node_) total += n;
  const std::string ntasks = variable_of(lookup, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, &name);
  r.num_tasks_ = number_of(name, ntasks, 1, 1 << 30, "[1, 2^30)");
  if (r.num_tasks_ != total) {
    throw InvalidArgumentError("SlurmClusterResolver: " + name + ": expected " + std::to_string(total) +
                               " (the sum of " + per_node + " tasks per node), got " + quoted(ntasks));
  }
  const std::string range = "[0, " + std::to_string(r.num_tasks_) + ")";
  r.rank_ = number_of("SLURM_PROCID", variable_of(lookup, {"SLURM_PROCID"}, &name), 0, r.num_tasks_, range);
  // Block distribution: the first tasks_per_node[0] ranks on host 0, ...
  int first = 0;
  while (r.rank_ >= first + r.tasks_per_node_[static_cast<std::size_t>(r.node_id_)]) {
    first += r.tasks_per_node_[static_cast<std::size_t>(r.node_id_++)];
  }
  r.local_rank_ = r.rank_ - first;
  const int block_node = r.node_id_;
  const auto hosts = static_cast<int>(r.hosts_.size());
  if (std::optional<std::string> node = lookup("SLURM_NODEID")) {
    r.node_id_ = number_of("SLURM_NODEID", *node, 0, hosts, "[0, " + std::to_string(hosts) + ") (the step's hosts)");
  }
  const int on_node = r.tasks_per_node_[static_cast<std::size_t>(r.node_id_)];
  if (std::optional<std::string> local = lookup("SLURM_LOCALID")) {
    r.local_rank_ = number_of("SLURM_LOCALID", *local, 0, on_node,
                              "[0, " + std::to_string(on_node) + ") (the tasks on node " +
                                  std::to_string(r.node_id_) + ", " + r.hosts_[static_cast<std::size_t>(r.node_id_)] +
                                  ")");
    r.block_ = r.node_id_ == block_node && r.local_rank_ == r.rank_ - first;
  } else if (r.node_id_ != block_node) {
    throw InvalidArgumentError("SlurmClusterResolver: SLURM_LOCALID is not set, and SLURM_NODEID " +
                               std::to_string(r.node_id_) + " is not where a block distribution puts rank " +
                               std::to_string(r.rank_) + " (node " + std::to_string(block_node) +
                               "): expected both or neither");
  }
  return r;
}

ClusterSpec SlurmClusterResolver::cluster_spec(const std::map<std::string, int>& jobs, int port_base) const {
  if (!block_) {
    throw FailedPreconditionError(
        "SlurmClusterResolver: the cluster spec gives rank r the r-th task slot, host by host (Slurm's block "
        "distribution), but SLURM_NODEID " + std::to_string(node_id_) + " and SLURM_LOCALID " +
        std::to_string(local_rank_) + " place rank " + std::to_string(rank_) +
        " elsewhere: launch with srun --distribution=block");
  }
  const std::map<std::string, int> all_workers{{std::string(kWorker), num_tasks_}};
  const std::map<std::string, int>& wanted = jobs.empty() ? all_workers : jobs;
  std::int64_t asked = 0;
  for (const auto& [job, n] : wanted) {
    if (n < 0) throw InvalidArgumentError("SlurmClusterResolver: jobs[" + quoted(job) + "]: expected >= 0 tasks, got " +
                                          std::to_string(n));
    asked += n;
  }
  if (asked != num_tasks_) {
    throw InvalidArgumentError("SlurmClusterResolver: the jobs ask for " + std::to_string(asked) +
                               " tasks, the Slurm step has " + std::to_string(num_tasks_));
  }
  const int most = *std::max_element(tasks_per_node_.begin(), tasks_per_node_.end());
  if (port_base < 1 || static_cast<std::int64_t>(port_base) + most - 1 > 65535) {
    throw InvalidArgumentError("SlurmClusterResolver: port_base: expected ports in [1, 65535] for " +
                               std::to_string(most) + " task(s) on a host, got " + std::to_string(port_base));
  }
  std::vector<std::string> addresses;
  for (std::size_t h = 0; h < hosts_.size(); ++h) {
    for (int t = 0; t < tasks_per_node_[h]; ++t) addresses.push_back(hosts_[h] + ":" + std::to_string(port_base + t));
  }
  ClusterSpec spec;
  std::size_t at = 0;
  for (const auto& [job, n] : wanted) {
    if (n == 0) continue;
    auto& tasks = spec.jobs[job];
    tasks.assign(addresses.begin() + static_cast<std::ptrdiff_t>(at),
                 addresses.begin() + static_cast<std::ptrdiff_t>(at + static_cast<std::size_t>(n)));
    at += static_cast<std::size_t>(n);
  }
  return spec;
}

TFConfigClusterResolver SlurmClusterResolver::resolve(const std::map<std::string, int>& jobs, int port_base) const {
  for (const auto& [job, n] : jobs) {
    if (job != kChief && job != kWorker && job != kEvaluator && job != kPs) {
      throw InvalidArgumentError("SlurmClusterResolver::resolve: jobs: expected names among chief, worker, evaluator "
                                 "and ps (the tasks TF places), got " + quoted(job));
    }
  }
  ClusterSpec spec = cluster_spec(jobs, port_base);
  int first = 0;
  for (const auto& [job, tasks] : spec.jobs) {
    const int n = static_cast<int>(tasks.size());
    if (rank_ < first + n) return TFConfigClusterResolver::create(spec, job, rank_ - first, "grpc");
    first += n;
  }
  throw InternalError("SlurmClusterResolver: rank " + std::to_string(rank_) + " is in no job");  // (checked above)
}

}  // namespace distribute
