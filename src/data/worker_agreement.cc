#include "data/worker_agreement.h"

#include <chrono>
#include <cstring>
#include <vector>

#include "data/batching.h"
#include "distribute/errors.h"
#include "runtime/deadline.h"

namespace distribute::internal {
namespace {

// A step's message: [has data][is tuple][components][dtype, rank, dims... of
// each component of an empty element like the step's first], as int64s.
std::vector<std::byte> encode(const std::optional<PerReplica<Element>>& step) {
  std::vector<std::int64_t> words{step.has_value() ? 1 : 0};
  if (step.has_value()) {
    const Element empty = empty_like(step->primary());
    words.push_back(empty.is_tuple() ? 1 : 0);
    words.push_back(static_cast<std::int64_t>(empty.size()));
    for (const Tensor& t : empty.components()) {
      words.push_back(static_cast<std::int64_t>(t.dtype()));
      words.push_back(t.rank());
      for (int k = 0; k < t.rank(); ++k) words.push_back(t.dim(k));
    }
  }
  std::vector<std::byte> bytes(words.size() * sizeof(std::int64_t));
  std::memcpy(bytes.data(), words.data(), bytes.size());
  return bytes;
}

Element decode_empty(const std::vector<std::byte>& bytes) {
  std::vector<std::int64_t> words(bytes.size() / sizeof(std::int64_t));
  std::memcpy(words.data(), bytes.data(), words.size() * sizeof(std::int64_t));
  std::size_t at = 1;
  const bool tuple = words.at(at++) != 0;
  const auto count = static_cast<std::size_t>(words.at(at++));
  std::vector<Tensor> components;
  for (std::size_t c = 0; c < count; ++c) {
    const auto dtype = static_cast<DType>(words.at(at++));
    const auto rank = static_cast<std::size_t>(words.at(at++));
    Shape shape;
    for (std::size_t k = 0; k < rank; ++k) shape.push_back(words.at(at++));
    void* data = nullptr;
    components.push_back(allocate_tensor(dtype, shape, &data));
    if (dtype != DType::kString) std::memset(data, 0, components.back().bytes().size());  // 0 rows, or a zero scalar
  }
  return tuple ? Element(std::move(components)) : Element(std::move(components.at(0)));
}

}  // namespace

WorkerAgreement::WorkerAgreement(std::shared_ptr<CrossWorker> cross, double timeout_seconds, int num_local_replicas,
                                 std::uint64_t origin)
    : cross_(std::move(cross)),
      timeout_seconds_(timeout_seconds),
      num_local_replicas_(num_local_replicas),
      origin_(origin) {}

std::optional<PerReplica<Element>> WorkerAgreement::settle(std::optional<PerReplica<Element>> local) {
  const auto deadline = deadline_after(timeout_seconds_);
  const auto all = cross_->all_gather("get_next (the workers agree on the step)", encode(local), deadline,
                                      [] { return false; });
  if (local.has_value()) return local;
  for (const std::vector<std::byte>& other : all) {
    std::int64_t has = 0;
    std::memcpy(&has, other.data(), sizeof(has));
    if (has == 0) continue;
    // Another worker still has data: this one's replicas get empty batches.
    return PerReplica<Element>(std::vector<Element>(static_cast<std::size_t>(num_local_replicas_), decode_empty(other)),
                               ProducedBy{origin_});
  }
  return std::nullopt;
}

}  // namespace distribute::internal
