#include "transport/peer_watch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>
#include <random>
#include <exception>
#include <thread>

#include "core/describe.h"
#include "distribute/errors.h"

namespace distribute::internal {
namespace {

constexpr std::uint32_t kMagic = 0x44505731;  // "DPW1"
constexpr char kLeaving = 'L';
constexpr char kAck = 'A';  // the connector kept the connection (start-up)
constexpr char kFailed = 'F';  // then the report, then '\0'
constexpr std::size_t kReportBytes = 2048;

std::string ipv4_text(std::uint32_t network_order) {
  char text[INET_ADDRSTRLEN] = {};
  in_addr a{};
  a.s_addr = network_order;
  ::inet_ntop(AF_INET, &a, text, sizeof text);
  return text;
}

// A CIDR ("10.0.0.0/24") or an interface name from an Open MPI
// if_include list.
bool matches(const std::string& item, const char* interface, std::uint32_t address) {
  const std::size_t slash = item.find('/');
  if (slash == std::string::npos) return item == interface;
  in_addr net{};
  if (::inet_pton(AF_INET, item.substr(0, slash).c_str(), &net) != 1) return false;
  int bits = 0;
  try {
    bits = std::stoi(item.substr(slash + 1));
  } catch (...) {
    return false;
  }
  if (bits < 0 || bits > 32) return false;
  const std::uint32_t mask = bits == 0 ? 0 : ~std::uint32_t{0} << (32 - bits);
  return (ntohl(address) & mask) == (ntohl(net.s_addr) & mask);
}

struct Card {  // what a worker tells the others
  std::uint64_t token = 0;
  std::uint32_t pid = 0;
  std::uint16_t port = 0;
  std::vector<std::uint32_t> addresses;  // network order
  std::string host;
};

template <class T>
void put(std::vector<std::byte>& out, T value) {
  const auto* p = reinterpret_cast<const std::byte*>(&value);
  out.insert(out.end(), p, p + sizeof value);
}

std::vector<std::byte> encode(const Card& c) {
  std::vector<std::byte> out;
  put(out, kMagic);
  put(out, c.token);
  put(out, c.pid);
  put(out, c.port);
  put(out, static_cast<std::uint16_t>(c.addresses.size()));
  for (std::uint32_t a : c.addresses) put(out, a);
  put(out, static_cast<std::uint16_t>(c.host.size()));
  for (char ch : c.host) out.push_back(static_cast<std::byte>(ch));
  return out;
}

Card decode(std::span<const std::byte> in, int worker) {
  std::size_t at = 0;
  auto bad = [&] {
    return UnavailableError("MultiWorkerMirroredStrategy start-up: worker " + std::to_string(worker) +
                            " sent a malformed connection card (" + std::to_string(in.size()) + " bytes)");
  };
  auto get = [&](auto& value) {
    if (in.size() - at < sizeof value) throw bad();
    std::memcpy(&value, in.data() + at, sizeof value);
    at += sizeof value;
  };
  Card c;
  std::uint32_t magic = 0;
  get(magic);
  if (magic != kMagic) throw bad();
  get(c.token);
  get(c.pid);
  get(c.port);
  std::uint16_t n = 0;
  get(n);
  c.addresses.resize(n);
  for (auto& a : c.addresses) get(a);
  std::uint16_t length = 0;
  get(length);
  if (in.size() - at < length) throw bad();
  c.host.assign(reinterpret_cast<const char*>(in.data() + at), length);
  return c;
}

struct TimedOut {};  // the start-up deadline passed (named once both sides ended)

struct Hello {
  std::uint32_t magic;
  std::uint32_t to;
  std::uint64_t token;
  std::uint32_t from;
  std::uint32_t zero;
};

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

int millis_until(PeerWatch::Clock::time_point end) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - PeerWatch::Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1000));
}

// Waits for `events` on fd until `end`; false at `end`.
bool wait_for(int fd, short events, PeerWatch::Clock::time_point end) {
  while (true) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, millis_until(end));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
    if (PeerWatch::Clock::now() >= end) return false;
  }
}

bool send_all(int fd, const void* data, std::size_t n, PeerWatch::Clock::time_point end) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<std::size_t>(w);
      continue;
    }
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!wait_for(fd, POLLOUT, end)) return false;
      continue;
    }
    return false;
  }
  return true;
}

bool recv_all(int fd, void* data, std::size_t n, PeerWatch::Clock::time_point end) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<std::size_t>(r);
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!wait_for(fd, POLLIN, end)) return false;
      continue;
    }
    return false;  // closed, or an error
  }
  return true;
}

Fd nonblocking_socket() {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) {
    throw UnavailableError(std::string("MultiWorkerMirroredStrategy start-up: socket() failed: ") +
                           std::strerror(errno));
  }
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// One attempt at `address`:`port`, until `end`; a connected socket or -1.
Fd connect_to(std::uint32_t address, std::uint16_t port, PeerWatch::Clock::time_point end) {
  Fd fd = nonblocking_socket();
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = address;
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) {
    if (errno != EINPROGRESS || !wait_for(fd.get(), POLLOUT, end)) return Fd();
    int error = 0;
    socklen_t length = sizeof error;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) return Fd();
  }
  return fd;
}

// Low descriptors kept for the connections (see reserve_descriptors).
// Never destroyed: the fork handlers below may run while the program exits.
std::mutex& pool_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::vector<int>& pool_free() {
  static auto* fds = new std::vector<int>;
  return *fds;
}
std::vector<int>& pool_all() {
  static auto* fds = new std::vector<int>;
  return *fds;
}

// Every watch connection open in this process (under pool_mutex): a child
// forked without exec closes its copies at once, so that this process's
// end still closes the connections (the peers see it end), and no code of
// the child writes on them. (Tracked from the end of the watch's start-up:
// a fork during start-up, while the strategy's constructor runs, leaves
// the child copies of the connections being made.)
std::vector<int>& live_sockets() {
  static auto* fds = new std::vector<int>;
  return *fds;
}

void lock_pool_for_fork() { pool_mutex().lock(); }
void unlock_pool_after_fork() { pool_mutex().unlock(); }
void close_sockets_in_child() {
  for (int fd : live_sockets()) ::close(fd);
  live_sockets().clear();
  pool_mutex().unlock();
}

void close_sockets_in_forked_children() {
  static std::once_flag once;
  std::call_once(once, [] {
    (void)pool_mutex();  // built before any fork can use it
    (void)live_sockets();
    ::pthread_atfork(lock_pool_for_fork, unlock_pool_after_fork, close_sockets_in_child);
  });
}

// `fd` moved onto a reserved low descriptor when one is free, and tracked
// (live_sockets).
int adopt(int fd) {
  std::lock_guard<std::mutex> lock(pool_mutex());
  int kept = fd;
  if (!pool_free().empty()) {
    const int low = pool_free().front();
    if (::dup3(fd, low, O_CLOEXEC) >= 0) {
      pool_free().erase(pool_free().begin());
      ::close(fd);
      kept = low;
    }
  }
  live_sockets().push_back(kept);
  return kept;
}

// Closes `fd`; a reserved one is kept open on /dev/null for the next watch.
void release(int fd) {
  std::lock_guard<std::mutex> lock(pool_mutex());
  const auto live = std::find(live_sockets().begin(), live_sockets().end(), fd);
  if (live != live_sockets().end()) live_sockets().erase(live);
  if (std::find(pool_all().begin(), pool_all().end(), fd) != pool_all().end()) {
    const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null >= 0 && ::dup3(null, fd, O_CLOEXEC) >= 0) {  // (closes the socket)
      ::close(null);
      pool_free().push_back(fd);
      std::sort(pool_free().begin(), pool_free().end());
      return;
    }
    if (null >= 0) ::close(null);
    pool_all().erase(std::find(pool_all().begin(), pool_all().end(), fd));
  }
  ::close(fd);
}

void ignore_sigpipe() {
  struct sigaction old {};
  if (::sigaction(SIGPIPE, nullptr, &old) != 0) return;
  if ((old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler == SIG_DFL) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, nullptr);
  }
}

}  // namespace

void PeerWatch::reserve_descriptors(int n) {
  std::lock_guard<std::mutex> lock(pool_mutex());
  for (int i = 0; i < n; ++i) {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    pool_all().push_back(fd);
    pool_free().push_back(fd);
  }
  std::sort(pool_free().begin(), pool_free().end());
}

std::vector<std::uint32_t> PeerWatch::local_addresses(const char* if_include) {
  std::vector<std::string> include;
  if (if_include != nullptr) {
    std::string list = if_include;
    for (std::size_t at = 0; at <= list.size();) {
      const std::size_t comma = std::min(list.find(',', at), list.size());
      if (comma > at) include.push_back(list.substr(at, comma - at));
      at = comma + 1;
    }
  }
  std::vector<std::uint32_t> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0) continue;
    const std::uint32_t a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    // Without a list, every address but the loopback ones (127.0.0.1 comes
    // last anyway); with one, what it names.
    if (include.empty() ? (i->ifa_flags & IFF_LOOPBACK) != 0
                        : std::none_of(include.begin(), include.end(),
                                       [&](const std::string& s) { return matches(s, i->ifa_name, a); })) {
      continue;
    }
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  }
  ::freeifaddrs(list);
  return out;
}

std::unique_ptr<PeerWatch> PeerWatch::start(int rank, int size, const Exchange& exchange, Clock::time_point deadline) {
  ignore_sigpipe();
  close_sockets_in_forked_children();
  auto failed = [&](const std::string& what) {
    return UnavailableError("MultiWorkerMirroredStrategy start-up on worker " + std::to_string(rank) +
                            ": the connections that watch the other workers' processes: " + what);
  };
  Fd listener = nonblocking_socket();
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t length = sizeof any;
  if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&any), sizeof any) != 0 ||
      ::listen(listener.get(), size) != 0 ||
      ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&any), &length) != 0) {
    throw failed(std::string("listening failed: ") + std::strerror(errno));
  }
  Card mine;
  mine.token = std::random_device{}();
  mine.token = (mine.token << 32) ^ std::random_device{}();
  mine.pid = static_cast<std::uint32_t>(::getpid());
  mine.port = ntohs(any.sin_port);
  const char* include = std::getenv("OMPI_MCA_btl_tcp_if_include");
  if (include == nullptr) include = std::getenv("OMPI_MCA_oob_tcp_if_include");
  mine.addresses = local_addresses(include);
  if (std::find(mine.addresses.begin(), mine.addresses.end(), htonl(INADDR_LOOPBACK)) == mine.addresses.end()) {
    mine.addresses.push_back(htonl(INADDR_LOOPBACK));
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  mine.host = host;

  const std::vector<std::vector<std::byte>> all = exchange(encode(mine));
  if (all.size() != static_cast<std::size_t>(size)) throw failed("expected a card from every worker");
  std::vector<Card> cards;
  for (int w = 0; w < size; ++w) cards.push_back(decode(all[static_cast<std::size_t>(w)], w));
  const std::uint64_t token = cards[0].token;
  std::vector<Peer> peers(static_cast<std::size_t>(size));
  for (int w = 0; w < size; ++w) {
    const Card& c = cards[static_cast<std::size_t>(w)];
    peers[static_cast<std::size_t>(w)].who =
        "worker " + std::to_string(w) + " (pid " + std::to_string(c.pid) + ", host " + c.host + ")";
  }
  std::vector<Fd> fds(static_cast<std::size_t>(size));
  auto timed_out = [&] {
    std::vector<std::string> missing;
    for (int w = 0; w < size; ++w) {
      if (w == rank || fds[static_cast<std::size_t>(w)].get() >= 0) continue;
      std::string item = std::to_string(w);
      if (w < rank) {  // this worker connects to it: where it tried
        const Card& c = cards[static_cast<std::size_t>(w)];
        item += " at port " + std::to_string(c.port) + " of";
        for (std::uint32_t a : c.addresses) item += " " + ipv4_text(a);
      }
      missing.push_back(item);
    }
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    return DeadlineExceededError("MultiWorkerMirroredStrategy start-up on worker " + std::to_string(rank) +
                                 ": could not open the connections that watch the other workers' processes to "
                                 "worker(s) [" + list + "] within the start-up deadline (startup_timeout_seconds "
                                 "in MultiWorkerOptions)");
  };

  // From every higher worker, on a thread of its own, so that the answers
  // do not wait for this worker's own connects (a connector gives up on an
  // answer after 2 s); a connection that is not one of them is dropped.
  std::exception_ptr accept_error;
  std::thread acceptor([&] {
    try {
      for (int accepted = 0; accepted < size - 1 - rank;) {
        if (!wait_for(listener.get(), POLLIN, deadline)) throw TimedOut{};
        Fd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (fd.get() < 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));  // (out of descriptors: not a spin)
          continue;
        }
        const auto end = std::min(deadline, Clock::now() + std::chrono::seconds(2));
        Hello hello{};
        if (!recv_all(fd.get(), &hello, sizeof hello, end)) continue;
        if (hello.magic != kMagic || hello.token != token || hello.to != static_cast<std::uint32_t>(rank) ||
            hello.from <= static_cast<std::uint32_t>(rank) || hello.from >= static_cast<std::uint32_t>(size) ||
            fds[hello.from].get() >= 0) {
          continue;
        }
        const Hello answer{kMagic, hello.from, token, static_cast<std::uint32_t>(rank), 0};
        if (!send_all(fd.get(), &answer, sizeof answer, end)) continue;
        // Kept only once the connector says it kept it: one that gave up
        // waiting for the answer has closed (end-of-file here), and would
        // otherwise be taken for a worker that died.
        char ack = 0;
        if (!recv_all(fd.get(), &ack, 1, deadline) || ack != kAck) continue;
        const int one = 1;
        ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fds[hello.from] = std::move(fd);
        ++accepted;
      }
    } catch (...) {
      accept_error = std::current_exception();
    }
  });
  // To every lower worker, its addresses in order, until one answers as it.
  std::exception_ptr connect_error;
  try {
    for (int p = 0; p < rank; ++p) {
      const Card& c = cards[static_cast<std::size_t>(p)];
      while (fds[static_cast<std::size_t>(p)].get() < 0) {
        for (std::uint32_t address : c.addresses) {
          const auto end = std::min(deadline, Clock::now() + std::chrono::seconds(2));
          Fd fd = connect_to(address, c.port, end);
          if (fd.get() < 0) continue;
          const Hello hello{kMagic, static_cast<std::uint32_t>(p), token, static_cast<std::uint32_t>(rank), 0};
          Hello answer{};
          if (!send_all(fd.get(), &hello, sizeof hello, end) || !recv_all(fd.get(), &answer, sizeof answer, end)) {
            continue;
          }
          if (answer.magic == kMagic && answer.token == token && answer.from == static_cast<std::uint32_t>(p) &&
              answer.to == static_cast<std::uint32_t>(rank) && send_all(fd.get(), &kAck, 1, end)) {
            fds[static_cast<std::size_t>(p)] = std::move(fd);
            break;
          }
        }
        if (fds[static_cast<std::size_t>(p)].get() >= 0) break;
        if (Clock::now() >= deadline) throw TimedOut{};
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  } catch (...) {
    connect_error = std::current_exception();
  }
  acceptor.join();
  // (The message reads every connection: after both sides ended.)
  for (const std::exception_ptr& error : {connect_error, accept_error}) {
    if (!error) continue;
    try {
      std::rethrow_exception(error);
    } catch (const TimedOut&) {
      throw timed_out();
    }
  }
  for (int w = 0; w < size; ++w) {
    const int fd = fds[static_cast<std::size_t>(w)].release();
    peers[static_cast<std::size_t>(w)].fd = fd < 0 ? fd : adopt(fd);
  }
  return std::unique_ptr<PeerWatch>(new PeerWatch(std::move(peers)));
}

PeerWatch::~PeerWatch() { leave(); }

bool PeerWatch::forked() noexcept {
  if (!owner_.forked_child()) return false;
  // A forked child: its copies of the connections were closed at the fork
  // (their numbers may be another file's now): forget them.
  for (Peer& peer : peers_) peer.fd = -1;
  return true;
}

std::optional<PeerWatch::Event> PeerWatch::check() {
  if (forked()) return std::nullopt;
  std::vector<pollfd>& fds = poll_fds_;
  std::vector<std::size_t>& which = poll_which_;
  fds.clear();
  which.clear();
  for (std::size_t w = 0; w < peers_.size(); ++w) {
    if (peers_[w].fd < 0 || peers_[w].gone) continue;
    fds.push_back(pollfd{peers_[w].fd, POLLIN, 0});
    which.push_back(w);
  }
  if (!fds.empty() && ::poll(fds.data(), fds.size(), 0) > 0) {
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Peer& peer = peers_[which[i]];
      char bytes[512];
      while (!peer.gone) {
        const ssize_t r = ::recv(peer.fd, bytes, sizeof bytes, MSG_DONTWAIT);
        if (r > 0) {
          // A worker writes only a failure report or its leaving byte.
          if (peer.inbox.size() < kReportBytes + 2) peer.inbox.append(bytes, static_cast<std::size_t>(r));
          if (peer.inbox[0] == kLeaving) {
            peer.kind = Kind::kLeft;
            peer.gone = true;
          } else if (peer.inbox.find('\0') != std::string::npos || peer.inbox.size() >= kReportBytes + 2) {
            peer.kind = Kind::kFailed;
            peer.gone = true;
          }
          continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
        // End-of-file or a reset: its process ended (after a cut report, a
        // report still).
        peer.kind = peer.inbox.empty() ? Kind::kEnded : Kind::kFailed;
        peer.gone = true;
      }
    }
  }
  // A death first, then a report, then a departure: a worker that reports
  // or leaves after another died most likely does so because of it.
  for (Kind kind : {Kind::kEnded, Kind::kFailed, Kind::kLeft}) {
    for (std::size_t w = 0; w < peers_.size(); ++w) {
      const Peer& peer = peers_[w];
      if (!peer.gone || peer.kind != kind) continue;
      Event event{static_cast<int>(w), kind, peer.who, ""};
      if (kind == Kind::kFailed) {
        const std::size_t end = peer.inbox.find('\0');
        event.report = peer.inbox.substr(1, (end == std::string::npos ? peer.inbox.size() : end) - 1);
      }
      return event;
    }
  }
  return std::nullopt;
}

void PeerWatch::report(const std::string& text) noexcept {
  if (reported_ || forked()) return;
  reported_ = true;
  std::string frame(1, kFailed);
  frame += utf8_prefix(text, kReportBytes - 1);
  std::replace(frame.begin(), frame.end(), '\0', ' ');  // (the frame's end)
  frame.push_back('\0');
  for (Peer& peer : peers_) {
    if (peer.fd >= 0) (void)::send(peer.fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
}

void PeerWatch::leave() noexcept {
  if (forked()) return;
  for (Peer& peer : peers_) {
    if (peer.fd < 0) continue;
    if (!reported_) {  // (after a report, the report says it)
      const char byte = kLeaving;
      (void)::send(peer.fd, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    // Unread bytes would turn the close into a reset, which may overtake
    // the byte just sent.
    char sink[64];
    while (::recv(peer.fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
    release(peer.fd);
    peer.fd = -1;
  }
}

void PeerWatch::drop() noexcept {
  if (forked()) return;
  for (Peer& peer : peers_) {
    if (peer.fd >= 0) release(peer.fd);
    peer.fd = -1;
  }
}

}  // namespace distribute::internal
