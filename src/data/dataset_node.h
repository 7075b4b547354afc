// The nodes behind Dataset: each transformation is a node holding its input
// node; make_iterator() builds the chain of iterators for one iteration.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "distribute/dataset.h"

namespace distribute::internal {

// FailedPreconditionError for `method` of an iterator whose state (`impl`)
// was moved out (Dataset::Iterator, DistributedIterator).
void require_not_moved_from(const void* impl, const char* method);

// One iteration over a dataset. Single consumer.
class ElementIterator {
 public:
  virtual ~ElementIterator() = default;
  // The next element, or std::nullopt at the end. May throw (see dataset.h);
  // after a throw the iterator stays usable.
  virtual std::optional<Element> next() = 0;
  // next() for the outermost iterator of a pipeline (what
  // Dataset::Iterator calls): an iterator that waits for background threads
  // (prefetch, parallel map) polls the calling thread's interrupt check
  // (distribute/interrupt.h) meanwhile and raises what it throws with
  // nothing consumed. Inner iterators are never interrupted, so that an
  // interrupt cannot cost a transformation the rows it holds.
  virtual std::optional<Element> next_interruptible() { return next(); }
  // Up to `n` consecutive elements stacked into one batch (fewer at the end
  // of the input, nullopt when none is left), as Dataset::batch builds them.
  // `pending` holds the rows gathered so far; it survives an exception from
  // upstream so that only the failing element is lost, and is empty on
  // return. `consumed` counts the elements taken so far (for error
  // messages) and is advanced by the rows taken. Sources that hold their
  // rows contiguously override this with a zero-copy slice, so batching them
  // costs no per-row work.
  virtual std::optional<Element> next_batch(std::int64_t n, std::vector<Element>& pending, std::int64_t& consumed);

  // The rows this iterator has not produced yet, when they are slices of
  // whole tensors (from_tensor_slices): row i of the element is row i of
  // every component, for i in [begin, end). The iterator hands them over
  // and is exhausted afterwards; its reader produces them itself (a shuffle
  // then moves row indices instead of elements). nullopt for other
  // iterators, which stay untouched.
  struct Rows {
    std::vector<Tensor> components;
    bool is_tuple = false;
    std::int64_t begin = 0, end = 0;
  };
  virtual std::optional<Rows> take_rows() { return std::nullopt; }
};

// Rows `rows` of `components`, copied into one new tensor per component and
// made into an element like the source's (the batch of a shuffled
// from_tensor_slices: one allocation per component, one copy per row).
Element gather_rows(const std::vector<Tensor>& components, bool is_tuple, std::span<const std::int64_t> rows);


class DatasetNode {
 public:
  virtual ~DatasetNode() = default;
  virtual std::unique_ptr<ElementIterator> make_iterator() const = 0;
  // TF's compute_batch_size: the batch size, when the pipeline ends in a
  // known batch; nullopt otherwise.
  virtual std::optional<std::int64_t> static_batch_size() const { return std::nullopt; }
  // The smallest rank among an element's components, when known without
  // iterating (0: some component is a scalar, so elements cannot be split
  // into per-replica batches); nullopt when unknown (map, generators, CSV).
  virtual std::optional<int> static_min_rank() const { return std::nullopt; }
  virtual std::string describe() const = 0;
  // Dataset::cardinality() (kUnknownCardinality unless the node knows).
  virtual std::int64_t cardinality() const { return Dataset::kUnknownCardinality; }
  // Dataset::element_spec() when the node knows it without iterating;
  // nullopt: read it from the node's first element.
  virtual std::optional<ElementSpec> static_element_spec() const { return std::nullopt; }
  // Dataset::options(): the options of every input merged (with_options
  // nodes add theirs).
  virtual Options options() const;

  // The pipeline as a chain, for rewrites (file sharding): the dataset this
  // node reads (nullptr for a source), and this node reading another one.
  virtual const Dataset* input() const { return nullptr; }
  virtual std::shared_ptr<const DatasetNode> with_input(Dataset input) const;
  // Every dataset the node reads (several for zip): what checkpoints and
  // private copies walk. By default input(), if any. File sharding follows
  // input() only: a node with several inputs has no file source under it.
  virtual std::vector<const Dataset*> inputs() const;
  // The node reading `inputs` instead (as many as inputs()); by default
  // with_input(inputs[0]).
  virtual std::shared_ptr<const DatasetNode> with_inputs(std::vector<Dataset> inputs) const;
  // A source that reads a list of files: how many, and the same source over
  // the files i with i % num_shards == index. 0 / nullptr for other nodes.
  virtual std::size_t num_files() const { return 0; }
  virtual std::shared_ptr<const DatasetNode> shard_files(int num_shards, int index) const;

  // Checkpointing an iterator by replay (src/data/iterator_state.h): the
  // transformation whose position cannot be replayed (a generator's
  // outside state, a shuffle without a seed), or nullptr for this node.
  virtual const char* unreplayable() const { return nullptr; }
  // The node's count of iterators made so far, when its output depends on
  // it (a reshuffling shuffle: iteration k draws the k-th order).
  virtual std::atomic<std::uint64_t>* iteration_counter() const { return nullptr; }
};

// Base of the nodes that read one dataset; by default they keep its batch
// size.
class UnaryNode : public DatasetNode {
 public:
  explicit UnaryNode(Dataset input) : input_(std::move(input)) {}
  std::optional<std::int64_t> static_batch_size() const override { return input_.static_batch_size(); }
  std::optional<int> static_min_rank() const override { return input_.node()->static_min_rank(); }
  std::optional<ElementSpec> static_element_spec() const override { return input_.element_spec(); }
  const Dataset* input() const override { return &input_; }

 protected:
  // For nodes that produce one element per input element (map, shuffle,
  // prefetch).
  std::int64_t input_cardinality() const { return input_.cardinality(); }

  // with_input() of a copyable node type: a copy reading `input`.
  template <class Self>
  std::shared_ptr<const DatasetNode> copy_with_input(Dataset input) const {
    auto copy = std::make_shared<Self>(static_cast<const Self&>(*this));
    copy->input_ = std::move(input);
    return copy;
  }

  Dataset input_;
};

// The file source under `dataset`'s transformations, if it has one.
const DatasetNode* find_file_source(const Dataset& dataset);
// `dataset` with its file source reading only the files i with
// i % num_shards == index (every transformation above it kept); requires
// find_file_source(dataset).
Dataset shard_by_files(const Dataset& dataset, int num_shards, int index);

// The same pipeline made of new nodes (sources shared: they hold no
// iteration state): its shuffles count their iterations, and its caches
// fill, apart from the original's.
Dataset private_copy(const Dataset& pipeline);

// The exact spec of one element.
ElementSpec spec_of(const Element& element);

// Calls f(node) for every node of the pipeline, depth first from the last
// transformation (every input of a node with several).
void for_each_node(const Dataset& pipeline, const std::function<void(const DatasetNode&)>& f);

// A fresh iterator over `dataset`.
inline std::unique_ptr<ElementIterator> iterate(const Dataset& dataset) { return dataset.node()->make_iterator(); }

}  // namespace distribute::internal
