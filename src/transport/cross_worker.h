// CrossWorker: the exchange between the worker processes of a
// MultiWorkerMirroredStrategy (one per worker, used by the worker's local
// replica 0 and by cross-replica calls). The MPI implementation is in
// mpi_cross_worker.cc; a build without MPI gets a factory that raises.
//
// Contract of every collective here:
//   - `what` names the call in messages as the user knows it ("all_reduce
//     #2", the number within the run; "reduce"; "start-up ..."): the
//     transport's own count of exchanges stays internal;
//   - every worker calls the same collectives in the same order; each first
//     exchanges a small header (strategy generation, sequence number, kind,
//     dtype, sizes) with
//     every peer, so that mismatched calls raise the same
//     WorkersMismatchError on every worker instead of corrupting memory;
//   - results are bitwise the same on every worker and on every run (sums
//     are taken in worker order; across hosts in the hierarchical mode, in
//     worker order within each host, then in host order);
//   - a wait ends by its deadline (DeadlineExceededError naming the workers
//     not heard from), when `cancelled()` holds (CancelledError), or when a
//     peer reports a failure (UnavailableError naming the peer and its
//     message); after any of these the channel is broken: later calls raise
//     FailedPreconditionError, and the process ends the MPI job with a
//     non-zero status at exit instead of finalizing (operations left in
//     flight cannot be completed).
#pragma once

#include <any>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "distribute/errors.h"
#include "distribute/internal/function_ref.h"
#include "distribute/types.h"

namespace distribute {
namespace internal {

// Mismatched calls found in the header exchange: every worker raises it at
// the same collective and the channel stays in step, so it is not a failure
// to report to the other workers.
class WorkersMismatchError : public InvalidArgumentError {
 public:
  using InvalidArgumentError::InvalidArgumentError;
};

class CrossWorker {
 public:
  using Clock = std::chrono::steady_clock;

  virtual ~CrossWorker() = default;

  virtual int num_workers() const = 0;
  virtual int worker_index() const = 0;
  // True when worker_index() and num_workers() are the process's rank and
  // size in the launcher's job (MPI_COMM_WORLD): the launcher's variables
  // (OMPI_COMM_WORLD_RANK, PMI_RANK, ...) must then agree with them. Who is
  // chief is the strategy's decision (TF's rules over TF_CONFIG), not the
  // transport's.
  virtual bool ranks_are_the_launchers() const { return false; }

  // out = the SUM over the workers of `count` elements of `dtype` at `in`
  // (`in` may be `out`). `layout` is a checksum of the shapes of the tensors
  // the elements come from (layout_checksum), compared like the count:
  // workers passing the same count in other shapes raise
  // WorkersMismatchError.
  virtual void all_reduce_sum(const char* what, DType dtype, const void* in, void* out, std::size_t count,
                              std::uint64_t layout, Clock::time_point deadline, FunctionRef<bool()> cancelled) = 0;
  // Every worker's bytes, in worker order (sizes may differ).
  virtual std::vector<std::vector<std::byte>> all_gather(const char* what, std::span<const std::byte> mine,
                                                         Clock::time_point deadline,
                                                         FunctionRef<bool()> cancelled) = 0;
  // Worker `root`'s `bytes` bytes at `data` copied to every worker's `data`.
  virtual void broadcast(const char* what, void* data, std::size_t bytes, int root, Clock::time_point deadline,
                         FunctionRef<bool()> cancelled) = 0;
  // A zero-filled buffer of `bytes` for this worker that all_reduce_sum
  // can sum in place without copying (in == out, at the same offset on
  // every worker: the host's shared memory; across hosts, its host-local
  // step), or null when this transport has no such memory or the system
  // refused it (the same on every worker, except that across hosts a
  // worker alone on its host gets null).
  // Collective: every worker calls it with the same `bytes`, in order with
  // the other collectives (WorkersMismatchError when the sizes differ).
  virtual std::shared_ptr<std::byte> allocate_shared(const char* what, std::size_t bytes,
                                                     Clock::time_point deadline) {
    (void)what, (void)bytes, (void)deadline;
    return nullptr;
  }
  // What carries all_reduce_sum (diagnostics and tests): "mpi" (messages
  // alone), "host segment" (every worker on one host: shared memory) or
  // "hierarchical" (several hosts: each host's segment, then MPI between
  // one worker per host); "in process" for workers that are threads.
  virtual const char* transport() const { return "in process"; }
  // How many all_reduce_sum calls were summed in place in allocate_shared's
  // memory, without a copy (diagnostics and tests).
  virtual std::uint64_t shared_in_place_sums() const { return 0; }
  // Tells every peer that this worker failed (their waits raise
  // UnavailableError with `message`), and breaks the channel. Never throws.
  virtual void report_failure(const std::string& message) noexcept = 0;
  // The strategy ends (its destructor): tells every peer that this worker
  // left (their waits raise UnavailableError), and lets the process create
  // another strategy; later calls raise FailedPreconditionError (a dataset
  // or variable kept beyond its strategy). Never throws; idempotent.
  virtual void close() noexcept = 0;
};

// The MPI channel for MultiWorkerMirroredStrategy (initializes MPI when the
// program has not). Start-up (MPI initialization, every worker's arrival,
// the communicators) is bounded by options.startup_timeout_seconds:
// DeadlineExceededError naming the workers that did not arrive (MPI's own
// initialization can name none). One strategy per process at a time:
// FailedPreconditionError while another is alive (not closed). Raises
// UnimplementedError when built without MPI.
struct ChannelOptions {
  // MultiWorkerOptions' fields of the same names.
  double startup_timeout_seconds = 60.0;
  std::any mpi_communicator;  // an MPI_Comm, or empty for MPI_COMM_WORLD
  bool shared_memory = true;
};
std::shared_ptr<CrossWorker> make_mpi_cross_worker(const ChannelOptions& options);

}  // namespace internal
}  // namespace distribute
