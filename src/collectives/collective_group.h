// CollectiveGroup: the rendezvous and shared-memory engine behind the
// replica-context collectives (all_reduce, all_gather, merge_call) of the
// replicas of one process.
//
// Protocol, per collective (every replica calls them in the same order; the
// k-th call of each replica in a run is collective number k):
//   1. Publish. Replica r writes its descriptor (kind, op, tensors, ...) into
//      its slot's descriptor k % 2, then stores k into the slot's `arrived`
//      word. For a reduction split across the replicas, replica 0 also
//      allocates the shared output buffer(s) from its own descriptor.
//   2. Meet. Each replica waits until every slot has arrived at k (or the
//      group is aborted, or the deadline passes). Every replica then checks
//      all descriptors against replica 0's; a mismatch raises the same
//      InvalidArgumentError on every replica.
//   3. Compute.
//      - A reduction pack of at least kSplitBytes: replica r fills elements
//        [r*L/N, (r+1)*L/N) of the shared output buffer, stores k into its
//        `done` word, and waits until every replica is done with k (the
//        result is then complete). All replicas' results are that buffer, so
//        a Mirrored result of N replicas costs the memory of one.
//      - A smaller pack: every replica reduces the whole pack into a buffer of
//        its own. That costs at most kSplitBytes per replica and saves the
//        second cross-core hand-off (the wait for the others' shares).
//      - A tensor of a split pack that EVERY replica donated (handed over,
//        sole owner of its buffer: all_reduce_donated): replica r reduces
//        the same share, reading every replica's input and writing the sum
//        into every replica's input (the in-place reference: no output
//        buffer), and each replica's result is its own donated tensor.
//        Details under "Donation" below.
//      Either way every element is summed in replica order, so the result is
//      bitwise the same on every replica whatever the timing.
//      all_gather and merge_call: replica 0 allocates the outputs (runs the
//      merge function), then announces them through its `ready` (`done`)
//      word; all_gather's replicas copy their parts, then wait for each other.
//   4. There is no leave barrier. Descriptor k % 2 of a slot is next written
//      by collective k + 2, which its replica can publish only after every
//      replica arrived at k + 1, that is, after every replica finished
//      reading collective k.
//
// Every wait polls its condition, then sleeps on one progress word, and ends
// by its deadline. abort() (a replica failed, or a deadline passed) wakes
// every waiter, which raises CancelledError naming the cause; a deadline
// raises DeadlineExceededError naming the collective, its number, and the
// replicas that arrived and that are missing. A replica that returns from its
// function while others wait in a collective counts as a mismatch. After an
// abort nothing more is published; slots keep their inputs (each descriptor
// owns references to them) until the next run resets the group.
//
// Donation. Each replica publishes, per tensor, whether it donates it (a
// handed-over tensor whose buffer it owns alone, see exclusive_bytes in
// tensor.h); after the meet every replica derives the same in-place set from
// all the bits (a tensor of a split pack donated by all; none with other
// workers). Safety of writing into another replica's buffer:
//   - shares are disjoint, and in a share every input element is read before
//     the sums are written, so no replica reads what another wrote;
//   - nobody writes into replica q's buffer before q said it will see the
//     call through: with an in-place tensor every replica stores its `ready`
//     word after its meet and checks, and everyone waits for all of them
//     before writing. A replica that raises before storing `ready` (abort,
//     deadline, mismatch) leaves its donated tensors untouched; one that
//     raises after it may have them half written, so it leaves them
//     moved-from (its descriptor keeps the buffer alive for the writers);
//   - nobody returns before every share is written (the `done` wait), and
//     then drops its descriptor's references to its in-place tensors, so
//     its result is again the sole owner (a loop x = all_reduce(move(x))
//     stays in place).
//
// Memory ordering: the words are written and read sequentially consistently
// (WaitWord's sleep protocol needs it). A replica that passed step 2 of
// collective k sees every descriptor and input written before the others'
// step 1; one whose wait for `done` returned sees every share of the output.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "core/tensor_access.h"
#include "distribute/internal/function_ref.h"
#include "distribute/tensor.h"
#include "distribute/types.h"
#include "runtime/spin_wait.h"
#include "transport/cross_worker.h"

namespace distribute::internal {

using Clock = std::chrono::steady_clock;

// Test-only fault injection: when set, called with the replica and the
// collective ("all_reduce", "all_gather") just before each allocation of a
// collective's output buffers, after the replicas met; a test makes it
// throw to stand for an allocation failure. Unset (nullptr) in programs.
inline std::atomic<void (*)(int replica, const char* what)> g_collective_allocation_hook{nullptr};

class CollectiveGroup {
 public:
  // Packs smaller than this are reduced by every replica on its own.
  static constexpr std::size_t kSplitBytes = 64 * 1024;

  // `cross`: the channel to the other workers of a multi-worker strategy
  // (outlives the group), or nullptr. With it, every all_reduce pack and
  // all_gather output is first combined over the local replicas as above,
  // then replica 0 combines it with the other workers' and announces the
  // result through its `crossed` word; the local replicas wait for that.
  // `threads`: how many threads run the replicas (fewer than num_replicas
  // when they run as fibers); 0: one each.
  explicit CollectiveGroup(int num_replicas, CrossWorker* cross = nullptr, int threads = 0);
  CollectiveGroup(const CollectiveGroup&) = delete;
  CollectiveGroup& operator=(const CollectiveGroup&) = delete;

  // Called by run() before the replicas start (no replica is inside a
  // collective): clears sequence numbers, finished marks and any abort.
  void reset();
  // Makes every pending and future wait of this run raise CancelledError
  // naming `replica` and `reason` (the first abort wins). Every exception
  // that escapes a collective after the replicas met aborts the group
  // (except a mismatch, which every replica raises itself), so that a
  // replica function that catches it and goes on cannot leave the others
  // waiting.
  void abort(int replica, std::exception_ptr reason) noexcept;
  // The first abort's reason and replica since the last reset (nullptr when
  // none): the root cause of the run's failures, which run() rethrows.
  std::exception_ptr abort_cause(int* replica) const;
  // Replica `replica` returned from its function.
  void finish(int replica) noexcept;

  // Element-wise reduction of each tensor over the replicas. `values` must
  // match on every replica (count, dtypes, shapes). Returns the replica's
  // results in a vector of its slot, valid until its next collective (move
  // them out).
  std::vector<Tensor>& all_reduce(int replica, ReduceOp op, std::span<const Tensor> values,
                                  std::int64_t bytes_per_pack, Clock::time_point deadline);
  // The same with `values` handed over (the caller's rvalues): a tensor that
  // every replica donates is reduced in place and the result is that tensor.
  // On return `values` are unchanged; when this raises after the reduction
  // could have started, the in-place ones are left moved-from.
  std::vector<Tensor>& all_reduce_donated(int replica, ReduceOp op, std::span<Tensor> values,
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
  enum class Kind : std::uint8_t { kNone, kAllReduce, kAllGather, kMergeCall };
  static const char* kind_name(Kind kind);
  enum class Phase { kArrive, kReady, kFinish };

  // A pack: tensors [first, last) of an all_reduce list, reduced as one flat
  // array of `elements`; split ones have a shared output buffer for the
  // `shared` elements of their tensors that are not reduced in place.
  struct Pack {
    std::size_t first, last;
    std::int64_t elements;
    bool split;
    std::int64_t shared;  // split only
    bool buffered;        // split with a shared buffer (not all in place)
    std::size_t output;   // index in replica 0's Descriptor::packs (buffered only)
  };

  // What the other replicas read of a collective on every call, next to the
  // words they poll: a signature (a hash of the kind, op, axis,
  // bytes_per_pack, argument type and every tensor's dtype and shape, the
  // gathered axis left out) and the first tensor's elements. A signature that
  // differs from replica 0's sends the check to the descriptors, which name
  // the difference.
  struct Header {
    std::uint64_t signature = 0;
    const void* first = nullptr;
  };

  struct Descriptor {
    Kind kind = Kind::kNone;
    ReduceOp op = ReduceOp::SUM;
    int axis = 0;
    std::int64_t bytes_per_pack = 0;
    // The descriptor keeps its own references to the inputs (and
    // merge_call's arguments), so that a replica unwinding after a timeout
    // cannot free what another replica still reads.
    std::vector<Tensor> inputs;
    // all_reduce: per input, 1 when this replica donates it.
    std::vector<std::uint8_t> donated;
    std::shared_ptr<const void> args;
    const char* type_name = nullptr;
    // Written by replica 0 only.
    std::vector<Tensor> packs;           // all_reduce: one buffer per split pack
    std::vector<Tensor> outputs;         // all_gather: one output per tensor
    std::shared_ptr<void> merge_result;  // merge_call
    std::exception_ptr merge_error;
    std::exception_ptr cross_error;  // a WorkersMismatchError, raised by every replica
  };

  static constexpr std::uint64_t kNever = std::numeric_limits<std::uint64_t>::max();

  struct alignas(64) Slot {
    // One cache line: what the other replicas poll and read on every call
    // (a publish moves one line between cores).
    std::atomic<std::uint64_t> arrived{0};  // last collective published
    std::atomic<std::uint64_t> done{0};     // last collective whose share is written
    // Replica 0: all_reduce / all_gather outputs allocated. Every replica,
    // for an all_reduce with in-place tensors: it passed its checks.
    std::atomic<std::uint64_t> ready{0};
    // The replica returned from its function before publishing this one.
    std::atomic<std::uint64_t> finished_before{kNever};
    Header header[2];  // collective k uses header[k % 2] and desc[k % 2]
    // Replica 0, with several workers: the result of this collective combines
    // every worker's (its own line: polled only in multi-worker runs).
    alignas(64) std::atomic<std::uint64_t> crossed{0};
    // Touched by the slot's replica only.
    std::uint64_t next_seq = 1;
    std::vector<Pack> plan;
    std::vector<std::uint8_t> in_place;  // per tensor of the current all_reduce
    std::vector<Tensor> results;
    BufferPool small_buffers{0, 8};  // the replica's own results of small packs
    Descriptor desc[2];
  };

  Slot& slot(int q) { return slots_[static_cast<std::size_t>(q)]; }
  const Slot& slot(int q) const { return slots_[static_cast<std::size_t>(q)]; }
  const Descriptor& desc(int q, std::uint64_t seq) const { return slot(q).desc[seq & 1]; }
  const Header& header(int q, std::uint64_t seq) const { return slot(q).header[seq & 1]; }
  bool arrived_at(int q, std::uint64_t seq) const;

  // Waits until `ready()` holds; raises on abort or at the deadline.
  template <class Ready>
  void wait(int replica, std::uint64_t seq, const char* what, Clock::time_point deadline, Phase phase, Ready ready);
  // Fills replica's descriptor through `fill`, derives its header, then
  // announces them.
  std::uint64_t publish(int replica, FunctionRef<void(Descriptor&)> fill);
  void mark_done(int replica, std::uint64_t seq);
  void meet(int replica, std::uint64_t seq, const char* what, Clock::time_point deadline);
  // Waits until every replica is done with `seq`.
  void wait_all_done(int replica, std::uint64_t seq, const char* what, Clock::time_point deadline);
  // Multi-worker: replica 0 runs `combine` (the exchange with the other
  // workers), then announces it; the other replicas wait for that. An
  // exception from `combine` aborts the group.
  void cross_workers(int replica, std::uint64_t seq, const char* what, Clock::time_point deadline,
                     FunctionRef<void()> combine);
  void check_matching(std::uint64_t seq, const char* what) const;
  // Aborts the group with `error`, escaping a collective after the meet,
  // unless every replica raises it anyway (WorkersMismatchError).
  void abort_unless_shared(int replica, std::exception_ptr error) noexcept;
  // Both all_reduce forms; `handed` is `values` made mutable, or empty. The
  // steps, in order (this header's steps 1-5):
  std::vector<Tensor>& reduce(int replica, ReduceOp op, std::span<const Tensor> values, std::span<Tensor> handed,
                              std::int64_t bytes_per_pack, Clock::time_point deadline);
  // Plans the packs into `plan`; true when any is split (shared buffer).
  bool plan_packs(std::vector<Pack>& plan, std::span<const Tensor> values, std::int64_t bytes_per_pack) const;
  // After the meet: the in-place tensors (every replica donated them) into
  // mine.in_place and each split pack's shared-buffer layout; true if any.
  bool decide_in_place(Slot& mine, std::uint64_t seq, std::span<const Tensor> values) const;
  // Replica 0 allocates the shared outputs; then the `ready` hand-off (every
  // replica's, with in-place tensors: `exposed` is set once this one's
  // donated buffers may be written by the others).
  void allocate_shared_outputs(int replica, std::uint64_t seq, std::span<const Tensor> values, bool any_in_place,
                               Clock::time_point deadline, bool& exposed);
  // This replica's share of `pack` (or, unsplit, all of it into its own
  // buffers), appending its results or placeholders to mine.results.
  void reduce_share(int replica, std::uint64_t seq, const Pack& pack, std::span<const Tensor> values, bool mean);
  // Multi-worker: replica 0 sums each shared buffer with the other workers'.
  void combine_workers(int replica, std::uint64_t seq, ReduceOp op, std::span<const Tensor> values,
                       Clock::time_point deadline);
  // The placeholders of split packs become views of the shared buffers.
  void bind_results(int replica, std::uint64_t seq, std::span<const Tensor> values);
  [[noreturn]] void throw_aborted(int replica, std::uint64_t seq, const char* what) const;

  const int n_;
  CrossWorker* const cross_;
  BufferPool buffers_;  // shared output buffers, recycled between calls
  std::vector<Slot> slots_;
  static constexpr std::chrono::microseconds kDedicatedCoreSpin{1000};
  SpinPolicy policy_;
  WaitWord progress_;  // sleepers wait on it; bumped when someone sleeps
  std::atomic<bool> aborted_{false};
  mutable Mutex abort_mutex_;
  std::string abort_reason_ GUARDED_BY(abort_mutex_);
  std::exception_ptr abort_error_ GUARDED_BY(abort_mutex_);
  int abort_replica_ GUARDED_BY(abort_mutex_) = -1;
  bool abort_is_deadline_ GUARDED_BY(abort_mutex_) = false;
};

}  // namespace distribute::internal
