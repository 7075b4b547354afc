#include "distribute/cluster_resolver.h"

#include <array>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "distribute/errors.h"

namespace distribute {
namespace {

using Json = nlohmann::json;

std::string in_quotes(std::string_view s) { return "\"" + std::string(s) + "\""; }

// How the fields are named in messages: JSON paths for TF_CONFIG, argument
// names for TFConfigClusterResolver::create.
struct FieldNames {
  std::string prefix;      // "TF_CONFIG: " or ""
  std::string task_type;   // "\"task.type\"" or "task_type"
  std::string task_index;  // "\"task.index\"" or "task_id"
  // The field holding `job`'s task list.
  std::string (*job)(std::string_view job);
};

const FieldNames kJsonNames{"TF_CONFIG: ", "\"task.type\"", "\"task.index\"",
                            [](std::string_view job) { return in_quotes("cluster." + std::string(job)); }};
const FieldNames kArgumentNames{"", "task_type", "task_id",
                                [](std::string_view job) { return "cluster_spec[" + in_quotes(job) + "]"; }};

[[noreturn]] void invalid(const FieldNames& names, const std::string& field, const std::string& what) {
  throw InvalidArgumentError(names.prefix + field + ": " + what);
}

std::string job_list(const ClusterSpec& spec) {
  std::string out;
  for (const auto& [job, tasks] : spec.jobs) out += (out.empty() ? "" : ", ") + in_quotes(job);
  return out;
}

// TF's multi_worker_util._validate_cluster_spec, in TF's order, for a
// non-empty `spec`.
void validate(const ClusterSpec& spec, const std::string& task_type, std::int64_t task_id, const FieldNames& names) {
  if (task_type != kChief && task_type != kWorker && task_type != kEvaluator && task_type != kPs) {
    invalid(names, names.task_type,
            "expected one of \"chief\", \"worker\", \"evaluator\", \"ps\", got " + in_quotes(task_type));
  }
  if (!spec.jobs.contains(task_type)) {
    invalid(names, names.task_type,
            "expected a job of the cluster (" + job_list(spec) + "), got " + in_quotes(task_type));
  }
  for (std::string_view single : {kChief, kEvaluator}) {
    const int n = spec.num_tasks(single);
    if (n > 1) {
      invalid(names, names.job(single),
              "expected at most one " + in_quotes(single) + " task, got " + std::to_string(n));
    }
  }
  const int n = spec.num_tasks(task_type);
  if (task_id < 0 || task_id >= n) {
    invalid(names, names.task_index,
            "expected an integer in [0, " + std::to_string(n) + ") (the number of " + in_quotes(task_type) +
                " tasks), got " + std::to_string(task_id));
  }
}

// "an array", "a number (1.5)", ... for messages.
std::string describe(const Json& value) {
  std::string out;
  switch (value.type()) {
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "a list";
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return value.get<bool>() ? "a boolean (true)" : "a boolean (false)";
    case Json::value_t::string:
      out = "a string (" + value.dump() + ")";
      break;
    default:
      out = "a number (" + value.dump() + ")";
      break;
  }
  constexpr std::size_t kMax = 80;
  if (out.size() > kMax) out = out.substr(0, kMax) + "...)";
  return out;
}

// "task.index": an integer, or a string holding one (TF applies int()).
std::int64_t parse_index(const Json& value) {
  if (value.is_number_integer()) {
    if (value.is_number_unsigned() &&
        value.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      invalid(kJsonNames, "\"task.index\"", "expected an integer that fits in 64 bits, got " + describe(value));
    }
    return value.get<std::int64_t>();
  }
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    std::int64_t index = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, index);
    if (!text.empty() && ec == std::errc() && ptr == end) return index;
  }
  invalid(kJsonNames, "\"task.index\"", "expected an integer, got " + describe(value));
}

ClusterSpec parse_cluster(const Json& cluster) {
  if (!cluster.is_object()) {
    invalid(kJsonNames, "\"cluster\"",
            "expected an object mapping job names to lists of \"host:port\" strings, got " + describe(cluster));
  }
  ClusterSpec spec;
  for (const auto& [job, tasks] : cluster.items()) {
    if (!tasks.is_array()) {
      invalid(kJsonNames, in_quotes("cluster." + job),
              "expected a list of \"host:port\" strings, got " + describe(tasks));
    }
    std::vector<std::string>& addresses = spec.jobs[job];
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      if (!tasks[i].is_string()) {
        invalid(kJsonNames, in_quotes("cluster." + job + "[" + std::to_string(i) + "]"),
                "expected a \"host:port\" string, got " + describe(tasks[i]));
      }
      addresses.push_back(tasks[i].get<std::string>());
    }
  }
  return spec;
}

// A decimal integer, or nullopt.
std::optional<std::int64_t> parse_decimal(std::string_view text) {
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

struct LauncherVariables {
  Launcher launcher;
  std::string_view rank;
  std::string_view size;
};

constexpr std::array<LauncherVariables, 3> kLaunchers{{
    {Launcher::kOpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {Launcher::kPmi, "PMI_RANK", "PMI_SIZE"},
    {Launcher::kSlurm, "SLURM_PROCID", "SLURM_NTASKS"},
}};

std::optional<LauncherRank> read_launcher(const EnvironmentLookup& lookup) {
  for (const LauncherVariables& vars : kLaunchers) {
    const std::optional<std::string> rank_text = lookup(std::string(vars.rank));
    if (!rank_text) continue;
    const std::optional<std::string> size_text = lookup(std::string(vars.size));
    const std::string who = " (set by " + std::string(launcher_name(vars.launcher)) + ")";
    if (!size_text) {
      throw InvalidArgumentError(std::string(vars.size) + who + ": expected a number of processes since " +
                                 std::string(vars.rank) + "=" + *rank_text + " is set, got an unset variable");
    }
    const std::optional<std::int64_t> size = parse_decimal(*size_text);
    if (!size || *size < 1 || *size > std::numeric_limits<int>::max()) {
      throw InvalidArgumentError(std::string(vars.size) + who + ": expected an integer >= 1, got \"" + *size_text +
                                 "\"");
    }
    const std::optional<std::int64_t> rank = parse_decimal(*rank_text);
    if (!rank || *rank < 0 || *rank >= *size) {
      throw InvalidArgumentError(std::string(vars.rank) + who + ": expected an integer in [0, " +
                                 std::to_string(*size) + ") (" + std::string(vars.size) + "=" + *size_text +
                                 "), got \"" + *rank_text + "\"");
    }
    return LauncherRank{vars.launcher, static_cast<int>(*rank), static_cast<int>(*size), vars.rank, vars.size};
  }
  return std::nullopt;
}

// What parse_tf_config() reads; an empty cluster_spec is local mode.
struct ParsedConfig {
  ClusterSpec cluster_spec;
  std::optional<std::string> task_type;
  std::optional<int> task_id;
  std::string rpc_layer;
};

// parse_tf_config's work, on nlohmann::json; its exceptions are left to the
// caller.
ParsedConfig parse_config(std::string_view json) {
  Json config;
  try {
    config = Json::parse(json);
  } catch (const Json::parse_error& e) {
    throw InvalidArgumentError("TF_CONFIG: expected a JSON object, got " +
                               std::string(json.empty() ? "an empty string" : "invalid JSON") + " (" + e.what() + ")");
  } catch (const Json::out_of_range& e) {
    // nlohmann::json raises this for a number beyond a double's range (1e400).
    throw InvalidArgumentError("TF_CONFIG: expected a JSON object whose numbers fit in a double, got a number out of "
                               "range (" + std::string(e.what()) + ")");
  }
  if (!config.is_object()) {
    throw InvalidArgumentError("TF_CONFIG: expected a JSON object at the top level, got " + describe(config));
  }

  ParsedConfig out;
  if (const auto it = config.find("rpc_layer"); it != config.end()) {
    if (!it->is_string()) invalid(kJsonNames, "\"rpc_layer\"", "expected a string, got " + describe(*it));
    out.rpc_layer = it->get<std::string>();
  }

  ClusterSpec spec;
  if (const auto it = config.find("cluster"); it != config.end()) spec = parse_cluster(*it);

  // The task's shape is checked even in local mode, where it is then ignored.
  std::optional<std::string> task_type;
  std::optional<std::int64_t> task_index;
  const auto task = config.find("task");
  if (task != config.end()) {
    if (!task->is_object()) {
      invalid(kJsonNames, "\"task\"", "expected an object with \"type\" and \"index\", got " + describe(*task));
    }
    if (const auto type = task->find("type"); type != task->end()) {
      if (!type->is_string()) invalid(kJsonNames, "\"task.type\"", "expected a string, got " + describe(*type));
      task_type = type->get<std::string>();
    }
    if (const auto index = task->find("index"); index != task->end()) task_index = parse_index(*index);
  }

  if (spec.empty()) return out;
  // TF: "When `cluster_spec` is given, you must also specify `task_type` and
  // `task_id`."
  const std::string required = "when \"cluster\" is given, the task's type and index must also be given";
  if (task == config.end()) invalid(kJsonNames, "\"task\"", required + ", got no \"task\"");
  if (!task_type) invalid(kJsonNames, "\"task.type\"", required + ", got no \"task.type\"");
  if (!task_index) invalid(kJsonNames, "\"task.index\"", required + ", got no \"task.index\"");
  validate(spec, *task_type, *task_index, kJsonNames);

  out.cluster_spec = std::move(spec);
  out.task_type = std::move(task_type);
  out.task_id = static_cast<int>(*task_index);
  return out;
}

}  // namespace

int ClusterSpec::num_tasks(std::string_view job) const {
  const auto it = jobs.find(std::string(job));
  return it == jobs.end() ? 0 : static_cast<int>(it->second.size());
}

TFConfigClusterResolver TFConfigClusterResolver::create(ClusterSpec cluster_spec, std::string task_type, int task_id,
                                                        std::string rpc_layer) {
  TFConfigClusterResolver out;
  out.rpc_layer_ = std::move(rpc_layer);
  if (cluster_spec.empty()) return out;
  validate(cluster_spec, task_type, task_id, kArgumentNames);
  out.cluster_spec_ = std::move(cluster_spec);
  out.task_type_ = std::move(task_type);
  out.task_id_ = task_id;
  return out;
}

int TFConfigClusterResolver::num_workers() const {
  if (!in_multi_worker_mode()) return 1;
  if (*task_type_ == kEvaluator) return cluster_spec_.num_tasks(kEvaluator);
  if (*task_type_ == kPs) {
    throw FailedPreconditionError(
        "num_workers: expected a \"chief\", \"worker\" or \"evaluator\" task, got a \"ps\" task, which is not a "
        "worker");
  }
  return cluster_spec_.num_tasks(kChief) + cluster_spec_.num_tasks(kWorker);
}

int TFConfigClusterResolver::id_in_cluster() const {
  if (!in_multi_worker_mode()) return 0;
  if (*task_type_ == kChief) return 0;
  if (*task_type_ == kWorker) return *task_id_ + cluster_spec_.num_tasks(kChief);
  if (*task_type_ == kEvaluator) return *task_id_;
  throw FailedPreconditionError(
      "id_in_cluster: expected a \"chief\", \"worker\" or \"evaluator\" task, got a \"ps\" task, which has no id");
}

bool TFConfigClusterResolver::is_chief() const {
  if (!in_multi_worker_mode()) return true;
  if (*task_type_ == kChief || *task_type_ == kEvaluator) return true;
  // A "chief" job with no tasks counts as no chief, so that the cluster has
  // one (TF would then have no chief at all).
  return *task_type_ == kWorker && *task_id_ == 0 && cluster_spec_.num_tasks(kChief) == 0;
}

std::string TFConfigClusterResolver::collective_leader() const {
  if (!in_multi_worker_mode() || *task_type_ == kEvaluator) return "";
  if (cluster_spec_.num_tasks(kChief) > 0) return "/job:chief/replica:0/task:0";
  return "/job:worker/replica:0/task:0";
}

TFConfigClusterResolver parse_tf_config(std::string_view json) {
  // Every exception of nlohmann::json becomes an InvalidArgumentError.
  // parse_config() turns the parser's (malformed text, a number out of range)
  // into messages of their own and otherwise calls only accessors whose type
  // it checked; this catch is the net for whatever the library raises beyond
  // that.
  ParsedConfig parsed;
  try {
    parsed = parse_config(json);
  } catch (const Json::exception& e) {
    throw InvalidArgumentError(std::string("TF_CONFIG: expected JSON the parser reads, got its error (") + e.what() +
                               ")");
  }
  TFConfigClusterResolver out;
  out.cluster_spec_ = std::move(parsed.cluster_spec);
  out.task_type_ = std::move(parsed.task_type);
  out.task_id_ = parsed.task_id;
  out.rpc_layer_ = std::move(parsed.rpc_layer);
  return out;
}

std::string_view launcher_name(Launcher launcher) {
  switch (launcher) {
    case Launcher::kOpenMpi:
      return "Open MPI";
    case Launcher::kPmi:
      return "PMI (MPICH/Hydra)";
    case Launcher::kSlurm:
      return "Slurm";
  }
  return "unknown launcher";
}

std::optional<std::string> getenv_lookup(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

ClusterEnvironment read_cluster_environment(const EnvironmentLookup& lookup) {
  ClusterEnvironment env;
  if (const std::optional<std::string> tf_config = lookup("TF_CONFIG")) env.tf_config = parse_tf_config(*tf_config);
  env.launcher = read_launcher(lookup);
  return env;
}

WorkerPlacement reconcile_cluster(const ClusterEnvironment& environment, int mpi_rank, int mpi_size) {
  if (mpi_size < 1 || mpi_rank < 0 || mpi_rank >= mpi_size) {
    throw InvalidArgumentError("reconcile_cluster: expected 0 <= mpi_rank < mpi_size, got mpi_rank " +
                               std::to_string(mpi_rank) + " and mpi_size " + std::to_string(mpi_size));
  }
  const std::string mpi = "MPI rank " + std::to_string(mpi_rank) + " of size " + std::to_string(mpi_size);

  if (const auto& launched = environment.launcher) {
    if (launched->rank != mpi_rank || launched->size != mpi_size) {
      throw InvalidArgumentError(std::string(launched->rank_variable) + "=" + std::to_string(launched->rank) + " and " +
                                 std::string(launched->size_variable) + "=" + std::to_string(launched->size) +
                                 " (set by " + std::string(launcher_name(launched->launcher)) +
                                 ") disagree with the communicator's " + mpi +
                                 "; expected the process to be started by that launcher");
    }
  }

  const auto& tf = environment.tf_config;
  if (!tf || !tf->in_multi_worker_mode()) {
    return WorkerPlacement{mpi_size, mpi_rank, mpi_rank == 0, std::nullopt, std::nullopt};
  }

  const std::string task = "\"" + *tf->task_type() + "\" task " + std::to_string(*tf->task_id());
  if (*tf->task_type() == kPs) {
    throw InvalidArgumentError("TF_CONFIG: \"task.type\": expected \"chief\", \"worker\" or \"evaluator\" for a " +
                               mpi + ", got \"ps\" (a parameter server is not a MultiWorkerMirroredStrategy worker)");
  }
  const int num_workers = tf->num_workers();
  const int id = tf->id_in_cluster();
  if (num_workers != mpi_size) {
    throw InvalidArgumentError(
        "TF_CONFIG describes " + std::to_string(num_workers) + " workers (" +
        std::to_string(tf->cluster_spec().num_tasks(kChief)) + " \"chief\" + " +
        std::to_string(tf->cluster_spec().num_tasks(kWorker)) + " \"worker\" tasks" +
        (*tf->task_type() == kEvaluator ? "; the evaluator counts only \"evaluator\" tasks" : "") +
        ") but the communicator has " + mpi + "; expected one process per worker (num_workers == MPI size)");
  }
  if (id != mpi_rank) {
    throw InvalidArgumentError("TF_CONFIG's " + task + " has id_in_cluster " + std::to_string(id) +
                               " but the communicator gives " + mpi +
                               "; expected ranks in id_in_cluster order (chief first, then worker 0, 1, ...)");
  }
  return WorkerPlacement{num_workers, id, tf->is_chief(), tf->task_type(), tf->task_id()};
}

}  // namespace distribute
