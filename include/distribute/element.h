// Element: one element of a Dataset, a Tensor or a tuple of Tensors such as
// (features, labels).
#pragma once

#include <cstddef>
#include <iosfwd>
#include <string>
#include <vector>

#include "distribute/tensor.h"

namespace distribute {

class Element {
 public:
  // A single-tensor element (implicit, so a function returning a Tensor can
  // serve where an Element is expected).
  Element(Tensor tensor);  // NOLINT(google-explicit-constructor)
  // A tuple element of one or more components; InvalidArgumentError when empty.
  explicit Element(std::vector<Tensor> components);
  static Element tuple(std::vector<Tensor> components) { return Element(std::move(components)); }
  // An element of the same kind as this one (single or tuple) holding
  // `components` (one for a single-tensor element).
  Element with_components(std::vector<Tensor> components) const {
    return is_tuple_ ? Element(std::move(components)) : Element(std::move(components.at(0)));
  }

  bool is_tuple() const noexcept { return is_tuple_; }
  // Number of components (1 for a single tensor).
  std::size_t size() const noexcept { return components_.size(); }
  const std::vector<Tensor>& components() const noexcept { return components_; }
  // Component i; InvalidArgumentError when out of range.
  const Tensor& operator[](std::size_t i) const;
  // The tensor of a single-tensor element; InvalidArgumentError for a tuple.
  const Tensor& tensor() const;
  // So that a function taking `const Tensor&` accepts a single-tensor element.
  operator const Tensor&() const { return tensor(); }  // NOLINT(google-explicit-constructor)

  friend bool operator==(const Element& a, const Element& b) {
    return a.is_tuple_ == b.is_tuple_ && a.components_ == b.components_;
  }

  // "Tensor(...)" for a single tensor, "(Tensor(...), Tensor(...))" for a tuple.
  std::string to_string() const;

 private:
  std::vector<Tensor> components_;
  bool is_tuple_;
};

std::ostream& operator<<(std::ostream& os, const Element& e);

}  // namespace distribute
