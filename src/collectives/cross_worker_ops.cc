#include "collectives/cross_worker_ops.h"

#include <cstring>
#include <string>

#include "core/describe.h"
#include "core/fnv1a.h"
#include "core/tensor_access.h"
#include "distribute/errors.h"

namespace distribute::internal {
namespace {

Tensor copy_of(const Tensor& value) {
  void* data = nullptr;
  Tensor out = allocate_tensor(value.dtype(), value.shape(), &data);
  std::memcpy(data, value.bytes().data(), value.bytes().size());
  return out;
}

// A tensor's dtype and shape as bytes: [dtype, rank, dims...] as int64.
std::vector<std::byte> spec_bytes(const Tensor& t) {
  std::vector<std::int64_t> spec{static_cast<std::int64_t>(t.dtype()), t.rank()};
  for (int k = 0; k < t.rank(); ++k) spec.push_back(t.dim(k));
  std::vector<std::byte> bytes(spec.size() * sizeof(std::int64_t));
  std::memcpy(bytes.data(), spec.data(), bytes.size());
  return bytes;
}

}  // namespace

std::uint64_t layout_checksum(std::span<const Tensor> tensors, std::string_view call) {
  // FNV-1a over words, as the in-process collectives' signature
  // (collective_group.cc): the call, then (dtype, rank, dims) of each tensor.
  internal::Fnv1a h;
  h.mix_bytes(call);
  for (const Tensor& t : tensors) {
    h.mix(static_cast<std::uint64_t>(t.dtype()));
    h.mix(static_cast<std::uint64_t>(t.rank()));
    for (const std::int64_t d : t.shape()) h.mix(static_cast<std::uint64_t>(d));
  }
  return h.value();
}

Tensor sum_over_workers(CrossWorker& cross, const char* what, const Tensor& value, CrossWorker::Clock::time_point deadline,
                        FunctionRef<bool()> cancelled) {
  check_numeric(value, what);
  void* data = nullptr;
  Tensor out = allocate_tensor(value.dtype(), value.shape(), &data);
  cross.all_reduce_sum(what, value.dtype(), value.bytes().data(), data, static_cast<std::size_t>(value.num_elements()),
                       layout_checksum(std::span<const Tensor>(&value, 1), what), deadline, cancelled);
  return out;
}

Tensor broadcast_from_worker0(CrossWorker& cross, const char* what, const Tensor& value,
                              CrossWorker::Clock::time_point deadline, FunctionRef<bool()> cancelled) {
  check_numeric(value, what);
  // The shapes first, so that a mismatch is an error, not a short read.
  const std::vector<std::byte> mine = spec_bytes(value);
  const auto specs = cross.all_gather(what, mine, deadline, cancelled);
  for (std::size_t w = 1; w < specs.size(); ++w) {
    if (specs[w] != specs[0]) {
      throw InvalidArgumentError(std::string(what) + ": expected the same dtype and shape on every worker, got " +
                                 "a different one on worker " + std::to_string(w) + " than on worker 0 (this worker: " +
                                 describe(value) + ")");
    }
  }
  Tensor out = copy_of(value);
  cross.broadcast(what, const_cast<std::byte*>(out.bytes().data()), out.bytes().size(), 0, deadline, cancelled);
  return out;
}

Tensor gather_over_workers(CrossWorker& cross, const char* what, const Tensor& value, int axis,
                           CrossWorker::Clock::time_point deadline, FunctionRef<bool()> cancelled) {
  check_numeric(value, what);
  const auto specs = cross.all_gather(what, spec_bytes(value), deadline, cancelled);
  const auto data = cross.all_gather(what, value.bytes(), deadline, cancelled);
  std::vector<Tensor> parts;
  parts.reserve(specs.size());
  for (std::size_t w = 0; w < specs.size(); ++w) {
    std::vector<std::int64_t> spec(specs[w].size() / sizeof(std::int64_t));
    std::memcpy(spec.data(), specs[w].data(), specs[w].size());
    Shape shape;
    for (std::size_t k = 2; k < spec.size(); ++k) shape.push_back(spec[k]);
    void* out = nullptr;
    parts.push_back(allocate_tensor(static_cast<DType>(spec[0]), shape, &out));
    if (parts.back().bytes().size() != data[w].size()) {
      throw InternalError(std::string(what) + ": worker " + std::to_string(w) + " sent " +
                          std::to_string(data[w].size()) + " bytes for " + describe(parts.back()));
    }
    std::memcpy(out, data[w].data(), data[w].size());
  }
  return concat_along_axis(parts, axis, what, "worker");
}

Tensor concat_along_axis(const std::vector<Tensor>& parts, int axis, const char* what, const char* unit) {
  for (const Tensor& t : parts) check_numeric(t, what);  // rows are memcpy'd below
  Shape shape = parts[0].shape();
  std::int64_t along = 0;
  for (std::size_t r = 0; r < parts.size(); ++r) {
    const Tensor& t = parts[r];
    bool same = t.dtype() == parts[0].dtype() && t.rank() == parts[0].rank();
    for (int k = 0; same && k < t.rank(); ++k) same = k == axis || t.dim(k) == parts[0].dim(k);
    if (!same) {
      throw InvalidArgumentError(std::string(what) + ": expected equal dtypes and dimensions except along axis " +
                                 std::to_string(axis) + ", got " + describe(parts[0]) + " on " + unit + " 0 and " +
                                 describe(t) + " on " + unit + " " + std::to_string(r));
    }
    along += t.dim(axis);
  }
  shape[static_cast<std::size_t>(axis)] = along;
  void* data = nullptr;
  Tensor out = allocate_tensor(parts[0].dtype(), shape, &data);
  std::size_t outer = 1, inner = dtype_size(out.dtype());
  for (int k = 0; k < axis; ++k) outer *= static_cast<std::size_t>(shape[static_cast<std::size_t>(k)]);
  for (int k = axis + 1; k < out.rank(); ++k) inner *= static_cast<std::size_t>(shape[static_cast<std::size_t>(k)]);
  std::size_t before = 0;
  for (const Tensor& t : parts) {
    const auto rows = static_cast<std::size_t>(t.dim(axis));
    for (std::size_t o = 0; o < outer && rows > 0; ++o) {
      std::memcpy(static_cast<std::byte*>(data) + (o * static_cast<std::size_t>(along) + before) * inner,
                  t.bytes().data() + o * rows * inner, rows * inner);
    }
    before += rows;
  }
  return out;
}

}  // namespace distribute::internal
