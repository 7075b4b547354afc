// ShmChannel outside MPI: the segment names left behind by a creator that
// ended during start-up, and the in-place all_reduce of shared allocations,
// with the workers as threads of this process mapping one segment. (The
// collectives through the segment are otherwise tested under mpirun:
// tests/multiworker.)
#include "transport/shm_channel.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distribute/errors.h"
#include "transport/cross_worker.h"

namespace distribute::internal {
namespace {

// A pid that no process has any more: a child's, after it ended.
pid_t ended_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

bool exists(const std::string& name) {
  const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

void make(const std::string& name) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0) << name;
  ::close(fd);
}

TEST(ShmChannel, CreatingASegmentRemovesTheNamesOfCreatorsThatEnded) {
  const std::string prefix = ShmChannel::name_prefix();
  if (prefix == "distribute-0-") GTEST_SKIP() << "no PID namespace to read in /proc/self/ns/pid";
  if (::access("/dev/shm", W_OK) != 0) GTEST_SKIP() << "/dev/shm is not writable here";
  const pid_t dead = ended_pid();
  const std::string stale = "/" + prefix + std::to_string(dead) + "-1-7";
  const std::string live = "/" + prefix + std::to_string(::getpid()) + "-999-7";
  // Another PID namespace's name: its pid means nothing here.
  const std::string foreign = "/distribute-1-" + std::to_string(dead) + "-1-7";
  const std::string unrelated = "/distribute-test-not-a-segment";
  // A pid strtol would read past a sign: not a name this library makes.
  const std::string signed_pid = "/" + prefix + "+" + std::to_string(dead) + "-1-7";
  for (const std::string& name : {stale, live, foreign, unrelated, signed_pid}) make(name);

  const auto channel = ShmChannel::create(0, 1);
  EXPECT_EQ(channel->name().rfind("/" + prefix + std::to_string(::getpid()) + "-", 0), 0u) << channel->name();
  EXPECT_FALSE(exists(stale)) << stale;
  EXPECT_TRUE(exists(live)) << live;
  EXPECT_TRUE(exists(foreign)) << foreign;
  EXPECT_TRUE(exists(unrelated)) << unrelated;
  EXPECT_TRUE(exists(signed_pid)) << signed_pid;
  for (const std::string& name : {stale, live, foreign, unrelated, signed_pid}) ::shm_unlink(name.c_str());
}

// M workers of one host as threads: one channel each over one segment.
struct Workers {
  explicit Workers(int m) {
    channels.push_back(ShmChannel::create(0, m));
    for (int r = 1; r < m; ++r) channels.push_back(ShmChannel::attach(channels[0]->name(), r, m));
    channels[0]->unlink();
    for (auto& c : channels) c->watch_peers();
  }
  // What MpiCrossWorker::allocate_shared does, step by step.
  std::vector<std::shared_ptr<std::byte>> allocate(std::size_t bytes) {
    const std::string name = channels[0]->create_shared(bytes);
    std::vector<std::shared_ptr<ShmChannel::SharedMapping>> maps;
    for (auto& c : channels) maps.push_back(c->map_shared(name, bytes));
    ShmChannel::unlink_shared(name);
    std::vector<std::shared_ptr<std::byte>> regions;
    for (std::size_t r = 0; r < channels.size(); ++r) regions.push_back(channels[r]->register_shared(maps[r]));
    return regions;
  }
  // fn(r) on a thread per worker; the first failure is rethrown.
  template <class Fn>
  void each(Fn fn) {
    std::vector<std::exception_ptr> errors(channels.size());
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < channels.size(); ++r) {
      threads.emplace_back([&, r] {
        try {
          fn(static_cast<int>(r));
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (auto& e : errors) {
      if (e) std::rethrow_exception(e);
    }
  }
  void all_reduce(int r, DType dtype, const void* in, void* out, std::size_t count) {
    const Header mine{1, ++seq[static_cast<std::size_t>(r)], static_cast<std::uint32_t>(Op::kAllReduce),
                      static_cast<std::uint32_t>(dtype), count, -1};
    channels[static_cast<std::size_t>(r)]->all_reduce_sum("all_reduce", mine, dtype, in, out, count,
                                                          ShmChannel::Clock::now() + std::chrono::seconds(30),
                                                          [] { return false; });
  }
  std::vector<std::unique_ptr<ShmChannel>> channels;
  std::vector<std::uint64_t> seq = std::vector<std::uint64_t>(8, 0);
};

// Worker r's input: magnitudes spread over 20 binades, so that the order of
// the additions shows in the bits.
float input_of(int r, std::size_t i) {
  const auto x = static_cast<float>((i * 2654435761u + static_cast<std::size_t>(r) * 40503u) % 1000003u);
  return std::ldexp(x / 1000003.f - 0.5f, static_cast<int>((i + static_cast<std::size_t>(r) * 7) % 20) - 10);
}

bool can_share() { return ::access("/dev/shm", W_OK) == 0; }

// A host's channel within a larger job (MpiCrossWorker's hierarchical mode)
// names the workers by their job numbers: in a mismatch, in a peer's
// report and at the deadline.
TEST(ShmChannel, NamedWorkersAreCalledByTheirNumbersInTheJob) {
  if (!can_share()) GTEST_SKIP() << "/dev/shm is not writable here";
  Workers w(2);
  for (auto& c : w.channels) c->name_workers({4, 5});
  // A mismatch: 1 element on the host's first worker (job worker 4), 2 on
  // its second (5).
  std::vector<std::string> messages(2);
  w.each([&](int r) {
    std::vector<float> in(static_cast<std::size_t>(r + 1), 1.f), out(in.size());
    try {
      w.all_reduce(r, DType::kFloat32, in.data(), out.data(), in.size());
    } catch (const WorkersMismatchError& e) {
      messages[static_cast<std::size_t>(r)] = e.what();
    }
  });
  for (const std::string& m : messages) {
    EXPECT_NE(m.find("1 elements of float32 on worker 4 vs 2 elements of float32 on worker 5"), std::string::npos)
        << m;
  }
  // A report, then a deadline: the other worker is named by its number.
  w.channels[1]->report_failure("worker 5: boom");
  EXPECT_EQ(w.channels[0]->peer_report().value_or(""), "worker 5 reported a failure (worker 5: boom)");
  Workers alone(2);
  alone.channels[0]->name_workers({7, 3});
  float x = 1.f, y = 0.f;
  const Header mine{1, 1, static_cast<std::uint32_t>(Op::kAllReduce), static_cast<std::uint32_t>(DType::kFloat32), 1,
                    -1};
  try {
    alone.channels[0]->all_reduce_sum("all_reduce #1", mine, DType::kFloat32, &x, &y, 1,
                                      ShmChannel::Clock::now() + std::chrono::milliseconds(20), [] { return false; });
    ADD_FAILURE() << "expected DeadlineExceededError";
  } catch (const DeadlineExceededError& e) {
    EXPECT_NE(std::string(e.what()).find("exceeded its deadline on worker 7: nothing received from worker(s) [3]"),
              std::string::npos)
        << e.what();
  }
}

TEST(ShmChannelShared, AnInPlaceSumOfSharedTensorsCopiesNothingAndHasTheCopyingPathsBits) {
  if (!can_share()) GTEST_SKIP() << "/dev/shm is not writable here";
  for (const int m : {2, 3}) {
    Workers workers(m);
    const std::size_t count = 100'003;  // > 64 KiB, not whole cache lines
    const auto regions = workers.allocate(count * sizeof(float));
    std::vector<std::vector<float>> copies(static_cast<std::size_t>(m), std::vector<float>(count));
    std::vector<std::vector<float>> expected(static_cast<std::size_t>(m), std::vector<float>(count));
    for (int r = 0; r < m; ++r) {
      auto* region = reinterpret_cast<float*>(regions[static_cast<std::size_t>(r)].get());
      for (std::size_t i = 0; i < count; ++i) region[i] = copies[static_cast<std::size_t>(r)][i] = input_of(r, i);
    }
    workers.each([&](int r) {
      const auto q = static_cast<std::size_t>(r);
      // The copying path first (ordinary memory), then in place.
      workers.all_reduce(r, DType::kFloat32, copies[q].data(), expected[q].data(), count);
      void* region = regions[q].get();
      workers.all_reduce(r, DType::kFloat32, region, region, count);
    });
    for (int r = 0; r < m; ++r) {
      const auto q = static_cast<std::size_t>(r);
      EXPECT_EQ(workers.channels[q]->shared_sums(), 1u) << "worker " << r << " of " << m;
      EXPECT_EQ(std::memcmp(regions[q].get(), expected[q].data(), count * sizeof(float)), 0)
          << "worker " << r << " of " << m;
      EXPECT_EQ(std::memcmp(expected[q].data(), expected[0].data(), count * sizeof(float)), 0);
    }
    // Spot check of the sum itself, in worker order.
    float sum = 0;
    for (int r = 0; r < m; ++r) sum += input_of(r, 12345);
    EXPECT_EQ(expected[0][12345], sum);
  }
}

TEST(ShmChannelShared, WorkersThatCannotAllSumInPlaceTakeTheCopyingPath) {
  if (!can_share()) GTEST_SKIP() << "/dev/shm is not writable here";
  Workers workers(2);
  const std::size_t count = 40'000;  // int64: 320 KB
  const auto regions = workers.allocate((count + 8) * sizeof(std::int64_t));
  std::vector<std::int64_t> ordinary(count);
  auto in_region = [&](int r, std::size_t skip) {
    return reinterpret_cast<std::int64_t*>(regions[static_cast<std::size_t>(r)].get()) + skip;
  };
  auto fill = [&](std::int64_t* p, int r) {
    for (std::size_t i = 0; i < count; ++i) p[i] = static_cast<std::int64_t>(i) * (r + 1);
  };
  auto check = [&](const std::int64_t* p, const char* what) {
    for (std::size_t i = 0; i < count; i += 997) ASSERT_EQ(p[i], static_cast<std::int64_t>(i) * 3) << what << " " << i;
  };
  // Worker 1 passes ordinary memory.
  fill(in_region(0, 0), 0);
  fill(ordinary.data(), 1);
  workers.each([&](int r) {
    std::int64_t* p = r == 0 ? in_region(0, 0) : ordinary.data();
    workers.all_reduce(r, DType::kInt64, p, p, count);
  });
  check(in_region(0, 0), "worker 0, mixed");
  check(ordinary.data(), "worker 1, mixed");
  // At different places in their regions.
  fill(in_region(0, 0), 0);
  fill(in_region(1, 8), 1);
  workers.each([&](int r) {
    std::int64_t* p = in_region(r, r == 0 ? 0 : 8);
    workers.all_reduce(r, DType::kInt64, p, p, count);
  });
  check(in_region(0, 0), "worker 0, offsets");
  check(in_region(1, 8), "worker 1, offsets");
  // Not in place (out is another buffer): the inputs stay as they were.
  fill(in_region(0, 0), 0);
  fill(in_region(1, 0), 1);
  std::vector<std::vector<std::int64_t>> outs(2, std::vector<std::int64_t>(count));
  workers.each([&](int r) { workers.all_reduce(r, DType::kInt64, in_region(r, 0), outs[static_cast<std::size_t>(r)].data(), count); });
  check(outs[0].data(), "worker 0, out of place");
  check(outs[1].data(), "worker 1, out of place");
  EXPECT_EQ(in_region(1, 0)[999], 999 * 2);
  for (const auto& c : workers.channels) EXPECT_EQ(c->shared_sums(), 0u);
  // And in place in the same regions, at the same place: the in-place path.
  workers.each([&](int r) { workers.all_reduce(r, DType::kInt64, in_region(r, 0), in_region(r, 0), count); });
  check(in_region(0, 0), "worker 0, in place");
  for (const auto& c : workers.channels) EXPECT_EQ(c->shared_sums(), 1u);
}

TEST(ShmChannelShared, ADroppedAllocationIsNotMistakenForTheMemoryThatReplacesIt) {
  if (!can_share()) GTEST_SKIP() << "/dev/shm is not writable here";
  Workers workers(2);
  const std::size_t count = 50'000;
  const std::size_t bytes = count * sizeof(double);
  auto regions = workers.allocate(bytes);
  std::vector<void*> addresses;
  for (const auto& r : regions) addresses.push_back(r.get());
  regions.clear();  // unmapped (the channels keep weak references only)
  // Ordinary memory now where each worker's region was, at the same offset
  // on both: the registered allocation's address range, but not its memory.
  std::vector<void*> replaced;
  for (void* a : addresses) {
    void* p = ::mmap(a, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != a) {
      for (void* q : replaced) ::munmap(q, bytes);
      if (p != MAP_FAILED) ::munmap(p, bytes);
      GTEST_SKIP() << "the old address was taken again before the test could map it";
    }
    replaced.push_back(p);
  }
  for (void* p : replaced) std::fill_n(static_cast<double*>(p), count, 1.5);
  workers.each([&](int r) {
    void* p = replaced[static_cast<std::size_t>(r)];
    workers.all_reduce(r, DType::kFloat64, p, p, count);
  });
  for (void* p : replaced) {
    EXPECT_EQ(static_cast<double*>(p)[0], 3.0);
    EXPECT_EQ(static_cast<double*>(p)[count - 1], 3.0);
  }
  for (const auto& c : workers.channels) EXPECT_EQ(c->shared_sums(), 0u);
  for (void* p : replaced) ::munmap(p, bytes);
}

TEST(ShmChannelShared, InPlaceSumsAreRightAtAnyOffsetInTheRegions) {
  if (!can_share()) GTEST_SKIP() << "/dev/shm is not writable here";
  Workers workers(3);
  const std::size_t count = 30'001;
  const auto regions = workers.allocate((count + 16) * sizeof(float));
  for (const std::size_t skip : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{15}}) {
    for (int r = 0; r < 3; ++r) {
      auto* p = reinterpret_cast<float*>(regions[static_cast<std::size_t>(r)].get()) + skip;
      for (std::size_t i = 0; i < count; ++i) p[i] = input_of(r, i);
    }
    workers.each([&](int r) {
      auto* p = reinterpret_cast<float*>(regions[static_cast<std::size_t>(r)].get()) + skip;
      workers.all_reduce(r, DType::kFloat32, p, p, count);
    });
    for (int r = 0; r < 3; ++r) {
      const auto* p = reinterpret_cast<const float*>(regions[static_cast<std::size_t>(r)].get()) + skip;
      for (std::size_t i = 0; i < count; i += 61) {
        ASSERT_EQ(p[i], (input_of(0, i) + input_of(1, i)) + input_of(2, i)) << "skip " << skip << " i " << i;
      }
      ASSERT_EQ(p[count - 1], (input_of(0, count - 1) + input_of(1, count - 1)) + input_of(2, count - 1));
    }
  }
  for (const auto& c : workers.channels) EXPECT_EQ(c->shared_sums(), 4u);
}

}  // namespace
}  // namespace distribute::internal
