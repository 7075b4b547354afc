// What the layers above the strategy (variables, checkpoints) need of a
// Strategy beyond its public API: its kind and the cross-worker helpers.
// One narrow door instead of befriending each of those classes.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "distribute/strategy.h"

namespace distribute::internal {

class StrategyAccess {
 public:
  // Whether variables created in its scope are distributed (a mirrored or
  // multi-worker strategy).
  static bool distributes_variables(const Strategy& s) {
    return s.kind_ == Strategy::Kind::kMirrored || s.kind_ == Strategy::Kind::kMultiWorker;
  }
  // The number of the next variable created under it (multi-worker checks).
  static int next_variable_number(Strategy& s) { return s.variables_created_++; }

  static void check_same_on_workers(Strategy& s, const std::string& what, const std::string& description) {
    s.check_same_on_workers(what, description);
  }
  static Tensor broadcast_from_chief(Strategy& s, const Tensor& value) { return s.broadcast_from_chief(value); }
  static Tensor sum_over_workers(Strategy& s, const Tensor& value) { return s.sum_over_workers(value); }
  // The transport's count of all_reduces summed in place in shared
  // allocations (0 without other workers).
  static std::uint64_t shared_in_place_sums(const Strategy& s);
  // What carries the workers' all_reduce (CrossWorker::transport), or
  // "none" without other workers.
  static std::string cross_worker_transport(const Strategy& s);
  static Tensor gather_over_workers(Strategy& s, const Tensor& value, int axis, const char* what = "gather") {
    return s.gather_over_workers(value, axis, what);
  }
  static std::string text_from_chief(Strategy& s, const std::string& text, const char* what) {
    return s.text_from_chief(text, what);
  }
  // A flag that is true while `s` lives and false from its destruction on,
  // for objects that keep a pointer to it and may outlive it (variables):
  // they check it before using the pointer. (A later strategy may live at
  // the same address: the flag, not the address, says which one is meant.)
  static std::shared_ptr<const std::atomic<bool>> liveness(const Strategy& s);
  // "MirroredStrategy(CPU:0, CPU:1), destroyed (strategy #3)" for a
  // strategy's id, living or not.
  static std::string name_of(std::uint64_t id);
};

}  // namespace distribute::internal
