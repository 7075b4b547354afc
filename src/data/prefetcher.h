// Prefetcher<T>: a background thread that calls produce() ahead of the
// consumer and keeps up to `depth` results in a bounded queue. Both sides
// wait by spinning briefly, then sleeping (runtime/spin_wait.h): a plain
// condition variable costs two thread wake-ups (~20 us each here) per
// element whenever the consumer is faster than the producer. Exceptions
// from produce() are queued in order and rethrown by next(); production then
// goes on. The destructor stops the thread, also when it waits on a full
// queue; it cannot interrupt a produce() call that itself blocks forever.
// A child forked without exec neither uses nor destroys its copy (next()
// raises there; the state is left).
#pragma once

#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <variant>

#include "core/mutex.h"
#include "runtime/interrupt.h"
#include "runtime/parent_only.h"
#include "runtime/spin_wait.h"

namespace distribute::internal {

// The producer thread and what it shares with the consumer (Prefetcher
// below is the interface).
template <class T>
class PrefetcherState {
 public:
  // produce() returns the next value, or std::nullopt at the end.
  PrefetcherState(std::function<std::optional<T>()> produce, std::size_t depth)
      : produce_(std::move(produce)), depth_(depth == 0 ? 1 : depth), thread_([this] { loop(); }) {}

  ~PrefetcherState() {
    {
      MutexLock lock(mutex_);
      stopping_ = true;
    }
    consumed_.notify_add(1);  // wakes a producer waiting for room
    thread_.join();
  }

  PrefetcherState(const PrefetcherState&) = delete;
  PrefetcherState& operator=(const PrefetcherState&) = delete;

  // The next value, std::nullopt at the end (and after it); rethrows a
  // queued exception. With `interruptible`, the calling thread's interrupt
  // check (distribute/interrupt.h) is polled while waiting; what it throws
  // is raised with nothing consumed.
  std::optional<T> next(bool interruptible = false) {
    InterruptPoll poll(interruptible);
    MutexLock lock(mutex_);
    while (queue_.empty() && !finished_) {
      std::uint32_t seen = produced_.load();
      lock.unlock();
      if (!poll.active()) {
        produced_.wait_while_equal(seen, policy_);
      } else if (!produced_.wait_while_equal_until(
                     seen, policy_, poll.slice_end(InterruptPoll::Clock::time_point::max()), &seen)) {
        poll.poll();
      }
      lock.lock();
    }
    if (queue_.empty()) return std::nullopt;
    Item item = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    consumed_.notify_add(1);
    if (auto* error = std::get_if<std::exception_ptr>(&item)) std::rethrow_exception(*error);
    return std::move(std::get<T>(item));
  }

 private:
  using Item = std::variant<T, std::exception_ptr>;

  void loop() {
    while (true) {
      {
        MutexLock lock(mutex_);
        while (queue_.size() >= depth_ && !stopping_) {
          const std::uint32_t seen = consumed_.load();
          lock.unlock();
          consumed_.wait_while_equal(seen, policy_);
          lock.lock();
        }
        if (stopping_) break;
      }
      std::optional<Item> item;
      bool end = false;
      try {
        std::optional<T> value = produce_();
        if (value.has_value()) {
          item.emplace(std::in_place_index<0>, std::move(*value));
        } else {
          end = true;
        }
      } catch (...) {
        item.emplace(std::in_place_index<1>, std::current_exception());
      }
      {
        MutexLock lock(mutex_);
        if (end) {
          finished_ = true;
        } else {
          queue_.push_back(std::move(*item));
        }
      }
      produced_.notify_add(1);
      if (end) return;
    }
    {
      MutexLock lock(mutex_);
      finished_ = true;
    }
    produced_.notify_add(1);
  }

  std::function<std::optional<T>()> produce_;
  const std::size_t depth_;
  SpinPolicy policy_;
  Mutex mutex_;
  // Bumped after every push (and at the end): the consumer waits on it.
  WaitWord produced_;
  // Bumped after every pop (and on stop): the producer waits on it.
  WaitWord consumed_;
  std::deque<Item> queue_ GUARDED_BY(mutex_);
  bool finished_ GUARDED_BY(mutex_) = false;
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::thread thread_;  // last: starts after every other member is ready
};

template <class T>
class Prefetcher {
 public:
  // produce() returns the next value, or std::nullopt at the end.
  Prefetcher(std::function<std::optional<T>()> produce, std::size_t depth)
      : state_(std::make_unique<PrefetcherState<T>>(std::move(produce), depth)) {}

  // The next value, std::nullopt at the end (and after it); rethrows a
  // queued exception. With `interruptible`, the calling thread's interrupt
  // check (distribute/interrupt.h) is polled while waiting; what it throws
  // is raised with nothing consumed. In a child forked from the process that
  // built it: FailedPreconditionError (nothing would ever be produced).
  std::optional<T> next(bool interruptible = false) { return state_.get("iterator").next(interruptible); }

  // True in a child forked from the process that built it.
  bool forked_child() const noexcept { return state_.forked_child(); }

 private:
  ParentOnly<PrefetcherState<T>> state_;  // (runtime/parent_only.h)
};

}  // namespace distribute::internal
