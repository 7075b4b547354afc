// TF's nest for C++ values: nested structures of per-replica values.
//
// A structure is a std::tuple or std::pair (fixed by its type), a
// std::vector (a list) or a std::map<std::string, V> (TF's dict), nested
// to any depth; anything else is a leaf. Where TF regroups a structure:
//
//   - Strategy::run of a function returning a tuple, pair or map gives the
//     same structure with a PerReplica at every leaf, so that
//       auto [loss, count] = strategy.run(step);   // two PerReplica
//     works; a std::vector result stays a PerReplica of vectors (index the
//     replica first), as all_reduce's list form is one value;
//   - ReplicaContext::merge_call hands a tuple, pair or map argument to its
//     function regrouped the same way;
//   - Strategy::reduce, ReplicaContext::all_reduce and
//     Strategy::experimental_local_results take tuples, pairs, vectors and
//     maps (of PerReplica, Mirrored or plain values), and PerReplica values
//     of them.
//
// Every replica's value must have the same structure: the same length at
// each vector and the same keys at each map, else InvalidArgumentError
// naming the first difference (its path, e.g. "[1]['bias']", and both
// replicas' lengths or keys).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "distribute/distributed_values.h"
#include "distribute/errors.h"

namespace distribute::nest {

template <class T>
struct is_tuple_like : std::false_type {};
template <class... A>
struct is_tuple_like<std::tuple<A...>> : std::true_type {};
template <class A, class B>
struct is_tuple_like<std::pair<A, B>> : std::true_type {};

template <class T>
struct is_list : std::false_type {};
template <class T, class Alloc>
struct is_list<std::vector<T, Alloc>> : std::true_type {};

template <class T>
struct is_dict : std::false_type {};
template <class V, class C, class Alloc>
struct is_dict<std::map<std::string, V, C, Alloc>> : std::true_type {};

// A tuple, pair, vector or string-keyed map.
template <class T>
inline constexpr bool is_structure_v = is_tuple_like<T>::value || is_list<T>::value || is_dict<T>::value;

// Whether the structure type holds a vector or map anywhere (whose length
// or keys may then differ between replicas).
template <class T>
struct HasDynamicShape : std::bool_constant<is_list<T>::value || is_dict<T>::value> {};
template <class... A>
struct HasDynamicShape<std::tuple<A...>> : std::bool_constant<(HasDynamicShape<A>::value || ...)> {};
template <class A, class B>
struct HasDynamicShape<std::pair<A, B>> : std::bool_constant<HasDynamicShape<A>::value || HasDynamicShape<B>::value> {};
template <class T>
inline constexpr bool has_dynamic_shape_v = HasDynamicShape<T>::value;

// What run() and merge_call regroup: tuples, pairs and maps (not vectors).
template <class T>
inline constexpr bool is_regrouped_v = is_tuple_like<T>::value || is_dict<T>::value;

// --- Regrouping: per-replica structures -> a structure of PerReplica ---------

template <class T>
struct Regrouped {
  using type = PerReplica<T>;
};
template <class... A>
struct Regrouped<std::tuple<A...>> {
  using type = std::tuple<typename Regrouped<A>::type...>;
};
template <class A, class B>
struct Regrouped<std::pair<A, B>> {
  using type = std::pair<typename Regrouped<A>::type, typename Regrouped<B>::type>;
};
template <class V, class C, class Alloc>
struct Regrouped<std::map<std::string, V, C, Alloc>> {
  using type = std::map<std::string, typename Regrouped<V>::type>;
};
template <class T>
using regrouped_t = typename Regrouped<T>::type;

namespace detail {

inline std::string key_list(const std::vector<std::string>& keys) {
  std::string out = "{";
  for (std::size_t i = 0; i < keys.size(); ++i) out += (i > 0 ? ", '" : "'") + keys[i] + "'";
  return out + "}";
}

template <class M>
std::vector<std::string> keys_of(const M& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m) out.push_back(k);
  return out;
}

[[noreturn]] inline void different_lengths(const std::string& what, const std::string& path, std::size_t replica,
                                           std::size_t length, std::size_t first_length) {
  throw InvalidArgumentError(what + ": expected the same structure from every replica, but replica " +
                             std::to_string(replica) + "'s has " + std::to_string(length) + " element(s) at " +
                             (path.empty() ? std::string("the top") : path) + " and replica 0's " +
                             std::to_string(first_length));
}

[[noreturn]] inline void different_keys(const std::string& what, const std::string& path, std::size_t replica,
                                        const std::vector<std::string>& keys, const std::vector<std::string>& first) {
  throw InvalidArgumentError(what + ": expected the same structure from every replica, but replica " +
                             std::to_string(replica) + "'s has keys " + key_list(keys) + " at " +
                             (path.empty() ? std::string("the top") : path) + " and replica 0's " + key_list(first));
}

// The values at one position of every replica's structure.
template <class T>
regrouped_t<T> regroup_at(std::vector<T> values, std::uint64_t origin, const std::string& what,
                          const std::string& path) {
  if constexpr (is_tuple_like<T>::value) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      const auto at = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
        using E = std::tuple_element_t<J, T>;
        std::vector<E> column;
        column.reserve(values.size());
        for (T& v : values) column.push_back(std::move(std::get<J>(v)));
        return regroup_at<E>(std::move(column), origin, what, path + "[" + std::to_string(J) + "]");
      };
      return regrouped_t<T>(at(std::integral_constant<std::size_t, I>{})...);
    }(std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (is_dict<T>::value) {
    using V = typename T::mapped_type;
    const std::vector<std::string> first = keys_of(values[0]);
    for (std::size_t r = 1; r < values.size(); ++r) {
      if (keys_of(values[r]) != first) different_keys(what, path, r, keys_of(values[r]), first);
    }
    regrouped_t<T> out;
    for (const std::string& key : first) {
      std::vector<V> column;
      column.reserve(values.size());
      for (T& v : values) column.push_back(std::move(v.at(key)));
      out.emplace(key, regroup_at<V>(std::move(column), origin, what, path + "['" + key + "']"));
    }
    return out;
  } else {
    return PerReplica<T>(std::move(values), internal::ProducedBy{origin});
  }
}

}  // namespace detail

// Replica r's structure is per_replica[r]; returns the structure with a
// PerReplica (of `origin`, a strategy id, or 0) at every leaf (vectors are
// leaves here). InvalidArgumentError, naming `what` and the first
// difference, unless every replica's maps have the same keys.
template <class T>
regrouped_t<T> regroup(std::vector<T> per_replica, std::uint64_t origin = 0, const std::string& what = "regroup") {
  return detail::regroup_at<T>(std::move(per_replica), origin, what, "");
}

// A PerReplica of vectors as a vector of PerReplica (TF's regroup of a
// list); InvalidArgumentError unless every replica's vector has the same
// length.
template <class T>
std::vector<PerReplica<T>> regroup_list(const PerReplica<std::vector<T>>& value, const std::string& what = "regroup") {
  const auto& values = value.values();
  for (std::size_t r = 1; r < values.size(); ++r) {
    if (values[r].size() != values[0].size()) {
      detail::different_lengths(what, "", r, values[r].size(), values[0].size());
    }
  }
  std::vector<PerReplica<T>> out;
  out.reserve(values[0].size());
  for (std::size_t i = 0; i < values[0].size(); ++i) {
    std::vector<T> column;
    column.reserve(values.size());
    for (const auto& v : values) column.push_back(v[i]);
    out.emplace_back(std::move(column), internal::ProducedBy{value.origin()});
  }
  return out;
}

// --- One replica's view (experimental_local_results) ---------------------------

// The structure with every PerReplica/Mirrored leaf replaced by its value
// type.
template <class T>
struct Unwrapped {
  using type = T;
};
template <class T>
struct Unwrapped<PerReplica<T>> {
  using type = T;
};
template <class T>
struct Unwrapped<Mirrored<T>> {
  using type = T;
};
template <class T>
struct Unwrapped<DistributedValues<T>> {
  using type = T;
};
template <class... A>
struct Unwrapped<std::tuple<A...>> {
  using type = std::tuple<typename Unwrapped<A>::type...>;
};
template <class A, class B>
struct Unwrapped<std::pair<A, B>> {
  using type = std::pair<typename Unwrapped<A>::type, typename Unwrapped<B>::type>;
};
template <class T, class Alloc>
struct Unwrapped<std::vector<T, Alloc>> {
  using type = std::vector<typename Unwrapped<T>::type>;
};
template <class V, class C, class Alloc>
struct Unwrapped<std::map<std::string, V, C, Alloc>> {
  using type = std::map<std::string, typename Unwrapped<V>::type>;
};
template <class T>
using unwrapped_t = typename Unwrapped<T>::type;

// Whether a DistributedValues sits anywhere in the structure type.
template <class T>
inline constexpr bool has_distributed_v = !std::is_same_v<unwrapped_t<T>, T>;

// Local replica r's view of `value`: value r of every DistributedValues
// leaf (InvalidArgumentError when a leaf has fewer values),
// plain leaves as they are.
template <class S>
unwrapped_t<S> select(const S& value, std::size_t r) {
  if constexpr (is_distributed_values_v<S>) {
    if (r >= value.values().size()) {
      throw InvalidArgumentError("experimental_local_results: expected a value per local replica, got " +
                                 std::to_string(value.values().size()) + " value(s) for replica " + std::to_string(r));
    }
    return value.values()[r];
  } else if constexpr (is_tuple_like<S>::value) {
    return std::apply([&](const auto&... e) { return unwrapped_t<S>{select(e, r)...}; }, value);
  } else if constexpr (is_list<S>::value) {
    unwrapped_t<S> out;
    out.reserve(value.size());
    for (const auto& e : value) out.push_back(select(e, r));
    return out;
  } else if constexpr (is_dict<S>::value) {
    unwrapped_t<S> out;
    for (const auto& [k, e] : value) out.emplace(k, select(e, r));
    return out;
  } else {
    return value;
  }
}

// --- Flattening structures of tensors (all_reduce) ----------------------------

// Appends the leaves of `value` (each convertible to const Tensor&) in
// order: tuple elements, vector elements, map values in key order.
template <class S, class Leaf>
void flatten_into(const S& value, std::vector<Leaf>& out) {
  if constexpr (is_tuple_like<S>::value) {
    std::apply([&](const auto&... e) { (flatten_into(e, out), ...); }, value);
  } else if constexpr (is_list<S>::value) {
    for (const auto& e : value) flatten_into(e, out);
  } else if constexpr (is_dict<S>::value) {
    for (const auto& [k, e] : value) flatten_into(e, out);
  } else {
    out.push_back(value);
  }
}

// `like`'s structure with its leaves taken, in order, from leaves[*next].
template <class S, class Leaf>
S pack_like(const S& like, std::vector<Leaf>& leaves, std::size_t& next) {
  if constexpr (is_tuple_like<S>::value) {
    return std::apply([&](const auto&... e) { return S{pack_like(e, leaves, next)...}; }, like);
  } else if constexpr (is_list<S>::value) {
    S out;
    out.reserve(like.size());
    for (const auto& e : like) out.push_back(pack_like(e, leaves, next));
    return out;
  } else if constexpr (is_dict<S>::value) {
    S out;
    for (const auto& [k, e] : like) out.emplace(k, pack_like(e, leaves, next));
    return out;
  } else {
    return S(std::move(leaves.at(next++)));
  }
}

// A description of the structure's shape (lengths and keys, not the
// leaves), the same on replicas whose structures match.
template <class S>
void describe_shape(const S& value, std::string& out) {
  if constexpr (is_tuple_like<S>::value) {
    out += "(";
    std::apply([&](const auto&... e) { ((describe_shape(e, out), out += ","), ...); }, value);
    out += ")";
  } else if constexpr (is_list<S>::value) {
    out += "[" + std::to_string(value.size()) + ":";
    for (const auto& e : value) describe_shape(e, out);
    out += "]";
  } else if constexpr (is_dict<S>::value) {
    out += "{";
    for (const auto& [k, e] : value) {
      out += std::to_string(k.size()) + ":" + k + "=";
      describe_shape(e, out);
    }
    out += "}";
  } else {
    out += "T";
  }
}

}  // namespace distribute::nest
