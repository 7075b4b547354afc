// The nodes behind Dataset: each transformation is a node holding its input
// node; make_iterator() builds the chain of iterators for one iteration.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "distribute/dataset.h"

namespace distribute::internal {

// One iteration over a dataset. Single consumer.
class ElementIterator {
 public:
  virtual ~ElementIterator() = default;
  // The next element, or std::nullopt at the end. May throw (see dataset.h);
  // after a throw the iterator stays usable.
  virtual std::optional<Element> next() = 0;
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

}  // namespace distribute::internal
