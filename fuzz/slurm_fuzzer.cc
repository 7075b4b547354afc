// Fuzzes the Slurm readers: the input's first line is a host list, the
// second a tasks-per-node list, the third SLURM_PROCID, the fourth and fifth
// SLURM_NODEID and SLURM_LOCALID when not empty (all as
// SlurmClusterResolver::from_environment reads them). A distribute::Error is
// the expected outcome of bad text; anything else (another exception, a
// sanitizer report, an inconsistent resolver) is a bug.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "distribute/cluster_resolver.h"
#include "distribute/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> lines{""};
  for (char c : text) {
    if (c == '\n' && lines.size() < 5) {
      lines.emplace_back();
    } else {
      lines.back() += c;
    }
  }
  lines.resize(5);
  try {
    (void)distribute::expand_slurm_hostlist(lines[0]);
  } catch (const distribute::Error&) {
  }
  try {
    (void)distribute::expand_slurm_tasks_per_node(lines[1]);
  } catch (const distribute::Error&) {
  }
  try {
    const auto resolver = distribute::SlurmClusterResolver::from_environment(
        [&](const std::string& name) -> std::optional<std::string> {
          if (name == "SLURM_STEP_NODELIST") return lines[0];
          if (name == "SLURM_STEP_TASKS_PER_NODE") return lines[1];
          if (name == "SLURM_PROCID") return lines[2];
          if (name == "SLURM_NODEID" && !lines[3].empty()) return lines[3];
          if (name == "SLURM_LOCALID" && !lines[4].empty()) return lines[4];
          if (name == "SLURM_STEP_NUM_TASKS") {
            long long total = 0;
            try {
              for (int n : distribute::expand_slurm_tasks_per_node(lines[1])) total += n;
            } catch (const distribute::Error&) {
            }
            return std::to_string(total);
          }
          return std::nullopt;
        });
    if (resolver.hosts().size() != resolver.tasks_per_node().size()) __builtin_trap();
    if (resolver.rank() < 0 || resolver.rank() >= resolver.num_tasks()) __builtin_trap();
    if (resolver.local_rank() >= resolver.tasks_per_node()[static_cast<std::size_t>(resolver.node_id())]) {
      __builtin_trap();
    }
    const distribute::TFConfigClusterResolver tf = resolver.resolve();
    if (tf.num_workers() != resolver.num_tasks() || tf.id_in_cluster() != resolver.rank()) __builtin_trap();
  } catch (const distribute::Error&) {
  }
  return 0;
}
