// ForkedChild: runs a function in a child forked (without exec) from the
// test process, as Python's os.fork and multiprocessing do, and brings its
// outcome back. The child sends the function's report (its return value:
// empty for success, else what went wrong, or the what() of an exception it
// let out), then waits until the parent releases it (or ends) and exits
// with _exit(0): it runs none of its parent's destructors on the way out.
// The parent never waits forever: a child that sends nothing within the
// timeout, or does not exit after release, is killed.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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
    int to_child[2], from_child[2];
    if (::pipe(to_child) != 0 || ::pipe(from_child) != 0) throw std::runtime_error("ForkedChild: pipe failed");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("ForkedChild: fork failed");
    if (pid_ == 0) {
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
      report.push_back('\n');  // ends the report (also an empty one)
      for (std::size_t sent = 0; sent < report.size();) {
        const ssize_t n = ::write(from_child[1], report.data() + sent, report.size() - sent);
        if (n <= 0) ::_exit(3);
        sent += static_cast<std::size_t>(n);
      }
      char byte;
      (void)!::read(to_child[0], &byte, 1);  // released, or the parent ended
      ::_exit(0);
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
  // within `timeout` (the child is then killed).
  std::optional<std::string> report(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    std::string text;
    while (text.empty() || text.back() != '\n') {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      pollfd p{report_fd_, POLLIN, 0};
      char buffer[4096];
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
        kill();
        return std::nullopt;
      }
      const ssize_t n = ::read(report_fd_, buffer, sizeof buffer);
      if (n <= 0) return std::nullopt;  // ended without a report
      text.append(buffer, static_cast<std::size_t>(n));
    }
    text.pop_back();
    return text;
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
      if (done == pid_) status_ = status;
      if (done == pid_ || done < 0) {
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
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  pid_t pid_ = -1;
  int release_fd_ = -1;
  int report_fd_ = -1;
  std::optional<int> status_;
};

}  // namespace distribute::testing
