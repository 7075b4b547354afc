// MultiWorkerMirroredStrategy and the strategy's calls that reach the other
// workers.
#include <algorithm>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "collectives/cross_worker_ops.h"
#include "distribute/strategies.h"
#include "runtime/deadline.h"
#include "runtime/replica_pool.h"
#include "strategy/strategy_access.h"
#include "transport/cross_worker.h"

namespace distribute {
namespace {

std::vector<DeviceSpec> local_devices(const MultiWorkerOptions& options) {
  if (options.local_devices.empty()) return {{"CPU", 0}};
  std::vector<DeviceSpec> devices;
  for (const std::string& name : options.local_devices) devices.push_back(parse_device(name));
  return devices;
}

// A cross-replica call's deadline: the timeout from now, capped inside a
// merge_call's function by that merge_call's (internal::ScopedDeadlineCap).
internal::CrossWorker::Clock::time_point deadline_of(const CommunicationOptions& options) {
  return std::min(internal::deadline_after(*options.timeout_seconds), internal::t_deadline_cap);
}

std::shared_ptr<internal::CrossWorker> required(std::shared_ptr<internal::CrossWorker> transport) {
  if (transport == nullptr) throw InvalidArgumentError("MultiWorkerMirroredStrategy: expected a transport, got none");
  return transport;
}

// What the transport needs of the options. Also checks the environment the
// replica pool reads (a bad value raises here, on this worker alone, before
// the start-up exchange rather than after it, with the others waiting; the
// constructor given a transport checks it only when it builds a pool with
// threads).
internal::ChannelOptions channel_options(const MultiWorkerOptions& options) {
  (void)internal::idle_spin_max();
  return {options.startup_timeout_seconds, options.mpi_communicator, options.shared_memory};
}

// Cross-replica calls have no local replicas to be cancelled by.
constexpr auto never = [] { return false; };

}  // namespace

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy() : MultiWorkerMirroredStrategy(MultiWorkerOptions{}) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(const MultiWorkerOptions& options)
    : MultiWorkerMirroredStrategy(options, internal::make_mpi_cross_worker(channel_options(options))) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(const MultiWorkerOptions& options,
                                                         std::shared_ptr<internal::CrossWorker> transport)
    : Strategy(Kind::kMultiWorker, local_devices(options), options.communication, required(std::move(transport))) {
  decide_chief(options);
  // Every worker must run as many replicas (TF: "tf.distribute expects every
  // worker to have the same number of replicas"); every worker checks.
  const Tensor counts = gather_over_workers(Tensor{static_cast<std::int64_t>(num_local_replicas())}, 0,
                                            "start-up (every worker's replica count)");
  for (int w = 0; w < num_workers(); ++w) {
    const std::int64_t c = counts.data<std::int64_t>()[static_cast<std::size_t>(w)];
    if (c != num_local_replicas()) {
      throw InvalidArgumentError("MultiWorkerMirroredStrategy: expected every worker to have the same number of "
                                 "local replicas, got " + std::to_string(num_local_replicas()) + " on worker " +
                                 std::to_string(worker_index()) + " and " + std::to_string(c) + " on worker " +
                                 std::to_string(w));
    }
  }
}

MultiWorkerMirroredStrategy::~MultiWorkerMirroredStrategy() { leave_workers(); }

void Strategy::decide_chief(const MultiWorkerOptions& options) {
  ClusterEnvironment environment = read_cluster_environment();
  if (options.cluster_resolver.has_value()) environment.tf_config = options.cluster_resolver;
  if (!cross_worker_->ranks_are_the_launchers()) environment.launcher.reset();
  is_chief_ = reconcile_cluster(environment, cross_worker_->worker_index(), cross_worker_->num_workers()).is_chief;
}

void Strategy::leave_workers() noexcept {
  if (cross_worker_ != nullptr) cross_worker_->close();
}

Tensor Strategy::sum_over_workers(const Tensor& value) {
  if (cross_worker_ == nullptr) return value;
  return internal::sum_over_workers(*cross_worker_, "reduce", value, deadline_of(communication_options_), never);
}

std::vector<std::shared_ptr<std::byte>> Strategy::experimental_allocate_shared(std::size_t bytes) {
  require_cross_replica_or_default_context("experimental_allocate_shared");
  std::vector<std::shared_ptr<std::byte>> out;
  if (cross_worker_ != nullptr && num_local_replicas() == 1) {
    std::shared_ptr<std::byte> region =
        cross_worker_->allocate_shared("experimental_allocate_shared", bytes, deadline_of(communication_options_));
    if (region != nullptr) {
      out.push_back(std::move(region));
      return out;
    }
  }
  for (int r = 0; r < num_local_replicas(); ++r) {
    // (new[] of std::byte is aligned for any fundamental type; value-initialized: zero)
    out.push_back(std::shared_ptr<std::byte>(new std::byte[std::max<std::size_t>(bytes, 1)](),
                                             std::default_delete<std::byte[]>()));
  }
  return out;
}

std::uint64_t internal::StrategyAccess::shared_in_place_sums(const Strategy& s) {
  return s.cross_worker_ != nullptr ? s.cross_worker_->shared_in_place_sums() : 0;
}

std::string internal::StrategyAccess::cross_worker_transport(const Strategy& s) {
  return s.cross_worker_ != nullptr ? s.cross_worker_->transport() : "none";
}

Tensor Strategy::broadcast_from_chief(const Tensor& value) {
  if (cross_worker_ == nullptr) return value;
  return internal::broadcast_from_worker0(*cross_worker_, "broadcast from the chief", value,
                                          deadline_of(communication_options_), never);
}

Tensor Strategy::gather_over_workers(const Tensor& value, int axis, const char* what) {
  if (cross_worker_ == nullptr) return value;
  return internal::gather_over_workers(*cross_worker_, what, value, axis, deadline_of(communication_options_),
                                       never);
}

std::string Strategy::text_from_chief(const std::string& text, const char* what) {
  if (cross_worker_ == nullptr) return text;
  // An all_gather, as the sizes differ: only the chief's (worker 0's) bytes
  // are sent, the others send none.
  const std::string_view mine = cross_worker_->worker_index() == 0 ? std::string_view(text) : std::string_view();
  const auto all = cross_worker_->all_gather(
      what, std::span<const std::byte>(reinterpret_cast<const std::byte*>(mine.data()), mine.size()),
      deadline_of(communication_options_), never);
  return std::string(reinterpret_cast<const char*>(all[0].data()), all[0].size());
}

void Strategy::check_same_on_workers(const std::string& what, const std::string& description) {
  if (cross_worker_ == nullptr) return;
  const auto* bytes = reinterpret_cast<const std::byte*>(description.data());
  const auto all = cross_worker_->all_gather(what.c_str(), std::span<const std::byte>(bytes, description.size()),
                                             deadline_of(communication_options_), never);
  auto text = [&](std::size_t w) {
    return std::string(reinterpret_cast<const char*>(all[w].data()), all[w].size());
  };
  for (std::size_t w = 1; w < all.size(); ++w) {
    if (all[w] != all[0]) {
      throw InvalidArgumentError("the workers differ in " + what + ": " + text(0) + " on worker 0 vs " + text(w) +
                                 " on worker " + std::to_string(w) + "; every worker must create the same variables "
                                 "in the same order");
    }
  }
}

}  // namespace distribute
