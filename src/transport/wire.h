// What every cross-worker collective exchanges first, whatever carries it
// (MPI messages, or the host's shared-memory segment): a Header per worker,
// compared with worker 0's so that mismatched calls raise the same
// WorkersMismatchError on every worker; and an all_reduce_sum's arguments
// as both transports pass them to their algorithms.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "distribute/types.h"

namespace distribute::internal {

enum class Op : std::uint32_t { kAllReduce = 1, kAllGather = 2, kBroadcast = 3 };

// "all_reduce", "all_gather", "broadcast", or "an unknown collective".
const char* op_name(std::uint32_t op);

struct Header {
  std::uint64_t generation = 0;  // the strategy's number in its process
  std::uint64_t seq = 0;         // the transport's count of exchanges
  std::uint32_t op = 0;
  std::uint32_t dtype = 0;
  std::uint64_t count = 0;  // all_reduce: elements; all_gather: this worker's bytes; broadcast: bytes
  std::int64_t root = -1;   // broadcast
  // all_reduce over shared memory, in place in a region every worker
  // allocated together (ShmChannel::register_shared): the allocation's
  // number (0: none) and the tensor's offset in this worker's region. Not
  // compared by check_headers: workers that differ here take the copying
  // path.
  std::uint64_t region = 0;
  std::uint64_t region_offset = 0;
  // all_reduce: a checksum of the shapes of the tensors the elements come
  // from (CrossWorker::all_reduce_sum's `layout`; 0 where a caller has no
  // tensors), compared by check_headers like the count: the same count in
  // other shapes is a mismatch.
  std::uint64_t layout = 0;
};

// An all_reduce_sum's arguments, as a transport hands them to its
// algorithms: `count` elements of `dtype` (`e` bytes each) at `in`, summed
// into `out` (which may be `in`).
struct Sum {
  DType dtype;
  std::size_t e;
  const std::byte* in;
  std::byte* out;
  std::size_t count;
};

// Raises WorkersMismatchError (the same on every worker: each compares
// every header with the first's) unless the calls of `all` (one header per
// worker, in worker order) match. `what` names the call; `ids`, when not
// empty, the workers' numbers in the message (by default their indices).
void check_headers(const char* what, const std::vector<Header>& all, std::span<const int> ids = {});

}  // namespace distribute::internal
