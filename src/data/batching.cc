// batch, unbatch and rebatch.
//
// rebatch(sizes) re-cuts the rows of a batched stream: output k has
// sizes[k % sizes.size()] rows, taken from the current input batch as a
// zero-copy slice when it holds enough rows, else gathered across input
// batches and concatenated (the only copy). This is how TF's
// RebatchDatasetV2 behaves: equivalent to unbatch().batch(size) with the
// size cycling, so output batches cross input batch boundaries.
#include "data/batching.h"

#include <cstring>
#include <utility>

#include "core/describe.h"
#include "data/dataset_node.h"
#include "distribute/errors.h"

namespace distribute {
namespace internal {

Element stack_elements(const std::vector<Element>& rows, std::int64_t first_index, const char* op) {
  const Element& first = rows.front();
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const Element& e = rows[i];
    const std::string index = std::to_string(first_index + static_cast<std::int64_t>(i));
    if (e.is_tuple() != first.is_tuple() || e.size() != first.size()) {
      throw InvalidArgumentError(std::string(op) + ": expected elements of the same structure, got element " +
                                 std::to_string(first_index) + " with " + std::to_string(first.size()) +
                                 " component(s) and element " + index + " with " + std::to_string(e.size()));
    }
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
      if (!bytes.empty()) std::memcpy(dst, bytes.data(), bytes.size());
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
        std::memcpy(dst, all.data() + static_cast<std::size_t>(r) * row_bytes, row_bytes);
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
      throw InvalidArgumentError(std::string(op) + ": expected batched elements (rank >= 1), got a scalar" +
                                 (e.size() > 1 ? " as component " + std::to_string(c) : std::string()) +
                                 "; call batch() on the dataset first");
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

std::optional<Element> ElementIterator::next_batch(std::int64_t n, std::vector<Element>& pending,
                                                  std::int64_t& consumed) {
  while (static_cast<std::int64_t>(pending.size()) < n) {
    std::optional<Element> e = next();
    if (!e.has_value()) break;
    pending.push_back(std::move(*e));
  }
  std::vector<Element> rows = std::move(pending);
  pending.clear();
  if (rows.empty()) return std::nullopt;
  const std::int64_t first = consumed;
  consumed += static_cast<std::int64_t>(rows.size());
  return stack_elements(rows, first, "Dataset::batch");
}

namespace {

class BatchNode final : public UnaryNode {
 public:
  std::shared_ptr<const DatasetNode> with_input(Dataset input) const override {
    return copy_with_input<BatchNode>(std::move(input));
  }
  BatchNode(Dataset input, std::int64_t batch_size, bool drop_remainder)
      : UnaryNode(std::move(input)), batch_size_(batch_size), drop_remainder_(drop_remainder) {}
  std::optional<int> static_min_rank() const override {
    const std::optional<int> rank = input_.node()->static_min_rank();
    return rank.has_value() ? std::optional<int>(*rank + 1) : std::nullopt;
  }

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
  std::optional<std::int64_t> static_batch_size() const override { return batch_size_; }
  std::int64_t cardinality() const override {
    const std::int64_t n = input_cardinality();
    if (n < 0) return n;
    return drop_remainder_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
  }
  std::string describe() const override {
    return "Batch(" + std::to_string(batch_size_) + (drop_remainder_ ? ", drop_remainder" : "") + ") <- " +
           input_.describe();
  }

 private:
  std::int64_t batch_size_;
  bool drop_remainder_;
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
};

class RebatchNode final : public UnaryNode {
 public:
  std::shared_ptr<const DatasetNode> with_input(Dataset input) const override {
    return copy_with_input<RebatchNode>(std::move(input));
  }
  RebatchNode(Dataset input, std::vector<std::int64_t> sizes, bool drop_remainder)
      : UnaryNode(std::move(input)), sizes_(std::move(sizes)), drop_remainder_(drop_remainder) {}

  std::unique_ptr<ElementIterator> make_iterator() const override {
    class It final : public ElementIterator {
     public:
      It(std::unique_ptr<ElementIterator> input, std::vector<std::int64_t> sizes, bool drop)
          : input_(std::move(input)), sizes_(std::move(sizes)), drop_(drop) {}

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
          rows_ = batch_dim(*e, "Dataset::rebatch");
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
      std::size_t next_size_ = 0;
      std::optional<Element> current_;
      std::int64_t offset_ = 0, rows_ = 0;
      bool done_ = false;
    };
    return std::make_unique<It>(iterate(input_), sizes_, drop_remainder_);
  }
  std::optional<std::int64_t> static_batch_size() const override {
    if (sizes_.size() == 1) return sizes_[0];
    return std::nullopt;
  }
  std::string describe() const override {
    std::string s = "Rebatch([";
    for (std::size_t i = 0; i < sizes_.size(); ++i) s += (i > 0 ? ", " : "") + std::to_string(sizes_[i]);
    return s + "]) <- " + input_.describe();
  }

 private:
  std::vector<std::int64_t> sizes_;
  bool drop_remainder_;
};

}  // namespace
}  // namespace internal

Dataset Dataset::batch(std::int64_t batch_size, bool drop_remainder) const {
  if (batch_size <= 0) {
    throw InvalidArgumentError("Dataset::batch: expected a batch size > 0, got " + std::to_string(batch_size));
  }
  return Dataset(std::make_shared<internal::BatchNode>(*this, batch_size, drop_remainder));
}

Dataset Dataset::unbatch() const { return Dataset(std::make_shared<internal::UnbatchNode>(*this)); }

Dataset Dataset::rebatch(std::vector<std::int64_t> batch_sizes, bool drop_remainder) const {
  if (batch_sizes.empty()) throw InvalidArgumentError("Dataset::rebatch: expected at least one batch size, got none");
  bool any_positive = false;
  for (std::int64_t s : batch_sizes) {
    if (s < 0) throw InvalidArgumentError("Dataset::rebatch: expected batch sizes >= 0, got " + std::to_string(s));
    any_positive = any_positive || s > 0;
  }
  if (!any_positive) throw InvalidArgumentError("Dataset::rebatch: expected at least one batch size > 0, got only zeros");
  return Dataset(std::make_shared<internal::RebatchNode>(*this, std::move(batch_sizes), drop_remainder));
}

Dataset Dataset::rebatch(std::int64_t batch_size, bool drop_remainder) const {
  if (batch_size <= 0) {
    throw InvalidArgumentError("Dataset::rebatch: expected a batch size > 0, got " + std::to_string(batch_size));
  }
  return rebatch(std::vector<std::int64_t>{batch_size}, drop_remainder);
}

}  // namespace distribute
