// CollectiveGroup: the rendezvous and shared-memory engine behind the
// replica-context collectives (all_reduce, all_gather, merge_call) of the
// replicas of one process.
//
// Protocol, per collective (every replica calls them in the same order; the
// k-th call of each replica in a run is collective number k):
//   1. Publish. Replica r writes its descriptor (kind, op, tensors, ...) into
//      slot r, then stores k into slot r's `arrived` word. Replica 0 also
//      allocates the output buffer(s) from its own descriptor.
//   2. Meet. Each replica waits until every slot has arrived at k (or the
//      group is aborted, or the deadline passes). Every replica then checks
//      all descriptors against replica 0's; a mismatch raises the same
//      InvalidArgumentError on every replica.
//   3. Compute. Replica r fills its own part of the shared output (for a
//      reduction: elements [r*L/N, (r+1)*L/N) of each pack, summed over the
//      replicas in replica order, so the result is bitwise the same whatever
//      the timing), then stores k into its `done` word.
//   4. Leave. Each replica waits until every slot is done with k, so no
//      input is released and no slot is reused while someone still reads it.
// The output is one buffer shared by every replica's result (Tensors are
// immutable), so a Mirrored result of N replicas costs the memory of one.
//
// Every wait spins briefly, then sleeps on one progress word, and ends by its
// deadline. abort() (a replica failed, or a deadline passed) wakes every
// waiter, which raises CancelledError naming the cause; a deadline raises
// DeadlineExceededError naming the collective, its number, and the replicas
// that arrived and that are missing. A replica that returns from its
// function while others wait in a collective counts as a mismatch.
//
// Memory ordering: a replica that passed step 2 of collective k sees every
// descriptor and input written before the other replicas' step 1; one that
// passed step 4 sees every replica's part of the output.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "distribute/internal/function_ref.h"
#include "distribute/tensor.h"
#include "distribute/types.h"
#include "runtime/spin_wait.h"

namespace distribute::internal {

using Clock = std::chrono::steady_clock;

class CollectiveGroup {
 public:
  explicit CollectiveGroup(int num_replicas);
  CollectiveGroup(const CollectiveGroup&) = delete;
  CollectiveGroup& operator=(const CollectiveGroup&) = delete;

  // Called by run() before the replicas start (no replica is inside a
  // collective): clears sequence numbers, finished marks and any abort.
  void reset();
  // Makes every pending and future wait of this run raise CancelledError
  // naming `replica` and `reason` (the first abort wins).
  void abort(int replica, std::exception_ptr reason) noexcept;
  // Replica `replica` returned from its function.
  void finish(int replica) noexcept;

  // Element-wise reduction of each tensor over the replicas. `values` must
  // match on every replica (count, dtypes, shapes). Results of one pack share
  // one buffer.
  std::vector<Tensor> all_reduce(int replica, ReduceOp op, const std::vector<Tensor>& values,
                                 std::int64_t bytes_per_pack, Clock::time_point deadline);
  // Concatenation of each tensor over the replicas along `axis`, in replica
  // order; sizes along the axis may differ, all other dimensions must match.
  std::vector<Tensor> all_gather(int replica, const std::vector<Tensor>& values, int axis,
                                 Clock::time_point deadline);
  // Replica 0 calls leader(per-replica argument pointers) once every replica
  // has arrived; every replica gets its result (or rethrows its exception).
  // `type_name` identifies the argument types (mismatch check).
  std::shared_ptr<void> merge_call(int replica, std::shared_ptr<const void> args, const char* type_name,
                                   FunctionRef<std::shared_ptr<void>(std::span<const void* const>)> leader,
                                   Clock::time_point deadline);

 private:
  enum class Kind : std::uint8_t { kNone, kAllReduce, kAllGather, kMergeCall, kFinished };

  struct Descriptor {
    Kind kind = Kind::kNone;
    ReduceOp op = ReduceOp::SUM;
    int axis = 0;
    std::int64_t bytes_per_pack = 0;
    // The slot keeps its own references to the inputs (and merge_call's
    // arguments), so that a replica unwinding after a timeout cannot free
    // what another replica still reads.
    std::vector<Tensor> owned_inputs;
    const std::vector<Tensor>* tensors = nullptr;  // = &owned_inputs once published
    std::shared_ptr<const void> args;
    const char* type_name = nullptr;
    // Written by replica 0 only.
    std::vector<Tensor> packs;          // all_reduce: one output buffer per pack
    std::vector<Tensor> outputs;        // all_gather: one output per tensor
    std::shared_ptr<void> merge_result; // merge_call
    std::exception_ptr merge_error;
  };

  struct alignas(64) Slot {
    Descriptor desc;
    std::atomic<std::uint64_t> arrived{0};
    std::atomic<std::uint64_t> done{0};
    // Replica 0 only: the outputs of all_gather `ready` are allocated.
    std::atomic<std::uint64_t> ready{0};
    std::uint64_t next_seq = 1;  // touched by the slot's replica only
  };

  // Waits until `ready()` holds; raises on abort or at the deadline.
  template <class Ready>
  void wait(int replica, std::uint64_t seq, const char* what, Clock::time_point deadline, bool arriving,
            Ready ready);
  // Fills replica's slot through `fill`, then announces it.
  std::uint64_t publish(int replica, FunctionRef<void(Descriptor&)> fill);
  void mark_done(int replica, std::uint64_t seq);
  void meet(int replica, std::uint64_t seq, const char* what, Clock::time_point deadline);
  void leave(int replica, std::uint64_t seq, const char* what, Clock::time_point deadline);
  void check_matching(std::uint64_t seq, const char* what) const;
  [[noreturn]] void throw_aborted(int replica, std::uint64_t seq, const char* what) const;

  const int n_;
  BufferPool buffers_;  // output buffers, recycled between calls
  std::vector<Slot> slots_;
  SpinPolicy policy_;
  WaitWord progress_;  // bumped by every arrival, completion and abort
  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mutex_;
  std::string abort_reason_;  // guarded by abort_mutex_
  int abort_replica_ = -1;    // guarded by abort_mutex_
  bool abort_is_deadline_ = false;
};

}  // namespace distribute::internal
