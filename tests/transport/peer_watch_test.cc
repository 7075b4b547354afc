// PeerWatch with threads of this process as the workers: an in-process
// all_gather stands in for MPI's. Real processes ending are tested under
// mpirun (multi_worker_fault_kill_detect_mpi_transport) and across network
// namespaces (tests/net/run_net.sh kill_host, kill_daemon).
#include "transport/peer_watch.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <functional>
#include <thread>

#include "distribute/errors.h"
#include "testing/forked_child.h"

namespace distribute::internal {
namespace {

using namespace std::chrono_literals;

// An all_gather among `n` threads.
class Gather {
 public:
  explicit Gather(int n) : cards_(static_cast<std::size_t>(n)), n_(n) {}
  PeerWatch::Exchange for_worker(int w) {
    return [this, w](std::span<const std::byte> card) {
      std::unique_lock<std::mutex> lock(mutex_);
      cards_[static_cast<std::size_t>(w)].assign(card.begin(), card.end());
      if (++arrived_ == n_) cv_.notify_all();
      cv_.wait(lock, [&] { return arrived_ == n_; });
      return cards_;
    };
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::vector<std::byte>> cards_;
  int n_;
  int arrived_ = 0;
};

std::vector<std::unique_ptr<PeerWatch>> start_all(int n, std::function<void(int, std::vector<std::byte>&)> edit = {}) {
  Gather gather(n);
  std::vector<std::unique_ptr<PeerWatch>> watches(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  const auto deadline = PeerWatch::Clock::now() + 20s;
  for (int w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      PeerWatch::Exchange exchange = gather.for_worker(w);
      if (edit) {
        exchange = [&, w, inner = gather.for_worker(w)](std::span<const std::byte> card) {
          std::vector<std::byte> mine(card.begin(), card.end());
          edit(w, mine);
          return inner(mine);
        };
      }
      watches[static_cast<std::size_t>(w)] = PeerWatch::start(w, n, exchange, deadline);
    });
  }
  for (auto& t : threads) t.join();
  return watches;
}

// The first event `watch` reports within 5 s.
std::optional<PeerWatch::Event> next_event(PeerWatch& watch) {
  const auto end = PeerWatch::Clock::now() + 5s;
  while (PeerWatch::Clock::now() < end) {
    if (auto e = watch.check()) return e;
    std::this_thread::sleep_for(1ms);
  }
  return std::nullopt;
}

// A card (peer_watch.cc's layout) of a worker at port 1 of 127.0.0.1, where
// nothing listens.
std::vector<std::byte> unreachable_card() {
  std::vector<std::byte> card;
  const std::uint32_t magic = 0x44505731, pid = 1;
  const std::uint64_t token = 7;
  const std::uint16_t port = 1, addresses = 1, host = 0;
  const std::uint32_t loopback = htonl(INADDR_LOOPBACK);
  auto put = [&](const auto& v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    card.insert(card.end(), p, p + sizeof v);
  };
  put(magic), put(token), put(pid), put(port), put(addresses), put(loopback), put(host);
  return card;
}

TEST(PeerWatch, NothingToReportWhileEveryWorkerIsThere) {
  auto watches = start_all(3);
  std::this_thread::sleep_for(20ms);
  for (auto& w : watches) EXPECT_FALSE(w->check().has_value());
}

TEST(PeerWatch, AWorkerWhoseConnectionsCloseIsReportedAsEndedByEveryOther) {
  auto watches = start_all(3);
  watches[1]->drop();  // as its process's end would
  for (int w : {0, 2}) {
    const auto event = next_event(*watches[static_cast<std::size_t>(w)]);
    ASSERT_TRUE(event.has_value()) << "worker " << w;
    EXPECT_EQ(event->worker, 1);
    EXPECT_EQ(event->kind, PeerWatch::Kind::kEnded);
    EXPECT_EQ(event->who.rfind("worker 1 (pid " + std::to_string(::getpid()) + ", host ", 0), 0u) << event->who;
    // It stays reported.
    EXPECT_EQ(watches[static_cast<std::size_t>(w)]->check()->worker, 1);
  }
}

// A child forked without exec (`in_child` runs in it) that lives on while
// the test goes on in the parent: `parent` runs once the child has run
// `in_child`; the child then waits for the parent and ends.
// Runs `in_child` in a forked child, then `parent` while the child lives;
// the child ends after (testing/forked_child.h).
void with_forked_child(const std::function<void()>& in_child, const std::function<void()>& parent) {
  testing::ForkedChild child([&] {
    in_child();
    return std::string();
  });
  const auto report = child.report();
  ASSERT_TRUE(report.has_value()) << "the forked child hung or died";
  ASSERT_EQ(*report, "");
  parent();
  const auto status = child.exit_status();
  ASSERT_TRUE(status.has_value()) << "the forked child did not end";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
}

// SIGPIPE (process-wide) in forked children, so that other tests' watches
// do not decide it: a user's handler is kept, the default becomes ignored.
void on_sigpipe(int) {}

std::string sigpipe_after_a_watch(void (*before)(int)) {
  struct sigaction set {};
  set.sa_handler = before;
  sigemptyset(&set.sa_mask);
  if (::sigaction(SIGPIPE, &set, nullptr) != 0) return "sigaction failed";
  auto watches = start_all(2);
  struct sigaction now {};
  if (::sigaction(SIGPIPE, nullptr, &now) != 0) return "sigaction failed";
  if (before == SIG_DFL) return now.sa_handler == SIG_IGN ? "" : "the default SIGPIPE action was not set to ignored";
  return now.sa_handler == before ? "" : "the user's SIGPIPE handler was replaced";
}

TEST(PeerWatch, SigpipeIsIgnoredOnlyWhereItsActionWasTheDefault) {
  for (void (*before)(int) : {&on_sigpipe, SIG_DFL}) {
    testing::ForkedChild child([&] { return sigpipe_after_a_watch(before); });
    const auto report = child.report();
    ASSERT_TRUE(report.has_value()) << "the forked child hung or died";
    EXPECT_EQ(*report, "");
  }
}

TEST(PeerWatch, AWorkersEndIsSeenWhileAChildItForkedLives) {
  auto watches = start_all(2);
  with_forked_child([] {}, [&] {
    watches[1]->drop();  // worker 1's process ends; its child (holding copies before the fix) lives on
    const auto event = next_event(*watches[0]);
    ASSERT_TRUE(event.has_value()) << "worker 1's end not seen while its forked child lives";
    EXPECT_EQ(event->worker, 1);
    EXPECT_EQ(event->kind, PeerWatch::Kind::kEnded);
  });
}

TEST(PeerWatch, AForkedChildsCopyOfAWatchWritesNothing) {
  auto watches = start_all(2);
  with_forked_child(
      [&] {
        // The child's copies of the watches end (a Python child's exit can
        // run destructors) and report: neither reaches the peers.
        watches[1]->report("from the child");
        watches[1].reset();
        watches[0].reset();
      },
      [&] {
        std::this_thread::sleep_for(50ms);
        EXPECT_FALSE(watches[0]->check().has_value());
        EXPECT_FALSE(watches[1]->check().has_value());
        watches[1]->leave();
        const auto event = next_event(*watches[0]);
        ASSERT_TRUE(event.has_value());
        EXPECT_EQ(event->kind, PeerWatch::Kind::kLeft);  // the parent's own leaving still arrives
      });
}

TEST(PeerWatch, AWorkerThatLeavesInOrderIsReportedAsLeft) {
  auto watches = start_all(2);
  watches[0]->leave();
  const auto event = next_event(*watches[1]);
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->worker, 0);
  EXPECT_EQ(event->kind, PeerWatch::Kind::kLeft);
}

TEST(PeerWatch, ADeathIsReportedBeforeADeparture) {
  auto watches = start_all(3);
  watches[0]->leave();
  watches[1]->drop();
  std::this_thread::sleep_for(50ms);  // both have reached worker 2
  const auto event = next_event(*watches[2]);
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->worker, 1);
  EXPECT_EQ(event->kind, PeerWatch::Kind::kEnded);
}

TEST(PeerWatch, AFailureReportReachesEveryOtherWorkerAndOutranksItsDeparture) {
  auto watches = start_all(3);
  const std::string text(3000, 'x');  // cut to the report's limit
  watches[2]->report("worker 2: it broke");
  watches[2]->report("a second report is not sent");
  watches[2]->leave();
  for (int w : {0, 1}) {
    const auto event = next_event(*watches[static_cast<std::size_t>(w)]);
    ASSERT_TRUE(event.has_value());
    EXPECT_EQ(event->worker, 2);
    EXPECT_EQ(event->kind, PeerWatch::Kind::kFailed);
    EXPECT_EQ(event->report, "worker 2: it broke");
  }
  watches[0]->report(text);
  // Worker 2's report is there already: the lowest-numbered one comes first
  // once worker 0's has arrived.
  std::optional<PeerWatch::Event> event;
  for (auto end = PeerWatch::Clock::now() + 5s; PeerWatch::Clock::now() < end;) {
    event = watches[1]->check();
    if (event.has_value() && event->worker == 0) break;
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->worker, 0);
  EXPECT_EQ(event->kind, PeerWatch::Kind::kFailed);
  EXPECT_EQ(event->report, std::string(2047, 'x'));
}

TEST(PeerWatch, ADeathOutranksAnotherWorkersReport) {
  auto watches = start_all(3);
  watches[0]->report("worker 0: worker 1 ended");
  watches[1]->drop();
  std::this_thread::sleep_for(50ms);
  const auto event = next_event(*watches[2]);
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->worker, 1);
  EXPECT_EQ(event->kind, PeerWatch::Kind::kEnded);
}

TEST(PeerWatch, AStrayConnectionToAListenerIsDroppedAndTheWorkerStillConnects) {
  // Worker 0's card names a port; a stranger connects there first and says
  // something that is not a hello of this job.
  std::atomic<int> stray_fd{-1};
  auto watches = start_all(2, [&](int w, std::vector<std::byte>& card) {
    if (w != 0) return;
    std::uint16_t port = 0;
    std::memcpy(&port, card.data() + 16, sizeof port);  // magic, token, pid, then the port
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to), 0);
    const char junk[24] = "not a hello of this job";
    ASSERT_EQ(::send(fd, junk, sizeof junk, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof junk));
    stray_fd = fd;
  });
  EXPECT_FALSE(watches[0]->check().has_value());
  EXPECT_FALSE(watches[1]->check().has_value());
  watches[1]->drop();
  EXPECT_EQ(next_event(*watches[0])->worker, 1);
  ::close(stray_fd);
}

// Starts worker `rank` of 2 while the other one only takes part in the
// exchange, with unreachable_card(): expects DeadlineExceededError at the
// 300 ms deadline, its message containing `expected`.
void expect_startup_deadline(int rank, const std::string& expected) {
  Gather gather(2);
  std::thread absent([&] { gather.for_worker(1 - rank)(unreachable_card()); });
  const auto start = PeerWatch::Clock::now();
  try {
    PeerWatch::start(rank, 2, gather.for_worker(rank), start + 300ms);
    ADD_FAILURE() << "expected DeadlineExceededError";
  } catch (const DeadlineExceededError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
  EXPECT_LT(PeerWatch::Clock::now() - start, 3s);
  absent.join();
}

TEST(PeerWatch, AWorkerThatCannotBeReachedEndsTheStartUpAtTheDeadlineNamingIt) {
  // Worker 0 listens nowhere: worker 1 tries its address until the deadline.
  expect_startup_deadline(1, "worker(s) [0 at port 1 of 127.0.0.1]");
}

TEST(PeerWatch, AWorkerThatNeverConnectsEndsTheStartUpAtTheDeadlineNamingIt) {
  // Worker 1 never connects to worker 0.
  expect_startup_deadline(0, "worker(s) [1]");
}

TEST(PeerWatch, AMalformedCardIsUnavailableErrorNamingItsWorker) {
  Gather gather(2);
  std::thread bad([&] { gather.for_worker(1)(std::vector<std::byte>(5, std::byte{1})); });
  try {
    PeerWatch::start(0, 2, gather.for_worker(0), PeerWatch::Clock::now() + 2s);
    ADD_FAILURE() << "expected UnavailableError";
  } catch (const UnavailableError& e) {
    EXPECT_NE(std::string(e.what()).find("worker 1 sent a malformed connection card"), std::string::npos)
        << e.what();
  }
  bad.join();
}

TEST(PeerWatch, OffersTheAddressesTheIncludeListNames) {
  const auto loopback = PeerWatch::local_addresses("127.0.0.0/8");
  ASSERT_FALSE(loopback.empty());
  EXPECT_EQ(loopback[0], htonl(INADDR_LOOPBACK));
  EXPECT_TRUE(PeerWatch::local_addresses("lo").size() >= 1);
  EXPECT_TRUE(PeerWatch::local_addresses("no-such-interface0").empty());
  EXPECT_TRUE(PeerWatch::local_addresses("0.0.0.0/32").empty());
  EXPECT_TRUE(PeerWatch::local_addresses("10.0.0.0/40").empty());  // not a subnet
  for (std::uint32_t a : PeerWatch::local_addresses(nullptr)) {
    EXPECT_NE(ntohl(a) >> 24, 127u);
    // Each one alone by its /32.
    char text[INET_ADDRSTRLEN] = {};
    in_addr in{};
    in.s_addr = a;
    ::inet_ntop(AF_INET, &in, text, sizeof text);
    EXPECT_EQ(PeerWatch::local_addresses((std::string(text) + "/32").c_str()), std::vector<std::uint32_t>{a});
  }
}

}  // namespace
}  // namespace distribute::internal
