#include "distribute/element.h"

#include <ostream>

#include "distribute/errors.h"

namespace distribute {

Element::Element(Tensor tensor) : components_{std::move(tensor)}, is_tuple_(false) {}

Element::Element(std::vector<Tensor> components) : components_(std::move(components)), is_tuple_(true) {
  if (components_.empty()) throw InvalidArgumentError("Element: expected a tuple of at least one tensor, got none");
}

const Tensor& Element::operator[](std::size_t i) const {
  if (i >= components_.size()) {
    throw InvalidArgumentError("Element: expected a component index below " + std::to_string(components_.size()) +
                               ", got " + std::to_string(i));
  }
  return components_[i];
}

const Tensor& Element::tensor() const {
  if (is_tuple_) {
    throw InvalidArgumentError("Element: expected a single-tensor element, got a tuple of " +
                               std::to_string(components_.size()) + " components; use element[i]");
  }
  return components_[0];
}

std::string Element::to_string() const {
  if (!is_tuple_) return components_[0].to_string();
  std::string s = "(";
  for (std::size_t i = 0; i < components_.size(); ++i) {
    if (i > 0) s += ", ";
    s += components_[i].to_string();
  }
  if (components_.size() == 1) s += ",";
  return s + ")";
}

std::ostream& operator<<(std::ostream& os, const Element& e) { return os << e.to_string(); }

}  // namespace distribute
