// Tensor collectives across the workers of a MultiWorkerMirroredStrategy, on
// top of the byte-level CrossWorker channel. Used by the collective engine
// (after the local replicas combined their values) and by the strategy's
// cross-replica calls.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "distribute/tensor.h"
#include "transport/cross_worker.h"

namespace distribute::internal {

// The element-wise sum of every worker's `value` (same dtype and shape on
// every worker), summed in worker order: the same bits on every worker.
Tensor sum_over_workers(CrossWorker& cross, const char* what, const Tensor& value, CrossWorker::Clock::time_point deadline,
                        FunctionRef<bool()> cancelled);
// Every worker's `value` joined along `axis` in worker order; dimensions
// other than `axis` must match (InvalidArgumentError naming the worker).
Tensor gather_over_workers(CrossWorker& cross, const char* what, const Tensor& value, int axis,
                           CrossWorker::Clock::time_point deadline, FunctionRef<bool()> cancelled);
// Worker 0's `value` on every worker (dtype and shape must match).
Tensor broadcast_from_worker0(CrossWorker& cross, const char* what, const Tensor& value,
                              CrossWorker::Clock::time_point deadline, FunctionRef<bool()> cancelled);
// A checksum of the tensors' dtypes and shapes and of `call` (the kind of
// call: a strategy's reduce and a replica's all_reduce of the same elements
// are a mismatch), for CrossWorker::all_reduce_sum.
std::uint64_t layout_checksum(std::span<const Tensor> tensors, std::string_view call);
// Joins `parts` along `axis` (dimensions but `axis` must match; `what` and
// `unit` ("replica", "worker") name the culprit otherwise).
Tensor concat_along_axis(const std::vector<Tensor>& parts, int axis, const char* what, const char* unit);

}  // namespace distribute::internal
