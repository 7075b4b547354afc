// Dataset sources and iteration entry points.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "data/dataset_node.h"
#include "distribute/errors.h"

namespace distribute {
namespace internal {
namespace {

class TensorSlicesNode final : public DatasetNode {
 public:
  TensorSlicesNode(std::vector<Tensor> components, bool is_tuple)
      : components_(std::move(components)), is_tuple_(is_tuple) {}
  std::optional<int> static_min_rank() const override {
    int rank = components_.front().rank();
    for (const Tensor& c : components_) rank = std::min(rank, c.rank());
    return std::max(rank - 1, 0);
  }

  std::unique_ptr<ElementIterator> make_iterator() const override {
    class It final : public ElementIterator {
     public:
      // Iterators own what they read (copies of Tensors share buffers), so
      // they outlive the Dataset they came from.
      It(std::vector<Tensor> components, bool is_tuple) : components_(std::move(components)), is_tuple_(is_tuple) {}
      std::optional<Element> next() override {
        if (index_ >= components_[0].dim(0)) return std::nullopt;
        std::vector<Tensor> row;
        row.reserve(components_.size());
        for (const Tensor& c : components_) row.push_back(c[index_]);
        ++index_;
        if (!is_tuple_) return Element(std::move(row[0]));
        return Element(std::move(row));
      }
      // Consecutive rows are one zero-copy slice of each component.
      std::optional<Element> next_batch(std::int64_t n, std::vector<Element>& pending, std::int64_t& consumed) override {
        if (!pending.empty()) return ElementIterator::next_batch(n, pending, consumed);
        const std::int64_t begin = index_, end = std::min(index_ + n, components_[0].dim(0));
        if (begin >= end) return std::nullopt;
        index_ = end;
        consumed += end - begin;
        std::vector<Tensor> batch;
        batch.reserve(components_.size());
        for (const Tensor& c : components_) batch.push_back(c.slice(begin, end));
        if (!is_tuple_) return Element(std::move(batch[0]));
        return Element(std::move(batch));
      }
      std::optional<Rows> take_rows() override {
        Rows rows{components_, is_tuple_, index_, components_[0].dim(0)};
        index_ = rows.end;
        return rows;
      }

     private:
      std::vector<Tensor> components_;
      bool is_tuple_;
      std::int64_t index_ = 0;
    };
    return std::make_unique<It>(components_, is_tuple_);
  }
  std::string describe() const override { return "TensorSlices"; }
  std::int64_t cardinality() const override { return components_[0].dim(0); }
  std::optional<ElementSpec> static_element_spec() const override {
    ElementSpec spec{{}, is_tuple_};
    for (const Tensor& c : components_) {
      const std::vector<std::int64_t> dims = c.shape();
      spec.components.push_back({c.dtype(), {dims.begin() + 1, dims.end()}});
    }
    return spec;
  }

 private:
  std::vector<Tensor> components_;
  bool is_tuple_;
};

// The rows of CSV files, one file loaded at a time.
class CsvFilesNode final : public DatasetNode {
 public:
  CsvFilesNode(std::vector<std::string> paths, CsvOptions options) : paths_(std::move(paths)), options_(options) {}

  std::unique_ptr<ElementIterator> make_iterator() const override {
    class It final : public ElementIterator {
     public:
      It(std::vector<std::string> paths, CsvOptions options) : paths_(std::move(paths)), options_(options) {}
      std::optional<Element> next() override {
        while (!rows_.has_value() || row_ >= rows_->dim(0)) {
          if (file_ >= paths_.size()) return std::nullopt;
          rows_ = load_csv(paths_[file_++], options_);
          row_ = 0;
        }
        return Element((*rows_)[row_++]);
      }

     private:
      std::vector<std::string> paths_;
      CsvOptions options_;
      std::size_t file_ = 0;
      std::optional<Tensor> rows_;
      std::int64_t row_ = 0;
    };
    return std::make_unique<It>(paths_, options_);
  }
  std::string describe() const override { return "CsvFiles(" + std::to_string(paths_.size()) + " files)"; }
  std::size_t num_files() const override { return paths_.size(); }
  std::shared_ptr<const DatasetNode> shard_files(int num_shards, int index) const override {
    std::vector<std::string> mine;
    for (std::size_t i = static_cast<std::size_t>(index); i < paths_.size(); i += static_cast<std::size_t>(num_shards)) {
      mine.push_back(paths_[i]);
    }
    return std::make_shared<CsvFilesNode>(std::move(mine), options_);
  }

 private:
  std::vector<std::string> paths_;
  CsvOptions options_;
};

class TensorsNode final : public DatasetNode {
 public:
  explicit TensorsNode(Element element) : element_(std::move(element)) {}
  std::optional<int> static_min_rank() const override {
    int rank = element_.components().front().rank();
    for (const Tensor& c : element_.components()) rank = std::min(rank, c.rank());
    return rank;
  }
  std::unique_ptr<ElementIterator> make_iterator() const override {
    class It final : public ElementIterator {
     public:
      explicit It(Element e) : element_(std::move(e)) {}
      std::optional<Element> next() override {
        if (done_) return std::nullopt;
        done_ = true;
        return element_;
      }

     private:
      Element element_;
      bool done_ = false;
    };
    return std::make_unique<It>(element_);
  }
  std::string describe() const override { return "Tensors"; }
  std::int64_t cardinality() const override { return 1; }
  std::optional<ElementSpec> static_element_spec() const override { return spec_of(element_); }

 private:
  Element element_;
};

class RangeNode final : public DatasetNode {
 public:
  RangeNode(std::int64_t start, std::int64_t stop, std::int64_t step) : start_(start), stop_(stop), step_(step) {}
  std::optional<int> static_min_rank() const override { return 0; }
  std::unique_ptr<ElementIterator> make_iterator() const override {
    class It final : public ElementIterator {
     public:
      It(std::int64_t start, std::int64_t stop, std::int64_t step) : next_(start), stop_(stop), step_(step) {}
      std::optional<Element> next() override {
        if (done_ || (step_ > 0 ? next_ >= stop_ : next_ <= stop_)) return std::nullopt;
        const std::int64_t v = next_;
        // A step past the int64 range ends the range (it would pass stop).
        done_ = __builtin_add_overflow(next_, step_, &next_);
        return Element(Tensor(v));
      }

     private:
      std::int64_t next_, stop_, step_;
      bool done_ = false;
    };
    return std::make_unique<It>(start_, stop_, step_);
  }
  std::string describe() const override {
    return "Range(" + std::to_string(start_) + ", " + std::to_string(stop_) + ", " + std::to_string(step_) + ")";
  }
  std::int64_t cardinality() const override {
    // ceil((stop - start) / step) when positive (step is never 0), in
    // unsigned arithmetic: the span of two int64 values may exceed int64.
    if (step_ > 0 ? stop_ <= start_ : stop_ >= start_) return 0;
    const auto u = [](std::int64_t x) { return static_cast<std::uint64_t>(x); };
    const std::uint64_t span = step_ > 0 ? u(stop_) - u(start_) : u(start_) - u(stop_);
    const std::uint64_t stride = step_ > 0 ? u(step_) : std::uint64_t{0} - u(step_);
    const std::uint64_t count = (span - 1) / stride + 1;
    return count > u(std::numeric_limits<std::int64_t>::max()) ? std::numeric_limits<std::int64_t>::max()
                                                                 : static_cast<std::int64_t>(count);
  }
  std::optional<ElementSpec> static_element_spec() const override {
    return ElementSpec{{TensorSpec{DType::kInt64, {}}}, false};
  }

 private:
  std::int64_t start_, stop_, step_;
};

class GeneratorNode final : public DatasetNode {
 public:
  explicit GeneratorNode(std::function<Dataset::Generator()> make) : make_(std::move(make)) {}
  std::unique_ptr<ElementIterator> make_iterator() const override {
    class It final : public ElementIterator {
     public:
      explicit It(Dataset::Generator gen) : gen_(std::move(gen)) {}
      std::optional<Element> next() override {
        if (done_) return std::nullopt;
        std::optional<Element> e = gen_();
        if (!e.has_value()) done_ = true;
        return e;
      }

     private:
      Dataset::Generator gen_;
      bool done_ = false;
    };
    Dataset::Generator gen = make_();
    if (!gen) throw InvalidArgumentError("Dataset::from_generator: expected make() to return a generator, got an empty function");
    return std::make_unique<It>(std::move(gen));
  }
  std::string describe() const override { return "Generator"; }
  const char* unreplayable() const override { return "from_generator (its generator's state is outside the pipeline)"; }

 private:
  std::function<Dataset::Generator()> make_;
};

}  // namespace

}  // namespace internal

Dataset::Dataset(std::shared_ptr<const internal::DatasetNode> node) : node_(std::move(node)) {}

Dataset Dataset::from_tensor_slices(const Tensor& tensor) {
  if (tensor.rank() == 0) {
    throw InvalidArgumentError("Dataset::from_tensor_slices: expected a tensor of rank >= 1 to slice along axis 0, "
                               "got a scalar " + tensor.to_string());
  }
  return Dataset(std::make_shared<internal::TensorSlicesNode>(std::vector<Tensor>{tensor}, false));
}

Dataset Dataset::from_tensor_slices(std::vector<Tensor> components) {
  if (components.empty()) throw InvalidArgumentError("Dataset::from_tensor_slices: expected at least one tensor, got none");
  for (std::size_t i = 0; i < components.size(); ++i) {
    if (components[i].rank() == 0) {
      throw InvalidArgumentError("Dataset::from_tensor_slices: expected tensors of rank >= 1, got a scalar as component " +
                                 std::to_string(i));
    }
    if (components[i].dim(0) != components[0].dim(0)) {
      throw InvalidArgumentError("Dataset::from_tensor_slices: expected all components to have the same size along "
                                 "axis 0, got " + std::to_string(components[0].dim(0)) + " for component 0 (shape " +
                                 shape_string(components[0].shape()) + ") and " + std::to_string(components[i].dim(0)) +
                                 " for component " + std::to_string(i) + " (shape " +
                                 shape_string(components[i].shape()) + ")");
    }
  }
  return Dataset(std::make_shared<internal::TensorSlicesNode>(std::move(components), true));
}

Dataset Dataset::from_tensors(Element element) {
  return Dataset(std::make_shared<internal::TensorsNode>(std::move(element)));
}

Dataset Dataset::from_csv_files(std::vector<std::string> paths, CsvOptions options) {
  if (paths.empty()) throw InvalidArgumentError("Dataset::from_csv_files: expected at least one file, got none");
  return Dataset(std::make_shared<internal::CsvFilesNode>(std::move(paths), options));
}

Dataset Dataset::range(std::int64_t stop) { return range(0, stop, 1); }

Dataset Dataset::range(std::int64_t start, std::int64_t stop, std::int64_t step) {
  if (step == 0) throw InvalidArgumentError("Dataset::range: expected a non-zero step, got 0");
  return Dataset(std::make_shared<internal::RangeNode>(start, stop, step));
}

Dataset Dataset::from_generator(std::function<Generator()> make) {
  if (!make) throw InvalidArgumentError("Dataset::from_generator: expected a function, got an empty one");
  return Dataset(std::make_shared<internal::GeneratorNode>(std::move(make)));
}

Dataset::Iterator::Iterator(std::unique_ptr<internal::ElementIterator> impl) : impl_(std::move(impl)) {}
Dataset::Iterator::Iterator(Iterator&&) noexcept = default;
Dataset::Iterator& Dataset::Iterator::operator=(Iterator&&) noexcept = default;
Dataset::Iterator::~Iterator() = default;

void internal::require_not_moved_from(const void* impl, const char* method) {
  if (impl == nullptr) {
    throw FailedPreconditionError(std::string(method) + ": expected an iterator, got a moved-from one (its state "
                                  "went to the iterator it was moved into)");
  }
}

Element Dataset::Iterator::get_next() {
  internal::require_not_moved_from(impl_.get(), "Dataset::Iterator::get_next");
  std::optional<Element> e = impl_->next_interruptible();
  if (!e.has_value()) throw OutOfRangeError("End of sequence");
  return std::move(*e);
}

std::optional<Element> Dataset::Iterator::get_next_as_optional() {
  internal::require_not_moved_from(impl_.get(), "Dataset::Iterator::get_next_as_optional");
  return impl_->next_interruptible();
}

Dataset::Iterator Dataset::make_iterator() const { return Iterator(node_->make_iterator()); }

Dataset::RangeIterator Dataset::begin() const { return RangeIterator(std::make_shared<Iterator>(make_iterator())); }

}  // namespace distribute
