// Small helpers shared by the test suites.
#pragma once

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include <cstddef>
#include <exception>
#include <stdexcept>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "distribute/replica_context.h"
#include "distribute/tensor.h"

namespace distribute::testing {

// Runs `f` and returns the what() of the exception of type E it throws;
// fails the test if it throws nothing or something else.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a different exception type, got: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected an exception, got none";
  return {};
}

// The elements of `t` as a std::vector<T>.
template <class T>
std::vector<T> values_of(const Tensor& t) {
  const auto d = t.data<T>();
  return {d.begin(), d.end()};
}

// Device names "CPU:0" .. "CPU:n-1", one per replica of a MirroredStrategy.
inline std::vector<std::string> cpu_devices(int n) {
  std::vector<std::string> devices;
  for (int i = 0; i < n; ++i) devices.push_back("CPU:" + std::to_string(i));
  return devices;
}

// Runs f() on a new thread pinned to the first CPU this thread may use, as
// under `taskset -c N` or an mpirun rank bound to one core.
template <class F>
void run_on_one_cpu(F&& f) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  constexpr std::size_t kNone = CPU_SETSIZE;
  std::size_t first = kNone;
  for (std::size_t c = 0; c < kNone && first == kNone; ++c) {
    if (CPU_ISSET(c, &mine)) first = c;
  }
  ASSERT_NE(first, kNone);
  std::thread pinned([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(one), &one), 0);
    f();
  });
  pinned.join();
}

// A fresh directory under the system's temporary directory, removed with
// everything in it when the object is destroyed.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix) {
    std::string templ = (std::filesystem::temp_directory_path() / (prefix + ".XXXXXX")).string();
    if (::mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + templ);
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const noexcept { return path_; }
  std::string operator/(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }

 private:
  std::string path_;
};

// Inside a replica function: its context and its replica id.
inline ReplicaContext& ctx() { return *get_replica_context(); }
inline int rid() { return get_replica_context()->replica_id_in_sync_group(); }

}  // namespace distribute::testing
