// Helpers shared by batch, rebatch and the distributed iterator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "distribute/dataset.h"
#include "distribute/element.h"

namespace distribute::internal {

// Stacks elements component-wise along a new axis 0. `first_index` is the
// position of rows[0] in the input stream, for error messages. Raises
// InvalidArgumentError when structures, shapes or dtypes differ, naming the
// element index and both shapes.
Element stack_elements(const std::vector<Element>& rows, std::int64_t first_index, const char* op);

class ElementIterator;

// Up to `n` rows for a batch: the rows in `pending` (kept there when the
// input throws, so only the failing element is lost) topped up from
// `input`, handed over (`pending` left empty). `first` is set to the
// stream position of the first row and `consumed` advanced past the last.
// Empty at the end of the input.
std::vector<Element> take_batch_rows(ElementIterator& input, std::int64_t n, std::vector<Element>& pending,
                                     std::int64_t& consumed, std::int64_t& first);

// Concatenates batched elements component-wise along axis 0 (zero-copy for
// adjacent slices).
Element concat_elements(const std::vector<Element>& parts);

// Rows [begin, end) of every component (zero-copy).
Element slice_element(const Element& e, std::int64_t begin, std::int64_t end);

// Size along axis 0, checked to be the same for every component.
std::int64_t batch_dim(const Element& e, const char* op);

// Dataset::rebatch(batch_sizes) as experimental_distribute_dataset uses it:
// the sizes are checked as Dataset::rebatch checks them (those errors name
// Dataset::rebatch), the elements' errors name experimental_distribute_dataset.
Dataset rebatch_for_distribution(const Dataset& dataset, std::vector<std::int64_t> batch_sizes);

// An element like `like` with 0 rows in every component (TF's dummy value for
// replicas without data): rank >= 1 components get first dimension 0,
// scalars become zeros of the same dtype.
Element empty_like(const Element& like);

}  // namespace distribute::internal
