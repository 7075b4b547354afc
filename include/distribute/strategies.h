// The concrete strategies.
#pragma once

#include <any>
#include <optional>
#include <string>
#include <vector>

#include "distribute/cluster_resolver.h"
#include "distribute/strategy.h"

namespace distribute {

// The CPUs this process may use: the CPUs of the calling thread's affinity
// mask (taskset, numactl, mpirun's binding, a container's cpuset), lowered to
// ceil(quota / period) when a cgroup CPU quota applies to the process (cgroup
// v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us, at its own cgroup or
// any parent: `docker run --cpus`, Kubernetes CPU limits). At least 1. Unlike
// std::thread::hardware_concurrency(), which counts the machine's CPUs, it
// sees a container limited to 2 CPUs of a 64-core host as 2. The quota is
// read once per process, the mask on every call.
int usable_cpu_count();

// N replicas in this process, one per local device, each run on its own
// thread. Devices are logical: more replicas than cores work (the replicas
// then share the cores). Replica threads wait for work by spinning briefly,
// then sleeping, so idle replicas use no CPU.
class MirroredStrategy : public Strategy {
 public:
  // One replica per CPU this process may use: n = usable_cpu_count() (the
  // affinity mask, capped by a cgroup CPU quota; not the machine's
  // hardware_concurrency()), devices "CPU:0" ... "CPU:<n-1>". Under
  // `taskset -c 0` that is one replica.
  MirroredStrategy();
  // One replica per listed device, in order: "CPU:0", "/device:CPU:1",
  // "/job:localhost/replica:0/task:0/device:CPU:2", ... Raises
  // InvalidArgumentError for an empty list and for duplicate, malformed or
  // unknown devices.
  explicit MirroredStrategy(const std::vector<std::string>& devices);
  // With strategy-wide collective options (e.g. the default timeout).
  MirroredStrategy(const std::vector<std::string>& devices, const CommunicationOptions& options);
  // With a way of running the replicas other than one thread each
  // (ReplicaExecution::FIBERS, for more replicas than cores).
  MirroredStrategy(const std::vector<std::string>& devices, const CommunicationOptions& options,
                   ReplicaExecution execution);
};

// One replica on one device; run() calls fn on the calling thread and values
// are never split. Raises InvalidArgumentError for a malformed or unknown
// device.
class OneDeviceStrategy : public Strategy {
 public:
  explicit OneDeviceStrategy(const std::string& device);
};

// How a MultiWorkerMirroredStrategy is set up. Every field is optional.
struct MultiWorkerOptions {
  // This worker's devices, one replica each (like MirroredStrategy's list);
  // empty: one replica on "CPU:0". Every worker must have the same number.
  std::vector<std::string> local_devices;
  // Collective options; timeout_seconds (default 60) bounds every wait on
  // another replica or worker.
  CommunicationOptions communication;
  // Bounds the constructor's waits: MPI initialization (when the library
  // initializes MPI, which waits for every process of the job), every
  // worker's arrival, and the communicators' set-up. A worker that does
  // not arrive in time makes the others raise DeadlineExceededError naming
  // it (MPI's initialization itself cannot say which process is missing).
  // Must be > 0. Start-up messages travel on the program's communicator
  // with tag 32700 (reserved: a receive of the program's with MPI_ANY_TAG
  // on it must not run while a strategy starts).
  double startup_timeout_seconds = 60.0;
  // The cluster as TF describes it; unset: TF_CONFIG from the environment,
  // if set. It must agree with the MPI communicator (size = number of
  // workers, rank = TF's id_in_cluster).
  std::optional<TFConfigClusterResolver> cluster_resolver = std::nullopt;
  // An MPI_Comm of the program's (distribute/mpi.h sets it); empty: the
  // library duplicates MPI_COMM_WORLD, initializing MPI if the program has
  // not (then it also finalizes MPI at exit).
  std::any mpi_communicator = {};
  // When every worker runs on one host (same kernel, IPC, mount and PID
  // namespaces), the workers' collectives go through a shared-memory
  // segment (POSIX shm, named only until every worker has mapped it) instead
  // of MPI messages: the same results, deadlines and failure reports, and a
  // worker whose process ends is noticed within a millisecond. false, or
  // DISTRIBUTE_SHARED_MEMORY=0 in the environment, keeps MPI for everything.
  // Workers on several hosts: all_reduce is hierarchical (each host's
  // workers sum on their host's segment, one worker per host exchanges the
  // sums over MPI, then hands the result to its host's); the other
  // collectives use MPI.
  bool shared_memory = true;
};

// M worker processes x N local replicas, TF's MultiWorkerMirroredStrategy,
// over MPI: launch the same program with mpirun (or srun), one process per
// worker. num_replicas_in_sync() counts every replica of every worker;
// replica ids are global and worker-major (worker w's local replica r is
// replica w * N + r); a PerReplica holds the local replicas' values
// (experimental_local_results). Collectives and reduce() combine the local
// replicas in shared memory, then the workers (through a shared-memory
// segment when all are on one host, see MultiWorkerOptions::shared_memory,
// else over MPI, with a host-local stage of all_reduce on each host that
// has several workers). Needs MPI with
// MPI_THREAD_SERIALIZED or higher (FailedPreconditionError otherwise); a
// build without MPI raises UnimplementedError here.
//
// One MultiWorkerMirroredStrategy per process at a time (every worker
// creates and destroys them in the same order): strategies in sequence work
// (train, then evaluate), each talking on channels of its own, so that
// nothing of a finished one is taken for the current one's; creating one
// while another is alive raises FailedPreconditionError. Destroying one
// tells the other workers that this one left; a distributed dataset or
// variable used after its strategy was destroyed raises
// FailedPreconditionError.
class MultiWorkerMirroredStrategy : public Strategy {
 public:
  MultiWorkerMirroredStrategy();
  explicit MultiWorkerMirroredStrategy(const MultiWorkerOptions& options);
  // Over a given transport instead of MPI (options' MPI and cluster fields
  // are not used): the library's tests run threads of one process as the
  // workers this way (src/transport/local_cross_worker.h).
  MultiWorkerMirroredStrategy(const MultiWorkerOptions& options, std::shared_ptr<internal::CrossWorker> transport);
  ~MultiWorkerMirroredStrategy() override;
};

// The default strategy: what get_strategy() returns outside any scope. One
// replica on the calling thread; reduce() returns plain values unchanged. A
// process-wide singleton, usable from any thread (a child forked without
// exec gets one of its own).
Strategy& get_default_strategy();

}  // namespace distribute
