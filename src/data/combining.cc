// Transformations that combine datasets: zip, enumerate, flat_map and
// interleave.
#include <algorithm>
#include <utility>

#include "data/dataset_node.h"
#include "distribute/errors.h"
#include "runtime/cpu_count.h"

namespace distribute {
namespace internal {
namespace {

class ZipNode final : public DatasetNode {
 public:
  explicit ZipNode(std::vector<Dataset> inputs) : inputs_(std::move(inputs)) {}

  std::vector<const Dataset*> inputs() const override {
    std::vector<const Dataset*> out;
    for (const Dataset& d : inputs_) out.push_back(&d);
    return out;
  }
  std::shared_ptr<const DatasetNode> with_inputs(std::vector<Dataset> inputs) const override {
    return std::make_shared<ZipNode>(std::move(inputs));
  }

  std::unique_ptr<ElementIterator> make_iterator() const override {
    class It final : public ElementIterator {
     public:
      explicit It(std::vector<std::unique_ptr<ElementIterator>> inputs) : inputs_(std::move(inputs)) {}
      std::optional<Element> next() override {
        if (done_) return std::nullopt;
        // The parts taken before an input throws stay in parts_, so the
        // next call goes on with that input and the inputs stay aligned.
        while (parts_.size() < inputs_.size()) {
          std::optional<Element> e = inputs_[parts_.size()]->next();
          if (!e.has_value()) {
            done_ = true;
            parts_.clear();
            return std::nullopt;
          }
          parts_.push_back(std::move(*e));
        }
        std::vector<Tensor> components;
        for (const Element& part : parts_) {
          components.insert(components.end(), part.components().begin(), part.components().end());
        }
        parts_.clear();
        return Element(std::move(components));
      }

     private:
      std::vector<std::unique_ptr<ElementIterator>> inputs_;
      std::vector<Element> parts_;
      bool done_ = false;
    };
    std::vector<std::unique_ptr<ElementIterator>> iterators;
    for (const Dataset& d : inputs_) iterators.push_back(iterate(d));
    return std::make_unique<It>(std::move(iterators));
  }

  // The shortest input; unknown when any is (as TF).
  std::int64_t cardinality() const override {
    std::int64_t result = Dataset::kInfiniteCardinality;
    for (const Dataset& d : inputs_) {
      const std::int64_t n = d.cardinality();
      if (n == Dataset::kUnknownCardinality) return n;
      if (n != Dataset::kInfiniteCardinality && (result == Dataset::kInfiniteCardinality || n < result)) result = n;
    }
    return result;
  }
  // The inputs' batch size when they all have the same one (TF's
  // compute_batch_size of a zip).
  std::optional<std::int64_t> static_batch_size() const override {
    std::optional<std::int64_t> size = inputs_[0].static_batch_size();
    for (const Dataset& d : inputs_) {
      if (d.static_batch_size() != size) return std::nullopt;
    }
    return size;
  }
  std::optional<int> static_min_rank() const override {
    std::optional<int> rank;
    for (const Dataset& d : inputs_) {
      const std::optional<int> r = d.node()->static_min_rank();
      if (!r.has_value()) return std::nullopt;
      rank = rank.has_value() ? std::min(*rank, *r) : *r;
    }
    return rank;
  }
  std::optional<ElementSpec> static_element_spec() const override {
    ElementSpec spec{{}, true};
    for (const Dataset& d : inputs_) {
      ElementSpec part = d.element_spec();
      spec.components.insert(spec.components.end(), part.components.begin(), part.components.end());
    }
    return spec;
  }
  std::string describe() const override {
    std::string s = "Zip(";
    for (std::size_t i = 0; i < inputs_.size(); ++i) s += (i > 0 ? ", " : "") + inputs_[i].describe();
    return s + ")";
  }

 private:
  std::vector<Dataset> inputs_;
};

class EnumerateNode final : public UnaryNode {
 public:
  EnumerateNode(Dataset input, std::int64_t start) : UnaryNode(std::move(input)), start_(start) {}
  std::shared_ptr<const DatasetNode> with_input(Dataset input) const override {
    return copy_with_input<EnumerateNode>(std::move(input));
  }
  std::unique_ptr<ElementIterator> make_iterator() const override {
    class It final : public ElementIterator {
     public:
      It(std::unique_ptr<ElementIterator> input, std::int64_t start) : input_(std::move(input)), next_(start) {}
      std::optional<Element> next() override {
        std::optional<Element> e = input_->next();
        if (!e.has_value()) return std::nullopt;
        std::vector<Tensor> components{Tensor(next_++)};
        components.insert(components.end(), e->components().begin(), e->components().end());
        return Element(std::move(components));
      }

     private:
      std::unique_ptr<ElementIterator> input_;
      std::int64_t next_;
    };
    return std::make_unique<It>(iterate(input_), start_);
  }
  std::optional<std::int64_t> static_batch_size() const override { return std::nullopt; }
  std::optional<int> static_min_rank() const override { return 0; }  // the index is a scalar
  std::optional<ElementSpec> static_element_spec() const override {
    ElementSpec spec{{TensorSpec{DType::kInt64, {}}}, true};
    ElementSpec in = input_.element_spec();
    spec.components.insert(spec.components.end(), in.components.begin(), in.components.end());
    return spec;
  }
  std::int64_t cardinality() const override { return input_cardinality(); }
  std::string describe() const override { return "Enumerate(" + std::to_string(start_) + ") <- " + input_.describe(); }

 private:
  std::int64_t start_;
};

using DatasetFn = std::function<Dataset(const Element&)>;

class FlatMapNode final : public UnaryNode {
 public:
  FlatMapNode(Dataset input, DatasetFn fn)
      : UnaryNode(std::move(input)), fn_(std::make_shared<const DatasetFn>(std::move(fn))) {}
  std::shared_ptr<const DatasetNode> with_input(Dataset input) const override {
    return copy_with_input<FlatMapNode>(std::move(input));
  }
  std::unique_ptr<ElementIterator> make_iterator() const override {
    class It final : public ElementIterator {
     public:
      It(std::unique_ptr<ElementIterator> input, std::shared_ptr<const DatasetFn> fn)
          : input_(std::move(input)), fn_(std::move(fn)) {}
      std::optional<Element> next() override {
        while (true) {
          if (current_) {
            std::optional<Element> e = current_->next();
            if (e.has_value()) return e;
            current_.reset();
          }
          std::optional<Element> in = input_->next();
          if (!in.has_value()) return std::nullopt;
          current_ = iterate((*fn_)(*in));
        }
      }

     private:
      std::unique_ptr<ElementIterator> input_;
      std::shared_ptr<const DatasetFn> fn_;
      std::unique_ptr<ElementIterator> current_;
    };
    return std::make_unique<It>(iterate(input_), fn_);
  }
  std::optional<std::int64_t> static_batch_size() const override { return std::nullopt; }
  std::optional<int> static_min_rank() const override { return std::nullopt; }
  std::optional<ElementSpec> static_element_spec() const override { return std::nullopt; }
  std::int64_t cardinality() const override { return Dataset::kUnknownCardinality; }
  std::string describe() const override { return "FlatMap <- " + input_.describe(); }

 private:
  std::shared_ptr<const DatasetFn> fn_;
};

class InterleaveNode final : public UnaryNode {
 public:
  InterleaveNode(Dataset input, DatasetFn fn, std::size_t cycle_length, std::int64_t block_length, bool parallel)
      : UnaryNode(std::move(input)),
        fn_(std::make_shared<const DatasetFn>(std::move(fn))),
        cycle_length_(cycle_length),
        block_length_(block_length),
        parallel_(parallel) {}
  std::shared_ptr<const DatasetNode> with_input(Dataset input) const override {
    return copy_with_input<InterleaveNode>(std::move(input));
  }

  // TF's InterleaveDataset order: slot after slot of the cycle, block_length
  // elements from each; an exhausted slot is refilled (from the next input
  // element) when the cycle comes back to it.
  std::unique_ptr<ElementIterator> make_iterator() const override {
    class It final : public ElementIterator {
     public:
      It(std::unique_ptr<ElementIterator> input, const InterleaveNode& node)
          : input_(std::move(input)),
            fn_(node.fn_),
            cycle_(node.cycle_length_),
            block_length_(node.block_length_),
            parallel_(node.parallel_) {}
      std::optional<Element> next() override {
        while (!input_done_ || open_ > 0) {
          std::unique_ptr<ElementIterator>& slot = cycle_[index_];
          if (slot && block_ < block_length_) {
            std::optional<Element> e = slot->next();
            if (e.has_value()) {
              ++block_;
              return e;
            }
            slot.reset();
            --open_;
            advance();
          } else if (slot) {
            advance();
          } else if (!input_done_) {
            std::optional<Element> in = input_->next();
            if (!in.has_value()) {
              input_done_ = true;
              continue;
            }
            Dataset d = (*fn_)(*in);
            // Read ahead on a thread of its own, a block at a time.
            slot = iterate(parallel_ ? d.prefetch(block_length_) : d);
            ++open_;
          } else {
            advance();
          }
        }
        return std::nullopt;
      }

     private:
      void advance() {
        block_ = 0;
        index_ = (index_ + 1) % cycle_.size();
      }

      std::unique_ptr<ElementIterator> input_;
      std::shared_ptr<const DatasetFn> fn_;
      std::vector<std::unique_ptr<ElementIterator>> cycle_;
      std::int64_t block_length_;
      bool parallel_;
      std::size_t index_ = 0, open_ = 0;
      std::int64_t block_ = 0;
      bool input_done_ = false;
    };
    return std::make_unique<It>(iterate(input_), *this);
  }
  std::optional<std::int64_t> static_batch_size() const override { return std::nullopt; }
  std::optional<int> static_min_rank() const override { return std::nullopt; }
  std::optional<ElementSpec> static_element_spec() const override { return std::nullopt; }
  std::int64_t cardinality() const override { return Dataset::kUnknownCardinality; }
  std::string describe() const override {
    return "Interleave(cycle=" + std::to_string(cycle_length_) + ", block=" + std::to_string(block_length_) +
           (parallel_ ? ", parallel" : "") + ") <- " + input_.describe();
  }

 private:
  std::shared_ptr<const DatasetFn> fn_;
  std::size_t cycle_length_;
  std::int64_t block_length_;
  bool parallel_;
};

}  // namespace
}  // namespace internal

Dataset Dataset::zip(std::vector<Dataset> datasets) {
  if (datasets.empty()) throw InvalidArgumentError("Dataset::zip: expected at least one dataset, got none");
  return Dataset(std::make_shared<internal::ZipNode>(std::move(datasets)));
}

Dataset Dataset::enumerate(std::int64_t start) const {
  return Dataset(std::make_shared<internal::EnumerateNode>(*this, start));
}

Dataset Dataset::flat_map(std::function<Dataset(const Element&)> fn) const {
  if (!fn) throw InvalidArgumentError("Dataset::flat_map: expected a function, got an empty one");
  return Dataset(std::make_shared<internal::FlatMapNode>(*this, std::move(fn)));
}

Dataset Dataset::interleave(std::function<Dataset(const Element&)> fn, std::int64_t cycle_length,
                            std::int64_t block_length, std::int64_t num_parallel_calls) const {
  if (!fn) throw InvalidArgumentError("Dataset::interleave: expected a function, got an empty one");
  const auto check = [](const char* what, std::int64_t v, bool autotune_ok) {
    if (v >= 1 || (autotune_ok && v == kAutotune)) return;
    throw InvalidArgumentError(std::string("Dataset::interleave: expected ") + what + " >= 1" +
                               (autotune_ok ? " or kAutotune" : "") + ", got " + std::to_string(v));
  };
  check("cycle_length", cycle_length, true);
  check("block_length", block_length, false);
  check("num_parallel_calls", num_parallel_calls, true);
  const std::size_t cycle = cycle_length == kAutotune ? static_cast<std::size_t>(internal::usable_cores())
                                                      : static_cast<std::size_t>(cycle_length);
  return Dataset(
      std::make_shared<internal::InterleaveNode>(*this, std::move(fn), cycle, block_length, num_parallel_calls != 1));
}

}  // namespace distribute
