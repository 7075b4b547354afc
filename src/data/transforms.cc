// Element-wise and order transformations: map, filter, shuffle, repeat,
// take, skip, shard, cache, prefetch.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "core/mutex.h"
#include "data/batching.h"
#include "data/dataset_node.h"
#include "data/prefetcher.h"
#include "distribute/errors.h"
#include "runtime/cpu_count.h"
#include "runtime/interrupt.h"
#include "runtime/parent_only.h"

namespace distribute {
namespace internal {
namespace {

using MapFn = std::function<Element(const Element&)>;

class MapIt final : public ElementIterator {
 public:
  MapIt(std::unique_ptr<ElementIterator> input, std::shared_ptr<const MapFn> fn) : input_(std::move(input)), fn_(std::move(fn)) {}
  std::optional<Element> next() override {
    std::optional<Element> e = input_->next();
    if (!e.has_value()) return std::nullopt;
    return (*fn_)(*e);
  }

 private:
  std::unique_ptr<ElementIterator> input_;
  std::shared_ptr<const MapFn> fn_;
};

// Keeps up to `parallelism` calls of fn in flight on worker threads. The
// consumer pulls input elements itself (so the input iterator stays
// single-threaded), hands them to the workers, and returns results in input
// order. An exception (from fn or from the input) is stored in its slot and
// rethrown when that slot's turn comes. Workers publish a result only after
// their catch block has ended and hold no reference to it afterwards, so an
// exception is always released by the consumer (libstdc++'s exception
// reference counts are invisible to ThreadSanitizer).
class ParallelMapState {
 public:
  ParallelMapState(std::unique_ptr<ElementIterator> input, std::shared_ptr<const MapFn> fn, std::size_t parallelism)
      : input_(std::move(input)), fn_(std::move(fn)), parallelism_(parallelism) {
    workers_.reserve(parallelism_);
    for (std::size_t i = 0; i < parallelism_; ++i) workers_.emplace_back([this] { work(); });
  }

  ~ParallelMapState() {
    {
      MutexLock lock(mutex_);
      stopping_ = true;
    }
    signals_.wake.notify_all();
    for (auto& w : workers_) w.join();
  }

  ParallelMapState(const ParallelMapState&) = delete;
  ParallelMapState& operator=(const ParallelMapState&) = delete;

  std::optional<Element> next() {
    while (in_flight_.size() < parallelism_ && !input_done_) {
      auto slot = std::make_shared<Slot>();
      std::exception_ptr input_error;
      std::optional<Element> e;
      try {
        e = input_->next();
      } catch (...) {
        input_error = std::current_exception();
      }
      if (!input_error && !e.has_value()) {
        input_done_ = true;
        break;
      }
      {
        MutexLock lock(mutex_);
        if (input_error) {
          slot->error = std::move(input_error);
          slot->ready = true;
        } else {
          tasks_.push_back({std::move(*e), slot});
        }
      }
      in_flight_.push_back(std::move(slot));
      signals_.wake.notify_one();
    }
    if (in_flight_.empty()) return std::nullopt;
    // The front slot stays queued until its result is taken: an interrupt
    // while waiting for it leaves every element in flight.
    const std::shared_ptr<Slot> front = in_flight_.front();
    std::optional<Element> value;
    std::exception_ptr error;
    {
      MutexLock lock(mutex_);
      InterruptPoll poll(interruptible_);
      while (!front->ready) {
        if (!poll.active()) {
          signals_.done.wait(lock.native(), [&] { return front->ready; });
        } else if (!signals_.done.wait_until(lock.native(), poll.slice_end(InterruptPoll::Clock::time_point::max()),
                                     [&] { return front->ready; })) {
          lock.unlock();
          poll.poll();
          lock.lock();
        }
      }
      value = std::move(front->value);
      error = std::move(front->error);
    }
    in_flight_.pop_front();
    if (error) std::rethrow_exception(error);
    return value;
  }

  std::optional<Element> next_interruptible() {
    interruptible_ = true;
    struct Reset {
      bool& flag;
      ~Reset() { flag = false; }
    } reset{interruptible_};
    return next();
  }

 private:
  // Shared by the consumer and a worker. Its fields are guarded by the
  // iterator's mutex_ (which GUARDED_BY cannot name from a nested struct):
  // read and written only with mutex_ held.
  struct Slot {
    std::optional<Element> value;
    std::exception_ptr error;
    bool ready = false;
  };
  struct Task {
    Element input;
    std::shared_ptr<Slot> slot;
  };

  bool interruptible_ = false;  // in next_interruptible() (the consumer's thread only)

  void work() {
    while (true) {
      std::optional<Task> task;
      {
        MutexLock lock(mutex_);
        while (!stopping_ && tasks_.empty()) signals_.wake.wait(lock.native());
        if (stopping_) return;
        task.emplace(std::move(tasks_.front()));
        tasks_.pop_front();
      }
      std::optional<Element> value;
      std::exception_ptr error;
      try {
        value.emplace((*fn_)(task->input));
      } catch (...) {
        error = std::current_exception();
      }
      {
        MutexLock lock(mutex_);
        task->slot->value = std::move(value);
        task->slot->error = std::move(error);
        task->slot->ready = true;
      }
      signals_.done.notify_all();
    }
  }

  std::unique_ptr<ElementIterator> input_;
  std::shared_ptr<const MapFn> fn_;
  const std::size_t parallelism_;
  std::deque<std::shared_ptr<Slot>> in_flight_;  // consumer only
  bool input_done_ = false;                      // consumer only
  Mutex mutex_;
  struct Signals {
    std::condition_variable wake;  // workers: a task or stop
    std::condition_variable done;  // consumer: a slot became ready
  };
  Signals signals_;
  std::deque<Task> tasks_ GUARDED_BY(mutex_);
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::vector<std::thread> workers_;
};

// The interface of ParallelMapState: a child forked without exec neither
// uses nor destroys its copy (runtime/parent_only.h).
class ParallelMapIt final : public ElementIterator {
 public:
  ParallelMapIt(std::unique_ptr<ElementIterator> input, std::shared_ptr<const MapFn> fn, std::size_t parallelism)
      : state_(std::make_unique<ParallelMapState>(std::move(input), std::move(fn), parallelism)) {}
  std::optional<Element> next() override { return state_.get("map iterator").next(); }
  std::optional<Element> next_interruptible() override { return state_.get("map iterator").next_interruptible(); }

 private:
  ParentOnly<ParallelMapState> state_;
};

class MapNode final : public UnaryNode {
 public:
  std::shared_ptr<const DatasetNode> with_input(Dataset input) const override {
    return copy_with_input<MapNode>(std::move(input));
  }
  MapNode(Dataset input, MapFn fn, std::size_t parallelism)
      : UnaryNode(std::move(input)), fn_(std::make_shared<const MapFn>(std::move(fn))), parallelism_(parallelism) {}
  std::optional<int> static_min_rank() const override { return std::nullopt; }  // whatever fn returns
  std::optional<ElementSpec> static_element_spec() const override { return std::nullopt; }
  std::unique_ptr<ElementIterator> make_iterator() const override {
    if (parallelism_ <= 1) return std::make_unique<MapIt>(iterate(input_), fn_);
    return std::make_unique<ParallelMapIt>(iterate(input_), fn_, parallelism_);
  }
  std::string describe() const override {
    return "Map(parallel=" + std::to_string(parallelism_) + ") <- " + input_.describe();
  }
  std::int64_t cardinality() const override { return input_cardinality(); }

 private:
  std::shared_ptr<const MapFn> fn_;
  std::size_t parallelism_;
};

using Predicate = std::function<bool(const Element&)>;

class FilterNode final : public UnaryNode {
 public:
  std::shared_ptr<const DatasetNode> with_input(Dataset input) const override {
    return copy_with_input<FilterNode>(std::move(input));
  }
  FilterNode(Dataset input, Predicate predicate)
      : UnaryNode(std::move(input)), predicate_(std::make_shared<const Predicate>(std::move(predicate))) {}
  std::unique_ptr<ElementIterator> make_iterator() const override {
    class It final : public ElementIterator {
     public:
      It(std::unique_ptr<ElementIterator> input, std::shared_ptr<const Predicate> p) : input_(std::move(input)), p_(std::move(p)) {}
      std::optional<Element> next() override {
        while (true) {
          std::optional<Element> e = input_->next();
          if (!e.has_value() || (*p_)(*e)) return e;
        }
      }

     private:
      std::unique_ptr<ElementIterator> input_;
      std::shared_ptr<const Predicate> p_;
    };
    return std::make_unique<It>(iterate(input_), predicate_);
  }
  std::string describe() const override { return "Filter <- " + input_.describe(); }

 private:
  std::shared_ptr<const Predicate> predicate_;
};

// SplitMix64: turns (seed, iteration) into well-spread 64-bit seeds.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

class ShuffleNode final : public UnaryNode {
 public:
  // (A new node: its epoch counter starts over, as for any new dataset.)
  std::shared_ptr<const DatasetNode> with_input(Dataset input) const override {
    return std::make_shared<ShuffleNode>(std::move(input), buffer_size_, seed_, reshuffle_, seeded_);
  }
  ShuffleNode(Dataset input, std::int64_t buffer_size, std::uint64_t seed, bool reshuffle, bool seeded)
      : UnaryNode(std::move(input)), buffer_size_(buffer_size), seed_(seed), reshuffle_(reshuffle), seeded_(seeded) {}
  const char* unreplayable() const override {
    return seeded_ ? nullptr : "shuffle without a seed (its order is random in every process)";
  }
  std::atomic<std::uint64_t>* iteration_counter() const override { return reshuffle_ ? &iterations_ : nullptr; }

  std::unique_ptr<ElementIterator> make_iterator() const override {
    // Iteration k of this dataset uses the k-th seed of the sequence (or the
    // first one every time without reshuffling).
    const std::uint64_t iteration = reshuffle_ ? iterations_.fetch_add(1, std::memory_order_relaxed) : 0;
    class It final : public ElementIterator {
     public:
      It(std::unique_ptr<ElementIterator> input, std::size_t buffer_size, std::uint64_t seed)
          : input_(std::move(input)), buffer_size_(buffer_size), rng_(seed) {}
      std::optional<Element> next() override {
        if (rows_mode()) {
          const std::optional<std::int64_t> r = next_row();
          if (!r.has_value()) return std::nullopt;
          std::vector<Tensor> row;
          row.reserve(rows_->components.size());
          for (const Tensor& c : rows_->components) row.push_back(c[*r]);
          if (!rows_->is_tuple) return Element(std::move(row[0]));
          return Element(std::move(row));
        }
        while (!input_done_ && buffer_.size() < buffer_size_) {
          std::optional<Element> e = input_->next();
          if (!e.has_value()) {
            input_done_ = true;
            break;
          }
          buffer_.push_back(std::move(*e));
        }
        if (buffer_.empty()) return std::nullopt;
        const std::size_t pick = static_cast<std::size_t>(rng_() % buffer_.size());
        Element out = std::move(buffer_[pick]);
        buffer_[pick] = std::move(buffer_.back());
        buffer_.pop_back();
        return out;
      }

      // Over from_tensor_slices the buffer holds row indices: the same
      // draws in the same buffer positions give the same order as buffering
      // the elements, and a batch is one gather of its rows.
      std::optional<Element> next_batch(std::int64_t n, std::vector<Element>& pending,
                                        std::int64_t& consumed) override {
        if (!pending.empty() || !rows_mode()) return ElementIterator::next_batch(n, pending, consumed);
        picked_.clear();
        while (static_cast<std::int64_t>(picked_.size()) < n) {
          const std::optional<std::int64_t> r = next_row();
          if (!r.has_value()) break;
          picked_.push_back(*r);
        }
        if (picked_.empty()) return std::nullopt;
        consumed += static_cast<std::int64_t>(picked_.size());
        return gather_rows(rows_->components, rows_->is_tuple, picked_);
      }

     private:
      // Decided on the first call: take the input's rows if it hands them over.
      bool rows_mode() {
        if (!decided_) {
          decided_ = true;
          rows_ = input_->take_rows();
          if (rows_.has_value()) next_index_ = rows_->begin;
        }
        return rows_.has_value();
      }
      std::optional<std::int64_t> next_row() {
        while (next_index_ < rows_->end && indices_.size() < buffer_size_) indices_.push_back(next_index_++);
        if (indices_.empty()) return std::nullopt;
        const std::size_t pick = static_cast<std::size_t>(rng_() % indices_.size());
        const std::int64_t out = indices_[pick];
        indices_[pick] = indices_.back();
        indices_.pop_back();
        return out;
      }

      std::unique_ptr<ElementIterator> input_;
      std::size_t buffer_size_;
      std::mt19937_64 rng_;
      std::vector<Element> buffer_;
      bool input_done_ = false;
      bool decided_ = false;
      std::optional<Rows> rows_;
      std::int64_t next_index_ = 0;
      std::vector<std::int64_t> indices_, picked_;
    };
    return std::make_unique<It>(iterate(input_), static_cast<std::size_t>(buffer_size_),
                                mix(seed_ ^ mix(iteration)));
  }
  // With the seed (an iterator checkpoint's fingerprint hashes the
  // description: another seed is another pipeline) and whether it
  // reshuffles.
  std::string describe() const override {
    std::string args = std::to_string(buffer_size_);
    if (seeded_) args += ", seed=" + std::to_string(seed_);
    if (!reshuffle_) args += ", reshuffle_each_iteration=false";
    return "Shuffle(" + args + ") <- " + input_.describe();
  }
  std::int64_t cardinality() const override { return input_cardinality(); }

 private:
  std::int64_t buffer_size_;
  std::uint64_t seed_;
  bool reshuffle_;
  bool seeded_;
  mutable std::atomic<std::uint64_t> iterations_{0};
};

class RepeatNode final : public UnaryNode {
 public:
  std::shared_ptr<const DatasetNode> with_input(Dataset input) const override {
    return copy_with_input<RepeatNode>(std::move(input));
  }
  RepeatNode(Dataset input, std::int64_t count) : UnaryNode(std::move(input)), count_(count) {}
  std::unique_ptr<ElementIterator> make_iterator() const override {
    class It final : public ElementIterator {
     public:
      It(Dataset input, std::int64_t count) : dataset_(std::move(input)), count_(count) {}
      std::optional<Element> next() override {
        while (true) {
          if (count_ >= 0 && pass_ >= count_) return std::nullopt;
          if (!current_) {
            current_ = iterate(dataset_);
            yielded_this_pass_ = false;
          }
          std::optional<Element> e = current_->next();
          if (e.has_value()) {
            yielded_this_pass_ = true;
            return e;
          }
          current_.reset();
          ++pass_;
          // A forever repeat stops at a pass that yields nothing (it would
          // spin); a finite one goes through every pass, as TF's.
          if (count_ < 0 && !yielded_this_pass_) return std::nullopt;
        }
      }

     private:
      Dataset dataset_;
      std::int64_t count_;
      std::int64_t pass_ = 0;
      std::unique_ptr<ElementIterator> current_;
      bool yielded_this_pass_ = false;
    };
    return std::make_unique<It>(input_, count_);
  }
  std::string describe() const override { return "Repeat(" + std::to_string(count_) + ") <- " + input_.describe(); }
  std::int64_t cardinality() const override {
    const std::int64_t n = input_cardinality();
    if (count_ == 0 || n == 0) return 0;
    if (count_ < 0) return Dataset::kInfiniteCardinality;  // (also of an unknown, non-empty input)
    if (n < 0) return n;
    std::int64_t total = 0;  // at most INT64_MAX (a range near the ends of int64, repeated)
    return __builtin_mul_overflow(n, count_, &total) ? std::numeric_limits<std::int64_t>::max() : total;
  }

 private:
  std::int64_t count_;
};

// take, skip and shard: keep the elements whose input position passes a test.
class SelectNode final : public UnaryNode {
 public:
  std::shared_ptr<const DatasetNode> with_input(Dataset input) const override {
    return copy_with_input<SelectNode>(std::move(input));
  }
  enum class Kind { kTake, kSkip, kShard };
  SelectNode(Dataset input, Kind kind, std::int64_t a, std::int64_t b)
      : UnaryNode(std::move(input)), kind_(kind), a_(a), b_(b) {}
  std::unique_ptr<ElementIterator> make_iterator() const override {
    class It final : public ElementIterator {
     public:
      It(std::unique_ptr<ElementIterator> input, Kind kind, std::int64_t a, std::int64_t b)
          : input_(std::move(input)), kind_(kind), a_(a), b_(b) {}
      std::optional<Element> next() override {
        while (true) {
          if (kind_ == Kind::kTake && a_ >= 0 && position_ >= a_) return std::nullopt;
          std::optional<Element> e = input_->next();
          if (!e.has_value()) return std::nullopt;
          const std::int64_t i = position_++;
          const bool keep = kind_ == Kind::kTake   ? true
                            : kind_ == Kind::kSkip ? (a_ >= 0 && i >= a_)
                                                   : i % a_ == b_;
          if (keep) return e;
        }
      }
      // take and skip pass batches through (so that a zero-copy or gathered
      // batch of the input stays one); shard goes element by element.
      std::optional<Element> next_batch(std::int64_t n, std::vector<Element>& pending,
                                        std::int64_t& consumed) override {
        if (kind_ == Kind::kShard || !pending.empty()) return ElementIterator::next_batch(n, pending, consumed);
        if (kind_ == Kind::kSkip) {
          while (a_ >= 0 && position_ < a_) {
            if (!input_->next().has_value()) return std::nullopt;
            ++position_;
          }
          return input_->next_batch(n, pending, consumed);
        }
        const std::int64_t want = a_ < 0 ? n : std::min(n, a_ - position_);
        if (want <= 0) return std::nullopt;
        std::optional<Element> batch = input_->next_batch(want, pending, consumed);
        if (batch.has_value()) position_ += batch_dim(*batch, "Dataset::take");
        return batch;
      }

     private:
      std::unique_ptr<ElementIterator> input_;
      Kind kind_;
      std::int64_t a_, b_;
      std::int64_t position_ = 0;
    };
    return std::make_unique<It>(iterate(input_), kind_, a_, b_);
  }
  std::int64_t cardinality() const override {
    const std::int64_t n = input_cardinality();
    switch (kind_) {
      case Kind::kTake:
        if (a_ < 0) return n;
        if (n == Dataset::kInfiniteCardinality) return a_;
        return n < 0 ? n : std::min(n, a_);
      case Kind::kSkip:
        if (a_ < 0) return 0;
        if (n < 0) return n;
        return std::max<std::int64_t>(0, n - a_);
      case Kind::kShard:
        if (n < 0) return n;
        return n / a_ + (b_ < n % a_ ? 1 : 0);
    }
    return Dataset::kUnknownCardinality;
  }
  std::string describe() const override {
    const char* name = kind_ == Kind::kTake ? "Take(" : kind_ == Kind::kSkip ? "Skip(" : "Shard(";
    std::string args = std::to_string(a_) + (kind_ == Kind::kShard ? ", " + std::to_string(b_) : "");
    return name + args + ") <- " + input_.describe();
  }

 private:
  Kind kind_;
  std::int64_t a_, b_;
};

// cache(): the first iteration to reach the end of the input stores what it
// produced; iterations made after that read the store.
class CacheNode final : public UnaryNode {
 public:
  explicit CacheNode(Dataset input) : UnaryNode(std::move(input)), cache_(std::make_shared<Cache>()) {}
  // A new node: an empty cache (a private copy fills its own).
  std::shared_ptr<const DatasetNode> with_input(Dataset input) const override {
    return std::make_shared<CacheNode>(std::move(input));
  }
  const char* unreplayable() const override {
    bool reshuffles = false;
    for_each_node(input_,
                  [&](const DatasetNode& node) { reshuffles = reshuffles || node.iteration_counter() != nullptr; });
    return reshuffles ? "cache() of a reshuffling shuffle (the cached order is the one of whichever iteration filled "
                        "the cache; shuffle after cache(), or pass reshuffle_each_iteration=false)"
                      : nullptr;
  }
  std::unique_ptr<ElementIterator> make_iterator() const override {
    {
      MutexLock lock(cache_->mutex);
      if (cache_->complete) return std::make_unique<ReadIt>(cache_);
    }
    return std::make_unique<WriteIt>(iterate(input_), cache_);
  }
  std::string describe() const override { return "Cache <- " + input_.describe(); }
  std::int64_t cardinality() const override { return input_cardinality(); }

 private:
  struct Cache {
    Mutex mutex;
    bool complete GUARDED_BY(mutex) = false;  // once set, elements is fixed
    std::vector<Element> elements;            // written once, under mutex, when complete is set
  };

  class ReadIt final : public ElementIterator {
   public:
    explicit ReadIt(std::shared_ptr<const Cache> cache) : cache_(std::move(cache)) {}
    std::optional<Element> next() override {
      if (index_ >= cache_->elements.size()) return std::nullopt;
      return cache_->elements[index_++];
    }

   private:
    std::shared_ptr<const Cache> cache_;
    std::size_t index_ = 0;
  };

  class WriteIt final : public ElementIterator {
   public:
    WriteIt(std::unique_ptr<ElementIterator> input, std::shared_ptr<Cache> cache)
        : input_(std::move(input)), cache_(std::move(cache)) {}
    std::optional<Element> next() override {
      if (done_) return std::nullopt;
      std::optional<Element> e = input_->next();
      if (e.has_value()) {
        seen_.push_back(*e);
        return e;
      }
      done_ = true;
      MutexLock lock(cache_->mutex);
      if (!cache_->complete) {
        cache_->elements = std::move(seen_);
        cache_->complete = true;
      }
      return std::nullopt;
    }

   private:
    std::unique_ptr<ElementIterator> input_;
    std::shared_ptr<Cache> cache_;
    std::vector<Element> seen_;
    bool done_ = false;
  };

  std::shared_ptr<Cache> cache_;
};

class PrefetchNode final : public UnaryNode {
 public:
  std::shared_ptr<const DatasetNode> with_input(Dataset input) const override {
    return copy_with_input<PrefetchNode>(std::move(input));
  }
  PrefetchNode(Dataset input, std::size_t depth) : UnaryNode(std::move(input)), depth_(depth) {}
  std::unique_ptr<ElementIterator> make_iterator() const override {
    class It final : public ElementIterator {
     public:
      It(std::unique_ptr<ElementIterator> input, std::size_t depth)
          : input_(std::shared_ptr<ElementIterator>(std::move(input))),
            prefetcher_([in = input_] { return in->next(); }, depth) {}
      std::optional<Element> next() override { return prefetcher_.next(); }
      std::optional<Element> next_interruptible() override { return prefetcher_.next(/*interruptible=*/true); }

     private:
      std::shared_ptr<ElementIterator> input_;
      Prefetcher<Element> prefetcher_;  // after input_: stopped before it is destroyed
    };
    return std::make_unique<It>(iterate(input_), depth_);
  }
  std::string describe() const override { return "Prefetch(" + std::to_string(depth_) + ") <- " + input_.describe(); }
  std::int64_t cardinality() const override { return input_cardinality(); }

 private:
  std::size_t depth_;
};

}  // namespace
}  // namespace internal

Dataset Dataset::map(std::function<Element(const Element&)> fn, std::int64_t num_parallel_calls) const {
  if (!fn) throw InvalidArgumentError("Dataset::map: expected a function, got an empty one");
  if (num_parallel_calls == 0 || num_parallel_calls < kAutotune) {
    throw InvalidArgumentError("Dataset::map: expected num_parallel_calls >= 1 or kAutotune, got " +
                               std::to_string(num_parallel_calls));
  }
  const std::size_t parallelism = num_parallel_calls == kAutotune ? static_cast<std::size_t>(internal::usable_cores())
                                                                  : static_cast<std::size_t>(num_parallel_calls);
  return Dataset(std::make_shared<internal::MapNode>(*this, std::move(fn), parallelism));
}

Dataset Dataset::filter(std::function<bool(const Element&)> predicate) const {
  if (!predicate) throw InvalidArgumentError("Dataset::filter: expected a predicate, got an empty function");
  return Dataset(std::make_shared<internal::FilterNode>(*this, std::move(predicate)));
}

Dataset Dataset::shuffle(std::int64_t buffer_size, std::optional<std::uint64_t> seed,
                         bool reshuffle_each_iteration) const {
  if (buffer_size <= 0) {
    throw InvalidArgumentError("Dataset::shuffle: expected a buffer size > 0, got " + std::to_string(buffer_size));
  }
  const std::uint64_t s = seed.has_value() ? *seed : (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  return Dataset(
      std::make_shared<internal::ShuffleNode>(*this, buffer_size, s, reshuffle_each_iteration, seed.has_value()));
}

Dataset Dataset::repeat(std::int64_t count) const {
  if (count < -1) throw InvalidArgumentError("Dataset::repeat: expected a count >= -1, got " + std::to_string(count));
  return Dataset(std::make_shared<internal::RepeatNode>(*this, count));
}

Dataset Dataset::take(std::int64_t count) const {
  if (count < -1) throw InvalidArgumentError("Dataset::take: expected a count >= -1, got " + std::to_string(count));
  return Dataset(std::make_shared<internal::SelectNode>(*this, internal::SelectNode::Kind::kTake, count, 0));
}

Dataset Dataset::skip(std::int64_t count) const {
  if (count < -1) throw InvalidArgumentError("Dataset::skip: expected a count >= -1, got " + std::to_string(count));
  return Dataset(std::make_shared<internal::SelectNode>(*this, internal::SelectNode::Kind::kSkip, count, 0));
}

Dataset Dataset::shard(std::int64_t num_shards, std::int64_t index) const {
  if (num_shards < 1) {
    throw InvalidArgumentError("Dataset::shard: expected num_shards >= 1, got " + std::to_string(num_shards));
  }
  if (index < 0 || index >= num_shards) {
    throw InvalidArgumentError("Dataset::shard: expected an index in [0, " + std::to_string(num_shards) + "), got " +
                               std::to_string(index));
  }
  return Dataset(std::make_shared<internal::SelectNode>(*this, internal::SelectNode::Kind::kShard, num_shards, index));
}

Dataset Dataset::cache() const { return Dataset(std::make_shared<internal::CacheNode>(*this)); }

Dataset Dataset::prefetch(std::int64_t buffer_size) const {
  if (buffer_size < kAutotune) {
    throw InvalidArgumentError("Dataset::prefetch: expected a buffer size >= 0 or kAutotune, got " +
                               std::to_string(buffer_size));
  }
  if (buffer_size == 0) return *this;
  const std::size_t depth = buffer_size == kAutotune ? 2 : static_cast<std::size_t>(buffer_size);
  return Dataset(std::make_shared<internal::PrefetchNode>(*this, depth));
}

}  // namespace distribute
