// ForkedChild: runs a function in a child forked (without exec) from the
// test process, as Python's os.fork and multiprocessing do, and brings its
// outcome back. The child sends the function's report (its return value:
// empty for success, else what went wrong, or the what() of an exception it
// let out) and closes it, then waits until the parent releases it (or ends)
// and exits with _exit(0): it runs none of its parent's destructors on the
// way out.
// The parent never waits forever: a child that sends nothing within the
// timeout, or does not exit after release, is killed.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <exception>
#include <functional>
#include <stdexcept>
#include <optional>
#include <string>
#include <thread>

namespace distribute::testing {

class ForkedChild {
 public:
  explicit ForkedChild(const std::function<std::string()>& body) {
    int to_child[2] = {-1, -1}, from_child[2] = {-1, -1};
    // Close-on-exec: no other child of this process keeps them open.
    if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0) {
      for (int fd : {to_child[0], to_child[1]}) {
        if (fd >= 0) ::close(fd);
      }
      throw std::runtime_error("ForkedChild: pipe2 failed");
    }
    pid_ = ::fork();
    if (pid_ < 0) {
      for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) ::close(fd);
      throw std::runtime_error("ForkedChild: fork failed");
    }
    if (pid_ == 0) {
      // Nothing leaves this block: the child never returns into the test.
      int code = 0;
      try {
        ::close(to_child[1]);
        ::close(from_child[0]);
        std::string report;
        try {
          report = body();
        } catch (const std::exception& e) {
          report = std::string("the child raised: ") + e.what();
        } catch (...) {
          report = "the child raised a non-standard exception";
        }
        // The report ends with the pipe (the parent reads to its end); a
        // success is one 'y', so that an empty pipe is not one.
        report = report.empty() ? "y" : "n" + report;
        for (std::size_t sent = 0; sent < report.size();) {
          const ssize_t n = ::write(from_child[1], report.data() + sent, report.size() - sent);
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) ::_exit(3);
          sent += static_cast<std::size_t>(n);
        }
        ::close(from_child[1]);
        char byte;
        while (::read(to_child[0], &byte, 1) < 0 && errno == EINTR) {
        }  // released, or the parent ended
      } catch (...) {
        code = 4;
      }
      ::_exit(code);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    release_fd_ = to_child[1];
    report_fd_ = from_child[0];
  }

  ForkedChild(const ForkedChild&) = delete;
  ForkedChild& operator=(const ForkedChild&) = delete;

  ~ForkedChild() {
    release();
    (void)exit_status(std::chrono::seconds(10));
    if (report_fd_ >= 0) ::close(report_fd_);
  }

  // The child's report (empty: success), or std::nullopt when none came
  // within `timeout` (the child is then killed) or it ended without one.
  std::optional<std::string> report(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    std::string text;
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        kill();
        return std::nullopt;
      }
      pollfd p{report_fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) {
        kill();
        return std::nullopt;
      }
      char buffer[4096];
      const ssize_t n = ::read(report_fd_, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // the end of the report
      text.append(buffer, static_cast<std::size_t>(n));
    }
    if (text == "y") return std::string();
    if (text.empty() || text[0] != 'n') return std::nullopt;
    return text.substr(1);
  }

  // Lets the child exit.
  void release() {
    if (release_fd_ < 0) return;
    ::close(release_fd_);
    release_fd_ = -1;
  }

  // The child's wait status once it ended (released first), or std::nullopt
  // when it did not end within `timeout` (it is then killed).
  std::optional<int> exit_status(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    release();
    if (pid_ <= 0) return status_;
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (true) {
      int status = 0;
      const pid_t done = ::waitpid(pid_, &status, WNOHANG);
      if (done < 0 && errno == EINTR) continue;
      if (done == pid_) status_ = status;
      if (done == pid_ || done < 0) {  // (< 0: not this process's child any more)
        pid_ = -1;
        return status_;
      }
      if (std::chrono::steady_clock::now() >= end) {
        kill();
        return std::nullopt;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

  pid_t pid_ = -1;
  int release_fd_ = -1;
  int report_fd_ = -1;
  std::optional<int> status_;
};

// Skips the calling test (from its body or SetUp) where a child forked from
// a process whose other threads run may hang in the sanitizer's runtime:
// under ThreadSanitizer (gcc 12's libtsan; llvm-project pull request
// 96600; TSan does not support new threads in such a child either) and
// under AddressSanitizer (gcc 12's libasan takes no allocator or
// stack-depot locks around fork, so the child's first allocation can wait
// forever on a lock another parent thread held; later LLVM releases install
// atfork handlers). The latter hung once in CI: the child of
// ForkedWhileTheMapFunctionRunsMakesItsOwnThreadsThenDropsTheCopy, 20 s,
// no report. glibc's malloc, in the release build, has the handlers.
#if defined(__SANITIZE_THREAD__)
#define DISTRIBUTE_SKIP_FORK_WITH_THREADS() \
  GTEST_SKIP() << "ThreadSanitizer does not support fork in a multi-threaded process"
#elif defined(__SANITIZE_ADDRESS__)
#define DISTRIBUTE_SKIP_FORK_WITH_THREADS()                                                             \
  GTEST_SKIP() << "gcc 12's AddressSanitizer runtime is not fork-safe in a multi-threaded process (no " \
                  "atfork handlers for its allocator)"
#else
#define DISTRIBUTE_SKIP_FORK_WITH_THREADS() static_cast<void>(0)
#endif

// The suite of tests that fork while other threads of the process run
// (skipped under the sanitizers, above).
class ForkTest : public ::testing::Test {
 protected:
  void SetUp() override { DISTRIBUTE_SKIP_FORK_WITH_THREADS(); }
};

}  // namespace distribute::testing
