// ShmChannel: the cross-worker collectives of worker processes that share
// one host, through a shared-memory segment instead of MPI messages (issue
// 14). MpiCrossWorker sets it up at start-up when every worker is on this
// host (MPI carries only the set-up) and sends every collective through it;
// across hosts, one per host with several workers, for the host-local steps
// of its hierarchical all_reduce (ranks here are then the host's, and
// name_workers gives the job's numbers for messages).
//
// The segment holds, per worker, a control block (barrier count, state,
// pid, a failure text, and a Header per parity) and two data slots of
// slot_bytes(). Collectives are sequences of barriers, numbered alike on
// every worker: before arriving at barrier b a worker writes its header and
// data into its parity-(b % 2) areas; after everyone arrived, the others read
// them, and finish reading before they arrive at barrier b + 1. The next
// write to those areas is for barrier b + 2, after everyone arrived at
// b + 1: nothing is overwritten while it is read, with one release store
// and acquire loads per barrier.
//
// Algorithms, M workers, S bytes (the same sums, in worker order, as the MPI
// path: the same bits):
//   - all_reduce of 2 workers, or up to kDirectBytes: by chunks of one slot,
//     each copies its chunk into its slot, one barrier (with the headers in
//     the first), and each sums all M in worker order (reading its own
//     input in place): S copied in, M S read per worker;
//   - all_reduce of 3 workers or more above kDirectBytes: per chunk each
//     copies what the others need of its input into its slot, barrier, sums
//     its 1/M share (reading its own input in place) into its other slot,
//     barrier, and copies the other shares out: S (M-1)/M bytes in and out
//     per worker, two barriers (measured on 2 workers, one barrier and the
//     redundant sum are faster: BENCHMARKS.md);
//   - all_gather and broadcast: rounds of one slot per worker (one round,
//     the header barrier, for anything up to a slot).
//
// Shared allocations (issue 14, item 4): allocate_shared is collective;
// worker 0 creates a second segment of M regions of the same size, every
// worker maps all of it, and each gets its own region (the caller's
// tensor). An all_reduce of a tensor that lies, on every worker, in its
// region of one allocation at the same offset, and that is reduced in place
// (`in == out`), copies nothing: after a barrier each worker sums its 1/M
// share of the elements straight from the M regions, in worker order, and
// writes the sum into every region's share (the in-process engine's
// in-place kernel: the same bits), then a second barrier. Such calls above
// kDirectBytes start with a barrier of headers alone (only once some
// allocation exists, which is the same on every worker), where the workers
// find whether all of them can; otherwise they take the copying paths.
//
// Waits spin, then yield, then sleep in 50 us steps, and end:
//   - when a peer's state says it failed or left (UnavailableError with its
//     text, as an MPI failure report would);
//   - when a peer's process ended (a pidfd, or kill(pid, 0), looked at every
//     millisecond): UnavailableError naming it: a killed worker does not
//     leave the others waiting until their deadline;
//   - when `cancelled()` holds (CancelledError), the thread's interrupt
//     check throws (after this worker's state says it failed), or at the
//     deadline (DeadlineExceededError naming the workers that did not
//     arrive).
// After any of these the channel is broken (broken() says why); the caller
// breaks its own state too. Mismatched calls raise WorkersMismatchError
// and leave the channel in step.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "distribute/internal/owner_process.h"
#include "distribute/internal/function_ref.h"
#include "distribute/types.h"
#include "transport/wire.h"

namespace distribute::internal {

class ShmChannel {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kDirectBytes = 64 * 1024;

  // This host's identity as the kernel sees it (boot id, host name, the
  // IPC, mount and PID namespaces): workers with equal keys can share a
  // segment and see each other's processes.
  static std::string host_key();

  // Creates the segment for `size` workers (`rank` 0 does this) under a
  // fresh name, /dev/shm/<name_prefix()><pid>-<n>-<random>, after removing
  // the names left by creators that ended before every worker attached (a
  // worker 0 killed during start-up: remove_stale_segments);
  // UnavailableError when the system refuses (no /dev/shm space, say), so
  // that the caller can fall back to MPI.
  static std::unique_ptr<ShmChannel> create(int rank, int size);
  // "distribute-<the inode of this PID namespace>-".
  static std::string name_prefix();
  // Unlinks every segment name of this PID namespace whose creator's pid
  // no longer exists.
  static void remove_stale_segments() noexcept;
  // Maps the segment `name` created by worker 0.
  static std::unique_ptr<ShmChannel> attach(const std::string& name, int rank, int size);
  ~ShmChannel();

  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  const std::string& name() const { return name_; }
  // Removes the name (the mappings stay): once every worker has attached,
  // nothing is left in /dev/shm whatever happens to the processes.
  void unlink() noexcept;
  // Starts watching the peers' processes (their pids, which every worker
  // wrote when it attached). Call after every worker attached.
  void watch_peers();
  // The workers' numbers in messages (errors, reports, mismatches), by
  // this channel's rank: a host's channel within a larger job
  // (MpiCrossWorker's hierarchical mode) names them as the job does. By
  // default, the ranks themselves.
  void name_workers(std::vector<int> ids);
  std::size_t slot_bytes() const { return slot_bytes_; }
  // How long a wait spins before it yields the core (50 us by default: the
  // latency of a hand-off between processes). A wait for a peer that is
  // itself waiting for the network (the hierarchical mode's hand-out of the
  // hosts' sum) spins for none: on cores shared with the peers, spinning
  // takes the time the peer and the kernel's network processing need.
  void set_spin(std::chrono::nanoseconds spin) { spin_ = spin; }
  std::chrono::nanoseconds spin() const { return spin_; }
  // set_spin for a scope: the previous value comes back at its end.
  class SpinFor {
   public:
    SpinFor(ShmChannel& channel, std::chrono::nanoseconds spin) : channel_(channel), before_(channel.spin()) {
      channel_.set_spin(spin);
    }
    ~SpinFor() { channel_.set_spin(before_); }
    SpinFor(const SpinFor&) = delete;
    SpinFor& operator=(const SpinFor&) = delete;

   private:
    ShmChannel& channel_;
    std::chrono::nanoseconds before_;
  };

  // The collectives (see the header comment). `mine` is this worker's
  // header for the call.
  void all_reduce_sum(const char* what, const Header& mine, DType dtype, const void* in, void* out,
                      std::size_t count, Clock::time_point deadline, FunctionRef<bool()> cancelled);
  std::vector<std::vector<std::byte>> all_gather(const char* what, const Header& mine,
                                                 std::span<const std::byte> bytes, Clock::time_point deadline,
                                                 FunctionRef<bool()> cancelled);
  // broadcast: with `each_round_at_least` > 0, each round's wait ends at
  // `deadline` or that long after the round began, whichever is later (the
  // hierarchical all_reduce's hand-off: mpi_cross_worker.cc).
  void broadcast(const char* what, const Header& mine, void* data, std::size_t bytes, int root,
                 Clock::time_point deadline, FunctionRef<bool()> cancelled,
                 Clock::duration each_round_at_least = Clock::duration::zero());

  // One allocation's mapping: M regions of region_bytes, worker w's at
  // base + w * region_bytes; unmapped when the last reference goes.
  struct SharedMapping {
    std::byte* base = nullptr;
    std::size_t region_bytes = 0;
    std::size_t bytes = 0;  // of the mapping
    ~SharedMapping();
  };
  // Worker 0: a fresh segment of `size` regions of `bytes` (rounded up to
  // pages) each, zero-filled, named like the channel's own (so that
  // remove_stale_segments removes it if worker 0 ends before it is
  // unlinked). UnavailableError when the system refuses (no /dev/shm space).
  std::string create_shared(std::size_t bytes) const;
  // Maps the segment `name` made by create_shared(bytes) (UnavailableError
  // when it cannot).
  std::shared_ptr<SharedMapping> map_shared(const std::string& name, std::size_t bytes) const;
  static void unlink_shared(const std::string& name) noexcept;
  // Registers a mapping every worker made (same order on all of them) for
  // the in-place path; returns this worker's region, which keeps the
  // mapping alive (the channel keeps only a weak reference).
  std::shared_ptr<std::byte> register_shared(std::shared_ptr<SharedMapping> mapping);

  // How many all_reduce_sum calls took the in-place path (for tests).
  std::uint64_t shared_sums() const { return shared_sums_; }

  // Marks this worker failed (`text` says why; peers waiting raise
  // UnavailableError with it) or gone (`leave`). Never throws; the first
  // call wins.
  void report_failure(const std::string& text) noexcept;
  void leave(const std::string& text) noexcept;
  // A peer's failure or leaving text ("worker 1 reported a failure (...)"),
  // if one has been posted: a call that would wait for that peer raises it.
  std::optional<std::string> peer_report() const;
  // Why the channel broke, or empty.
  std::string broken() const;

 private:
  struct Control;
  ShmChannel(std::string name, int fd, int rank, int size, std::size_t slot_bytes, bool owner);

  Control& control(int worker) const;
  int id(int worker) const { return ids_.empty() ? worker : ids_[static_cast<std::size_t>(worker)]; }
  std::byte* slot(int worker, std::uint64_t barrier) const;
  // Publishes `mine` for the next barrier, arrives, and waits for every
  // peer. Returns the barrier's number.
  std::uint64_t barrier(const char* what, const Header& mine, Clock::time_point deadline,
                        FunctionRef<bool()> cancelled);
  std::uint64_t next_barrier() const { return barrier_ + 1; }
  // Every worker's header of barrier `b`, checked against worker 0's.
  void check_headers_of(const char* what, std::uint64_t b) const;
  // all_reduce_sum by slot-sized chunks: every worker's chunk into its slot,
  // one barrier, each sums them all (2 workers, or small buffers).
  void sum_direct(const char* what, const Header& mine, const Sum& sum, Clock::time_point deadline,
                  FunctionRef<bool()> cancelled);
  // Reduce-scatter per chunk: each sums its 1/M share (two barriers).
  void sum_scattered(const char* what, const Header& mine, const Sum& sum, Clock::time_point deadline,
                     FunctionRef<bool()> cancelled);
  void wait(const char* what, std::uint64_t b, Clock::time_point deadline, FunctionRef<bool()> cancelled);
  // The first peer whose process ended while it has not arrived at `b`.
  int dead_peer(std::uint64_t b) const;
  // all_reduce_sum in place in the regions of `mapping`, at `offset`.
  void sum_shared(const char* what, const Header& mine, const Sum& sum, const SharedMapping& mapping,
                  std::size_t offset, Clock::time_point deadline, FunctionRef<bool()> cancelled);
  // The registered allocation whose region of this worker holds `bytes`
  // bytes at `data` (the mapping kept alive by the returned pointer), its
  // number and the offset; a null mapping when none does.
  std::shared_ptr<SharedMapping> find_shared(const std::byte* data, std::size_t bytes, std::uint64_t& id,
                                             std::size_t& offset);
  [[noreturn]] void fail(const std::string& reason, std::exception_ptr error);
  void post_state(std::uint32_t state, const std::string& text) noexcept;

  std::string name_;
  int fd_ = -1;
  int rank_ = 0;
  int size_ = 1;
  std::size_t slot_bytes_ = 0;
  std::size_t bytes_ = 0;  // of the mapping
  std::byte* base_ = nullptr;
  bool owner_ = false;  // created the name (unlinks it)
  OwnerProcess owner_process_;  // a forked child's copy posts and unlinks nothing
  std::vector<int> ids_;  // name_workers (empty: the ranks)
  std::chrono::nanoseconds spin_ = std::chrono::microseconds(50);
  std::uint64_t barrier_ = 0;  // the last barrier this worker arrived at
  // Reused by every call (the collectives run on one thread at a time):
  std::vector<std::byte> scratch_;         // a share's sum
  std::vector<const std::byte*> ins_;      // the inputs of a sum, per worker
  mutable std::vector<Header> headers_;    // every worker's header of a barrier
  struct Registered {
    std::uint64_t id;
    std::weak_ptr<SharedMapping> mapping;
  };
  // By id. register_shared runs on the strategy's caller thread and the
  // collectives on a replica thread, never at once (one collective or
  // cross-replica call at a time; run() orders them).
  std::vector<Registered> shared_;
  std::uint64_t shared_made_ = 0;   // allocations registered so far (the same on every worker)
  std::uint64_t shared_sums_ = 0;
  std::vector<int> pidfds_;    // per worker; -1: none (itself, or kill(pid, 0) instead)
  mutable Mutex state_mutex_;
  bool posted_ GUARDED_BY(state_mutex_) = false;  // this worker's state left kAlive
  std::string broken_ GUARDED_BY(state_mutex_);
};

}  // namespace distribute::internal
