#include "runtime/replica_pool.h"

#include <pthread.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string>
#include <system_error>

#include "distribute/errors.h"
#include "runtime/cpu_count.h"
#include "runtime/interrupt.h"

namespace distribute::internal {

namespace {
// A fiber's stack: reserved address space, committed as it is touched, as
// large as a thread's default stack.
constexpr std::size_t kFiberStackBytes = 8u << 20;
}  // namespace

ReplicaPool::ReplicaPool(int num_replicas, const std::string& name_prefix, bool fibers)
    : num_replicas_(num_replicas), idle_max_(num_replicas > 1 ? idle_spin_max() : std::chrono::microseconds(0)) {
  const unsigned cores = std::max(1u, usable_cores());
  int threads = num_replicas;
  if (fibers && static_cast<unsigned>(num_replicas) > cores) {
    threads = static_cast<int>(cores);
    for (int t = 0; t < threads; ++t) {
      std::vector<int> replicas;
      for (int r = t; r < num_replicas; r += threads) replicas.push_back(r);
      fiber_threads_.push_back(std::make_unique<FiberThread>(std::move(replicas), kFiberStackBytes));
    }
  }
  // With more busy threads than cores, spinning must give the core away.
  policy_.yield = static_cast<unsigned>(threads) > cores;
  threads_.reserve(static_cast<std::size_t>(std::max(0, threads - 1)));
  for (int r = 1; r < threads; ++r) {
    threads_.emplace_back([this, r] { worker_loop(r); });
    // Thread names are limited to 15 characters; failure is harmless.
    const std::string name = (name_prefix + std::to_string(r)).substr(0, 15);
    pthread_setname_np(threads_.back().native_handle(), name.c_str());
  }
}

ReplicaPool::~ReplicaPool() {
  stopping_ = true;
  task_ = nullptr;
  generation_.notify_add(1);
  for (auto& t : threads_) t.join();
}

void ReplicaPool::run(FunctionRef<void(int)> task, FunctionRef<void()> prologue, FunctionRef<void()> epilogue,
                      FunctionRef<void(std::exception_ptr)> interrupted) {
  if (num_replicas_ == 1 && owner_.load(std::memory_order_relaxed) == std::this_thread::get_id()) {
    // A nested call from this pool's own replica 0 (the default strategy
    // allows run() inside its replica function): nothing to hand off.
    task(0);
    return;
  }
  // One run() at a time. A caller that waits for another thread's run
  // polls its interrupt check meanwhile (Ctrl-C from Python): that run may
  // last as long as its replica functions do.
  // (try_lock and short sleeps, not a timed lock: GCC 12's ThreadSanitizer
  // does not intercept pthread_mutex_clocklock, which timed_mutex uses.)
  std::unique_lock<std::mutex> lock(run_mutex_, std::defer_lock);
  if (!lock.try_lock()) {
    InterruptPoll poll;
    if (!poll.active()) {
      lock.lock();
    } else {
      while (!lock.try_lock()) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        poll.poll();
      }
    }
  }
  owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  struct ClearOwner {
    std::atomic<std::thread::id>& owner;
    ~ClearOwner() { owner.store(std::thread::id(), std::memory_order_relaxed); }
  } clear_owner{owner_};
  prologue();
  const int threads = num_threads();
  if (threads > 1) {
    task_ = &task;
    remaining_.notify_value(static_cast<std::uint32_t>(threads - 1));
    generation_.notify_add(1);
  }
  if (uses_fibers()) {
    fiber_threads_[0]->run(task);
  } else {
    task(0);
  }
  if (threads > 1) {
    wait_for_replicas(interrupted);
    task_ = nullptr;
  }
  epilogue();
}

void ReplicaPool::wait_for_replicas(FunctionRef<void(std::exception_ptr)> interrupted) {
  InterruptPoll poll;
  std::uint32_t left = remaining_.load();
  while (left != 0) {
    if (!poll.active()) {
      left = remaining_.wait_while_equal(left, policy_);
      continue;
    }
    if (remaining_.wait_while_equal_until(left, policy_, poll.slice_end(InterruptPoll::Clock::time_point::max()),
                                          &left)) {
      continue;
    }
    try {
      poll.poll();
    } catch (...) {
      poll.disable();
      interrupted(std::current_exception());
    }
  }
}

SpinPolicy IdleSpin::policy() const noexcept {
  if (base_.yield || max_ <= base_.spin_for) return base_;
  std::chrono::nanoseconds longest{0};
  for (const std::chrono::nanoseconds gap : gaps_) {
    if (gap <= max_) longest = std::max(longest, gap);
  }
  if (longest + longest / 2 <= base_.spin_for) return base_;
  SpinPolicy policy = base_;
  policy.spin_for = std::min<std::chrono::nanoseconds>(longest + longest / 2, max_);
  policy.yield_after = base_.spin_for;
  policy.may_keep_spinning = &IdleSpin::runnable_threads_fit_cpus_lately;
  return policy;
}

bool IdleSpin::runnable_threads_fit_cpus_lately() noexcept {
  // Per thread: the answer and when it was read.
  thread_local std::chrono::steady_clock::time_point read_at{};
  thread_local bool fit = false;
  const auto now = std::chrono::steady_clock::now();
  if (read_at == std::chrono::steady_clock::time_point{} || now - read_at >= kRecheckEvery) {
    fit = runnable_threads_fit_cpus();
    read_at = now;
  }
  return fit;
}

void IdleSpin::record(std::chrono::nanoseconds gap) noexcept {
  gaps_[next_] = gap;
  next_ = (next_ + 1) % kHistory;
}

std::chrono::microseconds parse_idle_spin_us(const char* env) {
  if (env == nullptr || *env == '\0') return IdleSpin::kDefaultMax;
  const std::string text(env);
  long long us = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), us);
  if (error != std::errc() || end != text.data() + text.size() || us < 0 || us > 1000000) {
    throw InvalidArgumentError(
        "DISTRIBUTE_IDLE_SPIN_US must be a whole number of microseconds from 0 to 1000000, got '" + text + "'");
  }
  return std::chrono::microseconds(us);
}

std::chrono::microseconds idle_spin_max() {
  static const std::chrono::microseconds max = parse_idle_spin_us(std::getenv("DISTRIBUTE_IDLE_SPIN_US"));
  return max;
}

void ReplicaPool::worker_loop(int thread) {
  // Start from the generation the pool was built with, not a fresh load: a
  // run() (or the destructor's stop) may already have bumped it before this
  // thread got scheduled, and that bump must not be missed.
  std::uint32_t seen = 0;
  IdleSpin idle(policy_, idle_max_);
  while (true) {
    // The wait measures itself (after a spin, no clock read between the wake
    // and the task).
    std::chrono::nanoseconds waited{0};
    seen = generation_.wait_while_equal(seen, idle.policy(), &waited);
    idle.record(waited);
    if (stopping_) return;
    if (uses_fibers()) {
      fiber_threads_[static_cast<std::size_t>(thread)]->run(*task_);
    } else {
      (*task_)(thread);
    }
    remaining_.decrement();
  }
}

}  // namespace distribute::internal
