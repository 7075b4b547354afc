#include "transport/wire.h"

#include <string>

#include "distribute/types.h"
#include "transport/cross_worker.h"

namespace distribute::internal {

const char* op_name(std::uint32_t op) {
  switch (static_cast<Op>(op)) {
    case Op::kAllReduce: return "all_reduce";
    case Op::kAllGather: return "all_gather";
    case Op::kBroadcast: return "broadcast";
  }
  return "an unknown collective";
}

namespace {

std::string elements_text(const Header& h) {
  return std::to_string(h.count) + " elements of " + std::string(dtype_name(static_cast<DType>(h.dtype)));
}

// How `h` (worker p's) differs from worker w0's `h0` (the first), or "".
std::string difference(const Header& h0, int w0, const Header& h, int p) {
  const std::string on_0 = " on worker " + std::to_string(w0);
  const std::string on_p = " on worker " + std::to_string(p);
  if (h.generation != h0.generation) {
    return "MultiWorkerMirroredStrategy number " + std::to_string(h0.generation) + " of worker " +
           std::to_string(w0) + " vs number " + std::to_string(h.generation) + " of worker " + std::to_string(p);
  }
  if (h.op != h0.op) return std::string(op_name(h0.op)) + on_0 + " vs " + op_name(h.op) + on_p;
  if (h.seq != h0.seq) {
    // (The workers' counts of cross-worker exchanges, internal ones
    // included, differ: one skipped or added a call.)
    return std::string(op_name(h0.op)) + " number " + std::to_string(h0.seq) + on_0 + " vs number " +
           std::to_string(h.seq) + on_p;
  }
  if (h.op == static_cast<std::uint32_t>(Op::kAllReduce) && (h.dtype != h0.dtype || h.count != h0.count)) {
    return elements_text(h0) + on_0 + " vs " + elements_text(h) + on_p;
  }
  if (h.op == static_cast<std::uint32_t>(Op::kAllReduce) && h.layout != h0.layout) {
    // (The checksum covers the tensors' shapes and the kind of call.)
    return "the same " + elements_text(h0) + " in tensors of different shapes or from different calls (" +
           "Strategy.reduce, all_reduce)" + on_0 + " and" + on_p;
  }
  if (h.op == static_cast<std::uint32_t>(Op::kBroadcast) && (h.count != h0.count || h.root != h0.root)) {
    return std::to_string(h0.count) + " bytes from worker " + std::to_string(h0.root) + on_0 + " vs " +
           std::to_string(h.count) + " bytes from worker " + std::to_string(h.root) + on_p;
  }
  return "";
}

}  // namespace

void check_headers(const char* what, const std::vector<Header>& all, std::span<const int> ids) {
  const auto id = [&](std::size_t p) { return ids.empty() ? static_cast<int>(p) : ids[p]; };
  for (std::size_t p = 1; p < all.size(); ++p) {
    const std::string d = difference(all[0], id(0), all[p], id(p));
    if (!d.empty()) {
      throw WorkersMismatchError(std::string("workers made different collective calls at cross-worker ") + what +
                                 ": " + d + "; every worker must run the same collectives in the same order on "
                                 "values of the same shapes");
    }
  }
}

}  // namespace distribute::internal
