// InputRange: range-for support over anything with get_next_as_optional()
// (or next_in_loop(), when it has one).
#pragma once

#include <cstddef>
#include <iterator>
#include <memory>
#include <optional>
#include <utility>

namespace distribute::internal {

// An input iterator that owns (shares) the underlying iterator `It` and the
// current value of type T. Equal to the default-constructed end iterator once
// get_next_as_optional() returned std::nullopt.
template <class It, class T>
class InputRange {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = T;
  using difference_type = std::ptrdiff_t;
  using pointer = const T*;
  using reference = const T&;

  InputRange() = default;
  explicit InputRange(std::shared_ptr<It> it) : it_(std::move(it)) { ++*this; }

  const T& operator*() const { return *current_; }
  const T* operator->() const { return &*current_; }
  InputRange& operator++() {
    // An iterator whose loop differs from get_next_as_optional (a
    // distributed iterator: TF's `for` uses get_next) says so.
    if constexpr (requires(It& i) { i.next_in_loop(); }) {
      current_ = it_->next_in_loop();
    } else {
      current_ = it_->get_next_as_optional();
    }
    return *this;
  }
  void operator++(int) { ++*this; }
  friend bool operator==(const InputRange& a, const InputRange& b) {
    return a.current_.has_value() == b.current_.has_value();
  }

 private:
  std::shared_ptr<It> it_;
  std::optional<T> current_;
};

}  // namespace distribute::internal
