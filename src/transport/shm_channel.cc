#include "transport/shm_channel.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <thread>


#include "core/describe.h"
#include "core/dtype_dispatch.h"
#include "core/reduce_kernels.h"
#include "distribute/errors.h"
#include "runtime/deadline.h"
#include "runtime/interrupt.h"
#include "runtime/spin_wait.h"

namespace distribute::internal {

namespace {

enum State : std::uint32_t { kAlive = 0, kFailed = 1, kLeft = 2 };
constexpr std::size_t kTextBytes = 1024;
constexpr std::size_t kLine = 64;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

// One slot per worker and parity: large enough for a direct all_reduce,
// small enough that many workers fit in a container's /dev/shm.
std::size_t slot_bytes_for(int size) { return size <= 8 ? std::size_t{1} << 20 : std::size_t{256} << 10; }

std::string errno_text(const char* call) { return std::string(call) + ": " + std::strerror(errno); }

std::string read_first_line(const char* path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

std::string link_target(const char* path) {
  char buffer[256];
  const ssize_t n = ::readlink(path, buffer, sizeof buffer);
  return n > 0 ? std::string(buffer, static_cast<std::size_t>(n)) : std::string();
}

// The inode of this process's PID namespace ("4026531836"), or empty: the
// segments' names carry it, so that a process removes only names whose
// creator's pid it can look up.
std::string pid_namespace_id() {
  const std::string link = link_target("/proc/self/ns/pid");  // "pid:[4026531836]"
  const std::size_t open = link.find('['), close = link.find(']');
  if (open == std::string::npos || close == std::string::npos || close <= open + 1) return "";
  return link.substr(open + 1, close - open - 1);
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

// Reserves the `bytes` of the segment behind `fd` now: a tmpfs short of
// space fails here, not with SIGBUS at the first write.
void reserve(int fd, std::size_t bytes) {
  const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    throw UnavailableError("posix_fallocate of " + std::to_string(bytes) + " bytes in /dev/shm: " +
                           std::strerror(err));
  }
}

// Maps the `bytes` of the segment behind `fd`; with `check_size`, first
// checks that the segment has that size (another process made it).
std::byte* map_segment(int fd, std::size_t bytes, bool check_size) {
  if (check_size) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw UnavailableError(errno_text("fstat"));
    if (static_cast<std::size_t>(st.st_size) != bytes) {
      throw UnavailableError("the segment has " + std::to_string(st.st_size) + " bytes, expected " +
                             std::to_string(bytes));
    }
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) throw UnavailableError(errno_text("mmap"));
  return static_cast<std::byte*>(p);
}

}  // namespace

// Plain words in the (zero-filled) segment, accessed through std::atomic_ref:
// no object needs constructing in memory another process created.
struct ShmChannel::Control {
  alignas(kLine) std::uint64_t arrived;  // the last barrier this worker arrived at
  alignas(kLine) std::uint32_t state;    // State; text and report are written before it changes
  std::uint32_t attached;                // worker 0's: how many workers mapped the segment
  std::uint64_t report;                  // the order of this worker's report among all reports
  std::uint64_t reports;                 // worker 0's: reports posted so far
  std::int32_t pid;                      // written when the worker attached
  Header headers[2];                     // per barrier parity
  char text[kTextBytes];                 // why it failed or left
};
static_assert(std::atomic_ref<std::uint64_t>::is_always_lock_free &&
                  std::atomic_ref<std::uint32_t>::is_always_lock_free,
              "the shared segment's words must be lock-free to work across processes");

namespace {
template <class T>
std::atomic_ref<T> word(T& t) {
  return std::atomic_ref<T>(t);
}
}  // namespace

std::string ShmChannel::host_key() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string boot = read_first_line("/proc/sys/kernel/random/boot_id");
  const std::string ipc = link_target("/proc/self/ns/ipc"), mnt = link_target("/proc/self/ns/mnt"),
                    pid = link_target("/proc/self/ns/pid");
  // What cannot be read cannot be compared: then no worker shares a host.
  if (boot.empty() || ipc.empty() || mnt.empty() || pid.empty()) return "";
  return boot + "|" + host + "|" + ipc + "|" + mnt + "|" + pid;
}

std::string ShmChannel::name_prefix() {
  const std::string ns = pid_namespace_id();
  return "distribute-" + (ns.empty() ? std::string("0") : ns) + "-";
}

void ShmChannel::remove_stale_segments() noexcept {
  const std::string prefix = name_prefix();
  if (prefix == "distribute-0-") return;  // (no namespace to tell whose pids the names hold)
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  while (const dirent* entry = ::readdir(dir)) {
    const char* name = entry->d_name;
    if (std::strncmp(name, prefix.c_str(), prefix.size()) != 0) continue;
    const char* digits = name + prefix.size();
    if (*digits < '0' || *digits > '9') continue;  // (strtol would take a sign or spaces)
    char* end = nullptr;
    const long pid = std::strtol(digits, &end, 10);
    if (*end != '-' || pid <= 0 || pid > std::numeric_limits<pid_t>::max()) continue;
    // Its creator ended (a live one, even another user's, keeps it).
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) ::shm_unlink(("/" + std::string(name)).c_str());
  }
  ::closedir(dir);
}

namespace {
// "/distribute-<ns>-<pid>-<n>-<random>": remove_stale_segments reads the pid.
std::string fresh_name() {
  static std::atomic<unsigned> made{0};
  std::random_device random;
  return "/" + ShmChannel::name_prefix() + std::to_string(::getpid()) + "-" + std::to_string(++made) + "-" +
         std::to_string(random());
}
}  // namespace

std::unique_ptr<ShmChannel> ShmChannel::create(int rank, int size) {
  remove_stale_segments();
  const std::string name = fresh_name();
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) throw UnavailableError(errno_text("shm_open"));
  try {
    return std::unique_ptr<ShmChannel>(new ShmChannel(name, fd, rank, size, slot_bytes_for(size), true));
  } catch (...) {
    ::shm_unlink(name.c_str());
    throw;
  }
}

std::unique_ptr<ShmChannel> ShmChannel::attach(const std::string& name, int rank, int size) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) throw UnavailableError(errno_text("shm_open"));
  return std::unique_ptr<ShmChannel>(new ShmChannel(name, fd, rank, size, slot_bytes_for(size), false));
}

ShmChannel::ShmChannel(std::string name, int fd, int rank, int size, std::size_t slot_bytes, bool owner)
    : name_(std::move(name)), fd_(fd), rank_(rank), size_(size), slot_bytes_(slot_bytes), owner_(owner) {
  const auto n = static_cast<std::size_t>(size);
  bytes_ = round_up(sizeof(Control) * n, 4096) + 2 * n * slot_bytes_;
  try {
    if (owner) reserve(fd_, bytes_);
    base_ = map_segment(fd_, bytes_, /*check_size=*/!owner);
  } catch (...) {
    ::close(fd_);
    throw;
  }
  ins_.resize(static_cast<std::size_t>(size));
  headers_.resize(static_cast<std::size_t>(size));
  // (The segment starts zeroed: every worker kAlive at barrier 0.)
  control(rank_).pid = static_cast<std::int32_t>(::getpid());
  // The last worker to map the segment removes its name (worker 0 does too
  // once start-up knows every worker has it, or gave up).
  if (word(control(0).attached).fetch_add(1) + 1 == static_cast<std::uint32_t>(size_)) {
    ::shm_unlink(name_.c_str());
  }
}

ShmChannel::~ShmChannel() {
  for (int fd : pidfds_) {
    if (fd >= 0) ::close(fd);
  }
  if (base_ != nullptr) ::munmap(base_, bytes_);
  if (fd_ >= 0) ::close(fd_);
  unlink();
}

void ShmChannel::unlink() noexcept {
  if (owner_ && !owner_process_.forked_child()) ::shm_unlink(name_.c_str());
  owner_ = false;
}

void ShmChannel::name_workers(std::vector<int> ids) {
  if (ids.size() != static_cast<std::size_t>(size_)) {
    throw InternalError("ShmChannel::name_workers: expected " + std::to_string(size_) + " ids, got " +
                        std::to_string(ids.size()));
  }
  ids_ = std::move(ids);
}

void ShmChannel::watch_peers() {
  pidfds_.assign(static_cast<std::size_t>(size_), -1);
  for (int p = 0; p < size_; ++p) {
    // Without pidfds (an old kernel), dead_peer falls back on kill(pid, 0).
    if (p != rank_) pidfds_[static_cast<std::size_t>(p)] = open_pidfd(static_cast<pid_t>(control(p).pid));
  }
}

ShmChannel::Control& ShmChannel::control(int worker) const {
  return reinterpret_cast<Control*>(base_)[worker];
}

std::byte* ShmChannel::slot(int worker, std::uint64_t barrier) const {
  const auto n = static_cast<std::size_t>(size_);
  const std::size_t index = 2 * static_cast<std::size_t>(worker) + static_cast<std::size_t>(barrier % 2);
  return base_ + round_up(sizeof(Control) * n, 4096) + index * slot_bytes_;
}

std::uint64_t ShmChannel::barrier(const char* what, const Header& mine, Clock::time_point deadline,
                                  FunctionRef<bool()> cancelled) {
  const std::uint64_t b = ++barrier_;
  Control& me = control(rank_);
  me.headers[b % 2] = mine;
  word(me.arrived).store(b, std::memory_order_release);
  wait(what, b, deadline, cancelled);
  return b;
}

void ShmChannel::check_headers_of(const char* what, std::uint64_t b) const {
  for (int p = 0; p < size_; ++p) headers_[static_cast<std::size_t>(p)] = control(p).headers[b % 2];
  check_headers(what, headers_, ids_);
}

void ShmChannel::wait(const char* what, std::uint64_t b, Clock::time_point deadline,
                      FunctionRef<bool()> cancelled) {
  auto where = [&] { return std::string("cross-worker ") + what + " on worker " + std::to_string(id(rank_)); };
  InterruptPoll poll;  // the waiting thread's interrupt check (distribute/interrupt.h)
  const Clock::time_point start = Clock::now();
  Clock::time_point next_liveness = start + std::chrono::milliseconds(1);
  enum { kSpin, kYield, kSleep } backoff = kSpin;
  for (unsigned round = 0;; ++round) {
    bool all = true;
    for (int p = 0; p < size_ && all; ++p) all = word(control(p).arrived).load(std::memory_order_acquire) >= b;
    if (all) return;
    if (std::optional<std::string> report = peer_report()) {
      const std::string msg = where() + " failed: " + *report;
      fail(msg, std::make_exception_ptr(UnavailableError(msg)));
    }
    if (cancelled()) {
      const std::string msg = where() + " cancelled: a local replica failed";
      fail(msg, std::make_exception_ptr(CancelledError(msg)));
    }
    // The clock, the interrupt check and the peers' processes: every 64
    // rounds while spinning, every round once the wait yields or sleeps.
    if (backoff == kSpin && (round % 64) != 63) {
      cpu_relax();
      continue;
    }
    if (backoff == kYield) std::this_thread::yield();
    if (backoff == kSleep) std::this_thread::sleep_for(std::chrono::microseconds(50));
    if (poll.active()) {
      try {
        poll.poll();
      } catch (...) {
        // The others are told at once, as of a failed replica.
        const std::string reason = std::string("cross-worker ") + what + " interrupted on worker " +
                                   std::to_string(id(rank_));
        report_failure("worker " + std::to_string(id(rank_)) + ": " + reason);
        fail(reason, std::current_exception());
      }
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      std::vector<int> missing;
      for (int p = 0; p < size_; ++p) {
        if (word(control(p).arrived).load(std::memory_order_acquire) < b) missing.push_back(id(p));
      }
      if (missing.empty()) return;
      const std::string msg = std::string("cross-worker ") + what + " exceeded its deadline on worker " +
                              std::to_string(id(rank_)) + ": nothing received from worker(s) " + list_ids(missing) +
                              " (stopped, stuck or gone; timeout_seconds in CommunicationOptions sets the deadline)";
      fail(msg, std::make_exception_ptr(DeadlineExceededError(msg)));
    }
    if (now >= next_liveness) {
      next_liveness = now + std::chrono::milliseconds(1);
      const int dead = dead_peer(b);
      if (dead >= 0) {
        const std::string msg = where() + " failed: worker " + std::to_string(id(dead)) + " (pid " +
                                std::to_string(control(dead).pid) +
                                ") ended without reporting a failure (killed or crashed)";
        fail(msg, std::make_exception_ptr(UnavailableError(msg)));
      }
    }
    // Spin for the latency of a hand-off; then leave the core to the local
    // replicas (and to the peers, when the workers outnumber the cores).
    const auto waited = now - start;
    backoff = waited < spin_ ? kSpin
              : waited < std::chrono::milliseconds(5) ? kYield
                                                       : kSleep;
  }
}

int ShmChannel::dead_peer(std::uint64_t b) const {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || word(control(p).arrived).load(std::memory_order_acquire) >= b) continue;
    const int fd = pidfds_.empty() ? -1 : pidfds_[static_cast<std::size_t>(p)];
    if (fd >= 0) {
      pollfd pfd{fd, POLLIN, 0};
      if (::poll(&pfd, 1, 0) > 0) return p;  // a pidfd is readable once its process ended
    } else if (::kill(static_cast<pid_t>(control(p).pid), 0) != 0 && errno == ESRCH) {
      return p;
    }
  }
  return -1;
}

void ShmChannel::fail(const std::string& reason, std::exception_ptr error) {
  {
    MutexLock lock(state_mutex_);
    if (broken_.empty()) broken_ = reason;
  }
  std::rethrow_exception(error);
}

std::string ShmChannel::broken() const {
  MutexLock lock(state_mutex_);
  return broken_;
}

void ShmChannel::post_state(std::uint32_t state, const std::string& text) noexcept {
  // A forked child speaks for nobody (distribute/internal/owner_process.h); nor may it
  // take the lock, which another thread of the parent may have held.
  if (owner_process_.forked_child()) return;
  MutexLock lock(state_mutex_);
  if (posted_) return;
  posted_ = true;
  Control& me = control(rank_);
  const std::size_t n = utf8_prefix(text, kTextBytes - 1).size();
  std::memcpy(me.text, text.data(), n);
  me.text[n] = '\0';
  me.report = word(control(0).reports).fetch_add(1) + 1;
  word(me.state).store(state, std::memory_order_release);
}

void ShmChannel::report_failure(const std::string& text) noexcept { post_state(kFailed, text); }
void ShmChannel::leave(const std::string& text) noexcept { post_state(kLeft, text); }

std::optional<std::string> ShmChannel::peer_report() const {
  // The earliest report: a worker that failed because another did reports
  // too, later, and the first one names the cause.
  int first = -1;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || word(control(p).state).load(std::memory_order_acquire) == kAlive) continue;
    if (first < 0 || control(p).report < control(first).report) first = p;
  }
  if (first < 0) return std::nullopt;
  const Control& c = control(first);
  return "worker " + std::to_string(id(first)) + " reported a failure (" +
         std::string(c.text, ::strnlen(c.text, kTextBytes)) + ")";
}

ShmChannel::SharedMapping::~SharedMapping() {
  if (base != nullptr) ::munmap(base, bytes);
}

std::string ShmChannel::create_shared(std::size_t bytes) const {
  const std::size_t region = round_up(std::max<std::size_t>(bytes, 1), 4096);
  const std::size_t total = region * static_cast<std::size_t>(size_);
  if (total / static_cast<std::size_t>(size_) != region) throw UnavailableError("shared allocation too large");
  const std::string name = fresh_name();
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) throw UnavailableError(errno_text("shm_open"));
  try {
    reserve(fd, total);
  } catch (...) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw;
  }
  ::close(fd);
  return name;
}

std::shared_ptr<ShmChannel::SharedMapping> ShmChannel::map_shared(const std::string& name, std::size_t bytes) const {
  auto mapping = std::make_shared<SharedMapping>();
  mapping->region_bytes = round_up(std::max<std::size_t>(bytes, 1), 4096);
  const std::size_t total = mapping->region_bytes * static_cast<std::size_t>(size_);
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) throw UnavailableError(errno_text("shm_open"));
  try {
    mapping->base = map_segment(fd, total, /*check_size=*/true);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  mapping->bytes = total;
  return mapping;
}

void ShmChannel::unlink_shared(const std::string& name) noexcept { ::shm_unlink(name.c_str()); }

std::shared_ptr<std::byte> ShmChannel::register_shared(std::shared_ptr<SharedMapping> mapping) {
  std::erase_if(shared_, [](const Registered& r) { return r.mapping.expired(); });
  shared_.push_back({++shared_made_, mapping});
  std::byte* mine = mapping->base + static_cast<std::size_t>(rank_) * mapping->region_bytes;
  return std::shared_ptr<std::byte>(std::move(mapping), mine);
}

std::shared_ptr<ShmChannel::SharedMapping> ShmChannel::find_shared(const std::byte* data, std::size_t bytes,
                                                                   std::uint64_t& id, std::size_t& offset) {
  for (const Registered& r : shared_) {
    // Only a live mapping's addresses mean anything: a dropped one's may
    // have been reused by an ordinary allocation.
    std::shared_ptr<SharedMapping> m = r.mapping.lock();
    if (m == nullptr) continue;
    const std::byte* mine = m->base + static_cast<std::size_t>(rank_) * m->region_bytes;
    const auto at = reinterpret_cast<std::uintptr_t>(data), lo = reinterpret_cast<std::uintptr_t>(mine);
    if (at < lo || at - lo > m->region_bytes || bytes > m->region_bytes - (at - lo)) continue;
    id = r.id;
    offset = at - lo;
    return m;
  }
  return nullptr;
}

namespace {

// out[i] = the sum over workers, in worker order, of ins[w][i], i < count
// (`out` is none of the inputs): the same operations as the MPI path's.
// No allocation for up to 16 workers (a call of a few KiB costs ~1 us).
void sum_into(DType dtype, std::byte* out, std::span<const std::byte* const> ins, std::size_t count) {
  dispatch_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* inline_typed[16];
    std::vector<const T*> heap;
    std::span<const T*> typed(inline_typed, std::min<std::size_t>(ins.size(), 16));
    if (ins.size() > 16) {
      heap.resize(ins.size());
      typed = std::span<const T*>(heap);
    }
    for (std::size_t w = 0; w < ins.size(); ++w) typed[w] = reinterpret_cast<const T*>(ins[w]);
    reduce_kernels<T>().range(reinterpret_cast<T*>(out), typed, 0, count, false);
  });
}

}  // namespace

void ShmChannel::all_reduce_sum(const char* what, const Header& mine, DType dtype, const void* in_data,
                                void* out_data, std::size_t count, Clock::time_point deadline,
                                FunctionRef<bool()> cancelled) {
  const Sum sum{dtype, dtype_size(dtype), static_cast<const std::byte*>(in_data), static_cast<std::byte*>(out_data),
                count};
  if (shared_made_ > 0 && count * sum.e > kDirectBytes) {
    // Can every worker sum in place in one allocation's regions? A barrier
    // of headers alone tells (taken by every worker: shared_made_ and the
    // count are the same on all, or the headers differ and every one raises).
    Header h = mine;
    std::size_t offset = 0;
    std::shared_ptr<SharedMapping> mapping;
    if (sum.in == sum.out) mapping = find_shared(sum.out, count * sum.e, h.region, offset);
    h.region_offset = offset;
    const std::uint64_t b = barrier(what, h, deadline, cancelled);
    check_headers_of(what, b);
    bool all = h.region != 0;
    for (int p = 0; p < size_ && all; ++p) {
      const Header& other = control(p).headers[b % 2];
      all = other.region == h.region && other.region_offset == h.region_offset;
    }
    if (all) {
      sum_shared(what, mine, sum, *mapping, offset, deadline, cancelled);
      ++shared_sums_;
      return;
    }
  }
  if (size_ == 2 || count * sum.e <= kDirectBytes || count < static_cast<std::size_t>(size_)) {
    sum_direct(what, mine, sum, deadline, cancelled);
  } else {
    sum_scattered(what, mine, sum, deadline, cancelled);
  }
}

void ShmChannel::sum_direct(const char* what, const Header& mine, const Sum& sum, Clock::time_point deadline,
                            FunctionRef<bool()> cancelled) {
  const auto m = static_cast<std::size_t>(size_);
  std::vector<const std::byte*>& ins = ins_;
  const std::size_t chunk = slot_bytes_ / sum.e;
  // (One round for nothing at all: the headers still meet.)
  for (std::size_t a = 0; a == 0 || a < sum.count; a += chunk) {
    const std::size_t c = std::min(chunk, sum.count - a);
    const std::uint64_t b = next_barrier();
    if (c > 0) std::memcpy(slot(rank_, b), sum.in + a * sum.e, c * sum.e);  // (an empty tensor's data may be null)
    barrier(what, mine, deadline, cancelled);
    if (a == 0) check_headers_of(what, b);
    if (c == 0) return;
    for (std::size_t w = 0; w < m; ++w) ins[w] = slot(static_cast<int>(w), b);
    // This worker's own input read in place, unless it is also the output
    // (the kernels write no input).
    if (sum.in != sum.out) ins[static_cast<std::size_t>(rank_)] = sum.in + a * sum.e;
    sum_into(sum.dtype, sum.out + a * sum.e, ins, c);
  }
}

void ShmChannel::sum_shared(const char* what, const Header& mine, const Sum& sum, const SharedMapping& mapping,
                            std::size_t offset, Clock::time_point deadline, FunctionRef<bool()> cancelled) {
  const auto m = static_cast<std::size_t>(size_);
  const auto me = static_cast<std::size_t>(rank_);
  // Worker w sums elements [share(w), share(w + 1)), whose bounds fall on
  // cache lines of the regions (the tensor's offset counted): no line is
  // written by two workers. (`offset` is a multiple of the element size.)
  const std::size_t per_line = kLine / sum.e;
  const std::size_t skew = (kLine - offset % kLine) % kLine / sum.e;  // elements before the first line
  auto share = [&](std::size_t w) {
    if (w == 0) return std::size_t{0};
    if (w == m) return sum.count;
    return std::min(sum.count, skew + sum.count * w / m / per_line * per_line);
  };
  dispatch_dtype(sum.dtype, [&](auto zero) {
    using T = decltype(zero);
    T* inline_ios[16];
    std::vector<T*> heap;
    std::span<T*> ios(inline_ios, std::min<std::size_t>(m, 16));
    if (m > 16) {
      heap.resize(m);
      ios = std::span<T*>(heap);
    }
    for (std::size_t w = 0; w < m; ++w) {
      ios[w] = reinterpret_cast<T*>(mapping.base + w * mapping.region_bytes + offset);
    }
    const std::size_t lo = share(me), hi = share(me + 1);
    if (lo < hi) reduce_kernels<T>().in_place(ios, lo, hi, false);
  });
  // Every share written before anyone returns (and writes its tensor).
  barrier(what, mine, deadline, cancelled);
}

void ShmChannel::sum_scattered(const char* what, const Header& mine, const Sum& sum, Clock::time_point deadline,
                               FunctionRef<bool()> cancelled) {
  const auto m = static_cast<std::size_t>(size_);
  const auto me = static_cast<std::size_t>(rank_);
  const std::size_t e = sum.e;
  std::vector<const std::byte*>& ins = ins_;
  const std::size_t chunk = slot_bytes_ / e;
  for (std::size_t a = 0; a < sum.count; a += chunk) {
    const std::size_t c = std::min(chunk, sum.count - a);
    auto share = [&](std::size_t w) { return c * w / m; };  // worker w sums [share(w), share(w + 1))
    const std::size_t s0 = share(me), s1 = share(me + 1);
    // What the others need of this worker's input: all but its own share.
    const std::uint64_t b = next_barrier();
    std::byte* mine_in = slot(rank_, b);
    std::memcpy(mine_in, sum.in + a * e, s0 * e);
    std::memcpy(mine_in + s1 * e, sum.in + (a + s1) * e, (c - s1) * e);
    barrier(what, mine, deadline, cancelled);
    if (a == 0) check_headers_of(what, b);
    for (std::size_t w = 0; w < m; ++w) {
      ins[w] = w == me ? sum.in + (a + s0) * e : slot(static_cast<int>(w), b) + s0 * e;
    }
    // The share is summed into this thread's scratch (`out` may be `in`),
    // published for the others, and copied into place.
    if (s1 > s0) {  // (a last chunk of fewer elements than workers leaves some shares empty)
      scratch_.resize((s1 - s0) * e);
      sum_into(sum.dtype, scratch_.data(), ins, s1 - s0);
      std::memcpy(slot(rank_, b + 1) + s0 * e, scratch_.data(), (s1 - s0) * e);
      std::memcpy(sum.out + (a + s0) * e, scratch_.data(), (s1 - s0) * e);
    }
    barrier(what, mine, deadline, cancelled);
    for (std::size_t w = 0; w < m; ++w) {
      if (w == me) continue;
      const std::size_t w0 = share(w), w1 = share(w + 1);
      std::memcpy(sum.out + (a + w0) * e, slot(static_cast<int>(w), b + 1) + w0 * e, (w1 - w0) * e);
    }
  }
}

std::vector<std::vector<std::byte>> ShmChannel::all_gather(const char* what, const Header& mine,
                                                           std::span<const std::byte> bytes,
                                                           Clock::time_point deadline, FunctionRef<bool()> cancelled) {
  const auto m = static_cast<std::size_t>(size_);
  std::vector<std::vector<std::byte>> out(m);
  std::size_t rounds = 1;
  for (std::size_t r = 0; r < rounds; ++r) {
    const std::size_t at = r * slot_bytes_;
    const std::uint64_t b = next_barrier();
    if (at < bytes.size()) std::memcpy(slot(rank_, b), bytes.data() + at, std::min(slot_bytes_, bytes.size() - at));
    barrier(what, mine, deadline, cancelled);
    if (r == 0) {
      check_headers_of(what, b);
      std::size_t most = 0;
      for (std::size_t w = 0; w < m; ++w) {
        out[w].resize(control(static_cast<int>(w)).headers[b % 2].count);
        most = std::max(most, out[w].size());
      }
      rounds = std::max<std::size_t>(1, (most + slot_bytes_ - 1) / slot_bytes_);
    }
    for (std::size_t w = 0; w < m; ++w) {
      if (at < out[w].size()) {
        std::memcpy(out[w].data() + at, slot(static_cast<int>(w), b), std::min(slot_bytes_, out[w].size() - at));
      }
    }
  }
  return out;
}

void ShmChannel::broadcast(const char* what, const Header& mine, void* data, std::size_t bytes, int root,
                           Clock::time_point deadline, FunctionRef<bool()> cancelled,
                           Clock::duration each_round_at_least) {
  auto* d = static_cast<std::byte*>(data);
  const std::size_t rounds = std::max<std::size_t>(1, (bytes + slot_bytes_ - 1) / slot_bytes_);
  for (std::size_t r = 0; r < rounds; ++r) {
    const std::size_t at = r * slot_bytes_;
    const std::size_t n = at < bytes ? std::min(slot_bytes_, bytes - at) : 0;
    const std::uint64_t b = next_barrier();
    if (rank_ == root && n > 0) std::memcpy(slot(rank_, b), d + at, n);
    const Clock::time_point round_deadline =
        each_round_at_least > Clock::duration::zero() ? std::max(deadline, extended(Clock::now(), each_round_at_least))
                                                      : deadline;
    barrier(what, mine, round_deadline, cancelled);
    if (r == 0) check_headers_of(what, b);
    if (rank_ != root && n > 0) std::memcpy(d + at, slot(root, b), n);
  }
}

}  // namespace distribute::internal
