// CrossWorker over MPI: point-to-point messages on a duplicated communicator,
// nonblocking and polled, so that every wait has a deadline, can be
// cancelled, and notices a peer's failure report (sent on a second
// duplicated communicator).
//
// Every collective exchanges a Header with every peer, checked before the
// payload is used; the payload travels on another tag (messages between two
// ranks on one communicator and tag arrive in order). Algorithms, M workers,
// S bytes:
//   - all_reduce below kDirectBytes: every worker sends its buffer to every
//     peer and sums the M buffers in worker order: headers and buffers in one
//     round, except for buffers just above MPI's eager size, which follow the
//     headers in eager-sized pieces;
//   - all_reduce from kDirectBytes: reduce-scatter (worker w sums chunk w of
//     every buffer, in worker order) then all-gather of the chunks, by direct
//     exchange: 2 S (M-1)/M bytes sent per worker, as a ring would;
//   - all_gather: every worker sends its bytes to every peer;
//   - broadcast: the root sends to every peer.
// Workers that share a host use a ShmChannel instead (transport/shm_channel.h):
// for everything when all of them are on one host; across hosts, for the
// host-local steps of all_reduce (sum_across_hosts: the host's sum on its
// segment, the above between one worker per host, the result handed back).
// MPI calls are serialized by one mutex (MPI_THREAD_SERIALIZED suffices): a
// failure report from another replica thread interleaves with the polls.
#include <mpi.h>

#include <array>
#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>

#include "core/describe.h"
#include "core/dtype_dispatch.h"
#include "core/mutex.h"
#include "distribute/errors.h"
#include "distribute/internal/owner_process.h"
#include "runtime/deadline.h"
#include "runtime/interrupt.h"
#include "runtime/spin_wait.h"
#include "transport/cross_worker.h"
#include "transport/fault_point.h"
#include "transport/peer_watch.h"
#include "transport/shm_channel.h"
#include "transport/wire.h"

namespace distribute::internal {
namespace {

using Clock = CrossWorker::Clock;

// Tags: every MultiWorkerMirroredStrategy of a process (its generation)
// talks on tags of its own, so that a message of a finished one (say its
// leaving notice, or a step abandoned after a failure) is never taken for
// the current one's, even when MPI reuses a freed communicator's context.
// kHelloTag (start-up, on the program's communicator) is the same for all.
constexpr int kHeaderTag = 101;
constexpr int kDataTag = 102;
constexpr int kFailureTag = 103;
constexpr int kTagsPerGeneration = 4;
constexpr std::uint64_t kGenerationsBeforeReuse = 8000;  // tags stay below 32767, MPI's guaranteed MPI_TAG_UB
constexpr int kHelloTag = 32700;
// Low descriptors kept for the process watch's connections: one per peer
// (more peers than this still get connections, on ordinary descriptors).
constexpr int kReservedDescriptors = 64;

int generation_tag(int base, std::uint64_t generation) {
  return base + kTagsPerGeneration * static_cast<int>(generation % kGenerationsBeforeReuse);
}

std::string seconds_text(double seconds) {
  std::string s = std::to_string(seconds);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s + " s";
}
constexpr std::size_t kDirectBytes = 256 * 1024;
// Open MPI's shared-memory transport sends messages of up to 4 KiB
// (headers included) eagerly; larger ones take a rendezvous that costs a few
// microseconds more. Buffers of up to kChunkedBytes travel in pieces of
// kEagerBytes.
constexpr std::size_t kEagerBytes = 4000;
constexpr std::size_t kChunkedBytes = 32 * 1024;
// A failure report sent over MPI is cut to this many bytes: well within the
// eager limit, so that it arrives whole without its sender's help (the
// sender stops making MPI calls once it reported), and the receiver's
// MPI_Recv of a message MPI_Iprobe found returns at once.
constexpr std::size_t kReportBytes = 1024;

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<std::size_t>(length));
}

int error_class(int code) {
  int cls = 0;
  MPI_Error_class(code, &cls);
  return cls;
}

void check_mpi(int code, const char* call) {
  if (code != MPI_SUCCESS) throw InternalError(std::string(call) + " failed: " + mpi_error(code));
}

// MPI for the whole process: initialized by the first strategy when the
// program has not, finalized at exit by whoever initialized it, or the job
// aborted (non-zero status) when a channel broke.
//
// MPI_Init_thread waits until every process of the job calls it (Open MPI
// exchanges the processes' addresses there); it runs on a thread of its own
// so that the strategy's start-up deadline bounds it. MPI_Finalize then runs
// at exit on the main thread: MPI 3.1 (12.4.3) asks for the initializing
// thread; Open MPI, the MPI tested here, does not depend on it. A process whose
// initialization timed out cannot use MPI any more (the call may still
// return later; nothing else may run meanwhile).
class MpiProcess {
 public:
  // The process's MPI, initialized by the deadline (DeadlineExceededError
  // otherwise) when the program has not.
  static MpiProcess& start(Clock::time_point deadline, double timeout_seconds) {
    // A child forked without exec from a process of the job (it started MPI,
    // or a launcher started it) shares that process's MPI state and
    // connections, which MPI does not support (nor is start_mutex safe to
    // take there, should its parent have started MPI through it).
    int initialized_before = 0;
    MPI_Initialized(&initialized_before);
    if (OwnerProcess::process_was_forked() && (initialized_before != 0 || !launcher_size_text().empty())) {
      throw FailedPreconditionError(
          "MultiWorkerMirroredStrategy: expected a process of the MPI job, got a child forked (without exec) from "
          "one; MPI cannot be used in such a child: create the strategy in the parent, or start the child with exec");
    }
    static std::mutex start_mutex;
    static std::unique_ptr<MpiProcess> process;  // finalizes at exit
    static std::string failed;                   // why initialization failed for good
    std::lock_guard<std::mutex> lock(start_mutex);
    if (process != nullptr) return *process;
    if (!failed.empty()) throw FailedPreconditionError(failed);
    int initialized = 0;
    MPI_Initialized(&initialized);
    bool owner = false;
    if (initialized == 0) {
      struct Init {
        std::mutex mutex;
        std::condition_variable done_cv;
        bool done = false;
        int code = MPI_SUCCESS;
      };
      // Before MPI opens its sockets (transport/peer_watch.h).
      PeerWatch::reserve_descriptors(kReservedDescriptors);
      auto init = std::make_shared<Init>();
      std::thread([init] {
        int provided = 0;
        const int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
        std::lock_guard<std::mutex> done_lock(init->mutex);
        init->done = true;
        init->code = code;
        init->done_cv.notify_all();
      }).detach();
      std::unique_lock<std::mutex> wait_lock(init->mutex);
      if (!init->done_cv.wait_until(wait_lock, deadline, [&] { return init->done; })) {
        failed = "MultiWorkerMirroredStrategy: MPI initialization timed out earlier in this process (MPI_Init_thread "
                 "did not return within the start-up deadline); MPI cannot be used by this process";
        throw DeadlineExceededError(
            "MultiWorkerMirroredStrategy start-up: MPI_Init_thread did not return within " +
            seconds_text(timeout_seconds) + " (startup_timeout_seconds in MultiWorkerOptions): a process of the job " +
            launcher_size_text() + "has not started or has not reached MPI initialization; MPI names no process "
            "before it is initialized");
      }
      check_mpi(init->code, "MPI_Init_thread");
      owner = true;
    }
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED) {
      throw FailedPreconditionError(
          "MultiWorkerMirroredStrategy: expected MPI initialized with MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE "
          "(replica threads other than the main one call MPI), got thread level " + std::to_string(provided) +
          "; initialize MPI with MPI_Init_thread(..., MPI_THREAD_SERIALIZED, ...) or let the strategy initialize it");
    }
    process.reset(new MpiProcess(owner));
    return *process;
  }

  // Held around every MPI call of this process's channels (MPI_THREAD_SERIALIZED).
  Mutex& mutex() RETURN_CAPABILITY(mutex_) { return mutex_; }
  void mark_broken() { broken_ = true; }
  // A worker's process ended (seen by a process watch): MPI is not used
  // again by this process (transport/peer_watch.h).
  // At exit the job is then aborted, not finalized (as after a broken
  // channel).
  void mark_peer_lost(const std::string& reason) REQUIRES(mutex_) {
    if (peer_lost_.empty()) peer_lost_ = reason;
    broken_ = true;
  }
  const std::string& peer_lost() const REQUIRES(mutex_) { return peer_lost_; }

  // One MultiWorkerMirroredStrategy at a time: the next one's number (every
  // worker creates them in the same order, so the numbers agree), or
  // FailedPreconditionError while another is alive. release() when it ends.
  std::uint64_t acquire() {
    MutexLock lock(mutex_);
    if (!peer_lost_.empty()) {
      throw FailedPreconditionError(
          "MultiWorkerMirroredStrategy: a worker of this job ended earlier (" + peer_lost_ + "); this process "
          "makes no more MPI calls (one could end it: see docs/errors.md), so no new strategy can start");
    }
    if (alive_) {
      throw FailedPreconditionError(
          "MultiWorkerMirroredStrategy: another MultiWorkerMirroredStrategy (number " + std::to_string(generation_) +
          " of this process) is still alive; a process runs one at a time: destroy it before creating the next");
    }
    alive_ = true;
    return ++generation_;
  }
  void release() noexcept {
    MutexLock lock(mutex_);
    alive_ = false;
  }

  ~MpiProcess() {
    // A child forked without exec: MPI is its parent's (distribute/internal/owner_process.h).
    if (owner_process_.forked_child()) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized != 0) return;
    // Operations abandoned by a broken channel cannot complete: finalizing
    // could hang, so the job ends with an error status instead, after a
    // moment in which the workers told of this one's failure can raise and
    // report their own errors (the abort ends every process of the job).
    if (broken_) {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (owner_) MPI_Finalize();
  }

 private:
  explicit MpiProcess(bool owner) : owner_(owner) {}

  static std::string launcher_size_text() {
    const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (size == nullptr) size = std::getenv("PMI_SIZE");
    return size == nullptr ? "" : "(" + std::string(size) + " processes) ";
  }

  Mutex mutex_;
  OwnerProcess owner_process_;
  bool owner_ = false;
  bool broken_ = false;
  bool alive_ GUARDED_BY(mutex_) = false;
  std::string peer_lost_ GUARDED_BY(mutex_);  // how a worker ended (mark_peer_lost), or empty
  std::uint64_t generation_ GUARDED_BY(mutex_) = 0;
};

// Workers that take part in one MPI exchange: their ranks, in the order
// their inputs are summed, and this worker's index among them.
struct Group {
  std::vector<int> ranks;
  std::size_t me = 0;
  std::size_t size() const { return ranks.size(); }
};

class MpiCrossWorker final : public CrossWorker {
 public:
  MpiCrossWorker(MPI_Comm base, const ChannelOptions& options, MpiProcess& process,
                 std::uint64_t generation, Clock::time_point startup_deadline)
      : process_(process),
        generation_(generation),
        header_tag_(generation_tag(kHeaderTag, generation)),
        data_tag_(generation_tag(kDataTag, generation)),
        failure_tag_(generation_tag(kFailureTag, generation)) {
    try {
      start(base, options, startup_deadline);
    } catch (...) {
      process_.release();
      throw;
    }
  }

  ~MpiCrossWorker() override {
    // A forked child's copy speaks for nobody: no message, no MPI call, no
    // lock (another thread of the parent may have held it at the fork).
    if (owner_process_.forked_child()) return;
    close();
    MutexLock lock(process_.mutex());
    int finalized = 0;
    MPI_Finalized(&finalized);
    // A broken channel's requests, or a leaving notice still in flight, may
    // still use the communicators: they are left to MPI.
    if (finalized != 0 || broken_ || quiet_locked() || keep_communicators_) return;
    if (data_ != MPI_COMM_NULL) MPI_Comm_free(&data_);
    if (control_ != MPI_COMM_NULL) MPI_Comm_free(&control_);
  }

  void close() noexcept override {
    if (owner_process_.forked_child()) return;  // (see the destructor)
    {
      MutexLock lock(process_.mutex());
      if (closed_) return;
      closed_ = true;
      int finalized = 0;
      MPI_Finalized(&finalized);
      // Tell the peers this worker is gone: one still waiting for it in a
      // collective raises UnavailableError at once instead of at its
      // deadline (after a clean end nobody reads the notice).
      if (shm_ != nullptr) {
        // (Posting is always safe, broken or not; a report posted earlier
        // stays: the first post wins.)
        shm_->leave(leaving_text());
      } else if (host_ != nullptr) {
        host_->leave(leaving_text());  // (and over MPI to the other hosts, below)
      }
      if (shm_ == nullptr && finalized == 0 && !broken_ && !reported_ && size_ > 1 && control_ != MPI_COMM_NULL &&
          !peer_ended_locked()) {
        send_leaving_locked();
      }
      if (watch_ != nullptr) watch_->leave();
    }
    process_.release();
  }

  int num_workers() const override { return size_; }
  int worker_index() const override { return rank_; }

  bool ranks_are_the_launchers() const override { return world_; }

  void all_reduce_sum(const char* what, DType dtype, const void* in_data, void* data, std::size_t count,
                      std::uint64_t layout, Clock::time_point deadline, FunctionRef<bool()> cancelled) override {
    throw_if_forked_child(what);
    Header mine{generation_, next_seq(what), static_cast<std::uint32_t>(Op::kAllReduce),
                static_cast<std::uint32_t>(dtype), count, -1};
    mine.layout = layout;
    if (shm_ != nullptr) {
      on_host([&] { shm_->all_reduce_sum(what, mine, dtype, in_data, data, count, deadline, cancelled); });
      return;
    }
    const Sum sum{dtype, dtype_size(dtype), static_cast<const std::byte*>(in_data), static_cast<std::byte*>(data),
                  count};
    if (hierarchical_) {
      sum_across_hosts(what, mine, sum, deadline, cancelled);
      return;
    }
    sum_over(all_, what, mine, sum, deadline, cancelled);
  }

  // A collective of every worker. On one host (shm_) worker 0 creates the
  // allocation for all; in the hierarchical mode each host's first worker
  // creates its host's (for the host-local step, copy-free), and a worker
  // alone on its host gets null (ordinary memory: it has no host-local
  // step) but takes part.
  std::shared_ptr<std::byte> allocate_shared(const char* what, std::size_t bytes,
                                             Clock::time_point deadline) override {
    throw_if_forked_child(what);
    if (size_ == 1 || (shm_ == nullptr && !hierarchical_)) return nullptr;
    ShmChannel* segment = shm_ != nullptr ? shm_.get() : host_.get();
    auto never = [] { return false; };
    const int creator = host_group_.ranks.front();
    // The creator's name ("!" and why, when the system refused: every
    // worker then returns null).
    std::string name;
    if (segment != nullptr && rank_ == creator) {
      try {
        name = segment->create_shared(bytes);
      } catch (const UnavailableError& e) {
        name = std::string("!") + e.what();
      }
    }
    // The creator unlinks the name whatever happens from here (every worker
    // of its host has mapped it, or gave up, or the job failed): nothing is
    // left in /dev/shm.
    struct Unlink {
      std::string name;
      ~Unlink() {
        if (!name.empty()) ShmChannel::unlink_shared(name);
      }
    } unlink{!name.empty() && name[0] == '/' ? name : std::string()};
    const auto names = all_gather(what, std::as_bytes(std::span(name)), deadline, never);
    std::shared_ptr<ShmChannel::SharedMapping> mapping;
    if (segment != nullptr) {
      const auto& theirs = names[static_cast<std::size_t>(creator)];
      const std::string made(reinterpret_cast<const char*>(theirs.data()), theirs.size());
      if (!made.empty() && made[0] == '/') {
        try {
          mapping = segment->map_shared(made, bytes);
        } catch (const UnavailableError&) {
          mapping = nullptr;
        }
      }
    }
    struct Mapped {
      std::uint64_t bytes;
      std::uint64_t mapped;
    } mine{bytes, segment == nullptr || mapping != nullptr ? 1u : 0u};
    const auto all = all_gather(what, std::as_bytes(std::span(&mine, 1)), deadline, never);
    std::vector<Mapped> theirs(all.size());
    for (std::size_t p = 0; p < all.size(); ++p) {
      if (all[p].size() == sizeof(Mapped)) std::memcpy(&theirs[p], all[p].data(), sizeof(Mapped));
    }
    // Every size against worker 0's, as check_headers does: the same
    // message on every worker.
    bool everyone = true;
    for (std::size_t p = 0; p < theirs.size(); ++p) {
      if (theirs[p].bytes != theirs[0].bytes) {
        throw WorkersMismatchError(std::string(what) + ": expected the same size on every worker, got " +
                                   std::to_string(theirs[0].bytes) + " bytes on worker 0 and " +
                                   std::to_string(theirs[p].bytes) + " bytes on worker " + std::to_string(p));
      }
      everyone = everyone && theirs[p].mapped == 1;
    }
    if (!everyone || segment == nullptr) return nullptr;
    return segment->register_shared(std::move(mapping));
  }

  const char* transport() const override {
    return shm_ != nullptr ? "host segment" : hierarchical_ ? "hierarchical" : "mpi";
  }

  std::uint64_t shared_in_place_sums() const override {
    const ShmChannel* segment = shm_ != nullptr ? shm_.get() : host_.get();
    return segment != nullptr ? segment->shared_sums() : 0;
  }

  std::vector<std::vector<std::byte>> all_gather(const char* what, std::span<const std::byte> mine_bytes,
                                                 Clock::time_point deadline, FunctionRef<bool()> cancelled) override {
    throw_if_forked_child(what);
    const Header mine{generation_, next_seq(what), static_cast<std::uint32_t>(Op::kAllGather), 0, mine_bytes.size(), -1};
    if (shm_ != nullptr) return on_host([&] { return shm_->all_gather(what, mine, mine_bytes, deadline, cancelled); });
    const std::vector<Header> all = exchange_headers(what, mine, all_, deadline, cancelled);
    std::vector<std::vector<std::byte>> out(static_cast<std::size_t>(size_));
    Requests requests(data_tag_);
    MutexLock lock(process_.mutex());
    throw_if_quiet_locked(what);
    for (int p = 0; p < size_; ++p) {
      auto& dst = out[static_cast<std::size_t>(p)];
      dst.resize(all[static_cast<std::size_t>(p)].count);
      if (p == rank_) {
        std::copy(mine_bytes.begin(), mine_bytes.end(), dst.begin());
        continue;
      }
      requests.recv(dst.data(), dst.size(), p, data_);
      requests.send(mine_bytes.data(), mine_bytes.size(), p, data_);
    }
    lock.unlock();
    wait(what, requests, deadline, cancelled);
    return out;
  }

  void broadcast(const char* what, void* data, std::size_t bytes, int root, Clock::time_point deadline,
                 FunctionRef<bool()> cancelled) override {
    throw_if_forked_child(what);
    const Header mine{generation_, next_seq(what), static_cast<std::uint32_t>(Op::kBroadcast), 0, bytes, root};
    if (shm_ != nullptr) {
      on_host([&] { shm_->broadcast(what, mine, data, bytes, root, deadline, cancelled); });
      return;
    }
    exchange_headers(what, mine, all_, deadline, cancelled);
    Requests requests(data_tag_);
    MutexLock lock(process_.mutex());
    throw_if_quiet_locked(what);
    if (rank_ == root) {
      for (int p = 0; p < size_; ++p) {
        if (p != rank_) requests.send(data, bytes, p, data_);
      }
    } else {
      requests.recv(data, bytes, root, data_);
    }
    lock.unlock();
    wait(what, requests, deadline, cancelled);
  }

  void report_failure(const std::string& message) noexcept override {
    if (owner_process_.forked_child()) return;  // (see the destructor)
    try {
      MutexLock lock(process_.mutex());
      if (reported_) return;
      reported_ = true;
      failure_text_ = "worker " + std::to_string(rank_) + ": " + message;
      // Through the watch too: a peer that saw a death reads no MPI message.
      if (watch_ != nullptr) watch_->report(failure_text_);
      // The host's peers in the hierarchical mode read its segment.
      if (host_ != nullptr) host_->report_failure(failure_text_);
      if (peer_ended_locked()) {  // no MPI call (watched_peer_gone_locked)
        break_channel_locked();
        return;
      }
      if (shm_ != nullptr) {
        // The peers watch this worker's state in the segment.
        shm_->report_failure(failure_text_);
        break_channel_locked();
        return;
      }
      std::string report = failure_text_;
      if (report.size() > kReportBytes) report = std::string(utf8_prefix(report, kReportBytes - 3)) + "...";
      send_to_peers_locked(std::move(report), std::chrono::milliseconds(200));
      break_channel_locked();
    } catch (...) {
      // Reporting is best effort: the deadline still bounds the others' waits.
    }
  }

 private:
  // A forked child's copy speaks for nobody: its collectives raise instead
  // of waiting for answers that go to its parent.
  void throw_if_forked_child(const char* what) const {
    if (!owner_process_.forked_child()) return;
    throw FailedPreconditionError(std::string("cross-worker ") + what + " on worker " + std::to_string(rank_) +
                                  ": expected the process that created this MultiWorkerMirroredStrategy, got a "
                                  "child forked from it without exec (the other workers talk to its parent); "
                                  "create the strategy in the process that uses it");
  }

  // Start-up, bounded by `deadline`: every worker says hello on the
  // program's communicator (naming the ones that do not within the
  // deadline, and checking that all are at the same strategy), then the
  // strategy's own communicators are duplicated from it.
  void start(MPI_Comm base, const ChannelOptions& options, Clock::time_point deadline) {
    const double timeout = options.startup_timeout_seconds;
    {
      MutexLock lock(process_.mutex());
      MPI_Comm_rank(base, &rank_);
      MPI_Comm_size(base, &size_);
    }
    all_.ranks.resize(static_cast<std::size_t>(size_));
    for (int p = 0; p < size_; ++p) all_.ranks[static_cast<std::size_t>(p)] = p;
    all_.me = static_cast<std::size_t>(rank_);
    say_hello(base, deadline, timeout);
    {
      MutexLock lock(process_.mutex());
      // MPI writes the new handles when the requests complete: into memory
      // that is left to MPI (leaked) if they do not complete in time.
      struct Dup {
        MPI_Comm comms[2] = {MPI_COMM_NULL, MPI_COMM_NULL};
        MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
      };
      auto dup = std::make_unique<Dup>();
      check_mpi(MPI_Comm_idup(base, &dup->comms[0], &dup->requests[0]), "MPI_Comm_idup");
      check_mpi(MPI_Comm_idup(base, &dup->comms[1], &dup->requests[1]), "MPI_Comm_idup");
      for (;;) {
        int done = 0;
        check_mpi(MPI_Testall(2, dup->requests, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
        if (done != 0) {
          data_ = dup->comms[0];
          control_ = dup->comms[1];
          break;
        }
        if (Clock::now() >= deadline) {
          (void)dup.release();
          break_channel_locked("start-up timed out");
          throw DeadlineExceededError("MultiWorkerMirroredStrategy start-up on worker " + std::to_string(rank_) +
                                      ": duplicating the communicator did not complete within " +
                                      seconds_text(timeout) + " (startup_timeout_seconds in MultiWorkerOptions)");
        }
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
      }
      // Errors come back as codes (and raise exceptions here) instead of
      // ending the job; a truncated receive is an expected one (see
      // all_reduce_sum).
      MPI_Comm_set_errhandler(data_, MPI_ERRORS_RETURN);
      MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN);
    }
    // The launcher's rank and size describe MPI_COMM_WORLD, not a
    // communicator of the program's.
    world_ = !options.mpi_communicator.has_value();
    if (size_ > 1) start_shared_memory(shared_memory_wanted(options), deadline);
    if (size_ > 1 && shm_ == nullptr && process_watch_wanted()) {
      // Workers that talk over MPI messages (on several hosts, usually over
      // TCP) watch each other's processes through connections of their own:
      // MPI does not report a peer that died (transport/peer_watch.h).
      auto never = [] { return false; };
      auto watch = PeerWatch::start(
          rank_, size_,
          [&](std::span<const std::byte> card) { return all_gather("start-up (process watch)", card, deadline, never); },
          deadline);
      MutexLock lock(process_.mutex());
      watch_ = std::move(watch);
    }
  }

  // Whether workers that share a host should use a shared-memory segment:
  // the option, unless DISTRIBUTE_SHARED_MEMORY=0 (for measuring and
  // testing the MPI path with the same program).
  static bool shared_memory_wanted(const ChannelOptions& options) {
    const char* env = std::getenv("DISTRIBUTE_SHARED_MEMORY");
    if (env != nullptr && std::string(env) == "0") return false;
    return options.shared_memory;
  }

  // The process watch, unless DISTRIBUTE_PROCESS_WATCH=0 (for measuring
  // its cost; a dead peer is then noticed at the deadline, if Open MPI
  // has not ended the job first). Every worker must agree: set it alike.
  static bool process_watch_wanted() {
    const char* env = std::getenv("DISTRIBUTE_PROCESS_WATCH");
    return env == nullptr || std::string(env) != "0";
  }

  // When every worker wants it and runs on this host: one segment for all
  // (shm_); on several hosts, the hierarchical mode (start_hierarchical).
  // Otherwise, or when a segment cannot be made or mapped, MPI carries
  // everything, as before. Every worker takes part in every step whatever it
  // wants, so that all decide alike. Bounded by `deadline`.
  void start_shared_memory(bool wanted, Clock::time_point deadline) {
    auto never = [] { return false; };
    const std::string host = ShmChannel::host_key();
    const std::string key = std::string(wanted && !host.empty() ? "1|" : "0|") + host;
    const auto as_bytes = [](const std::string& text) { return std::as_bytes(std::span(text)); };
    const auto keys = all_gather("start-up (host check)", as_bytes(key), deadline, never);
    const auto host_of = [](std::span<const std::byte> k) { return k.size() < 2 ? k : k.subspan(2); };
    several_hosts_ = host.empty() || std::ranges::any_of(keys, [&](const auto& k) {
                       return !std::ranges::equal(host_of(k), host_of(as_bytes(key)));
                     });
    if (several_hosts_) {
      start_hierarchical(keys, deadline);
      return;
    }
    for (const auto& k : keys) {
      // One that does not want the segment: MPI.
      if (key[0] != '1' || !std::ranges::equal(k, as_bytes(key))) return;
    }
    if (auto channel = open_host_segment(all_, deadline)) {
      shm_ = std::move(*channel);
      host_group_ = all_;
    }
  }

  // Workers on several hosts, every one wanting a segment and knowing its
  // host (the keys of start_shared_memory), some hosts with several
  // workers: the hierarchical mode (sum_across_hosts), with a segment per
  // such host; when any worker could not map its host's, all use MPI
  // messages alone.
  void start_hierarchical(const std::vector<std::vector<std::byte>>& keys, Clock::time_point deadline) {
    const auto& my_key = keys[static_cast<std::size_t>(rank_)];
    Group host;  // this host's workers
    leaders_ = Group{};
    bool everyone_wants = true;
    for (int p = 0; p < size_; ++p) {
      const auto& k = keys[static_cast<std::size_t>(p)];
      everyone_wants = everyone_wants && !k.empty() && k[0] == std::byte{'1'};
      const bool first_of_its_host =
          std::none_of(keys.begin(), keys.begin() + p, [&](const auto& earlier) { return earlier == k; });
      if (first_of_its_host) {
        if (p == rank_) leaders_.me = leaders_.size();
        leaders_.ranks.push_back(p);
      }
      if (k == my_key) {
        if (p == rank_) host.me = host.size();
        host.ranks.push_back(p);
      }
    }
    // (A key of "0|" or an empty host name: not wanted, or the host is
    // unknown; one worker per host: MPI alone is as good.)
    if (!everyone_wants || leaders_.size() == static_cast<std::size_t>(size_)) return;
    std::optional<std::unique_ptr<ShmChannel>> channel = open_host_segment(host, deadline);
    if (!channel.has_value()) return;
    host_ = std::move(*channel);
    host_group_ = host;
    leader_ = host.me == 0;
    hierarchical_ = true;
  }

  // The segment of the workers of `host` (this one among them), made by
  // its first worker, whose name an all-gather carries to the others; every
  // worker of the job takes part in the all-gathers, whichever host it is
  // on. Once all have mapped theirs (an all-gather of "mapped": the same
  // answer everywhere) the names are removed. Null when `host` is this
  // worker alone; nothing when any worker of the job could not (every one
  // then keeps MPI).
  std::optional<std::unique_ptr<ShmChannel>> open_host_segment(const Group& host, Clock::time_point deadline) {
    auto never = [] { return false; };
    const int local = static_cast<int>(host.me);
    const int local_size = static_cast<int>(host.size());
    std::unique_ptr<ShmChannel> channel;
    std::string name;
    if (local_size > 1 && local == 0) {
      try {
        channel = ShmChannel::create(0, local_size);
        name = channel->name();
      } catch (...) {
        // No segment (no /dev/shm, no room, ...): every worker uses MPI.
      }
    }
    const auto names = all_gather("start-up (shared memory)", std::as_bytes(std::span(name)), deadline, never);
    if (local_size > 1 && local != 0) {
      const auto& theirs = names[static_cast<std::size_t>(host.ranks[0])];
      if (!theirs.empty()) {
        try {
          channel = ShmChannel::attach(std::string(reinterpret_cast<const char*>(theirs.data()), theirs.size()),
                                       local, local_size);
        } catch (...) {
          // This worker cannot map it: all use MPI.
        }
      }
    }
    const std::byte ready = local_size == 1 || channel != nullptr ? std::byte{1} : std::byte{0};
    const auto all = all_gather("start-up (shared memory)", std::span(&ready, 1), deadline, never);
    if (channel != nullptr) channel->unlink();  // (the creator's: every worker of its host has mapped it or gave up)
    for (const auto& a : all) {
      if (a.size() != 1 || a[0] != std::byte{1}) return std::nullopt;
    }
    if (channel != nullptr) {
      if (local_size < size_) channel->name_workers(host.ranks);
      channel->watch_peers();
    }
    return channel;
  }

  // Runs a collective on the host's segment; a failure (not a mismatch,
  // which leaves the channel in step) breaks this channel too.
  template <class F>
  std::invoke_result_t<F> on_host(F&& collective) {
    try {
      return collective();
    } catch (const WorkersMismatchError&) {
      throw;
    } catch (...) {
      MutexLock lock(process_.mutex());
      std::string reason = shm_->broken();
      if (reason.empty()) reason = "a shared-memory collective failed";
      // The peers stop waiting for this worker (unless it reported already:
      // the first post wins, and a failing replica's run reports the cause
      // before its collectives are cancelled).
      shm_->report_failure("worker " + std::to_string(rank_) + ": " + reason);
      break_channel_locked(reason);
      throw;
    }
  }

  // all_reduce in the hierarchical mode: the sum of the host's workers on
  // its segment (in rank order), then the leaders' sum of those over MPI (in
  // host order), then the leader's result copied to its host's workers. The
  // same bits on every worker, and on every run with the same placement of
  // workers on hosts. Any failure, a mismatch too, is reported to every
  // worker (the host's through the segment, the others over MPI) and breaks
  // the channel: the workers of other hosts, waiting at another step, would
  // not learn of it otherwise.
  //
  // Each step waits a tenth of the timeout (the grace) longer than the one
  // before, so that a stuck worker is named by the workers that wait for it
  // directly (its host's, or the other leaders), and the others raise their
  // report instead of naming the leader they wait for: the deadline of a
  // worker that waits in the last step is up to a fifth of the timeout later.
  // The leader is the exception in the last step: there it waits for its
  // host's workers, which were past the host's sum before it began the
  // leaders' one, so each round of the hand-off waits until the
  // collective's own deadline, or a grace from the round's start if that
  // has passed. The other leaders, who may already wait for it in the next
  // all_reduce (whose deadline is a grace later than that call's own,
  // counted from after this leader's data reached them), then get its
  // report naming the stuck worker before their own deadline, instead of
  // naming the leader. (A next call of another kind, over every worker,
  // waits for the stuck worker directly and names it, with this leader
  // unless the report came first.)
  void sum_across_hosts(const char* what, const Header& mine, const Sum& sum, Clock::time_point deadline,
                        FunctionRef<bool()> cancelled) {
    const std::size_t bytes = sum.count * sum.e;
    const Clock::duration grace = std::max(deadline - Clock::now(), Clock::duration::zero()) / 10;
    const Clock::time_point leaders_deadline = extended(deadline, grace);
    try {
      if (host_ != nullptr) {
        host_->all_reduce_sum(what, mine, sum.dtype, sum.in, sum.out, sum.count, deadline, cancelled);
      } else if (sum.in != sum.out && bytes > 0) {
        std::memcpy(sum.out, sum.in, bytes);
      }
      if (leader_) sum_over(leaders_, what, mine, Sum{sum.dtype, sum.e, sum.out, sum.out, sum.count},
                            leaders_deadline, cancelled);
      if (host_ != nullptr) {
        fault_point(FaultPoint::kBeforeHostHandOff);
        const Header handed{mine.generation, mine.seq, static_cast<std::uint32_t>(Op::kBroadcast), 0, bytes, 0};
        // (The others wait for the leader's network exchange: no spinning.)
        const ShmChannel::SpinFor spin(*host_, leader_ ? host_->spin() : Clock::duration::zero());
        if (leader_) {
          host_->broadcast(what, handed, sum.out, bytes, 0, deadline, cancelled, /*each_round_at_least=*/grace);
        } else {
          host_->broadcast(what, handed, sum.out, bytes, 0, extended(leaders_deadline, grace), cancelled);
        }
      }
    } catch (...) {
      std::string reason = host_ != nullptr ? host_->broken() : std::string();
      if (reason.empty()) reason = what_of(std::current_exception());
      report_failure(reason);
      throw;
    }
  }

  std::string leaving_text() const {
    return "worker " + std::to_string(rank_) +
           " left: its MultiWorkerMirroredStrategy was destroyed (the program ended or moved on)";
  }

  void say_hello(MPI_Comm base, Clock::time_point deadline, double timeout) {
    if (size_ == 1) return;
    const auto n = static_cast<std::size_t>(size_);
    // What MPI may still write or read after a timeout (a receive already
    // matched cannot be cancelled) is left to it: leaked then.
    auto theirs_owned = std::make_unique<std::vector<std::uint64_t>>(n, 0);
    std::vector<std::uint64_t>& theirs = *theirs_owned;
    std::vector<MPI_Request> recvs(n, MPI_REQUEST_NULL), sends(n, MPI_REQUEST_NULL);
    auto mine = std::make_unique<std::uint64_t>(generation_);  // left to MPI if a send is abandoned
    MutexLock lock(process_.mutex());
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      const auto q = static_cast<std::size_t>(p);
      check_mpi(MPI_Irecv(&theirs[q], 1, MPI_UINT64_T, p, kHelloTag, base, &recvs[q]), "MPI_Irecv");
      check_mpi(MPI_Isend(mine.get(), 1, MPI_UINT64_T, p, kHelloTag, base, &sends[q]), "MPI_Isend");
    }
    for (;;) {
      int received = 0, sent = 0;
      check_mpi(MPI_Testall(size_, recvs.data(), &received, MPI_STATUSES_IGNORE), "MPI_Testall");
      check_mpi(MPI_Testall(size_, sends.data(), &sent, MPI_STATUSES_IGNORE), "MPI_Testall");
      if (received != 0 && sent != 0) break;
      if (Clock::now() >= deadline) {
        std::vector<int> missing;
        for (int p = 0; p < size_; ++p) {
          auto& r = recvs[static_cast<std::size_t>(p)];
          if (r == MPI_REQUEST_NULL) continue;
          missing.push_back(p);
          MPI_Cancel(&r);
          MPI_Request_free(&r);
        }
        for (MPI_Request& r : sends) {
          if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
        }
        (void)mine.release();
        (void)theirs_owned.release();
        break_channel_locked("start-up timed out");
        throw DeadlineExceededError(
            "MultiWorkerMirroredStrategy start-up on worker " + std::to_string(rank_) + ": worker(s) " +
            list_ids(missing) + " did not arrive within " + seconds_text(timeout) +
            " (not started, slow, or gone; startup_timeout_seconds in MultiWorkerOptions sets the bound)");
      }
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    }
    for (int p = 0; p < size_; ++p) {
      const std::uint64_t g = theirs[static_cast<std::size_t>(p)];
      if (p != rank_ && g != generation_) {
        break_channel_locked("start-up mismatch");
        throw FailedPreconditionError(
            "MultiWorkerMirroredStrategy start-up on worker " + std::to_string(rank_) + ": this is strategy number " +
            std::to_string(generation_) + " of this worker but number " + std::to_string(g) + " of worker " +
            std::to_string(p) + "; every worker must create its MultiWorkerMirroredStrategy objects in the same order");
      }
    }
  }

  // The notice that this worker left (the MPI mutex held).
  void send_leaving_locked() { send_to_peers_locked(leaving_text(), std::chrono::milliseconds(20)); }

  // Sends `text` to every peer on the control communicator (the MPI mutex
  // held), waiting for the sends at most `patience`: small messages
  // complete at once (eager); never blocks on a dead peer. Sends still
  // pending then keep their text (and the communicators) to the end.
  void send_to_peers_locked(std::string message, std::chrono::milliseconds patience) {
    auto text = std::make_unique<std::string>(std::move(message));
    std::vector<MPI_Request> sends;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      sends.push_back(MPI_REQUEST_NULL);
      MPI_Isend(text->data(), static_cast<int>(text->size()), MPI_CHAR, p, failure_tag_, control_, &sends.back());
    }
    int done = 0;
    const auto until = Clock::now() + patience;
    while (!sends.empty() && done == 0 && Clock::now() < until) {
      MPI_Testall(static_cast<int>(sends.size()), sends.data(), &done, MPI_STATUSES_IGNORE);
      if (done == 0) std::this_thread::yield();
    }
    if (!sends.empty() && done == 0) {
      // MPI still reads the text: leave it (and the communicators) to MPI.
      for (MPI_Request& r : sends) {
        if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
      }
      (void)text.release();
      keep_communicators_ = true;
    }
  }

  // The MPI algorithms of all_reduce among the workers of `g` (every
  // worker, or the hosts' first workers in the hierarchical mode), in the
  // order of g.ranks.
  void sum_over(const Group& g, const char* what, const Header& mine, const Sum& sum, Clock::time_point deadline,
                FunctionRef<bool()> cancelled) {
    const std::size_t bytes = sum.count * sum.e;
    if (g.size() > 1 && sum.count > 0 && (bytes < kDirectBytes || sum.count < g.size())) {
      sum_direct(g, what, mine, sum, deadline, cancelled);
      return;
    }
    exchange_headers(what, mine, g, deadline, cancelled);
    if (g.size() == 1 || sum.count == 0) {
      if (sum.in != sum.out && bytes > 0) std::memcpy(sum.out, sum.in, bytes);
      return;
    }
    sum_scattered(g, what, sum, deadline, cancelled);
  }

  // all_reduce below kDirectBytes: everyone's buffer to everyone, then the
  // sum in worker order. Headers and buffers travel in one round, except
  // buffers just above MPI's eager size, which follow the headers in
  // eager-sized pieces.
  void sum_direct(const Group& g, const char* what, const Header& mine, const Sum& sum, Clock::time_point deadline,
                  FunctionRef<bool()> cancelled) {
    const std::size_t m = g.size();
    const std::size_t me = g.me;
    const std::size_t bytes = sum.count * sum.e;
    std::vector<Header> all(m);
    all[me] = mine;
    scratch_.resize(m * bytes);
    Requests requests(data_tag_);
    const bool chunked = bytes > kEagerBytes && bytes <= kChunkedBytes;
    if (chunked) {
      // First the headers (so that every worker cuts the same chunks), then
      // messages small enough for MPI's eager protocol.
      exchange_headers(what, mine, g, deadline, cancelled);
      MutexLock lock(process_.mutex());
      throw_if_quiet_locked(what);
      for (std::size_t i = 0; i < m; ++i) {
        if (i == me) continue;
        for (std::size_t at = 0; at < bytes; at += kEagerBytes) {
          const std::size_t n = std::min(kEagerBytes, bytes - at);
          requests.recv(scratch_.data() + i * bytes + at, n, g.ranks[i], data_);
          requests.send(sum.in + at, n, g.ranks[i], data_);
        }
      }
    } else {
      // One round: the headers and the buffers at once. A peer's larger
      // buffer is cut to this worker's size (MPI reports the truncation;
      // the headers name the mismatch).
      MutexLock lock(process_.mutex());
      throw_if_quiet_locked(what);
      post_headers(mine, all, requests, g);
      for (std::size_t i = 0; i < m; ++i) {
        if (i == me) continue;
        requests.recv(scratch_.data() + i * bytes, bytes, g.ranks[i], data_);
        requests.send(sum.in, bytes, g.ranks[i], data_);
      }
    }
    wait(what, requests, deadline, cancelled);
    if (!chunked) check_headers(what, all, g.ranks);
    sum_in_order(sum.dtype, sum.out, 0, sum.count, m,
                 [&](std::size_t w) { return w == me ? sum.in : scratch_.data() + w * bytes; });
  }

  // all_reduce from kDirectBytes, after the header exchange: reduce-scatter
  // (member i sums elements [i*count/M, (i+1)*count/M) of every buffer, in
  // member order) then all-gather of the sums, straight into place.
  void sum_scattered(const Group& g, const char* what, const Sum& sum, Clock::time_point deadline,
                     FunctionRef<bool()> cancelled) {
    const std::size_t m = g.size();
    const std::size_t me = g.me;
    const std::size_t e = sum.e;
    auto first = [&](std::size_t w) { return sum.count * w / m; };
    const std::size_t my_count = first(me + 1) - first(me);
    scratch_.resize(m * my_count * e);
    {
      Requests requests(data_tag_);
      MutexLock lock(process_.mutex());
      throw_if_quiet_locked(what);
      for (std::size_t q = 0; q < m; ++q) {
        if (q == me) continue;
        requests.recv(scratch_.data() + q * my_count * e, my_count * e, g.ranks[q], data_);
        requests.send(sum.in + first(q) * e, (first(q + 1) - first(q)) * e, g.ranks[q], data_);
      }
      lock.unlock();
      wait(what, requests, deadline, cancelled);
    }
    std::byte* mine_begin = sum.out + first(me) * e;
    const std::byte* my_input = sum.in + first(me) * e;
    sum_in_order(sum.dtype, mine_begin, 0, my_count, m, [&](std::size_t w) {
      return w == me ? my_input : scratch_.data() + w * my_count * e;
    });
    Requests requests(data_tag_);
    MutexLock lock(process_.mutex());
    throw_if_quiet_locked(what);
    for (std::size_t q = 0; q < m; ++q) {
      if (q == me) continue;
      requests.recv(sum.out + first(q) * e, (first(q + 1) - first(q)) * e, g.ranks[q], data_);
      requests.send(mine_begin, my_count * e, g.ranks[q], data_);
    }
    lock.unlock();
    wait(what, requests, deadline, cancelled);
  }

  // Requests of one step and the peer each one talks to (posted with the
  // MPI mutex held).
  struct Requests {
    explicit Requests(int data_tag) : tag(data_tag) {}
    int tag;
    std::vector<MPI_Request> requests;
    std::vector<int> peers;
    std::vector<bool> receiving;
    void recv(void* buffer, std::size_t bytes, int peer, MPI_Comm comm) {
      add(peer, true);
      check_mpi(MPI_Irecv(buffer, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm, &requests.back()),
                "MPI_Irecv");
    }
    void send(const void* buffer, std::size_t bytes, int peer, MPI_Comm comm) {
      add(peer, false);
      check_mpi(MPI_Isend(buffer, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm, &requests.back()),
                "MPI_Isend");
    }
    void add(int peer, bool is_recv) {
      requests.push_back(MPI_REQUEST_NULL);
      peers.push_back(peer);
      receiving.push_back(is_recv);
    }
  };

  std::uint64_t next_seq(const char* what) {
    MutexLock lock(process_.mutex());
    if (!kept_report_.empty() && !broken_) {
      const std::string msg = std::string("cross-worker ") + what + " on worker " +
                              std::to_string(rank_) + " failed: " + kept_report_;
      break_channel_locked(msg);
      throw UnavailableError(msg);
    }
    if (ShmChannel* segment = shm_ != nullptr ? shm_.get() : host_.get(); segment != nullptr && !broken_ && !closed_) {
      // A peer that failed or left will never meet this call.
      if (std::optional<std::string> report = segment->peer_report()) {
        const std::string msg = std::string("cross-worker ") + what + " on worker " + std::to_string(rank_) +
                                " failed: " + *report;
        break_channel_locked(msg);
        throw UnavailableError(msg);
      }
    }
    // (On one host the waits look often enough: no poll() per call.)
    if (watch_ != nullptr && several_hosts_ && !broken_ && !closed_) {
      if (std::optional<std::string> gone = watched_peer_gone_locked()) {
        const std::string msg = std::string("cross-worker ") + what + " on worker " + std::to_string(rank_) +
                                " failed: " + *gone;
        break_channel_locked(msg);
        throw UnavailableError(msg);
      }
    }
    if (closed_) {
      throw FailedPreconditionError(std::string("cross-worker ") + what + " on worker " + std::to_string(rank_) +
                                    ": its MultiWorkerMirroredStrategy was destroyed; a distributed dataset or "
                                    "variable cannot be used after its strategy");
    }
    if (broken_) {
      throw FailedPreconditionError(std::string("cross-worker ") + what + " on worker " + std::to_string(rank_) +
                                    ": the channel between the workers broke earlier (" + broken_reason_ +
                                    "); a MultiWorkerMirroredStrategy cannot continue after a failed collective");
    }
    return ++seq_;
  }

  // Sends `mine` to every other member of `g`, receives theirs (in g's
  // order), and checks them against the first's (so every member raises the
  // same error).
  std::vector<Header> exchange_headers(const char* what, const Header& mine, const Group& g,
                                       Clock::time_point deadline, FunctionRef<bool()> cancelled) {
    std::vector<Header> all(g.size());
    all[g.me] = mine;
    if (g.size() == 1) return all;
    Requests requests(data_tag_);
    {
      MutexLock lock(process_.mutex());
      throw_if_quiet_locked(what);
      post_headers(mine, all, requests, g);
    }
    wait(what, requests, deadline, cancelled);
    check_headers(what, all, g.ranks);
    return all;
  }

  // Posts the exchange of `mine` with every other member's header of `g`
  // into `all` (the MPI mutex held).
  void post_headers(const Header& mine, std::vector<Header>& all, Requests& requests, const Group& g) {
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (i == g.me) continue;
      const int p = g.ranks[i];
      requests.add(p, true);
      check_mpi(MPI_Irecv(&all[i], sizeof(Header), MPI_BYTE, p, header_tag_, data_,
                          &requests.requests.back()),
                "MPI_Irecv");
      requests.add(p, false);
      check_mpi(MPI_Isend(&mine, sizeof(Header), MPI_BYTE, p, header_tag_, data_, &requests.requests.back()),
                "MPI_Isend");
    }
  }

  // Polls until every request completed. Raises on a peer's failure report,
  // on cancellation and at the deadline, breaking the channel (the requests
  // still in flight keep their buffers: see the header).
  void wait(const char* what, Requests& requests, Clock::time_point deadline,
            FunctionRef<bool()> cancelled) {
    InterruptPoll poll;  // the waiting thread's interrupt check (distribute/interrupt.h)
    for (unsigned round = 0;; ++round) {
      {
        MutexLock lock(process_.mutex());
        throw_if_quiet_locked(what);  // (a death seen by another thread: close, report_failure)
        if (watch_ != nullptr && (several_hosts_ || (round % 64) == 63)) {
          // Did a peer's process end? Across hosts, looked at once a round,
          // before the round's MPI calls: Open MPI's TCP transport may meet
          // the broken connection first and end the process (one poll() a
          // round: these are network waits). On one host (MPI's
          // shared-memory transport does not notice a death), every 64
          // rounds.
          if (std::optional<std::string> gone = watched_peer_gone_locked()) {
            const std::string msg = std::string("cross-worker ") + what + " on worker " + std::to_string(rank_) +
                                    " failed: " + *gone;
            if (quiet_locked()) {
              // A death: no MPI call from here on (watched_peer_gone_locked);
              // the requests are left as they are, never progressed again.
              break_channel_locked(msg);
              throw UnavailableError(msg);
            }
            // A report or a departure can overtake this step's last data:
            // as for an MPI report, a short grace, then the report is kept
            // for the next collective.
            if (complete_within_grace_locked(requests)) {
              kept_report_ = *gone;
              return;
            }
            abandon_locked(requests, msg);
            throw UnavailableError(msg);
          }
        }
        if (test_locked(requests)) return;
        // Failure reports are rare: look every 32 polls (a few microseconds).
        if ((round % 32) == 31) check_failure_reports_locked(what, requests);
      }
      if (cancelled()) {
        abandon(requests, std::string("cancelled: a replica of worker ") + std::to_string(rank_) + " failed");
        throw CancelledError(std::string("cross-worker ") + what + " on worker " +
                             std::to_string(rank_) + " cancelled: a local replica failed");
      }
      if ((round % 64) == 63 && poll.active()) {
        try {
          poll.poll();
        } catch (...) {
          // The others are told at once, as of a failed replica.
          const std::string reason = std::string("cross-worker ") + what + " interrupted on worker " +
                                     std::to_string(rank_);
          abandon(requests, reason);
          report_failure(reason);
          throw;
        }
      }
      if ((round % 64) == 63 && Clock::now() >= deadline) {
        // Every request tested (not only up to the first pending one), so
        // that only the workers not heard from are named.
        if (test_every(requests)) return;
        std::vector<int> waiting;
        for (std::size_t i = 0; i < requests.requests.size(); ++i) {
          if (requests.requests[i] != MPI_REQUEST_NULL && requests.receiving[i]) waiting.push_back(requests.peers[i]);
        }
        std::sort(waiting.begin(), waiting.end());
        waiting.erase(std::unique(waiting.begin(), waiting.end()), waiting.end());
        const std::string msg = std::string("cross-worker ") + what +
                                " exceeded its deadline on worker " + std::to_string(rank_) +
                                ": nothing received from worker(s) " + list_ids(waiting) +
                                " (stopped, stuck or gone; timeout_seconds in CommunicationOptions sets the deadline)";
        abandon(requests, msg);
        throw DeadlineExceededError(msg);
      }
      if (round > 1000) {
        std::this_thread::yield();  // a long wait leaves the core to the local replicas
      } else {
        cpu_relax();
      }
    }
  }

  // True when every request completed; tests every pending one (takes the
  // MPI mutex).
  bool test_every(Requests& requests) {
    MutexLock lock(process_.mutex());
    if (quiet_locked()) return false;  // (no MPI call: watched_peer_gone_locked)
    return test_every_locked(requests);
  }
  bool test_every_locked(Requests& requests) REQUIRES(process_.mutex()) {
    bool all = true;
    for (MPI_Request& r : requests.requests) all = test_one_locked(r) && all;
    return all;
  }

  // True when every request completed. Tests them in order up to the first
  // one still pending: one MPI_Test drives MPI's progress for all of them.
  bool test_locked(Requests& requests) {
    for (MPI_Request& r : requests.requests) {
      if (!test_one_locked(r)) return false;
    }
    return true;
  }

  // True when `r` completed (or was already). A truncated receive (a peer's
  // larger buffer) completes: the header check that follows names the
  // mismatch.
  static bool test_one_locked(MPI_Request& r) {
    if (r == MPI_REQUEST_NULL) return true;
    int done = 0;
    MPI_Status status;
    const int code = MPI_Test(&r, &done, &status);
    if (code != MPI_SUCCESS && error_class(code) != MPI_ERR_TRUNCATE) check_mpi(code, "MPI_Test");
    if (code != MPI_SUCCESS) r = MPI_REQUEST_NULL;
    return r == MPI_REQUEST_NULL;
  }

  // Raises UnavailableError when a peer reported a failure, unless this
  // step's messages all arrive within a short grace (a report can overtake
  // the last data a peer sent before leaving): then the report is kept and
  // raised by the next collective.
  void check_failure_reports_locked(const char* what, Requests& requests) REQUIRES(process_.mutex()) {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, failure_tag_, control_, &flag, &status);
    if (flag == 0) return;
    int length = 0;
    MPI_Get_count(&status, MPI_CHAR, &length);
    std::string text;
    if (length >= 0 && static_cast<std::size_t>(length) <= kReportBytes) {
      // Sent eagerly (at most kReportBytes): here whole, received at once.
      text.resize(static_cast<std::size_t>(length));
      MPI_Recv(text.data(), length, MPI_CHAR, status.MPI_SOURCE, failure_tag_, control_, MPI_STATUS_IGNORE);
    } else {
      // Not one of this library's reports: receiving it could wait for its
      // sender, which makes no more MPI calls once it reported.
      text = "a report of " + std::to_string(length) + " bytes, more than the " + std::to_string(kReportBytes) +
             " a report has, left unread";
    }
    if (complete_within_grace_locked(requests)) {
      kept_report_ = "worker " + std::to_string(status.MPI_SOURCE) + " reported a failure (" + text + ")";
      return;
    }
    const std::string msg = std::string("cross-worker ") + what + " on worker " +
                            std::to_string(rank_) + " failed: worker " + std::to_string(status.MPI_SOURCE) +
                            " reported a failure (" + text + ")";
    abandon_locked(requests, msg);
    throw UnavailableError(msg);
  }

  // What the process watch saw of a peer that ended, reported a failure or
  // left, if anything. Once it saw one end, this process makes no more MPI
  // calls: any call that drives Open MPI's progress may meet the broken
  // connection and end the process (ob1 aborts on a transport error)
  // before the error is raised. The others learn of the death from their
  // own watch; at exit the job is aborted (MpiProcess). (A peer that
  // reported or left is still there, in MPI_Finalize or before its abort.)
  std::optional<std::string> watched_peer_gone_locked() REQUIRES(process_.mutex()) {
    const std::optional<PeerWatch::Event> event = watch_->check();
    if (!event.has_value()) return std::nullopt;
    // (Worded as the MPI messages and the segment's watch word them.)
    if (event->kind == PeerWatch::Kind::kEnded) {
      const std::string ended = event->who + " ended without reporting a failure (killed or crashed: its "
                                             "connection to this worker closed)";
      process_.mark_peer_lost(ended);
      return ended;
    }
    const std::string worker = "worker " + std::to_string(event->worker);
    if (event->kind == PeerWatch::Kind::kLeft) {
      return worker + " reported a failure (" + worker +
             " left: its MultiWorkerMirroredStrategy was destroyed (the program ended or moved on))";
    }
    return worker + " reported a failure (" + event->report + ")";
  }

  // Whether a peer's process ended, as a watch saw (the process's state:
  // it makes no more MPI calls).
  bool quiet_locked() const REQUIRES(process_.mutex()) { return !process_.peer_lost().empty(); }

  // After a death seen by the watch: UnavailableError, and no MPI call.
  void throw_if_quiet_locked(const char* what) REQUIRES(process_.mutex()) {
    if (!quiet_locked()) return;
    const std::string msg = std::string("cross-worker ") + what + " on worker " + std::to_string(rank_) +
                            " failed: " + process_.peer_lost();
    break_channel_locked(msg);
    throw UnavailableError(msg);
  }

  // Whether a peer's process ended (looked at now): then no MPI call.
  bool peer_ended_locked() REQUIRES(process_.mutex()) {
    if (watch_ != nullptr && !quiet_locked()) (void)watched_peer_gone_locked();
    return quiet_locked();
  }

  // Whether `requests` complete within 10 ms (at least one test after the
  // grace, however long this thread was descheduled). False at once when
  // the watch sees a peer's process end meanwhile (then no more MPI calls:
  // watched_peer_gone_locked), looked at as often as wait() looks.
  bool complete_within_grace_locked(Requests& requests) REQUIRES(process_.mutex()) {
    const auto grace_end = Clock::now() + std::chrono::milliseconds(10);
    for (unsigned round = 0, last = 0; last == 0; ++round) {
      if (watch_ != nullptr && (several_hosts_ || (round % 64) == 63) && peer_ended_locked()) return false;
      last = Clock::now() >= grace_end ? 1 : 0;
      if (test_locked(requests)) return true;
    }
    return false;
  }

  void abandon(Requests& requests, const std::string& reason) {
    MutexLock lock(process_.mutex());
    abandon_locked(requests, reason);
  }

  // Gives up on a step: pending receives are cancelled (so that nothing is
  // written into the caller's buffers later), pending sends are left to MPI,
  // and the channel breaks.
  void abandon_locked(Requests& requests, const std::string& reason) REQUIRES(process_.mutex()) {
    if (quiet_locked()) {  // no MPI call (watched_peer_gone_locked): the requests stay as they are
      break_channel_locked(reason);
      return;
    }
    for (std::size_t i = 0; i < requests.requests.size(); ++i) {
      MPI_Request& r = requests.requests[i];
      if (r == MPI_REQUEST_NULL) continue;
      if (requests.receiving[i]) MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
    break_channel_locked(reason);
  }

  void break_channel_locked(const std::string& reason = "") {
    if (!broken_) broken_reason_ = reason.empty() ? failure_text_ : reason;
    broken_ = true;
    process_.mark_broken();
    // The host's other workers may wait on its segment, where no MPI report
    // or process watch reaches them (a failure outside sum_across_hosts:
    // next_seq, a cross-worker call from the caller's thread). The first
    // post wins: a report made before stays.
    if (host_ != nullptr) host_->report_failure("worker " + std::to_string(rank_) + ": " + broken_reason_);
  }

  // out[i] = the sum over workers w (in order) of source(w)[i] (a source may
  // be `out` itself: each element is read before it is written).
  template <class Source>
  void sum_in_order(DType dtype, std::byte* out, std::size_t begin, std::size_t count, std::size_t m,
                    Source source) {
    dispatch_dtype(dtype, [&](auto zero) {
      using T = decltype(zero);
      T* o = reinterpret_cast<T*>(out);
      std::vector<const T*> in(m);
      for (std::size_t w = 0; w < m; ++w) in[w] = reinterpret_cast<const T*>(source(w));
      for (std::size_t i = begin; i < begin + count; ++i) {
        T acc = in[0][i];
        for (std::size_t w = 1; w < m; ++w) acc += in[w][i];
        o[i] = acc;
      }
    });
  }

  MpiProcess& process_;
  const std::uint64_t generation_;  // this strategy's number in the process
  const int header_tag_, data_tag_, failure_tag_;
  bool closed_ = false;              // its strategy was destroyed
  bool keep_communicators_ = false;  // MPI may still use them: never freed
  MPI_Comm data_ = MPI_COMM_NULL;
  MPI_Comm control_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  bool world_ = true;  // the communicator is MPI_COMM_WORLD's processes
  std::uint64_t seq_ = 0;
  std::vector<std::byte> scratch_;
  bool broken_ = false;
  bool reported_ = false;
  std::string kept_report_;  // a peer's report received after a step's data
  std::string broken_reason_;
  std::string failure_text_;
  OwnerProcess owner_process_;
  std::unique_ptr<ShmChannel> shm_;  // every worker on this host: collectives through shared memory
  Group all_;                        // every worker
  // The hierarchical mode (workers on several hosts, some sharing one):
  // all_reduce sums on each host's segment (host_; null on a host of one
  // worker), then among the hosts' first workers (leaders_) over MPI, then
  // each leader hands the result to its host.
  bool hierarchical_ = false;
  bool leader_ = false;
  std::unique_ptr<ShmChannel> host_;
  Group leaders_;
  Group host_group_;  // the workers of shm_ or host_ (this host's)
  // Otherwise the peers' processes are watched; set at start-up, then used
  // under process_.mutex().
  std::unique_ptr<PeerWatch> watch_ GUARDED_BY(process_.mutex());
  bool several_hosts_ = true;  // the workers are not all on this host (or it is not known)
};

}  // namespace

std::shared_ptr<CrossWorker> make_mpi_cross_worker(const ChannelOptions& options) {
  const double timeout = options.startup_timeout_seconds;
  if (!(timeout > 0)) {
    throw InvalidArgumentError("MultiWorkerOptions: expected startup_timeout_seconds > 0, got " +
                               std::to_string(timeout));
  }
  const Clock::time_point deadline = deadline_after(timeout);
  // Initializes MPI (or checks the program's initialization).
  MpiProcess& process = MpiProcess::start(deadline, timeout);
  MPI_Comm base = MPI_COMM_WORLD;
  if (options.mpi_communicator.has_value()) {
    const MPI_Comm* comm = std::any_cast<MPI_Comm>(&options.mpi_communicator);
    if (comm == nullptr) {
      throw InvalidArgumentError(
          "MultiWorkerOptions.mpi_communicator: expected an MPI_Comm (set it with distribute::with_communicator from "
          "distribute/mpi.h), got a value of another type");
    }
    base = *comm;
  }
  const std::uint64_t generation = process.acquire();
  return std::make_shared<MpiCrossWorker>(base, options, process, generation, deadline);
}

}  // namespace distribute::internal
