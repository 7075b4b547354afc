// batch, unbatch and rebatch.
//
// rebatch(sizes) re-cuts the rows of a batched stream: output k has
// sizes[k % sizes.size()] rows, taken from the current input batch as a
// zero-copy slice when it holds enough rows, else gathered across input
// batches and concatenated (the only copy). This is how TF's
// RebatchDatasetV2 behaves: equivalent to unbatch().batch(size) with the
// size cycling, so output batches cross input batch boundaries.
#include "data/batching.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/describe.h"
#include "core/tensor_access.h"
#include "data/dataset_node.h"
#include "distribute/errors.h"

namespace distribute {
namespace internal {

namespace {

// InvalidArgumentError unless element `e` (at `index` of the stream) has the
// structure of `first` (at `first_index`).
void check_same_structure(const Element& first, std::int64_t first_index, const Element& e, const std::string& index,
                          const char* op) {
  if (e.is_tuple() != first.is_tuple() || e.size() != first.size()) {
    throw InvalidArgumentError(std::string(op) + ": expected elements of the same structure, got element " +
                               std::to_string(first_index) + " with " + std::to_string(first.size()) +
                               " component(s) and element " + index + " with " + std::to_string(e.size()));
  }
}

}  // namespace

Element stack_elements(const std::vector<Element>& rows, std::int64_t first_index, const char* op) {
  const Element& first = rows.front();
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const Element& e = rows[i];
    const std::string index = std::to_string(first_index + static_cast<std::int64_t>(i));
    check_same_structure(first, first_index, e, index, op);
    for (std::size_t c = 0; c < e.size(); ++c) {
      if (e[c].shape() != first[c].shape() || e[c].dtype() != first[c].dtype()) {
        throw InvalidArgumentError(std::string(op) + ": cannot batch elements of different shapes: element " +
                                   std::to_string(first_index) + " has " + describe(first[c]) + " but element " +
                                   index + " has " + describe(e[c]) +
                                   (e.size() > 1 ? " (component " + std::to_string(c) + ")" : std::string()));
      }
    }
  }
  std::vector<Tensor> out;
  out.reserve(first.size());
  for (std::size_t c = 0; c < first.size(); ++c) {
    // Rows that are consecutive views of one buffer (from_tensor_slices)
    // join without a copy; others are copied once into the batch.
    std::vector<Tensor> column;
    column.reserve(rows.size());
    for (const Element& e : rows) column.push_back(e[c]);
    if (column.size() > 1 && column[0].num_elements() > 0 && column[0].shares_buffer_with(column[1])) {
      out.push_back(stack(column));
      continue;
    }
    Shape shape = first[c].shape();
    shape.insert(shape.begin(), static_cast<std::int64_t>(rows.size()));
    void* data = nullptr;
    Tensor batch = allocate_tensor(first[c].dtype(), std::move(shape), &data);
    auto* dst = static_cast<std::byte*>(data);
    for (const Tensor& row : column) {
      const auto bytes = row.bytes();
      copy_elements(row.dtype(), dst, bytes.data(), bytes.size());
      dst += bytes.size();
    }
    out.push_back(std::move(batch));
  }
  return first.with_components(std::move(out));
}

Element gather_rows(const std::vector<Tensor>& components, bool is_tuple, std::span<const std::int64_t> rows) {
  std::vector<Tensor> out;
  out.reserve(components.size());
  for (const Tensor& c : components) {
    Shape shape = c.shape();
    const auto all = c.bytes();
    const std::size_t row_bytes = shape[0] > 0 ? all.size() / static_cast<std::size_t>(shape[0]) : 0;
    shape[0] = static_cast<std::int64_t>(rows.size());
    void* data = nullptr;
    Tensor batch = allocate_tensor(c.dtype(), std::move(shape), &data);
    auto* dst = static_cast<std::byte*>(data);
    if (row_bytes > 0) {
      for (const std::int64_t r : rows) {
        copy_elements(c.dtype(), dst, all.data() + static_cast<std::size_t>(r) * row_bytes, row_bytes);
        dst += row_bytes;
      }
    }
    out.push_back(std::move(batch));
  }
  if (!is_tuple) return Element(std::move(out[0]));
  return Element(std::move(out));
}

Element concat_elements(const std::vector<Element>& parts) {
  const Element& first = parts.front();
  std::vector<Tensor> out;
  out.reserve(first.size());
  for (std::size_t c = 0; c < first.size(); ++c) {
    std::vector<Tensor> column;
    column.reserve(parts.size());
    for (const Element& e : parts) column.push_back(e[c]);
    out.push_back(concat(column));
  }
  return first.with_components(std::move(out));
}

Element slice_element(const Element& e, std::int64_t begin, std::int64_t end) {
  std::vector<Tensor> out;
  out.reserve(e.size());
  for (const Tensor& c : e.components()) out.push_back(c.slice(begin, end));
  return e.with_components(std::move(out));
}

std::int64_t batch_dim(const Element& e, const char* op) {
  std::int64_t rows = -1;
  for (std::size_t c = 0; c < e.size(); ++c) {
    if (e[c].rank() == 0) {
      throw InvalidArgumentError(std::string(op) + ": expected a batched dataset (elements of rank >= 1), got a "
                                 "scalar element" +
                                 (e.size() > 1 ? " (component " + std::to_string(c) + ")" : std::string()) +
                                 "; call the batch method on the dataset first");
    }
    if (rows >= 0 && e[c].dim(0) != rows) {
      throw InvalidArgumentError(std::string(op) + ": expected every component to have the same batch size, got " +
                                 std::to_string(rows) + " and " + std::to_string(e[c].dim(0)) + " (component " +
                                 std::to_string(c) + ")");
    }
    rows = e[c].dim(0);
  }
  return rows;
}

Element empty_like(const Element& like) {
  std::vector<Tensor> out;
  out.reserve(like.size());
  for (const Tensor& c : like.components()) {
    out.push_back(c.rank() == 0 ? Tensor::zeros(c.dtype(), {}) : c.slice(0, 0));
  }
  return like.with_components(std::move(out));
}

std::vector<Element> take_batch_rows(ElementIterator& input, std::int64_t n, std::vector<Element>& pending,
                                     std::int64_t& consumed, std::int64_t& first) {
  while (static_cast<std::int64_t>(pending.size()) < n) {
    std::optional<Element> e = input.next();
    if (!e.has_value()) break;
    pending.push_back(std::move(*e));
  }
  std::vector<Element> rows = std::move(pending);
  pending.clear();
  first = consumed;
  consumed += static_cast<std::int64_t>(rows.size());
  return rows;
}

std::optional<Element> ElementIterator::next_batch(std::int64_t n, std::vector<Element>& pending,
                                                   std::int64_t& consumed) {
  std::int64_t first = 0;
  const std::vector<Element> rows = take_batch_rows(*this, n, pending, consumed, first);
  if (rows.empty()) return std::nullopt;
  return stack_elements(rows, first, "Dataset::batch");
}

namespace {

std::int64_t batched_cardinality(std::int64_t n, std::int64_t batch_size, bool drop_remainder) {
  if (n < 0) return n;
  return drop_remainder ? n / batch_size : n / batch_size + (n % batch_size != 0 ? 1 : 0);  // (no n + b - 1: n may be
                                                                                              // near INT64_MAX)
}

// `spec` with a leading dimension of `dim` on every component.
ElementSpec with_batch_dim(ElementSpec spec, std::int64_t dim) {
  for (TensorSpec& c : spec.components) c.shape.insert(c.shape.begin(), dim);
  return spec;
}

// What batch and padded_batch share: batches of batch_size_ elements (a
// smaller last one unless drop_remainder_), one dimension more.
class BatchingNode : public UnaryNode {
 public:
  BatchingNode(Dataset input, std::int64_t batch_size, bool drop_remainder)
      : UnaryNode(std::move(input)), batch_size_(batch_size), drop_remainder_(drop_remainder) {}
  std::optional<int> static_min_rank() const override {
    const std::optional<int> rank = input_.node()->static_min_rank();
    return rank.has_value() ? std::optional<int>(*rank + 1) : std::nullopt;
  }
  std::optional<std::int64_t> static_batch_size() const override { return batch_size_; }
  std::int64_t cardinality() const override {
    return batched_cardinality(input_cardinality(), batch_size_, drop_remainder_);
  }

 protected:
  // The batch dimension of the element spec: known only with drop_remainder.
  ElementSpec batched_spec(ElementSpec spec) const {
    return with_batch_dim(std::move(spec), drop_remainder_ ? batch_size_ : -1);
  }

  std::int64_t batch_size_;
  bool drop_remainder_;
};

class BatchNode final : public BatchingNode {
 public:
  std::shared_ptr<const DatasetNode> with_input(Dataset input) const override {
    return copy_with_input<BatchNode>(std::move(input));
  }
  using BatchingNode::BatchingNode;

  std::unique_ptr<ElementIterator> make_iterator() const override {
    class It final : public ElementIterator {
     public:
      It(std::unique_ptr<ElementIterator> input, std::int64_t n, bool drop) : input_(std::move(input)), n_(n), drop_(drop) {}
      std::optional<Element> next() override {
        std::optional<Element> batch = input_->next_batch(n_, rows_, consumed_);
        if (!batch.has_value()) return std::nullopt;
        if (drop_ && batch_dim(*batch, "Dataset::batch") < n_) return std::nullopt;
        return batch;
      }

     private:
      std::unique_ptr<ElementIterator> input_;
      std::int64_t n_;
      bool drop_;
      std::vector<Element> rows_;
      std::int64_t consumed_ = 0;
    };
    return std::make_unique<It>(iterate(input_), batch_size_, drop_remainder_);
  }
  std::optional<ElementSpec> static_element_spec() const override { return batched_spec(input_.element_spec()); }
  std::string describe() const override {
    return "Batch(" + std::to_string(batch_size_) + (drop_remainder_ ? ", drop_remainder" : "") + ") <- " +
           input_.describe();
  }
};

// Copies the row-major array `src` of shape `from` into the corner of the
// row-major array `dst` of shape `to` (to[d] >= from[d]).
void copy_into_corner(DType dtype, const std::byte* src, const Shape& from, std::byte* dst, const Shape& to,
                      std::size_t d, std::size_t element_bytes) {
  if (d == from.size()) {
    copy_elements(dtype, dst, src, element_bytes);
    return;
  }
  std::size_t src_stride = element_bytes, dst_stride = element_bytes;
  for (std::size_t k = d + 1; k < from.size(); ++k) {
    src_stride *= static_cast<std::size_t>(from[k]);
    dst_stride *= static_cast<std::size_t>(to[k]);
  }
  if (d + 1 == from.size()) {
    if (from[d] > 0) copy_elements(dtype, dst, src, static_cast<std::size_t>(from[d]) * element_bytes);
    return;
  }
  for (std::int64_t i = 0; i < from[d]; ++i) {
    copy_into_corner(dtype, src + static_cast<std::size_t>(i) * src_stride, from,
                     dst + static_cast<std::size_t>(i) * dst_stride, to, d + 1, element_bytes);
  }
}

// A new tensor of `dtype` and `shape` filled with `value` (empty strings for
// kString); *data: its buffer.
Tensor filled(DType dtype, Shape shape, double value, void** buffer) {
  void*& data = *buffer;
  Tensor t = allocate_tensor(dtype, std::move(shape), &data);
  const auto n = static_cast<std::size_t>(t.num_elements());
  switch (dtype) {
    case DType::kFloat32:
      std::fill_n(static_cast<float*>(data), n, static_cast<float>(value));
      break;
    case DType::kFloat64:
      std::fill_n(static_cast<double*>(data), n, value);
      break;
    case DType::kInt32:
      std::fill_n(static_cast<std::int32_t*>(data), n, static_cast<std::int32_t>(value));
      break;
    case DType::kInt64:
      std::fill_n(static_cast<std::int64_t*>(data), n, static_cast<std::int64_t>(value));
      break;
    case DType::kString:
      break;  // allocate_tensor's elements are empty strings
  }
  return t;
}

using PaddedShapes = std::vector<std::vector<std::int64_t>>;

// TF's padded_batch of `rows` (consecutive input elements, the first one at
// `first_index` of the stream).
Element pad_and_stack(const std::vector<Element>& rows, std::int64_t first_index, const PaddedShapes& padded_shapes,
                      const std::vector<double>& padding_values) {
  const char* op = "Dataset::padded_batch";
  const Element& first = rows.front();
  if (!padded_shapes.empty() && padded_shapes.size() != first.size()) {
    throw InvalidArgumentError(std::string(op) + ": expected " + std::to_string(first.size()) +
                               " padded shape(s), one per component, got " + std::to_string(padded_shapes.size()));
  }
  if (padding_values.size() > 1 && padding_values.size() != first.size()) {
    throw InvalidArgumentError(std::string(op) + ": expected " + std::to_string(first.size()) +
                               " padding value(s), one per component (or one for all), got " +
                               std::to_string(padding_values.size()));
  }
  std::vector<Tensor> out;
  out.reserve(first.size());
  for (std::size_t c = 0; c < first.size(); ++c) {
    const std::string component = first.size() > 1 ? " (component " + std::to_string(c) + ")" : std::string();
    Shape target = first[c].shape();
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Element& e = rows[i];
      const std::string index = std::to_string(first_index + static_cast<std::int64_t>(i));
      check_same_structure(first, first_index, e, index, op);
      if (e[c].dtype() != first[c].dtype() || e[c].rank() != first[c].rank()) {
        throw InvalidArgumentError(std::string(op) + ": expected elements of the same dtype and rank, got element " +
                                   std::to_string(first_index) + " with " + describe(first[c]) + " and element " +
                                   index + " with " + describe(e[c]) + component);
      }
      for (std::size_t d = 0; d < target.size(); ++d) target[d] = std::max(target[d], e[c].shape()[d]);
    }
    if (!padded_shapes.empty()) {
      const std::vector<std::int64_t>& want = padded_shapes[c];
      if (want.size() != target.size()) {
        throw InvalidArgumentError(std::string(op) + ": expected a padded shape of rank " +
                                   std::to_string(target.size()) + " for elements " + describe(first[c]) + ", got " +
                                   shape_string(Shape(want)) + component);
      }
      for (std::size_t d = 0; d < want.size(); ++d) {
        if (want[d] < 0) continue;
        if (want[d] < target[d]) {
          throw InvalidArgumentError(std::string(op) + ": an element of the batch starting at element " +
                                     std::to_string(first_index) + " has size " + std::to_string(target[d]) +
                                     " in dimension " + std::to_string(d) + ", more than the padded shape " +
                                     shape_string(Shape(want)) + " allows" + component);
        }
        target[d] = want[d];
      }
    }
    if (first[c].dtype() == DType::kString && padding_values.size() > 1 && padding_values[c] != 0) {
      throw InvalidArgumentError(std::string(op) + ": string components are padded with empty strings, got padding value " +
                                 std::to_string(padding_values[c]) + component);
    }
    Shape batch_shape = target;
    batch_shape.insert(batch_shape.begin(), static_cast<std::int64_t>(rows.size()));
    void* data = nullptr;
    Tensor batch = filled(first[c].dtype(), std::move(batch_shape),
                          padding_values.empty() ? 0.0 : padding_values[std::min(c, padding_values.size() - 1)], &data);
    const std::size_t element_bytes = dtype_size(first[c].dtype());
    std::size_t row_bytes = element_bytes;
    for (std::int64_t dim : target) row_bytes *= static_cast<std::size_t>(dim);
    auto* dst = static_cast<std::byte*>(data);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Tensor& t = rows[i][c];
      if (t.num_elements() == 0) continue;
      copy_into_corner(t.dtype(), t.bytes().data(), t.shape(), dst + i * row_bytes, target, 0, element_bytes);
    }
    out.push_back(std::move(batch));
  }
  return first.with_components(std::move(out));
}

class PaddedBatchNode final : public BatchingNode {
 public:
  std::shared_ptr<const DatasetNode> with_input(Dataset input) const override {
    return copy_with_input<PaddedBatchNode>(std::move(input));
  }
  PaddedBatchNode(Dataset input, std::int64_t batch_size, PaddedShapes padded_shapes,
                  std::vector<double> padding_values, bool drop_remainder)
      : BatchingNode(std::move(input), batch_size, drop_remainder),
        padded_shapes_(std::move(padded_shapes)),
        padding_values_(std::move(padding_values)) {}
  std::unique_ptr<ElementIterator> make_iterator() const override {
    class It final : public ElementIterator {
     public:
      It(std::unique_ptr<ElementIterator> input, const PaddedBatchNode& node) : input_(std::move(input)), node_(node) {}
      std::optional<Element> next() override {
        std::int64_t first = 0;
        const std::vector<Element> rows = take_batch_rows(*input_, node_.batch_size_, rows_, consumed_, first);
        if (rows.empty()) return std::nullopt;
        if (node_.drop_remainder_ && static_cast<std::int64_t>(rows.size()) < node_.batch_size_) return std::nullopt;
        return pad_and_stack(rows, first, node_.padded_shapes_, node_.padding_values_);
      }

     private:
      std::unique_ptr<ElementIterator> input_;
      const PaddedBatchNode node_;  // a copy: the iterator may outlive the dataset
      std::vector<Element> rows_;
      std::int64_t consumed_ = 0;
    };
    return std::make_unique<It>(iterate(input_), *this);
  }
  std::optional<ElementSpec> static_element_spec() const override {
    ElementSpec spec = input_.element_spec();
    for (std::size_t c = 0; c < spec.components.size(); ++c) {
      std::vector<std::int64_t>& shape = spec.components[c].shape;
      if (c < padded_shapes_.size() && padded_shapes_[c].size() == shape.size()) shape = padded_shapes_[c];
      for (std::int64_t& d : shape) d = std::max<std::int64_t>(d, -1);
    }
    return batched_spec(std::move(spec));
  }
  std::string describe() const override {
    std::string s = "PaddedBatch(" + std::to_string(batch_size_);
    for (const auto& shape : padded_shapes_) s += ", " + shape_string(Shape(shape));
    for (double v : padding_values_) s += ", pad=" + std::to_string(v);
    return s + (drop_remainder_ ? ", drop_remainder" : "") + ") <- " + input_.describe();
  }

 private:
  PaddedShapes padded_shapes_;
  std::vector<double> padding_values_;
};

class UnbatchNode final : public UnaryNode {
 public:
  std::shared_ptr<const DatasetNode> with_input(Dataset input) const override {
    return copy_with_input<UnbatchNode>(std::move(input));
  }
  explicit UnbatchNode(Dataset input) : UnaryNode(std::move(input)) {}
  std::optional<int> static_min_rank() const override {
    const std::optional<int> rank = input_.node()->static_min_rank();
    return rank.has_value() ? std::optional<int>(std::max(*rank - 1, 0)) : std::nullopt;
  }
  std::unique_ptr<ElementIterator> make_iterator() const override {
    class It final : public ElementIterator {
     public:
      explicit It(std::unique_ptr<ElementIterator> input) : input_(std::move(input)) {}
      std::optional<Element> next() override {
        while (!current_.has_value() || row_ >= rows_) {
          current_ = input_->next();
          if (!current_.has_value()) return std::nullopt;
          rows_ = batch_dim(*current_, "Dataset::unbatch");
          row_ = 0;
        }
        std::vector<Tensor> out;
        for (const Tensor& c : current_->components()) out.push_back(c[row_]);
        ++row_;
        return current_->with_components(std::move(out));
      }

     private:
      std::unique_ptr<ElementIterator> input_;
      std::optional<Element> current_;
      std::int64_t row_ = 0, rows_ = 0;
    };
    return std::make_unique<It>(iterate(input_));
  }
  std::string describe() const override { return "Unbatch <- " + input_.describe(); }
  std::optional<std::int64_t> static_batch_size() const override { return std::nullopt; }
  std::optional<ElementSpec> static_element_spec() const override {
    ElementSpec spec = input_.element_spec();
    for (TensorSpec& c : spec.components) {
      if (!c.shape.empty()) c.shape.erase(c.shape.begin());
    }
    return spec;
  }
};

class RebatchNode final : public UnaryNode {
 public:
  std::shared_ptr<const DatasetNode> with_input(Dataset input) const override {
    return copy_with_input<RebatchNode>(std::move(input));
  }
  // `op`: the call its errors name (experimental_distribute_dataset's
  // rebatching names that call, not Dataset::rebatch).
  RebatchNode(Dataset input, std::vector<std::int64_t> sizes, bool drop_remainder, const char* op = "Dataset::rebatch")
      : UnaryNode(std::move(input)), sizes_(std::move(sizes)), drop_remainder_(drop_remainder), op_(op) {}

  std::unique_ptr<ElementIterator> make_iterator() const override {
    class It final : public ElementIterator {
     public:
      It(std::unique_ptr<ElementIterator> input, std::vector<std::int64_t> sizes, bool drop, const char* op)
          : input_(std::move(input)), sizes_(std::move(sizes)), drop_(drop), op_(op) {}

      std::optional<Element> next() override {
        if (done_) return std::nullopt;
        const std::int64_t want = sizes_[next_size_];
        std::vector<Element> parts;
        std::int64_t have = 0;
        // A zero size yields an empty batch until the end of the input has
        // been seen, also right after the last input batch was used up (as
        // TF's RebatchDatasetV2: [1, 1, 1, 1, 0] over batches of 4 ends with
        // an empty batch). Only before the first input batch must it read
        // ahead, to learn the shape.
        if (want == 0) {
          if (!current_.has_value() && !fill()) return finish();
          next_size_ = (next_size_ + 1) % sizes_.size();
          return slice_element(*current_, offset_, offset_);
        }
        while (have < want) {
          if (!fill()) break;
          const std::int64_t take = std::min(want - have, rows_ - offset_);
          parts.push_back(slice_element(*current_, offset_, offset_ + take));
          offset_ += take;
          have += take;
        }
        if (have == 0 || (have < want && drop_)) return finish();
        next_size_ = (next_size_ + 1) % sizes_.size();
        return parts.size() == 1 ? std::move(parts[0]) : concat_elements(parts);
      }

     private:
      // Makes sure current_ has rows left; false at the end of the input.
      bool fill() {
        while (!current_.has_value() || offset_ >= rows_) {
          std::optional<Element> e = input_->next();
          if (!e.has_value()) {
            current_.reset();
            return false;
          }
          // Checked before it becomes current_: after a bad element the
          // iterator goes on from the previous (valid) state.
          rows_ = batch_dim(*e, op_);
          current_ = std::move(e);
          offset_ = 0;
          if (rows_ == 0) continue;  // empty input batches contribute nothing
        }
        return true;
      }
      std::optional<Element> finish() {
        done_ = true;
        return std::nullopt;
      }

      std::unique_ptr<ElementIterator> input_;
      std::vector<std::int64_t> sizes_;
      bool drop_;
      const char* op_;
      std::size_t next_size_ = 0;
      std::optional<Element> current_;
      std::int64_t offset_ = 0, rows_ = 0;
      bool done_ = false;
    };
    return std::make_unique<It>(iterate(input_), sizes_, drop_remainder_, op_);
  }
  std::optional<std::int64_t> static_batch_size() const override {
    if (sizes_.size() == 1) return sizes_[0];
    return std::nullopt;
  }
  // Every output batch has `size` rows when all sizes are that one and
  // either the remainder is dropped or the input's batches are a fixed
  // multiple of it; else the leading dimension is unknown.
  std::optional<ElementSpec> static_element_spec() const override {
    ElementSpec spec = input_.element_spec();
    const bool same = std::all_of(sizes_.begin(), sizes_.end(), [&](std::int64_t v) { return v == sizes_[0]; });
    for (TensorSpec& c : spec.components) {
      if (c.shape.empty()) continue;
      const std::int64_t in = c.shape[0];
      c.shape[0] = same && sizes_[0] > 0 && (drop_remainder_ || (in > 0 && in % sizes_[0] == 0)) ? sizes_[0] : -1;
    }
    return spec;
  }
  std::string describe() const override {
    std::string s = "Rebatch([";
    for (std::size_t i = 0; i < sizes_.size(); ++i) s += (i > 0 ? ", " : "") + std::to_string(sizes_[i]);
    return s + "]) <- " + input_.describe();
  }

 private:
  std::vector<std::int64_t> sizes_;
  bool drop_remainder_;
  const char* op_;
};

}  // namespace

// Dataset::rebatch's checks of its sizes (all zeros would never read the
// input: an endless stream of empty batches).
void check_rebatch_sizes(const std::vector<std::int64_t>& batch_sizes) {
  if (batch_sizes.empty()) throw InvalidArgumentError("Dataset::rebatch: expected at least one batch size, got none");
  bool any_positive = false;
  for (std::int64_t s : batch_sizes) {
    if (s < 0) throw InvalidArgumentError("Dataset::rebatch: expected batch sizes >= 0, got " + std::to_string(s));
    any_positive = any_positive || s > 0;
  }
  if (!any_positive) throw InvalidArgumentError("Dataset::rebatch: expected at least one batch size > 0, got only zeros");
}

Dataset rebatch_for_distribution(const Dataset& dataset, std::vector<std::int64_t> batch_sizes) {
  check_rebatch_sizes(batch_sizes);
  return Dataset(std::make_shared<RebatchNode>(dataset, std::move(batch_sizes), /*drop_remainder=*/false,
                                               "experimental_distribute_dataset"));
}

}  // namespace internal

Dataset Dataset::batch(std::int64_t batch_size, bool drop_remainder) const {
  if (batch_size <= 0) {
    throw InvalidArgumentError("Dataset::batch: expected a batch size > 0, got " + std::to_string(batch_size));
  }
  return Dataset(std::make_shared<internal::BatchNode>(*this, batch_size, drop_remainder));
}

Dataset Dataset::padded_batch(std::int64_t batch_size, std::vector<std::vector<std::int64_t>> padded_shapes,
                              std::vector<double> padding_values, bool drop_remainder) const {
  if (batch_size <= 0) {
    throw InvalidArgumentError("Dataset::padded_batch: expected a batch size > 0, got " + std::to_string(batch_size));
  }
  for (const auto& shape : padded_shapes) {
    for (std::int64_t d : shape) {
      if (d < -1) {
        throw InvalidArgumentError(
            "Dataset::padded_batch: expected padded dimensions >= 0 (or -1: the batch's "
            "largest), got " +
            shape_string(Shape(shape)));
      }
    }
  }
  return Dataset(std::make_shared<internal::PaddedBatchNode>(*this, batch_size, std::move(padded_shapes),
                                                             std::move(padding_values), drop_remainder));
}

Dataset Dataset::unbatch() const { return Dataset(std::make_shared<internal::UnbatchNode>(*this)); }

Dataset Dataset::rebatch(std::vector<std::int64_t> batch_sizes, bool drop_remainder) const {
  internal::check_rebatch_sizes(batch_sizes);
  return Dataset(std::make_shared<internal::RebatchNode>(*this, std::move(batch_sizes), drop_remainder));
}

Dataset Dataset::rebatch(std::int64_t batch_size, bool drop_remainder) const {
  if (batch_size <= 0) {
    throw InvalidArgumentError("Dataset::rebatch: expected a batch size > 0, got " + std::to_string(batch_size));
  }
  return rebatch(std::vector<std::int64_t>{batch_size}, drop_remainder);
}

}  // namespace distribute
