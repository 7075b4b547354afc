// The in-process stand-in transport: see local_cross_worker.h.
#include "transport/local_cross_worker.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "core/describe.h"
#include "core/dtype_dispatch.h"
#include "core/mutex.h"
#include "distribute/internal/owner_process.h"
#include "transport/wire.h"

namespace distribute::internal {
namespace {

using Clock = CrossWorker::Clock;

// One worker's part of one exchange: its header (wire.h: compared with
// worker 0's, as every transport does) and its bytes.
struct Part {
  Header header;
  std::vector<std::byte> bytes;
};

// The exchanges in flight, by number (every worker numbers its calls from
// 0), and what each worker told the others.
struct Hub {
  explicit Hub(int n) : failed(static_cast<std::size_t>(n)), left(static_cast<std::size_t>(n), false) {}

  struct Round {
    std::vector<std::optional<Part>> parts;
    int taken = 0;
  };

  Mutex mutex;
  std::condition_variable changed;
  std::map<std::uint64_t, Round> rounds GUARDED_BY(mutex);
  std::vector<std::string> failed GUARDED_BY(mutex);  // a worker's failure report ("" while none)
  std::vector<bool> left GUARDED_BY(mutex);           // a worker's strategy ended
};

class LocalChannel final : public CrossWorker {
 public:
  LocalChannel(std::shared_ptr<Hub> hub, int rank, int size) : hub_(std::move(hub)), rank_(rank), size_(size) {}

  int num_workers() const override { return size_; }
  int worker_index() const override { return rank_; }

  void all_reduce_sum(const char* what, DType dtype, const void* in, void* out, std::size_t count,
                      std::uint64_t layout, Clock::time_point deadline, FunctionRef<bool()> cancelled) override {
    const std::size_t bytes = count * dtype_size(dtype);
    const Header header{.op = static_cast<std::uint32_t>(Op::kAllReduce), .dtype = static_cast<std::uint32_t>(dtype),
                        .count = count, .layout = layout};
    std::vector<std::byte> mine(bytes);
    if (bytes > 0) std::memcpy(mine.data(), in, bytes);
    const std::vector<Part> parts = exchange(what, header, std::move(mine), deadline, cancelled);
    if (bytes == 0) return;
    // In worker order, as every transport sums: the same bits everywhere.
    dispatch_dtype(dtype, [&](auto zero) {
      using T = decltype(zero);
      T* o = static_cast<T*>(out);
      std::memcpy(o, parts[0].bytes.data(), bytes);
      for (std::size_t w = 1; w < parts.size(); ++w) {
        const auto* x = reinterpret_cast<const T*>(parts[w].bytes.data());
        for (std::size_t i = 0; i < count; ++i) o[i] = static_cast<T>(o[i] + x[i]);
      }
    });
  }

  std::vector<std::vector<std::byte>> all_gather(const char* what, std::span<const std::byte> mine,
                                                 Clock::time_point deadline, FunctionRef<bool()> cancelled) override {
    std::vector<Part> parts =
        exchange(what, Header{.op = static_cast<std::uint32_t>(Op::kAllGather), .count = mine.size()},
                 std::vector<std::byte>(mine.begin(), mine.end()), deadline, cancelled);
    std::vector<std::vector<std::byte>> out;
    out.reserve(parts.size());
    for (Part& p : parts) out.push_back(std::move(p.bytes));
    return out;
  }

  void broadcast(const char* what, void* data, std::size_t bytes, int root, Clock::time_point deadline,
                 FunctionRef<bool()> cancelled) override {
    const Header header{.op = static_cast<std::uint32_t>(Op::kBroadcast), .count = bytes, .root = root};
    std::vector<std::byte> mine;
    if (rank_ == root && bytes > 0) mine.assign(static_cast<const std::byte*>(data), static_cast<const std::byte*>(data) + bytes);
    const std::vector<Part> parts = exchange(what, header, std::move(mine), deadline, cancelled);
    if (rank_ != root && bytes > 0) std::memcpy(data, parts[static_cast<std::size_t>(root)].bytes.data(), bytes);
  }

  void report_failure(const std::string& message) noexcept override {
    if (owner_process_.forked_child()) return;  // (see close)
    MutexLock lock(hub_->mutex);
    try {
      // As the MPI transport: the peers' messages name this worker.
      std::string& mine = hub_->failed[static_cast<std::size_t>(rank_)];
      if (mine.empty()) mine = "worker " + std::to_string(rank_) + ": " + message;
      if (broken_.empty()) broken_ = message;
    } catch (...) {
      // (Out of memory for the text: the peers still see a report.)
      std::string& mine = hub_->failed[static_cast<std::size_t>(rank_)];
      if (mine.empty()) mine.assign("a worker failed");
    }
    hub_->changed.notify_all();
  }

  void close() noexcept override {
    // A forked child's copy: the other workers (threads) are its parent's,
    // and may have held the hub's lock at the fork
    // (distribute/internal/owner_process.h).
    if (owner_process_.forked_child()) return;
    MutexLock lock(hub_->mutex);
    closed_ = true;
    hub_->left[static_cast<std::size_t>(rank_)] = true;
    hub_->changed.notify_all();
  }

 private:
  // Posts this worker's part of the next exchange and returns every
  // worker's, in worker order, once all have posted.
  std::vector<Part> exchange(const char* what, Header header, std::vector<std::byte> bytes,
                             Clock::time_point deadline, FunctionRef<bool()> cancelled) {
    MutexLock lock(hub_->mutex);
    if (closed_) {
      throw FailedPreconditionError(std::string("cross-worker ") + what + " on worker " + std::to_string(rank_) +
                                    ": the strategy has ended (a dataset or variable kept beyond its strategy?)");
    }
    if (!broken_.empty()) {
      throw FailedPreconditionError(std::string("cross-worker ") + what + " on worker " + std::to_string(rank_) +
                                    ": the channel to the other workers is broken (" + broken_ + ")");
    }
    const std::uint64_t number = next_round_++;
    Hub::Round& round = hub_->rounds[number];
    round.parts.resize(static_cast<std::size_t>(size_));
    header.seq = number;
    round.parts[static_cast<std::size_t>(rank_)] = Part{header, std::move(bytes)};
    hub_->changed.notify_all();
    const std::string where = std::string("cross-worker ") + what + " on worker " + std::to_string(rank_);
    for (;;) {
      std::vector<int> missing;
      for (int p = 0; p < size_; ++p) {
        if (!round.parts[static_cast<std::size_t>(p)].has_value()) missing.push_back(p);
      }
      if (missing.empty()) break;
      for (int p : missing) {
        const std::string& report = hub_->failed[static_cast<std::size_t>(p)];
        if (!report.empty()) fail(where + " failed: " + report, ErrorKind::kUnavailable);
        if (hub_->left[static_cast<std::size_t>(p)]) {
          fail(where + " failed: worker " + std::to_string(p) + " left (its strategy ended)",
               ErrorKind::kUnavailable);
        }
      }
      if (cancelled()) fail(where + " cancelled: a local replica failed", ErrorKind::kCancelled);
      const Clock::time_point now = Clock::now();
      if (now >= deadline) {
        fail(std::string("cross-worker ") + what + " exceeded its deadline on worker " + std::to_string(rank_) +
                 ": nothing received from worker(s) " + list_ids(missing) +
                 " (stopped, stuck or gone; timeout_seconds in CommunicationOptions sets the deadline)",
             ErrorKind::kDeadline);
      }
      // (cancelled() is polled: a local replica's failure does not notify.)
      hub_->changed.wait_until(lock.native(), std::min(deadline, now + std::chrono::milliseconds(1)));
    }
    std::vector<Part> parts;
    parts.reserve(round.parts.size());
    for (const std::optional<Part>& p : round.parts) parts.push_back(*p);
    if (++round.taken == size_) hub_->rounds.erase(number);
    std::vector<Header> headers;
    for (const Part& p : parts) headers.push_back(p.header);
    lock.unlock();
    check_headers(what, headers);
    return parts;
  }

  enum class ErrorKind { kUnavailable, kCancelled, kDeadline };

  // Breaks the channel, tells the other workers, and raises (the caller's
  // lock is released as the exception leaves its scope).
  [[noreturn]] void fail(const std::string& message, ErrorKind kind) REQUIRES(hub_->mutex) {
    if (broken_.empty()) broken_ = message;
    std::string& mine = hub_->failed[static_cast<std::size_t>(rank_)];
    if (mine.empty()) mine = "worker " + std::to_string(rank_) + ": " + message;
    hub_->changed.notify_all();
    switch (kind) {
      case ErrorKind::kCancelled: throw CancelledError(message);
      case ErrorKind::kDeadline: throw DeadlineExceededError(message);
      case ErrorKind::kUnavailable: break;
    }
    throw UnavailableError(message);
  }

  std::shared_ptr<Hub> hub_;
  const int rank_, size_;
  OwnerProcess owner_process_;
  std::uint64_t next_round_ GUARDED_BY(hub_->mutex) = 0;
  std::string broken_ GUARDED_BY(hub_->mutex);
  bool closed_ GUARDED_BY(hub_->mutex) = false;
};

}  // namespace

std::vector<std::shared_ptr<CrossWorker>> make_local_cross_workers(int num_workers) {
  if (num_workers < 1) {
    throw InvalidArgumentError("make_local_cross_workers: expected at least one worker, got " +
                               std::to_string(num_workers));
  }
  auto hub = std::make_shared<Hub>(num_workers);
  std::vector<std::shared_ptr<CrossWorker>> out;
  for (int w = 0; w < num_workers; ++w) out.push_back(std::make_shared<LocalChannel>(hub, w, num_workers));
  return out;
}

}  // namespace distribute::internal
