#include "collectives/collective_group.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/dtype_dispatch.h"
#include "distribute/errors.h"

namespace distribute::internal {
namespace {

constexpr std::uint64_t kFinishedSeq = std::numeric_limits<std::uint64_t>::max();
// Packs smaller than this are reduced by replica 0 alone: splitting them
// costs more in cache-line traffic than it saves.
constexpr std::size_t kSplitBytes = 64 * 1024;
// Elements summed per block: the block of the output stays in L1 while every
// replica's input is added to it.
constexpr std::size_t kBlock = 2048;

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

std::string list_replicas(const std::vector<int>& ids) {
  std::string s = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i > 0 ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

std::string describe(const Tensor& t) {
  return "shape " + shape_string(t.shape()) + " dtype " + std::string(dtype_name(t.dtype()));
}

// out[i] = sum over q of ins[q][i] for i in [begin, end), in replica order;
// MEAN then divides by the number of replicas (truncating for integers).
template <class T>
void reduce_range(T* out, std::span<const T* const> ins, std::size_t begin, std::size_t end, bool mean) {
  const auto n = static_cast<T>(ins.size());
  for (std::size_t b = begin; b < end; b += kBlock) {
    const std::size_t e = std::min(end, b + kBlock);
    if (ins.size() == 2) {
      const T* x = ins[0];
      const T* y = ins[1];
      for (std::size_t i = b; i < e; ++i) out[i] = x[i] + y[i];
    } else {
      std::memcpy(out + b, ins[0] + b, (e - b) * sizeof(T));
      for (std::size_t q = 1; q < ins.size(); ++q) {
        const T* x = ins[q];
        for (std::size_t i = b; i < e; ++i) out[i] += x[i];
      }
    }
    if (mean) {
      for (std::size_t i = b; i < e; ++i) out[i] /= n;
    }
  }
}

// A pack: tensors [first, last) of the list, reduced as one flat array.
struct Pack {
  std::size_t first, last;
  std::int64_t elements;
};

std::vector<Pack> plan_packs(const std::vector<Tensor>& values, std::int64_t bytes_per_pack) {
  std::vector<Pack> packs;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const Tensor& t = values[i];
    const auto bytes = static_cast<std::int64_t>(t.bytes().size());
    const bool fits = !packs.empty() && values[packs.back().first].dtype() == t.dtype() &&
                      (bytes_per_pack == 0 ||
                       (packs.back().elements * static_cast<std::int64_t>(dtype_size(t.dtype())) + bytes <=
                        bytes_per_pack));
    if (fits) {
      packs.back().last = i + 1;
      packs.back().elements += t.num_elements();
    } else {
      packs.push_back({i, i + 1, t.num_elements()});
    }
  }
  return packs;
}

const char* kind_name(int kind) {
  switch (kind) {
    case 1: return "all_reduce";
    case 2: return "all_gather";
    case 3: return "merge_call";
    case 4: return "return from the replica function";
    default: return "nothing";
  }
}

}  // namespace

CollectiveGroup::CollectiveGroup(int num_replicas) : n_(num_replicas), slots_(static_cast<std::size_t>(num_replicas)) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  policy_.yield = static_cast<unsigned>(num_replicas) > cores;
}

void CollectiveGroup::reset() {
  for (Slot& s : slots_) {
    s.desc = Descriptor{};
    s.arrived.store(0, std::memory_order_relaxed);
    s.done.store(0, std::memory_order_relaxed);
    s.ready.store(0, std::memory_order_relaxed);
    s.next_seq = 1;
  }
  std::lock_guard<std::mutex> lock(abort_mutex_);
  abort_reason_.clear();
  abort_replica_ = -1;
  abort_is_deadline_ = false;
  aborted_.store(false, std::memory_order_release);
}

void CollectiveGroup::abort(int replica, std::exception_ptr reason) noexcept {
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (aborted_.load(std::memory_order_relaxed)) return;
    bool deadline = false;
    try {
      std::rethrow_exception(reason);
    } catch (const DeadlineExceededError&) {
      deadline = true;
    } catch (...) {
    }
    abort_is_deadline_ = deadline;
    abort_replica_ = replica;
    abort_reason_ = deadline ? what_of(reason) : "replica " + std::to_string(replica) + " failed: " + what_of(reason);
    aborted_.store(true, std::memory_order_release);
  }
  progress_.notify_add(1);
}

void CollectiveGroup::finish(int replica) noexcept {
  Slot& s = slots_[static_cast<std::size_t>(replica)];
  s.desc = Descriptor{};
  s.desc.kind = Kind::kFinished;
  s.done.store(kFinishedSeq, std::memory_order_release);
  s.ready.store(kFinishedSeq, std::memory_order_release);
  s.arrived.store(kFinishedSeq, std::memory_order_release);
  progress_.notify_add(1);
}

void CollectiveGroup::throw_aborted(int replica, std::uint64_t seq, const char* what) const {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  const std::string prefix = std::string(what) + " #" + std::to_string(seq) + " on replica " + std::to_string(replica);
  if (abort_is_deadline_) throw DeadlineExceededError(abort_reason_);
  throw CancelledError(prefix + " cancelled: " + abort_reason_);
}

template <class Ready>
void CollectiveGroup::wait(int replica, std::uint64_t seq, const char* what, Clock::time_point deadline, bool arriving,
                           Ready ready) {
  while (true) {
    const std::uint32_t word = progress_.load();
    if (aborted_.load(std::memory_order_acquire)) throw_aborted(replica, seq, what);
    if (ready()) return;
    std::uint32_t ignored = 0;
    if (progress_.wait_while_equal_until(word, policy_, deadline, &ignored)) continue;
    if (aborted_.load(std::memory_order_acquire)) throw_aborted(replica, seq, what);
    if (ready()) return;
    std::vector<int> arrived, missing;
    for (int q = 0; q < n_; ++q) {
      const Slot& s = slots_[static_cast<std::size_t>(q)];
      const std::uint64_t at = (arriving ? s.arrived : s.done).load(std::memory_order_acquire);
      (at >= seq ? arrived : missing).push_back(q);
    }
    const std::string msg = std::string(what) + " #" + std::to_string(seq) + " exceeded its deadline on replica " +
                            std::to_string(replica) + " waiting for the other replicas to " +
                            (arriving ? "arrive" : "finish") + ": arrived " + list_replicas(arrived) + ", missing " +
                            list_replicas(missing) + " (timeout_seconds in CommunicationOptions sets the deadline)";
    abort(replica, std::make_exception_ptr(DeadlineExceededError(msg)));
    throw DeadlineExceededError(msg);
  }
}

std::uint64_t CollectiveGroup::publish(int replica, FunctionRef<void(Descriptor&)> fill) {
  Slot& s = slots_[static_cast<std::size_t>(replica)];
  const std::uint64_t seq = s.next_seq++;
  // After an abort nothing is published: the slot may still be read by a
  // replica that passed its meeting before the abort.
  if (aborted_.load(std::memory_order_acquire)) throw_aborted(replica, seq, "collective");
  // Refill the slot in place (its vectors keep their capacity).
  Descriptor& d = s.desc;
  d.kind = Kind::kNone;
  d.op = ReduceOp::SUM;
  d.axis = 0;
  d.bytes_per_pack = 0;
  d.owned_inputs.clear();
  d.args.reset();
  d.type_name = nullptr;
  d.packs.clear();
  d.outputs.clear();
  d.merge_result.reset();
  d.merge_error = nullptr;
  fill(d);
  d.tensors = &d.owned_inputs;
  s.arrived.store(seq, std::memory_order_release);
  progress_.notify_add(1);
  return seq;
}

void CollectiveGroup::mark_done(int replica, std::uint64_t seq) {
  slots_[static_cast<std::size_t>(replica)].done.store(seq, std::memory_order_release);
  progress_.notify_add(1);
}

void CollectiveGroup::meet(int replica, std::uint64_t seq, const char* what, Clock::time_point deadline) {
  wait(replica, seq, what, deadline, true, [&] {
    for (const Slot& s : slots_) {
      if (s.arrived.load(std::memory_order_acquire) < seq) return false;
    }
    return true;
  });
  try {
    check_matching(seq, what);
  } catch (...) {
    // Every replica finds the same mismatch. Leave together, so that no
    // replica returns (freeing its inputs, or marking its slot finished)
    // while another is still checking its descriptor.
    mark_done(replica, seq);
    leave(replica, seq, what, deadline);
    throw;
  }
}

void CollectiveGroup::leave(int replica, std::uint64_t seq, const char* what, Clock::time_point deadline) {
  wait(replica, seq, what, deadline, false, [&] {
    for (const Slot& s : slots_) {
      if (s.done.load(std::memory_order_acquire) < seq) return false;
    }
    return true;
  });
}

void CollectiveGroup::check_matching(std::uint64_t seq, const char* what) const {
  // Messages are built only on a mismatch: this runs on every collective.
  auto call = [&] { return std::string(what) + " #" + std::to_string(seq); };
  const Descriptor& d0 = slots_[0].desc;
  for (int q = 0; q < n_; ++q) {
    const Descriptor& d = slots_[static_cast<std::size_t>(q)].desc;
    if (d.kind == Kind::kFinished) {
      throw InvalidArgumentError("replicas made different collective calls: replica " + std::to_string(q) +
                                 " returned from its replica function while the others called " + call() +
                                 "; every replica must call the same collectives in the same order");
    }
  }
  for (int q = 1; q < n_; ++q) {
    const Descriptor& d = slots_[static_cast<std::size_t>(q)].desc;
    const char* on = " on replica 0 vs ";
    auto rq = [q] { return " on replica " + std::to_string(q); };
    if (d.kind != d0.kind) {
      throw InvalidArgumentError("replicas made different collective calls at collective #" + std::to_string(seq) +
                                 ": " + kind_name(static_cast<int>(d0.kind)) + on +
                                 kind_name(static_cast<int>(d.kind)) + rq());
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
    if (d.tensors->size() != d0.tensors->size()) {
      throw InvalidArgumentError(call() + ": " + std::to_string(d0.tensors->size()) + " tensor(s)" + on +
                                 std::to_string(d.tensors->size()) + rq());
    }
    for (std::size_t i = 0; i < d.tensors->size(); ++i) {
      const Tensor& a = (*d0.tensors)[i];
      const Tensor& b = (*d.tensors)[i];
      bool same = a.dtype() == b.dtype() && a.rank() == b.rank();
      if (same && d.kind == Kind::kAllGather) {
        for (int k = 0; k < a.rank(); ++k) same = same && (k == d.axis || a.dim(k) == b.dim(k));
      } else if (same) {
        same = a.shape() == b.shape();
      }
      if (!same) {
        const std::string which = d.tensors->size() > 1 ? " (tensor " + std::to_string(i) + ")" : "";
        throw InvalidArgumentError(call() + which + ": " + describe(a) + on + describe(b) + rq());
      }
    }
  }
}

std::vector<Tensor> CollectiveGroup::all_reduce(int replica, ReduceOp op, const std::vector<Tensor>& values,
                                                std::int64_t bytes_per_pack, Clock::time_point deadline) {
  if (bytes_per_pack < 0) {
    throw InvalidArgumentError("all_reduce: expected bytes_per_pack >= 0, got " + std::to_string(bytes_per_pack));
  }
  const std::vector<Pack> packs = plan_packs(values, bytes_per_pack);
  const std::uint64_t seq = publish(replica, [&](Descriptor& desc) {
    desc.kind = Kind::kAllReduce;
    desc.op = op;
    desc.bytes_per_pack = bytes_per_pack;
    desc.owned_inputs.assign(values.begin(), values.end());
    if (replica == 0) {
      for (const Pack& p : packs) {
        void* data = nullptr;
        desc.packs.push_back(buffers_.allocate(values[p.first].dtype(), {p.elements}, &data));
      }
    }
  });
  meet(replica, seq, "all_reduce", deadline);

  // Compute this replica's share of every pack.
  const std::vector<Tensor> outputs = slots_[0].desc.packs;  // shared buffers (copies of the references)
  for (std::size_t p = 0; p < packs.size(); ++p) {
    const Pack& pack = packs[p];
    const DType dtype = values[pack.first].dtype();
    const auto total = static_cast<std::size_t>(pack.elements);
    const bool split = total * dtype_size(dtype) >= kSplitBytes;
    if (!split && replica != 0) continue;
    const std::size_t begin = split ? total * static_cast<std::size_t>(replica) / static_cast<std::size_t>(n_) : 0;
    const std::size_t end = split ? total * static_cast<std::size_t>(replica + 1) / static_cast<std::size_t>(n_) : total;
    dispatch_dtype(dtype, [&](auto zero) {
      using T = decltype(zero);
      T* out = const_cast<T*>(outputs[p].data<T>().data());
      // Walk the tensors of the pack that overlap [begin, end).
      std::size_t offset = 0;
      std::vector<const T*> ins_heap;
      const T* ins_inline[16];
      std::span<const T*> ins(ins_inline, static_cast<std::size_t>(std::min(n_, 16)));
      if (n_ > 16) {
        ins_heap.resize(static_cast<std::size_t>(n_));
        ins = std::span<const T*>(ins_heap);
      }
      for (std::size_t t = pack.first; t < pack.last && offset < end; ++t) {
        const auto count = static_cast<std::size_t>(values[t].num_elements());
        const std::size_t lo = std::max(begin, offset), hi = std::min(end, offset + count);
        if (lo < hi) {
          for (int q = 0; q < n_; ++q) {
            ins[static_cast<std::size_t>(q)] =
                (*slots_[static_cast<std::size_t>(q)].desc.tensors)[t].template data<T>().data() - offset;
          }
          reduce_range<T>(out, ins, lo, hi, op == ReduceOp::MEAN);
        }
        offset += count;
      }
    });
  }
  mark_done(replica, seq);
  leave(replica, seq, "all_reduce", deadline);

  // Every result is a view of its pack's shared buffer.
  std::vector<Tensor> results;
  results.reserve(values.size());
  for (std::size_t p = 0; p < packs.size(); ++p) {
    std::int64_t offset = 0;
    for (std::size_t t = packs[p].first; t < packs[p].last; ++t) {
      const std::int64_t count = values[t].num_elements();
      results.push_back(outputs[p].slice(offset, offset + count).reshape(values[t].shape()));
      offset += count;
    }
  }
  return results;
}

std::vector<Tensor> CollectiveGroup::all_gather(int replica, const std::vector<Tensor>& values, int axis,
                                                Clock::time_point deadline) {
  const std::uint64_t seq = publish(replica, [&](Descriptor& desc) {
    desc.kind = Kind::kAllGather;
    desc.axis = axis;
    desc.owned_inputs.assign(values.begin(), values.end());
  });
  meet(replica, seq, "all_gather", deadline);
  // Replica 0 allocates the outputs once all shapes are known and announces
  // them through its `ready` word; the others wait for that, then everyone
  // copies its own part.
  if (replica == 0) {
    Descriptor& d0 = slots_[0].desc;
    for (std::size_t i = 0; i < values.size(); ++i) {
      Shape shape = values[i].shape();
      std::int64_t along = 0;
      for (const Slot& s : slots_) along += (*s.desc.tensors)[i].dim(axis);
      shape[static_cast<std::size_t>(axis)] = along;
      void* data = nullptr;
      d0.outputs.push_back(buffers_.allocate(values[i].dtype(), shape, &data));
    }
  }
  if (replica == 0) {
    slots_[0].ready.store(seq, std::memory_order_release);
    progress_.notify_add(1);
  } else {
    wait(replica, seq, "all_gather", deadline, false,
         [&] { return slots_[0].ready.load(std::memory_order_acquire) >= seq; });
  }
  const std::vector<Tensor> outputs = slots_[0].desc.outputs;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const Tensor& mine = values[i];
    const Tensor& out = outputs[i];
    std::int64_t before = 0;
    for (int q = 0; q < replica; ++q) before += (*slots_[static_cast<std::size_t>(q)].desc.tensors)[i].dim(axis);
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
  leave(replica, seq, "all_gather", deadline);
  return outputs;
}

std::shared_ptr<void> CollectiveGroup::merge_call(
    int replica, std::shared_ptr<const void> args, const char* type_name,
    FunctionRef<std::shared_ptr<void>(std::span<const void* const>)> leader, Clock::time_point deadline) {
  const std::uint64_t seq = publish(replica, [&](Descriptor& desc) {
    desc.kind = Kind::kMergeCall;
    desc.args = std::move(args);
    desc.type_name = type_name;
  });
  meet(replica, seq, "merge_call", deadline);
  if (replica == 0) {
    std::vector<const void*> all(static_cast<std::size_t>(n_));
    for (int q = 0; q < n_; ++q) all[static_cast<std::size_t>(q)] = slots_[static_cast<std::size_t>(q)].desc.args.get();
    Descriptor& d0 = slots_[0].desc;
    try {
      d0.merge_result = leader(all);
    } catch (...) {
      d0.merge_error = std::current_exception();
    }
    mark_done(0, seq);
  } else {
    wait(replica, seq, "merge_call", deadline, false,
         [&] { return slots_[0].done.load(std::memory_order_acquire) >= seq; });
  }
  std::shared_ptr<void> result = slots_[0].desc.merge_result;
  std::exception_ptr error = slots_[0].desc.merge_error;
  if (replica != 0) mark_done(replica, seq);
  leave(replica, seq, "merge_call", deadline);
  if (error) std::rethrow_exception(error);
  return result;
}

}  // namespace distribute::internal
