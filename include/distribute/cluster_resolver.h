// Cluster resolution for MultiWorkerMirroredStrategy: who the workers are and
// which one this process is.
//
// Three sources describe a multi-worker job:
//   - TF_CONFIG, TF's JSON environment variable, for users coming from TF:
//       {"cluster": {"chief": ["host:port"], "worker": ["host:port", ...]},
//        "task": {"type": "worker", "index": 0}}
//     parse_tf_config() validates it as TF's TFConfigClusterResolver and
//     multi_worker_util do, and TFConfigClusterResolver answers TF's
//     questions (num_workers, id_in_cluster, is_chief).
//   - The rank and size an MPI launcher (mpirun, mpiexec, srun) gives each
//     process in its environment.
//   - A Slurm job step's host and task lists (SlurmClusterResolver, as TF's).
//
// read_cluster_environment() is the one place where the library itself reads
// the cluster's description from the environment; everything else takes its
// result. (SlurmClusterResolver::from_environment() reads Slurm's variables
// when the program asks for it; the DISTRIBUTE_REDUCE_ISA override of the
// reduction kernels, DISTRIBUTE_IDLE_SPIN_US of src/runtime/, and the
// launcher check, DISTRIBUTE_SHARED_MEMORY, DISTRIBUTE_PROCESS_WATCH and
// Open MPI's TCP interface selection of src/transport/, read their own
// variables.) reconcile_cluster() checks
// the environment against the communicator's rank and size at run time and
// gives the worker's place in the cluster.
//
// Every function here is thread-compatible: TFConfigClusterResolver is an
// immutable value type, and read_cluster_environment() only reads (see its
// comment for the one caveat about std::getenv).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace distribute {

// TF's tf.train.ClusterSpec: job name -> the "host:port" address of each of
// its tasks, task i at position i. Addresses are kept as given; this library
// does not connect to them (MPI carries the bytes).
struct ClusterSpec {
  std::map<std::string, std::vector<std::string>> jobs;

  // True when there are no jobs: local (single-worker) mode.
  bool empty() const { return jobs.empty(); }
  // The number of tasks of `job`; 0 when the job is absent.
  int num_tasks(std::string_view job) const;

  friend bool operator==(const ClusterSpec&, const ClusterSpec&) = default;
};

// The task types TF knows: "chief", "worker", "evaluator", "ps".
inline constexpr std::string_view kChief = "chief";
inline constexpr std::string_view kWorker = "worker";
inline constexpr std::string_view kEvaluator = "evaluator";
inline constexpr std::string_view kPs = "ps";

// A validated cluster and this task's place in it: what TF's
// TFConfigClusterResolver resolves plus what multi_worker_util derives from
// it. An immutable value; build one with parse_tf_config() or create().
//
// Local mode (empty cluster spec, the default-constructed value): one worker,
// num_workers() == 1, id_in_cluster() == 0, is_chief(), and no task type or id
// (TF's MultiWorkerMirroredStrategy sets both to None in local mode).
class TFConfigClusterResolver {
 public:
  // Local mode.
  TFConfigClusterResolver() = default;

  // Validates as TF's multi_worker_util._validate_cluster_spec, in this
  // order: `task_type` is one of chief, worker, evaluator, ps; it is a job of
  // `cluster_spec`; at most one chief and one evaluator; 0 <= task_id < the
  // number of `task_type` tasks. An empty `cluster_spec` gives local mode and
  // ignores the task. Raises InvalidArgumentError naming the argument
  // ("task_type", "task_id", "cluster_spec[\"chief\"]") and the bad value.
  // For TF_CONFIG text use parse_tf_config(), whose messages name JSON fields.
  static TFConfigClusterResolver create(ClusterSpec cluster_spec, std::string task_type, int task_id,
                                        std::string rpc_layer = "");

  const ClusterSpec& cluster_spec() const { return cluster_spec_; }
  // "chief", "worker", "evaluator" or "ps"; nullopt in local mode.
  const std::optional<std::string>& task_type() const { return task_type_; }
  // The index of this task within its job; nullopt in local mode.
  std::optional<int> task_id() const { return task_id_; }
  // TF_CONFIG's "rpc_layer" (e.g. "grpc"); empty when not given.
  const std::string& rpc_layer() const { return rpc_layer_; }

  // True when the cluster spec is not empty (TF: a cluster spec was given).
  bool in_multi_worker_mode() const { return !cluster_spec_.empty(); }

  // TF's multi_worker_util.worker_count: len(chief) + len(worker) for chief
  // and worker tasks (the chief is also a worker); len(evaluator) for the
  // evaluator, which is a cluster of its own; 1 in local mode. Raises
  // FailedPreconditionError for a "ps" task, which is not a worker.
  int num_workers() const;

  // TF's multi_worker_util.id_in_cluster, in [0, num_workers()): the chief is
  // 0, worker i is i + len(chief), the evaluator is its task_id; 0 in local
  // mode. Raises FailedPreconditionError for a "ps" task.
  int id_in_cluster() const;

  // TF's multi_worker_util.is_chief: true for the chief, for the evaluator
  // (the only task of its own cluster), for worker 0 when the cluster has no
  // chief, and in local mode.
  bool is_chief() const;

  // TF's multi_worker_util.collective_leader: "/job:chief/replica:0/task:0"
  // when the cluster has a chief, else "/job:worker/replica:0/task:0"; empty
  // in local mode and for the evaluator.
  std::string collective_leader() const;

  friend bool operator==(const TFConfigClusterResolver&, const TFConfigClusterResolver&) = default;

 private:
  friend TFConfigClusterResolver parse_tf_config(std::string_view json);

  ClusterSpec cluster_spec_;
  std::optional<std::string> task_type_;
  std::optional<int> task_id_;
  std::string rpc_layer_;
};

// Parses and validates TF_CONFIG's JSON text. Recognized keys: "cluster" (an
// object mapping job names to lists of "host:port" strings), "task" (an object
// with "type", a string, and "index", an integer or a string holding one, as
// TF's int() accepts) and "rpc_layer" (a string); other keys are ignored, as
// TF does.
//
// A missing or empty "cluster" gives local mode; a "task" is then checked for
// its shape only and otherwise ignored, as TF does. With a non-empty cluster,
// "task.type" and "task.index" are required ("When cluster_spec is given, you
// must also specify task_type and task_id") and validated as create() does.
//
// Raises InvalidArgumentError whose message starts with "TF_CONFIG: " and
// names the bad field in JSON-path form with what was expected and what was
// got, e.g.
//   TF_CONFIG: "task.index": expected an integer in [0, 2) (the number of
//   "worker" tasks), got 5
// Stricter than TF in three places: a job's tasks must be a list (TF also
// accepts an {index: address} object), "task.type" must be a string, and a
// number beyond a double's range anywhere in the text (1e400, which Python's
// json.loads reads as inf) is an error even in a key that is ignored.
TFConfigClusterResolver parse_tf_config(std::string_view json);

// The MPI launchers whose rank and size variables read_cluster_environment()
// understands, in the order it looks for them.
enum class Launcher {
  kOpenMpi,  // Open MPI's mpirun: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE
  kPmi,      // MPICH / Intel MPI (Hydra) mpiexec: PMI_RANK, PMI_SIZE
  kSlurm,    // Slurm's srun: SLURM_PROCID, SLURM_NTASKS
};

// "Open MPI", "PMI (MPICH/Hydra)", "Slurm".
std::string_view launcher_name(Launcher launcher);

// What a launcher told this process: its rank in [0, size).
struct LauncherRank {
  Launcher launcher;
  int rank = 0;
  int size = 1;
  // The variables read, e.g. "OMPI_COMM_WORLD_RANK" and "OMPI_COMM_WORLD_SIZE"
  // (views of string literals, valid for the whole program).
  std::string_view rank_variable;
  std::string_view size_variable;

  friend bool operator==(const LauncherRank&, const LauncherRank&) = default;
};

// What the environment says about the cluster; each part is nullopt when its
// variables are not set.
struct ClusterEnvironment {
  // TF_CONFIG, parsed and validated.
  std::optional<TFConfigClusterResolver> tf_config;
  // The first launcher (in Launcher's order) whose rank variable is set.
  // Open MPI and PMI come before Slurm because mpirun inside a Slurm
  // allocation inherits the allocation's SLURM_* variables.
  std::optional<LauncherRank> launcher;
};

// Looks up an environment variable: its value, or nullopt when it is unset.
using EnvironmentLookup = std::function<std::optional<std::string>(const std::string& name)>;

// The process environment through std::getenv. std::getenv is safe to call
// from several threads but not while another thread calls setenv/putenv.
std::optional<std::string> getenv_lookup(const std::string& name);

// The one place the library reads the cluster's description from the
// environment (see the list above for the others). Reads TF_CONFIG (through
// parse_tf_config(); an empty value is invalid JSON, as in TF) and the
// launcher variables listed in Launcher. Raises InvalidArgumentError naming
// the variable and its value when a rank or size is not a decimal integer,
// when a size is < 1, when a rank is not in [0, size), or when a launcher
// sets a rank without a size. Pass `lookup` to read from somewhere else
// (tests use a map).
ClusterEnvironment read_cluster_environment(const EnvironmentLookup& lookup = getenv_lookup);

// --- Slurm ------------------------------------------------------------------
//
// TF's tf.distribute.cluster_resolver.SlurmClusterResolver reads a Slurm job
// step's environment. These are the same facts, validated, for a process
// started by srun (or by mpirun inside an allocation).

// Expands a Slurm host list in its compressed form, as SLURM_JOB_NODELIST and
// SLURM_STEP_NODELIST hold it: comma-separated hosts, each a name with any
// number of bracketed ranges, e.g. "node[01-03,07],gpu5" gives node01,
// node02, node03, node07, gpu5, and "r[1-2]n[1-2]" gives r1n1, r1n2, r2n1,
// r2n2. Order is kept and nothing is deduplicated (as TF's expand_hostlist).
// A range keeps the width of its zero-padded start, as Slurm does ("01-10"
// gives 01 ... 10). Unlike TF's expand_hostlist, a host may have several
// bracket groups (Slurm's multi-dimensional names). Raises
// InvalidArgumentError naming the list, the offset and what was expected for
// an empty host, an unclosed or nested bracket, a bound that is not a decimal
// number, a descending range, more than kMaxSlurmRangeGroups groups in one
// name, a name longer than kMaxSlurmHostName characters, or more than
// kMaxSlurmHosts hosts (so that hostile text cannot take unbounded memory).
inline constexpr std::size_t kMaxSlurmHosts = 1 << 20;
inline constexpr std::size_t kMaxSlurmHostName = 255;
inline constexpr int kMaxSlurmRangeGroups = 8;
std::vector<std::string> expand_slurm_hostlist(std::string_view hostlist);

// Expands Slurm's tasks-per-node list, as SLURM_STEP_TASKS_PER_NODE and
// SLURM_TASKS_PER_NODE hold it: "3(x2),2,1" gives 3, 3, 2, 1 (TF's
// expand_tasks_per_node). Counts are >= 1. Raises InvalidArgumentError naming
// the list and the bad part.
std::vector<int> expand_slurm_tasks_per_node(std::string_view tasks_per_node);

// A Slurm job step: its hosts in the step's node order, the tasks on each,
// and this task's rank, node and local rank. Build one with from_environment().
class SlurmClusterResolver {
 public:
  // Reads, with the job's variables as fallbacks for the step's (a batch
  // script outside srun has only those):
  //   SLURM_PROCID                 this task's rank, in [0, tasks)
  //   SLURM_STEP_NUM_TASKS         (SLURM_NTASKS) the number of tasks
  //   SLURM_STEP_NODELIST          (SLURM_JOB_NODELIST, SLURM_NODELIST) the hosts
  //   SLURM_STEP_TASKS_PER_NODE    (SLURM_TASKS_PER_NODE) tasks on each host
  //   SLURM_NODEID, SLURM_LOCALID  this task's host (index) and rank on it,
  //                                optional: derived from the rank under
  //                                Slurm's default block distribution
  // and checks them against each other: each host listed once, one
  // tasks-per-node count per host, their sum the number of tasks, the rank,
  // node id and local rank in range. Raises FailedPreconditionError naming the variable when one is
  // missing ("not running inside a Slurm job step?"), and
  // InvalidArgumentError naming the variable, what was expected and what was
  // got otherwise.
  static SlurmClusterResolver from_environment(const EnvironmentLookup& lookup = getenv_lookup);

  // The step's hosts, in node order, and the tasks on each (same length).
  const std::vector<std::string>& hosts() const { return hosts_; }
  const std::vector<int>& tasks_per_node() const { return tasks_per_node_; }
  int num_tasks() const { return num_tasks_; }
  // This task: its global rank, its host's index in hosts(), its rank on
  // that host (among the tasks of one host: the processes that can share
  // memory), and the host's name.
  int rank() const { return rank_; }
  int node_id() const { return node_id_; }
  int local_rank() const { return local_rank_; }
  const std::string& host() const { return hosts_[static_cast<std::size_t>(node_id_)]; }

  // TF's SlurmClusterResolver.cluster_spec() for `jobs` (job name -> tasks;
  // default: every task a "worker"): the tasks' addresses, "host:port" with
  // ports from `port_base` up on each host, host by host, handed to the jobs
  // in name order (so rank r is task r of that list). Hosts come in the
  // step's node order, where Slurm's default block distribution puts the
  // ranks (TF sorts them by name; Slurm's own lists are sorted).
  // InvalidArgumentError unless the jobs' tasks add up to num_tasks(), or
  // when a port would pass 65535; FailedPreconditionError when SLURM_NODEID
  // and SLURM_LOCALID place this task elsewhere than the block distribution
  // (srun --distribution=cyclic, say): rank r's slot would not be its host.
  ClusterSpec cluster_spec(const std::map<std::string, int>& jobs = {}, int port_base = 8888) const;
  // The same cluster with this task's place in it (TF: get_task_info()):
  // a resolver to pass as MultiWorkerOptions::cluster_resolver. The job
  // names must be among chief, worker, evaluator and ps.
  TFConfigClusterResolver resolve(const std::map<std::string, int>& jobs = {}, int port_base = 8888) const;

 private:
  std::vector<std::string> hosts_;
  std::vector<int> tasks_per_node_;
  int num_tasks_ = 1;
  int rank_ = 0;
  int node_id_ = 0;
  int local_rank_ = 0;
  bool block_ = true;  // placed as Slurm's block distribution places rank_

  SlurmClusterResolver() = default;  // from_environment() makes them
};

// This process's place among the workers, once checked against the
// communicator.
struct WorkerPlacement {
  int num_workers = 1;
  // This worker's index in [0, num_workers): TF's id_in_cluster, which is
  // also the worker's MPI rank.
  int id_in_cluster = 0;
  bool is_chief = true;
  // From TF_CONFIG in multi-worker mode; nullopt when MPI alone placed the
  // worker.
  std::optional<std::string> task_type;
  std::optional<int> task_id;

  friend bool operator==(const WorkerPlacement&, const WorkerPlacement&) = default;
};

// Checks `environment` against the communicator's `mpi_rank` and `mpi_size`
// (which must satisfy 0 <= mpi_rank < mpi_size, else InvalidArgumentError)
// and places this worker:
//   - When TF_CONFIG describes a cluster, it must agree with MPI:
//     num_workers() == mpi_size and id_in_cluster() == mpi_rank, so start one
//     process per chief and worker task, ranked in id_in_cluster order. A "ps"
//     task cannot be a worker. The chief is as TF_CONFIG says.
//   - Otherwise (no TF_CONFIG, or one without a cluster) MPI is authoritative:
//     the worker index is mpi_rank, num_workers is mpi_size, rank 0 is chief.
//   - A launcher's rank and size, when found, must equal mpi_rank and
//     mpi_size (they differ when, e.g., a Slurm batch script's own variables
//     leak into a program that was not started by srun).
// A disagreement raises InvalidArgumentError naming both sources and both
// values.
WorkerPlacement reconcile_cluster(const ClusterEnvironment& environment, int mpi_rank, int mpi_size);

}  // namespace distribute
