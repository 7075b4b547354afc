// DistributedValues: one value per replica.
//
//   PerReplica<T>  unsynchronized values, e.g. each replica's slice of a batch,
//                  or what Strategy::run returns.
//   Mirrored<T>    values known to be identical on every replica, e.g. model
//                  weights; reading any replica's copy is safe anywhere.
//
// Values are kept in replica order (index = replica_id_in_sync_group for the
// replicas of this process). A DistributedValues is an immutable value type:
// it may be read from any number of threads at once.
//
// Printed in TF's layout:
//   PerReplica:{
//     0: Tensor([5.], shape=(1,), dtype=float32),
//     1: Tensor([6.], shape=(1,), dtype=float32)
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "distribute/errors.h"

namespace distribute {

namespace internal {
// Marks values produced by a strategy (its run, its distributed datasets):
// the strategy's id (Strategy::id(), never reused in a process).
struct ProducedBy {
  std::uint64_t strategy_id = 0;
};
}  // namespace internal

template <class T>
class DistributedValues {
 public:
  using value_type = T;
  // const T&, or bool for DistributedValues<bool> (std::vector<bool>).
  using const_reference = typename std::vector<T>::const_reference;

  // InvalidArgumentError when `values` is empty.
  explicit DistributedValues(std::vector<T> values) : values_(std::move(values)) {
    if (values_.empty()) {
      throw InvalidArgumentError("DistributedValues: expected one value per replica (at least one), got none");
    }
  }
  // Values produced by a strategy (library use): they remember it, and
  // another strategy's run, reduce or gather rejects them.
  DistributedValues(std::vector<T> values, internal::ProducedBy by) : DistributedValues(std::move(values)) {
    origin_ = by.strategy_id;
  }

  // The id of the strategy that produced these values (Strategy::id()), or
  // 0 for values built by hand, which any strategy of their size accepts.
  std::uint64_t origin() const noexcept { return origin_; }

  // The values in replica order.
  const std::vector<T>& values() const noexcept { return values_; }
  // Number of values (= local replicas).
  int size() const noexcept { return static_cast<int>(values_.size()); }
  // The value of replica `replica`; InvalidArgumentError when out of range.
  const_reference at(int replica) const {
    if (replica < 0 || replica >= size()) {
      throw InvalidArgumentError("DistributedValues: expected a replica index in [0, " + std::to_string(size()) +
                                 "), got " + std::to_string(replica));
    }
    return values_[static_cast<std::size_t>(replica)];
  }
  const_reference operator[](int replica) const { return at(replica); }
  // The value of replica 0.
  const_reference primary() const noexcept { return values_.front(); }

  auto begin() const noexcept { return values_.begin(); }
  auto end() const noexcept { return values_.end(); }

  // Equal values (wherever they came from).
  friend bool operator==(const DistributedValues& a, const DistributedValues& b) { return a.values_ == b.values_; }

 protected:
  std::vector<T> values_;
  std::uint64_t origin_ = 0;
};

template <class T>
class PerReplica : public DistributedValues<T> {
 public:
  static constexpr std::string_view kClassName = "PerReplica";
  using DistributedValues<T>::DistributedValues;
};

template <class T>
class Mirrored : public DistributedValues<T> {
 public:
  static constexpr std::string_view kClassName = "Mirrored";
  using DistributedValues<T>::DistributedValues;
};

// True for PerReplica<U>, Mirrored<U> and DistributedValues<U>.
template <class T>
struct is_distributed_values : std::false_type {};
template <class T>
struct is_distributed_values<DistributedValues<T>> : std::true_type {};
template <class T>
struct is_distributed_values<PerReplica<T>> : std::true_type {};
template <class T>
struct is_distributed_values<Mirrored<T>> : std::true_type {};
template <class T>
inline constexpr bool is_distributed_values_v = is_distributed_values<std::remove_cvref_t<T>>::value;

namespace internal {
template <class DV>
void print_distributed(std::ostream& os, const DV& dv) {
  os << DV::kClassName << ":{\n";
  for (int i = 0; i < dv.size(); ++i) {
    os << "  " << i << ": " << dv.values()[static_cast<std::size_t>(i)] << (i + 1 < dv.size() ? ",\n" : "\n");
  }
  os << "}";
}
}  // namespace internal

template <class T>
std::ostream& operator<<(std::ostream& os, const PerReplica<T>& v) {
  internal::print_distributed(os, v);
  return os;
}
template <class T>
std::ostream& operator<<(std::ostream& os, const Mirrored<T>& v) {
  internal::print_distributed(os, v);
  return os;
}

// The printed form as a string.
template <class DV>
  requires is_distributed_values_v<DV>
std::string to_string(const DV& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace distribute
