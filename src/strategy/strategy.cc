#include "distribute/strategy.h"

#include <pthread.h>

#include <atomic>
#include <exception>
#include <map>
#include <mutex>

#include "collectives/collective_group.h"
#include "core/mutex.h"
#include "runtime/replica_pool.h"
#include "strategy/context.h"
#include "strategy/strategy_access.h"
#include "transport/cross_worker.h"

namespace distribute {
namespace {

// Keeps the root cause of a run's failures: the reason of the collective
// group's first abort when there was one (every CancelledError of a
// released replica follows from it, even when that replica recorded its
// error first), else the first failure recorded. Nothing when no replica's
// function raised.
class FirstFailure {
 public:
  void record(int replica, std::exception_ptr error) {
    internal::MutexLock lock(mutex_);
    if (error_ == nullptr) {
      error_ = std::move(error);
      replica_ = replica;
    }
  }

  // When a replica's function raised, the group's first abort, if any, is
  // the root cause: it replaces what was recorded (also when the replica
  // that caused it caught its exception and returned normally). When every
  // replica handled its errors, run() returns normally.
  void prefer_abort_cause(const internal::CollectiveGroup& group) {
    int replica = -1;
    std::exception_ptr cause = group.abort_cause(&replica);
    if (cause == nullptr) return;
    internal::MutexLock lock(mutex_);
    if (error_ == nullptr) return;
    error_ = std::move(cause);
    replica_ = replica;
  }

  // Rethrows the recorded failure, its type preserved; a distribute::Error
  // gets the replica id attached (unless a nested run already attached one).
  void rethrow_if_any() {
    std::exception_ptr error;
    int replica = -1;
    {
      internal::MutexLock lock(mutex_);
      error = error_;
      replica = replica_;
    }
    if (error == nullptr) return;
    try {
      std::rethrow_exception(error);
    } catch (Error& e) {
      if (!e.replica_id().has_value()) e.set_replica_id(replica);
      throw;
    }
  }

 private:
  internal::Mutex mutex_;
  std::exception_ptr error_ GUARDED_BY(mutex_);
  int replica_ GUARDED_BY(mutex_) = -1;
};

// Strategies are numbered in the process (ids never reused, so a value of a
// destroyed strategy is never taken for a new one's); their names are kept
// for the messages that name them.
std::uint64_t next_strategy_id() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1);
}
struct StrategyNames {
  internal::Mutex mutex;
  std::map<std::uint64_t, std::string> by_id GUARDED_BY(mutex);
  // The liveness flags handed out (StrategyAccess::liveness), of living
  // strategies only.
  std::map<std::uint64_t, std::shared_ptr<std::atomic<bool>>> alive GUARDED_BY(mutex);
};
// Never destroyed (a child's exit may come while it was being updated at
// the fork), and held across every fork (pthread_atfork), so that a child
// forked without exec finds it unlocked and whole, and can build strategies
// of its own.
StrategyNames* names_instance = nullptr;
void lock_names_for_fork() NO_THREAD_SAFETY_ANALYSIS { names_instance->mutex.lock(); }
void unlock_names_after_fork() NO_THREAD_SAFETY_ANALYSIS { names_instance->mutex.unlock(); }
StrategyNames& strategy_names() {
  static StrategyNames* const names = [] {
    names_instance = new StrategyNames;
    ::pthread_atfork(lock_names_for_fork, unlock_names_after_fork, unlock_names_after_fork);
    return names_instance;
  }();
  return *names;
}

// "replica 3 failed: <what>" for another worker's error message.
std::string failure_message(int replica, const std::exception_ptr& error) {
  std::string what;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "an exception that is not a std::exception";
  }
  return "local replica " + std::to_string(replica) + " failed: " + what;
}

bool is_workers_mismatch(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const internal::WorkersMismatchError&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

std::string_view Strategy::kind_name(Kind kind) {
  switch (kind) {
    case Kind::kDefault: return "DefaultStrategy";
    case Kind::kOneDevice: return "OneDeviceStrategy";
    case Kind::kMirrored: return "MirroredStrategy";
    case Kind::kMultiWorker: return "MultiWorkerMirroredStrategy";
  }
  return "Strategy";
}

int ReplicaContext::num_replicas_in_sync() const noexcept { return strategy_->num_replicas_in_sync(); }

int ReplicaContext::replica_id_in_sync_group() const noexcept {
  return strategy_->worker_index() * strategy_->num_local_replicas() + replica_id_;
}

Strategy::Strategy(Kind kind, std::vector<DeviceSpec> devices, CommunicationOptions options,
                   std::shared_ptr<internal::CrossWorker> cross_worker, ReplicaExecution execution)
    : kind_(kind),
      id_(next_strategy_id()),
      devices_(std::move(devices)),
      communication_options_(options),
      cross_worker_(std::move(cross_worker)) {
  if (cross_worker_ != nullptr) {
    num_workers_ = cross_worker_->num_workers();
    worker_index_ = cross_worker_->worker_index();
    is_chief_ = worker_index_ == 0;  // until MultiWorkerMirroredStrategy applies TF's rules (decide_chief)
  }
  if (!communication_options_.timeout_seconds.has_value()) communication_options_.timeout_seconds = 60.0;
  if (!(*communication_options_.timeout_seconds > 0)) {
    throw InvalidArgumentError("CommunicationOptions: expected timeout_seconds > 0, got " +
                               std::to_string(*communication_options_.timeout_seconds));
  }
  if (communication_options_.bytes_per_pack < 0) {
    throw InvalidArgumentError("CommunicationOptions: expected bytes_per_pack >= 0, got " +
                               std::to_string(communication_options_.bytes_per_pack));
  }
  if (devices_.empty()) {
    throw InvalidArgumentError(std::string(kind_name(kind_)) +
                               ": expected at least one device, got an empty list");
  }
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (devices_[i] == devices_[j]) {
        throw InvalidArgumentError(std::string(kind_name(kind_)) +
                                   ": expected distinct devices, got " + devices_[i].short_name() + " at positions " +
                                   std::to_string(j) + " and " + std::to_string(i));
      }
    }
  }
  replica_contexts_.reserve(devices_.size());
  for (std::size_t r = 0; r < devices_.size(); ++r) {
    replica_contexts_.push_back(std::unique_ptr<ReplicaContext>(new ReplicaContext(*this, static_cast<int>(r))));
  }
  pool_ = std::make_unique<internal::ReplicaPool>(num_local_replicas(), "replica-",
                                                  execution == ReplicaExecution::FIBERS);
  collectives_ = std::make_unique<internal::CollectiveGroup>(num_local_replicas(), cross_worker_.get(),
                                                             pool_->num_threads());
  StrategyNames& names = strategy_names();
  internal::MutexLock lock(names.mutex);
  names.by_id[id_] = to_string();
}

Strategy::~Strategy() {
  if (owner_process_.forked_child()) {
    // A forked child's copy: the replica threads, the collectives' waiters
    // and the channel to the other workers are its parent's, and another
    // thread of the parent may have held any of their locks at the fork: all
    // of it is left as it is (the name stays registered: harmless).
    (void)collectives_.release();
    (void)pool_.release();
    (void)new std::shared_ptr<internal::CrossWorker>(std::move(cross_worker_));
    return;
  }
  StrategyNames& names = strategy_names();
  internal::MutexLock lock(names.mutex);
  auto it = names.by_id.find(id_);
  if (it != names.by_id.end()) it->second += ", destroyed";
  if (auto flag = names.alive.find(id_); flag != names.alive.end()) {
    flag->second->store(false, std::memory_order_release);
    names.alive.erase(flag);
  }
}

std::shared_ptr<const std::atomic<bool>> internal::StrategyAccess::liveness(const Strategy& s) {
  StrategyNames& names = strategy_names();
  internal::MutexLock lock(names.mutex);
  std::shared_ptr<std::atomic<bool>>& flag = names.alive[s.id()];
  if (flag == nullptr) flag = std::make_shared<std::atomic<bool>>(true);
  return flag;
}

std::string internal::StrategyAccess::name_of(std::uint64_t id) {
  StrategyNames& names = strategy_names();
  internal::MutexLock lock(names.mutex);
  auto it = names.by_id.find(id);
  return (it != names.by_id.end() ? it->second : std::string("an unknown strategy")) + " (strategy #" +
         std::to_string(id) + ")";
}

void Strategy::check_origin(std::uint64_t origin, const std::string& what) const {
  if (origin == 0 || origin == id_) return;
  std::string other;
  {
    StrategyNames& names = strategy_names();
    internal::MutexLock lock(names.mutex);
    auto it = names.by_id.find(origin);
    other = it != names.by_id.end() ? it->second : "an unknown strategy";
  }
  throw InvalidArgumentError(what + ": expected values of this strategy, " + to_string() + " (strategy #" +
                             std::to_string(id_) + "), got values produced by another one, " + other +
                             " (strategy #" + std::to_string(origin) + "); a strategy's PerReplica values (the "
                             "results of its run, the steps of its distributed datasets) belong to it: to move "
                             "them, build a new PerReplica from experimental_local_results(value)");
}

std::string Strategy::to_string() const {
  std::string s(kind_name(kind_));
  if (kind_ == Kind::kDefault) return s;
  s += "(";
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    if (i > 0) s += ", ";
    s += devices_[i].short_name();
  }
  return s + ")";
}

void Strategy::require_cross_replica_or_default_context(std::string_view method) const {
  const internal::ThreadMode* top = internal::current_mode();
  if (top == nullptr) return;  // the default state allows every cross-replica call
  if (top->strategy == this && top->replica == nullptr) return;
  const std::string call = "Strategy::" + std::string(method);
  if (top->strategy != this) {
    if (top->strategy->is_default()) {
      throw FailedPreconditionError(call + " of " + to_string() + " needs to be called inside \"strategy.scope()\" of " +
                                    "that strategy or outside any scope, but this thread is in the scope of the " +
                                    "default strategy");
    }
    std::string mismatch = "Mixing different tf.distribute.Strategy objects: " + call + " of " + to_string() +
                           " was called while " + top->strategy->to_string() + " is current";
    if (top->strategy->to_string() == to_string()) mismatch += " (a different object with the same devices)";
    if (top->replica != nullptr) {
      mismatch += ", inside its replica function (replica " + std::to_string(top->replica->replica_id_in_sync_group()) +
                  ")";
    }
    throw FailedPreconditionError(mismatch);
  }
  throw FailedPreconditionError(call + " requires being in cross-replica context, but was called from the replica " +
                                "function of replica " + std::to_string(top->replica->replica_id_in_sync_group()) +
                                " of " + to_string() + "; inside a replica function use " +
                                (method == "gather" ? "get_replica_context()->all_gather()"
                                                    : "get_replica_context()->merge_call()") +
                                " instead");
}

void Strategy::check_replica_count(std::size_t values, std::size_t argument_index) const {
  if (values != devices_.size()) {
    throw InvalidArgumentError("Strategy::run: expected argument " + std::to_string(argument_index) +
                               " to hold one value per replica (" + std::to_string(devices_.size()) + " for " +
                               to_string() + "), got " + std::to_string(values) + " values");
  }
}

void Strategy::run_replicas(internal::FunctionRef<void(int)> body) {
  if (owner_process_.forked_child()) {
    throw FailedPreconditionError(
        "Strategy::run: " + to_string() + " was created in the parent of this process, which was forked "
        "from it without exec: expected a strategy created in this process (a fork copies none of the replica "
        "threads and none of the links to the other workers), got the parent's copy; create the strategy after "
        "the fork, or start the child with exec (Python's multiprocessing 'spawn' or 'forkserver')");
  }
  FirstFailure failure;
  auto fail = [&](int r, std::exception_ptr error) noexcept {
    failure.record(r, error);
    // Tells the other workers at once (their waits raise UnavailableError).
    // (Not a mismatch every worker found: they all raise it themselves.)
    if (cross_worker_ != nullptr && !is_workers_mismatch(error)) {
      cross_worker_->report_failure(failure_message(r, error));
    }
    // Releases the replicas waiting for this one in a collective.
    collectives_->abort(r, std::move(error));
  };
  auto task = [&](int r) noexcept {
    internal::FiberModeStack own_modes;
    try {
      internal::push_mode({this, replica_contexts_[static_cast<std::size_t>(r)].get()});
    } catch (...) {
      failure.record(r, std::current_exception());
      collectives_->abort(r, std::current_exception());
      return;
    }
    try {
      body(r);
      collectives_->finish(r);
    } catch (...) {
      fail(r, std::current_exception());
    }
    internal::pop_mode();
  };
  // The abort cause is read before the next run (another thread's) can
  // reset the group. An interrupt of the caller's wait for the other
  // replicas (distribute/interrupt.h) fails the run as a failure of the
  // caller's replica 0 would.
  pool_->run(
      task, [this] { collectives_->reset(); }, [&] { failure.prefer_abort_cause(*collectives_); },
      [&](std::exception_ptr error) { fail(0, std::move(error)); });
  failure.rethrow_if_any();
}

}  // namespace distribute
