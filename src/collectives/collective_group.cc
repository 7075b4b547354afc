#include "collectives/collective_group.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "collectives/cross_worker_ops.h"
#include "core/reduce_kernels.h"
#include "core/describe.h"
#include "core/dtype_dispatch.h"
#include "core/fnv1a.h"
#include "core/tensor_access.h"
#include "distribute/errors.h"
#include "runtime/cpu_count.h"
#include "runtime/deadline.h"
#include "runtime/interrupt.h"

namespace distribute::internal {
namespace {

void before_allocation(int replica, const char* what) {
  if (auto* hook = g_collective_allocation_hook.load(std::memory_order_relaxed)) hook(replica, what);
}

}  // namespace

const char* CollectiveGroup::kind_name(Kind kind) {
  switch (kind) {
    case Kind::kNone: return "nothing";
    case Kind::kAllReduce: return "all_reduce";
    case Kind::kAllGather: return "all_gather";
    case Kind::kMergeCall: return "merge_call";
  }
  return "nothing";
}

CollectiveGroup::CollectiveGroup(int num_replicas, CrossWorker* cross, int threads)
    : n_(num_replicas), cross_(cross), slots_(static_cast<std::size_t>(num_replicas)) {
  const unsigned cores = usable_cores();
  // Replicas on fibers share fewer threads (runtime/fiber.h): what competes
  // for the cores is the threads.
  policy_.yield = static_cast<unsigned>(threads > 0 ? threads : num_replicas) > cores;
  // With a core per replica, a replica that waits in a collective is waiting
  // for a peer that is still computing its part of the step (in training:
  // the slower replica's gradients, often 50-100 us behind). Sleeping there
  // costs a futex wake-up (10-30 us on these VMs) on the step's critical
  // path, so waits spin for up to 1 ms, as MPI and NCCL poll, before they
  // sleep. Oversubscribed replicas keep the short window: their spinning
  // would take the core from the peer being waited for. So do the replicas
  // of a worker of a multi-worker cluster: its waits include the network,
  // and other workers' processes may share these cores.
  if (!policy_.yield && cross_ == nullptr) policy_.spin_for = kDedicatedCoreSpin;
}

void CollectiveGroup::reset() {
  for (Slot& s : slots_) {
    s.header[0] = Header{};
    s.header[1] = Header{};
    s.desc[0] = Descriptor{};
    s.desc[1] = Descriptor{};
    s.arrived.store(0);
    s.done.store(0);
    s.ready.store(0);
    s.crossed.store(0);
    s.finished_before.store(kNever);
    s.next_seq = 1;
  }
  MutexLock lock(abort_mutex_);
  abort_reason_.clear();
  abort_error_ = nullptr;
  abort_replica_ = -1;
  abort_is_deadline_ = false;
  aborted_.store(false);
}

void CollectiveGroup::abort(int replica, std::exception_ptr reason) noexcept {
  {
    MutexLock lock(abort_mutex_);
    if (aborted_.load()) return;
    bool deadline = false;
    try {
      std::rethrow_exception(reason);
    } catch (const DeadlineExceededError&) {
      deadline = true;
    } catch (...) {
    }
    abort_is_deadline_ = deadline;
    abort_error_ = reason;
    abort_replica_ = replica;
    abort_reason_ = deadline ? what_of(reason) : "replica " + std::to_string(replica) + " failed: " + what_of(reason);
    aborted_.store(true);
  }
  progress_.notify_add(1);
}

std::exception_ptr CollectiveGroup::abort_cause(int* replica) const {
  MutexLock lock(abort_mutex_);
  if (replica != nullptr) *replica = abort_replica_;
  return abort_error_;
}

void CollectiveGroup::finish(int replica) noexcept {
  Slot& s = slot(replica);
  s.finished_before.store(s.next_seq);
  progress_.notify_if_sleeping();
}

bool CollectiveGroup::arrived_at(int q, std::uint64_t seq) const {
  const Slot& s = slot(q);
  return s.arrived.load() >= seq || s.finished_before.load() <= seq;
}

void CollectiveGroup::throw_aborted(int replica, std::uint64_t seq, const char* what) const {
  MutexLock lock(abort_mutex_);
  const std::string prefix = std::string(what) + " #" + std::to_string(seq) + " on replica " + std::to_string(replica);
  if (abort_is_deadline_) throw DeadlineExceededError(abort_reason_);
  throw CancelledError(prefix + " cancelled: " + abort_reason_);
}

template <class Ready>
void CollectiveGroup::wait(int replica, std::uint64_t seq, const char* what, Clock::time_point deadline, Phase phase,
                           Ready ready) {
  auto stop = [this] { return aborted_.load(); };
  auto result = WaitWord::WaitResult::kTimedOut;
  // With an interrupt check (distribute/interrupt.h) the wait is cut into
  // slices, the check called between them; what it throws fails this
  // replica, as any exception escaping a collective does.
  for (InterruptPoll poll;;) {
    result = progress_.wait_until(policy_, poll.slice_end(deadline), ready, stop);
    if (result != WaitWord::WaitResult::kTimedOut || !poll.active() || Clock::now() >= deadline) break;
    try {
      poll.poll();
    } catch (...) {
      abort(replica, std::current_exception());
      throw;
    }
  }
  if (result == WaitWord::WaitResult::kReady) return;
  if (result == WaitWord::WaitResult::kStopped) throw_aborted(replica, seq, what);
  const bool arriving = phase == Phase::kArrive;
  std::vector<int> arrived, missing;
  for (int q = 0; q < n_; ++q) {
    const bool there = arriving                ? arrived_at(q, seq)
                       : phase == Phase::kReady ? slot(q).ready.load() >= seq
                                                : slot(q).done.load() >= seq;
    (there ? arrived : missing).push_back(q);
  }
  const std::string msg = std::string(what) + " #" + std::to_string(seq) + " exceeded its deadline on replica " +
                          std::to_string(replica) + " waiting for the other replicas to " +
                          (arriving ? "arrive" : phase == Phase::kReady ? "pass their checks" : "finish") + ": arrived " + list_ids(arrived) + ", missing " +
                          list_ids(missing) + " (timeout_seconds in CommunicationOptions sets the deadline)";
  abort(replica, std::make_exception_ptr(DeadlineExceededError(msg)));
  throw DeadlineExceededError(msg);
}

std::uint64_t CollectiveGroup::publish(int replica, FunctionRef<void(Descriptor&)> fill) {
  Slot& s = slot(replica);
  const std::uint64_t seq = s.next_seq++;
  // After an abort nothing is published (see the header).
  if (aborted_.load()) throw_aborted(replica, seq, "collective");
  // Refill the descriptor in place (its vectors keep their capacity).
  Descriptor& d = s.desc[seq & 1];
  d.kind = Kind::kNone;
  d.op = ReduceOp::SUM;
  d.axis = 0;
  d.bytes_per_pack = 0;
  d.inputs.clear();
  d.donated.clear();
  d.args.reset();
  d.type_name = nullptr;
  d.packs.clear();
  d.outputs.clear();
  d.merge_result.reset();
  d.merge_error = nullptr;
  d.cross_error = nullptr;
  fill(d);
  // FNV-1a over everything the replicas must agree on.
  internal::Fnv1a sig;
  sig.mix(static_cast<std::uint64_t>(d.kind));
  sig.mix(static_cast<std::uint64_t>(d.op));
  sig.mix(static_cast<std::uint64_t>(d.axis));
  sig.mix(static_cast<std::uint64_t>(d.bytes_per_pack));
  sig.mix(d.inputs.size());
  if (d.type_name != nullptr) sig.mix_bytes(d.type_name);
  for (const Tensor& t : d.inputs) {
    sig.mix(static_cast<std::uint64_t>(t.dtype()));
    sig.mix(static_cast<std::uint64_t>(t.rank()));
    for (int k = 0; k < t.rank(); ++k) {
      sig.mix(d.kind == Kind::kAllGather && k == d.axis ? 0 : static_cast<std::uint64_t>(t.dim(k)));
    }
  }
  Header& h = s.header[seq & 1];
  h.signature = sig.value();
  h.first = d.inputs.empty() ? nullptr : d.inputs.front().bytes().data();
  s.arrived.store(seq);
  progress_.notify_if_sleeping();
  return seq;
}

void CollectiveGroup::mark_done(int replica, std::uint64_t seq) {
  slot(replica).done.store(seq);
  progress_.notify_if_sleeping();
}

void CollectiveGroup::meet(int replica, std::uint64_t seq, const char* what, Clock::time_point deadline) {
  wait(replica, seq, what, deadline, Phase::kArrive, [&] {
    for (int q = 0; q < n_; ++q) {
      if (!arrived_at(q, seq)) return false;
    }
    return true;
  });
  // Every replica finds the same mismatch, if any, and raises it. No one
  // waits for the others to finish checking: a replica that leaves (even one
  // that returns from its function) changes neither its descriptor nor its
  // inputs, which stay until collective seq + 2.
  check_matching(seq, what);
}

void CollectiveGroup::wait_all_done(int replica, std::uint64_t seq, const char* what, Clock::time_point deadline) {
  wait(replica, seq, what, deadline, Phase::kFinish, [&] {
    for (const Slot& s : slots_) {
      if (s.done.load() < seq) return false;
    }
    return true;
  });
}

void CollectiveGroup::cross_workers(int replica, std::uint64_t seq, const char* what, Clock::time_point deadline,
                                    FunctionRef<void()> combine) {
  if (replica != 0) {
    // Replica 0's step across the workers is bounded by the transport, which
    // may wait past `deadline` (the hierarchical mode's graces, a tenth of
    // the time left each) to name the worker it did not hear from: it then
    // either stores `crossed` or aborts the group with that error. This
    // bound only backs that up; at `deadline` itself this replica would
    // raise first, naming no worker.
    const Clock::duration left = std::max(deadline - Clock::now(), Clock::duration::zero());
    wait(replica, seq, what, extended(deadline, left / 2), Phase::kFinish,
         [&] { return slot(0).crossed.load() >= seq; });
    if (desc(0, seq).cross_error) std::rethrow_exception(desc(0, seq).cross_error);
    return;
  }
  try {
    combine();
  } catch (const WorkersMismatchError&) {
    // Every worker found the same mismatch: every local replica raises it.
    slot(0).desc[seq & 1].cross_error = std::current_exception();
    slot(0).crossed.store(seq);
    progress_.notify_if_sleeping();
    throw;
  } catch (...) {
    abort(0, std::current_exception());
    throw;
  }
  slot(0).crossed.store(seq);
  progress_.notify_if_sleeping();
}

void CollectiveGroup::abort_unless_shared(int replica, std::exception_ptr error) noexcept {
  try {
    std::rethrow_exception(error);
  } catch (const WorkersMismatchError&) {
    return;  // every local replica raises it (cross_workers)
  } catch (...) {
  }
  abort(replica, std::move(error));
}

void CollectiveGroup::check_matching(std::uint64_t seq, const char* what) const {
  // Messages are built only on a mismatch: this runs on every collective.
  auto call = [&] { return std::string(what) + " #" + std::to_string(seq); };
  for (int q = 0; q < n_; ++q) {
    if (slot(q).arrived.load() < seq) {
      throw InvalidArgumentError("replicas made different collective calls: replica " + std::to_string(q) +
                                 " returned from its replica function while the others called " + call() +
                                 "; every replica must call the same collectives in the same order");
    }
  }
  // Fast path: every signature equal to replica 0's.
  const std::uint64_t sig0 = header(0, seq).signature;
  bool same = true;
  for (int q = 1; q < n_ && same; ++q) same = header(q, seq).signature == sig0;
  if (same) return;
  const Descriptor& d0 = desc(0, seq);
  for (int q = 1; q < n_; ++q) {
    const Descriptor& d = desc(q, seq);
    const char* on = " on replica 0 vs ";
    auto rq = [q] { return " on replica " + std::to_string(q); };
    if (d.kind != d0.kind) {
      throw InvalidArgumentError("replicas made different collective calls at collective #" + std::to_string(seq) +
                                 ": " + kind_name(d0.kind) + on +
                                 kind_name(d.kind) + rq());
    }
    if (d.kind == Kind::kMergeCall) {
      if (std::strcmp(d.type_name, d0.type_name) != 0) {
        throw InvalidArgumentError(call() + ": arguments of different types: " + d0.type_name + on + d.type_name + rq());
      }
      continue;
    }
    if (d.op != d0.op) {
      throw InvalidArgumentError(call() + ": reduce op " + std::string(reduce_op_name(d0.op)) + on +
                                 std::string(reduce_op_name(d.op)) + rq());
    }
    if (d.axis != d0.axis) {
      throw InvalidArgumentError(call() + ": axis " + std::to_string(d0.axis) + on + std::to_string(d.axis) + rq());
    }
    if (d.bytes_per_pack != d0.bytes_per_pack) {
      throw InvalidArgumentError(call() + ": bytes_per_pack " + std::to_string(d0.bytes_per_pack) + on +
                                 std::to_string(d.bytes_per_pack) + rq());
    }
    if (d.inputs.size() != d0.inputs.size()) {
      throw InvalidArgumentError(call() + ": " + std::to_string(d0.inputs.size()) + " tensor(s)" + on +
                                 std::to_string(d.inputs.size()) + rq());
    }
    for (std::size_t i = 0; i < d.inputs.size(); ++i) {
      const Tensor& a = d0.inputs[i];
      const Tensor& b = d.inputs[i];
      bool equal = a.dtype() == b.dtype() && a.rank() == b.rank();
      if (equal && d.kind == Kind::kAllGather) {
        for (int k = 0; k < a.rank(); ++k) equal = equal && (k == d.axis || a.dim(k) == b.dim(k));
      } else if (equal) {
        equal = a.shape() == b.shape();
      }
      if (!equal) {
        const std::string which = d.inputs.size() > 1 ? " (tensor " + std::to_string(i) + ")" : "";
        throw InvalidArgumentError(call() + which + ": " + describe(a) + on + describe(b) + rq());
      }
    }
  }
}

std::vector<Tensor>& CollectiveGroup::all_reduce(int replica, ReduceOp op, std::span<const Tensor> values,
                                                 std::int64_t bytes_per_pack, Clock::time_point deadline) {
  return reduce(replica, op, values, {}, bytes_per_pack, deadline);
}

std::vector<Tensor>& CollectiveGroup::all_reduce_donated(int replica, ReduceOp op, std::span<Tensor> values,
                                                         std::int64_t bytes_per_pack, Clock::time_point deadline) {
  return reduce(replica, op, values, values, bytes_per_pack, deadline);
}

bool CollectiveGroup::plan_packs(std::vector<Pack>& plan, std::span<const Tensor> values,
                                 std::int64_t bytes_per_pack) const {
  // Consecutive tensors of one dtype, up to bytes_per_pack bytes each (0: no
  // limit).
  plan.clear();
  for (std::size_t i = 0; i < values.size(); ++i) {
    const Tensor& t = values[i];
    const auto bytes = static_cast<std::int64_t>(t.bytes().size());
    const auto element = static_cast<std::int64_t>(dtype_size(t.dtype()));
    const bool fits = !plan.empty() && values[plan.back().first].dtype() == t.dtype() &&
                      (bytes_per_pack == 0 || plan.back().elements * element + bytes <= bytes_per_pack);
    if (fits) {
      plan.back().last = i + 1;
      plan.back().elements += t.num_elements();
    } else {
      plan.push_back({i, i + 1, t.num_elements(), false, 0, false, 0});
    }
  }
  bool any_split = false;
  for (Pack& p : plan) {
    // With other workers every pack needs the shared buffer that replica 0
    // exchanges.
    p.split = cross_ != nullptr ||
              static_cast<std::size_t>(p.elements) * dtype_size(values[p.first].dtype()) >= kSplitBytes;
    any_split = any_split || p.split;
  }
  return any_split;
}

bool CollectiveGroup::decide_in_place(Slot& mine, std::uint64_t seq, std::span<const Tensor> values) const {
  // The in-place set: tensors of split packs that every replica donated.
  // Every replica derives the same set from the same published bits, and
  // the same layout of each pack's shared buffer (its other tensors, in
  // order).
  std::vector<std::uint8_t>& in_place = mine.in_place;
  in_place.assign(values.size(), 0);
  bool any_in_place = false;
  std::size_t outputs = 0;
  for (Pack& p : mine.plan) {
    if (!p.split) continue;
    bool pack_in_place = false;
    p.shared = 0;
    for (std::size_t t = p.first; t < p.last; ++t) {
      // With other workers, only one local replica's single-tensor pack:
      // the exchange with them then sums in place in its buffer.
      bool all = cross_ == nullptr || (n_ == 1 && p.last - p.first == 1);
      for (int q = 0; q < n_ && all; ++q) all = desc(q, seq).donated[t] != 0;
      in_place[t] = all ? 1 : 0;
      pack_in_place = pack_in_place || all;
      if (!all) p.shared += values[t].num_elements();
    }
    any_in_place = any_in_place || pack_in_place;
    // A pack entirely in place needs no buffer.
    p.buffered = p.shared > 0 || !pack_in_place;
    if (p.buffered) p.output = outputs++;
  }
  return any_in_place;
}

void CollectiveGroup::allocate_shared_outputs(int replica, std::uint64_t seq, std::span<const Tensor> values,
                                              bool any_in_place, Clock::time_point deadline, bool& exposed) {
  // Replica 0 allocates the shared buffers once everyone has arrived, that
  // is, once every replica has left the previous call and dropped its
  // references to that call's buffers (the descriptor's included), then
  // announces them through its `ready` word.
  if (replica == 0) {
    slot(0).desc[(seq - 1) & 1].packs.clear();
    Descriptor& d = slot(0).desc[seq & 1];
    for (const Pack& p : slot(0).plan) {
      if (!p.buffered) continue;
      void* data = nullptr;
      before_allocation(replica, "all_reduce");
      d.packs.push_back(buffers_.allocate(values[p.first].dtype(), {p.shared}, &data));
    }
  }
  if (any_in_place) {
    // Every replica says it passed its checks, then waits for all: no one
    // writes into a buffer whose owner might still raise before that point.
    slot(replica).ready.store(seq);
    exposed = true;
    progress_.notify_if_sleeping();
    wait(replica, seq, "all_reduce", deadline, Phase::kReady, [&] {
      for (const Slot& s : slots_) {
        if (s.ready.load() < seq) return false;
      }
      return true;
    });
  } else if (replica == 0) {
    slot(0).ready.store(seq);
    progress_.notify_if_sleeping();
  } else {
    wait(replica, seq, "all_reduce", deadline, Phase::kFinish, [&] { return slot(0).ready.load() >= seq; });
  }
}

void CollectiveGroup::reduce_share(int replica, std::uint64_t seq, const Pack& pack, std::span<const Tensor> values,
                                   bool mean) {
  Slot& mine = slot(replica);
  std::vector<Tensor>& results = mine.results;
  const std::vector<std::uint8_t>& in_place = mine.in_place;
  const Descriptor& d0 = desc(0, seq);
  const DType dtype = values[pack.first].dtype();
  dispatch_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    const ReduceKernels<T>& kernels = reduce_kernels<T>();
    const std::size_t n = static_cast<std::size_t>(n_);
    const T* ins_inline[16];
    T* ios_inline[16];
    std::vector<const T*> ins_heap;
    std::vector<T*> ios_heap;
    std::span<const T*> ins(ins_inline, std::min<std::size_t>(n, 16));
    std::span<T*> ios(ios_inline, std::min<std::size_t>(n, 16));
    if (n > 16) {
      ins_heap.resize(n);
      ios_heap.resize(n);
      ins = std::span<const T*>(ins_heap);
      ios = std::span<T*>(ios_heap);
    }
    auto gather_inputs = [&](std::size_t t, std::size_t offset) {
      for (int q = 0; q < n_; ++q) {
        const T* in = t == 0 ? static_cast<const T*>(header(q, seq).first)
                             : desc(q, seq).inputs[t].template data<T>().data();
        ins[static_cast<std::size_t>(q)] = in - offset;
      }
    };
    if (!pack.split) {
      // Each replica reduces every tensor of the pack into its own buffer.
      for (std::size_t t = pack.first; t < pack.last; ++t) {
        void* data = nullptr;
        before_allocation(replica, "all_reduce");
        results.push_back(mine.small_buffers.allocate(dtype, values[t].shape(), &data));
        gather_inputs(t, 0);
        kernels.range(static_cast<T*>(data), ins, 0, static_cast<std::size_t>(values[t].num_elements()), mean);
      }
      return;
    }
    // This replica's share of the pack: walk the tensors that overlap
    // [begin, end), writing each into every replica's buffer (in place) or
    // into its place in the shared buffer (the pack's other tensors,
    // consecutive).
    const auto total = static_cast<std::size_t>(pack.elements);
    const std::size_t begin = total * static_cast<std::size_t>(replica) / n;
    const std::size_t end = total * static_cast<std::size_t>(replica + 1) / n;
    T* shared = pack.buffered ? const_cast<T*>(d0.packs[pack.output].template data<T>().data()) : nullptr;
    // One replica's single tensor: the exchange with the other workers
    // reads the input itself (no local copy).
    if (cross_ != nullptr && n_ == 1 && pack.last - pack.first == 1) {
      results.push_back(values[pack.first]);  // placeholder, as below
      return;
    }
    std::size_t offset = 0, shared_offset = 0;
    for (std::size_t t = pack.first; t < pack.last && offset < end; ++t) {
      const auto count = static_cast<std::size_t>(values[t].num_elements());
      const std::size_t lo = std::max(begin, offset), hi = std::min(end, offset + count);
      if (lo < hi) {
        gather_inputs(t, offset);
        if (in_place[t] != 0) {
          // Every replica owns its input alone and said so (its bit): the
          // buffers are writable.
          for (std::size_t q = 0; q < n; ++q) ios[q] = const_cast<T*>(ins[q]);
          kernels.in_place(ios, lo, hi, mean);
        } else {
          kernels.range(shared + shared_offset - offset, ins, lo, hi, mean);
        }
      }
      if (in_place[t] == 0) shared_offset += count;
      offset += count;
    }
    // Placeholders (a reference count each, no allocation), replaced by
    // views of the shared buffer once every share is written; an in-place
    // tensor's is its result.
    for (std::size_t t = pack.first; t < pack.last; ++t) results.push_back(values[t]);
  });
}

void CollectiveGroup::combine_workers(int replica, std::uint64_t seq, ReduceOp op, std::span<const Tensor> values,
                                      Clock::time_point deadline) {
  const Descriptor& d0 = desc(0, seq);
  const std::vector<Pack>& plan = slot(replica).plan;
  cross_workers(replica, seq, "all_reduce", deadline, [&] {
    // Named as the user counts: the call's number within the run.
    const std::string label = "all_reduce #" + std::to_string(seq);
    const auto total = static_cast<std::int64_t>(n_) * cross_->num_workers();
    for (const Pack& pack : plan) {
      // A pack in place (one replica's single donated tensor) is summed in
      // its own buffer, the others into the pack's shared buffer.
      const Tensor& b = pack.buffered ? d0.packs[pack.output] : values[pack.first];
      const bool direct = n_ == 1 && pack.last - pack.first == 1;
      auto* data = const_cast<std::byte*>(b.bytes().data());
      cross_->all_reduce_sum(label.c_str(), b.dtype(), direct ? values[pack.first].bytes().data() : data, data,
                             static_cast<std::size_t>(b.num_elements()),
                             layout_checksum(values.subspan(pack.first, pack.last - pack.first), "all_reduce"), deadline,
                             [this] { return aborted_.load(); });
      if (op != ReduceOp::MEAN) continue;
      dispatch_dtype(b.dtype(), [&](auto zero) {
        using T = decltype(zero);
        T* x = const_cast<T*>(b.template data<T>().data());
        for (std::size_t i = 0; i < static_cast<std::size_t>(b.num_elements()); ++i) x[i] /= static_cast<T>(total);
      });
    }
  });
}

void CollectiveGroup::bind_results(int replica, std::uint64_t seq, std::span<const Tensor> values) {
  // Every other result of a split pack is a view of the pack's shared
  // buffer.
  Slot& mine = slot(replica);
  const Descriptor& d0 = desc(0, seq);
  for (const Pack& pack : mine.plan) {
    if (!pack.buffered) continue;
    const Tensor& buffer = d0.packs[pack.output];
    if (pack.last - pack.first == 1) {
      mine.results[pack.first] = buffer.reshape(values[pack.first].shape());
      continue;
    }
    std::int64_t shared_offset = 0;
    for (std::size_t t = pack.first; t < pack.last; ++t) {
      if (mine.in_place[t] != 0) continue;
      const std::int64_t count = values[t].num_elements();
      mine.results[t] = buffer.slice(shared_offset, shared_offset + count).reshape(values[t].shape());
      shared_offset += count;
    }
  }
}

std::vector<Tensor>& CollectiveGroup::reduce(int replica, ReduceOp op, std::span<const Tensor> values,
                                             std::span<Tensor> handed, std::int64_t bytes_per_pack,
                                             Clock::time_point deadline) {
  if (bytes_per_pack < 0) {
    throw InvalidArgumentError("all_reduce: expected bytes_per_pack >= 0, got " + std::to_string(bytes_per_pack));
  }
  for (const Tensor& t : values) check_numeric(t, "all_reduce");
  Slot& mine = slot(replica);
  const bool any_split = plan_packs(mine.plan, values, bytes_per_pack);

  // The previous call's results are the caller's now: dropping this slot's
  // references before arriving lets the shared buffers of that call return
  // to the pool, so that a training loop cycles through one output buffer
  // per pack instead of two (a working set of 3 buffers, not 4, at 64 MiB).
  std::vector<Tensor>& results = mine.results;
  results.clear();
  // Only tensors of split packs are donated, and with other workers only
  // by a single local replica (otherwise replica 0 exchanges one shared
  // buffer per pack with them).
  const bool may_donate = !handed.empty() && (cross_ == nullptr || n_ == 1) && any_split;
  const std::uint64_t seq = publish(replica, [&](Descriptor& d) {
    d.kind = Kind::kAllReduce;
    d.op = op;
    d.bytes_per_pack = bytes_per_pack;
    // Decided before the descriptor takes its references to the inputs
    // (publish has dropped the ones of collective seq - 2; those of an
    // in-place tensor of seq - 1 were dropped when it completed).
    d.donated.assign(values.size(), 0);
    for (const Pack& p : mine.plan) {
      if (!may_donate || !p.split) continue;
      for (std::size_t t = p.first; t < p.last; ++t) d.donated[t] = exclusive_bytes(handed[t]) != nullptr ? 1 : 0;
    }
    d.inputs.assign(values.begin(), values.end());
  });
  meet(replica, seq, "all_reduce", deadline);
  const bool any_in_place = decide_in_place(mine, seq, values);

  // From here on, with in-place tensors, the other replicas may write into
  // this replica's donated buffers once it has stored `ready`: if the call
  // raises after that, the caller must not see them (header, "Donation").
  bool exposed = false;
  try {
    if (any_split) allocate_shared_outputs(replica, seq, values, any_in_place, deadline, exposed);
    // With other workers MEAN divides once every worker's sum is in.
    const bool mean = op == ReduceOp::MEAN && cross_ == nullptr;
    for (const Pack& pack : mine.plan) reduce_share(replica, seq, pack, values, mean);
    if (any_split) {
      mark_done(replica, seq);
      wait_all_done(replica, seq, "all_reduce", deadline);
      if (cross_ != nullptr) combine_workers(replica, seq, op, values, deadline);
      bind_results(replica, seq, values);
    }
  } catch (...) {
    // Another replica may be writing into the in-place buffers still (the
    // descriptor's references keep them alive until the next run): the
    // caller must not see them.
    if (exposed) {
      for (std::size_t t = 0; t < handed.size(); ++t) {
        if (mine.in_place[t] != 0) Tensor gone = std::move(handed[t]);
      }
    }
    abort_unless_shared(replica, std::current_exception());
    throw;
  }
  if (any_in_place) {
    // Every share is written and nobody reads this call's inputs any more:
    // drop the descriptor's references to the in-place tensors, so that the
    // result is its buffer's sole owner again (and can be donated next).
    Descriptor& d = mine.desc[seq & 1];
    for (std::size_t t = 0; t < values.size(); ++t) {
      if (mine.in_place[t] != 0) Tensor dropped = std::move(d.inputs[t]);
    }
  }
  return results;
}

std::vector<Tensor> CollectiveGroup::all_gather(int replica, const std::vector<Tensor>& values, int axis,
                                                Clock::time_point deadline) {
  for (const Tensor& t : values) check_numeric(t, "all_gather");
  const std::uint64_t seq = publish(replica, [&](Descriptor& d) {
    d.kind = Kind::kAllGather;
    d.axis = axis;
    d.inputs.assign(values.begin(), values.end());
  });
  meet(replica, seq, "all_gather", deadline);
  try {
    // Replica 0 allocates the outputs once all shapes are known and announces
    // them through its `ready` word; the others wait for that, then everyone
    // copies its own part.
    if (replica == 0) {
      Descriptor& d0 = slot(0).desc[seq & 1];
      for (std::size_t i = 0; i < values.size(); ++i) {
        Shape shape = values[i].shape();
        std::int64_t along = 0;
        for (int q = 0; q < n_; ++q) along += desc(q, seq).inputs[i].dim(axis);
        shape[static_cast<std::size_t>(axis)] = along;
        void* data = nullptr;
        before_allocation(replica, "all_gather");
        d0.outputs.push_back(buffers_.allocate(values[i].dtype(), shape, &data));
      }
      slot(0).ready.store(seq);
      progress_.notify_if_sleeping();
    } else {
      wait(replica, seq, "all_gather", deadline, Phase::kFinish, [&] { return slot(0).ready.load() >= seq; });
    }
    const std::vector<Tensor>& outputs = desc(0, seq).outputs;
    for (std::size_t i = 0; i < values.size(); ++i) {
      const Tensor& mine = values[i];
      const Tensor& out = outputs[i];
      std::int64_t before = 0;
      for (int q = 0; q < replica; ++q) before += desc(q, seq).inputs[i].dim(axis);
      std::size_t outer = 1, inner = dtype_size(mine.dtype());
      for (int k = 0; k < axis; ++k) outer *= static_cast<std::size_t>(mine.dim(k));
      for (int k = axis + 1; k < mine.rank(); ++k) inner *= static_cast<std::size_t>(mine.dim(k));
      const auto rows = static_cast<std::size_t>(mine.dim(axis));
      const auto total = static_cast<std::size_t>(out.dim(axis));
      auto* dst = const_cast<std::byte*>(out.bytes().data());
      const std::byte* src = mine.bytes().data();
      for (std::size_t o = 0; o < outer && rows > 0; ++o) {
        std::memcpy(dst + (o * total + static_cast<std::size_t>(before)) * inner, src + o * rows * inner, rows * inner);
      }
    }
    mark_done(replica, seq);
    wait_all_done(replica, seq, "all_gather", deadline);
    if (cross_ != nullptr) {
      cross_workers(replica, seq, "all_gather", deadline, [&] {
        Descriptor& d0 = slot(0).desc[seq & 1];
        const std::string label = "all_gather #" + std::to_string(seq);
        for (Tensor& out : d0.outputs) {
          out = gather_over_workers(*cross_, label.c_str(), out, axis, deadline, [this] { return aborted_.load(); });
        }
      });
    }
    return outputs;
  } catch (...) {
    abort_unless_shared(replica, std::current_exception());
    throw;
  }
}

std::shared_ptr<void> CollectiveGroup::merge_call(
    int replica, std::shared_ptr<const void> args, const char* type_name,
    FunctionRef<std::shared_ptr<void>(std::span<const void* const>)> leader, Clock::time_point deadline) {
  const std::uint64_t seq = publish(replica, [&](Descriptor& d) {
    d.kind = Kind::kMergeCall;
    d.args = std::move(args);
    d.type_name = type_name;
  });
  meet(replica, seq, "merge_call", deadline);
  if (replica == 0) {
    std::vector<const void*> all(static_cast<std::size_t>(n_));
    for (int q = 0; q < n_; ++q) all[static_cast<std::size_t>(q)] = desc(q, seq).args.get();
    Descriptor& d0 = slot(0).desc[seq & 1];
    try {
      // (Its cross-worker calls end before the others stop waiting for it.)
      const ScopedDeadlineCap cap(deadline);
      d0.merge_result = leader(all);
    } catch (...) {
      d0.merge_error = std::current_exception();
    }
    mark_done(0, seq);
  } else {
    wait(replica, seq, "merge_call", deadline, Phase::kFinish, [&] { return slot(0).done.load() >= seq; });
    mark_done(replica, seq);  // only for the deadline messages of others
  }
  const Descriptor& d0 = desc(0, seq);
  if (d0.merge_error) std::rethrow_exception(d0.merge_error);
  return d0.merge_result;
}

}  // namespace distribute::internal
