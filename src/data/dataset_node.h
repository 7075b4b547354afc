// The nodes behind Dataset: each transformation is a node holding its input
// node; make_iterator() builds the chain of iterators for one iteration.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distribute/dataset.h"

namespace distribute::internal {

// One iteration over a dataset. Single consumer.
class ElementIterator {
 public:
  virtual ~ElementIterator() = default;
  // The next element, or std::nullopt at the end. May throw (see dataset.h);
  // after a throw the iterator stays usable.
  virtual std::optional<Element> next() = 0;
  // Up to `n` consecutive elements stacked into one batch (fewer at the end
  // of the input, nullopt when none is left), as Dataset::batch builds them.
  // `pending` holds the rows gathered so far; it survives an exception from
  // upstream so that only the failing element is lost, and is empty on
  // return. `consumed` counts the elements taken so far (for error
  // messages) and is advanced by the rows taken. Sources that hold their
  // rows contiguously override this with a zero-copy slice, so batching them
  // costs no per-row work.
  virtual std::optional<Element> next_batch(std::int64_t n, std::vector<Element>& pending, std::int64_t& consumed);
};


class DatasetNode {
 public:
  virtual ~DatasetNode() = default;
  virtual std::unique_ptr<ElementIterator> make_iterator() const = 0;
  // TF's compute_batch_size: the batch size, when the pipeline ends in a
  // known batch; nullopt otherwise.
  virtual std::optional<std::int64_t> static_batch_size() const { return std::nullopt; }
  virtual std::string describe() const = 0;
};

// A fresh iterator over `dataset`.
inline std::unique_ptr<ElementIterator> iterate(const Dataset& dataset) { return dataset.node()->make_iterator(); }

}  // namespace distribute::internal
