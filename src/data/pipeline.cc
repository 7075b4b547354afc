// What every dataset node shares: walking and copying a pipeline (for
// checkpoints, file sharding and element_spec), its options, and its
// element spec.
#include <algorithm>
#include <utility>

#include "data/dataset_node.h"
#include "distribute/errors.h"

namespace distribute {
namespace internal {

ElementSpec spec_of(const Element& element) {
  ElementSpec spec{{}, element.is_tuple()};
  for (const Tensor& c : element.components()) spec.components.push_back({c.dtype(), c.shape()});
  return spec;
}

std::shared_ptr<const DatasetNode> DatasetNode::with_input(Dataset /*input*/) const {
  throw InternalError("DatasetNode::with_input on a node without an input: " + describe());
}

std::vector<const Dataset*> DatasetNode::inputs() const {
  if (const Dataset* in = input()) return {in};
  return {};
}

std::shared_ptr<const DatasetNode> DatasetNode::with_inputs(std::vector<Dataset> inputs) const {
  if (inputs.size() != 1) {
    throw InternalError("DatasetNode::with_inputs: " + std::to_string(inputs.size()) + " inputs for " + describe());
  }
  return with_input(std::move(inputs[0]));
}

Options DatasetNode::options() const {
  Options merged;
  for (const Dataset* in : inputs()) merged = in->options().merged_over(merged);
  return merged;
}

std::shared_ptr<const DatasetNode> DatasetNode::shard_files(int /*num_shards*/, int /*index*/) const {
  throw InternalError("DatasetNode::shard_files on a node that reads no files: " + describe());
}

const DatasetNode* find_file_source(const Dataset& dataset) {
  for (const DatasetNode* node = dataset.node().get(); node != nullptr;
       node = node->input() != nullptr ? node->input()->node().get() : nullptr) {
    if (node->num_files() > 0) return node;
  }
  return nullptr;
}

Dataset shard_by_files(const Dataset& dataset, int num_shards, int index) {
  const DatasetNode& node = *dataset.node();
  if (node.num_files() > 0) return Dataset(node.shard_files(num_shards, index));
  return Dataset(node.with_input(shard_by_files(*node.input(), num_shards, index)));
}

// Other iterators of the original, or an iterator being replaced and its
// prefetch threads, may be advancing the original's counters meanwhile.
Dataset private_copy(const Dataset& pipeline) {
  const std::vector<const Dataset*> inputs = pipeline.node()->inputs();
  if (inputs.empty()) return pipeline;
  std::vector<Dataset> copies;
  copies.reserve(inputs.size());
  for (const Dataset* in : inputs) copies.push_back(private_copy(*in));
  return Dataset(pipeline.node()->with_inputs(std::move(copies)));
}

void for_each_node(const Dataset& pipeline, const std::function<void(const DatasetNode&)>& f) {
  f(*pipeline.node());
  for (const Dataset* in : pipeline.node()->inputs()) for_each_node(*in, f);
}

namespace {

// with_options: the same elements, with options for what reads the pipeline.
class OptionsNode final : public UnaryNode {
 public:
  OptionsNode(Dataset input, Options options) : UnaryNode(std::move(input)), options_(options) {}
  std::shared_ptr<const DatasetNode> with_input(Dataset input) const override {
    return copy_with_input<OptionsNode>(std::move(input));
  }
  std::unique_ptr<ElementIterator> make_iterator() const override { return iterate(input_); }
  std::string describe() const override {
    // Options change what the strategy does with the pipeline, not its
    // elements: left out of the description (and of an iterator's
    // fingerprint).
    return input_.describe();
  }
  std::int64_t cardinality() const override { return input_cardinality(); }
  Options options() const override { return options_.merged_over(input_.options()); }

 private:
  Options options_;
};

std::string dims_string(const std::vector<std::int64_t>& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += shape[i] < 0 ? "None" : std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";
  return out + ")";
}

}  // namespace
}  // namespace internal

std::string TensorSpec::to_string() const {
  return "TensorSpec(shape=" + internal::dims_string(shape) + ", dtype=tf." + std::string(dtype_name(dtype)) +
         ", name=None)";
}

std::string ElementSpec::to_string() const {
  if (!is_tuple && components.size() == 1) return components[0].to_string();
  std::string out = "(";
  for (std::size_t i = 0; i < components.size(); ++i) {
    if (i > 0) out += ", ";
    out += components[i].to_string();
  }
  if (components.size() == 1) out += ",";
  return out + ")";
}

std::optional<std::int64_t> Dataset::static_batch_size() const { return node_->static_batch_size(); }
std::string Dataset::describe() const { return node_->describe(); }
std::int64_t Dataset::cardinality() const { return node_->cardinality(); }
Options Dataset::options() const { return node_->options(); }

Dataset Dataset::with_options(const Options& options) const {
  return Dataset(std::make_shared<internal::OptionsNode>(*this, options));
}

ElementSpec Dataset::element_spec() const {
  if (std::optional<ElementSpec> spec = node_->static_element_spec()) return *std::move(spec);
  // A private copy: reading its first element leaves this dataset's
  // shuffle counters and caches as they were.
  std::optional<Element> first = internal::iterate(internal::private_copy(*this))->next();
  if (!first.has_value()) {
    throw FailedPreconditionError("Dataset::element_spec: the spec of " + describe() +
                                  " comes from its first element, and it has none");
  }
  ElementSpec spec = internal::spec_of(*first);
  for (TensorSpec& c : spec.components) std::fill(c.shape.begin(), c.shape.end(), std::int64_t{-1});
  return spec;
}

}  // namespace distribute
