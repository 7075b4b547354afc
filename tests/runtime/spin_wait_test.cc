#include "runtime/spin_wait.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstddef>
#include <thread>

namespace distribute::internal {
namespace {

TEST(UsableCores, CountsTheAffinityMask) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(usable_cores(), static_cast<unsigned>(CPU_COUNT(&set)));
  EXPECT_LE(usable_cores(), std::max(1u, std::thread::hardware_concurrency()));
}

TEST(UsableCores, SeesAThreadPinnedToOneCore) {
  // As under taskset -c N or an mpirun rank bound to a core: replicas must
  // then count one core, whatever the machine has.
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  constexpr std::size_t kNone = CPU_SETSIZE;
  std::size_t first = kNone;
  for (std::size_t c = 0; c < kNone && first == kNone; ++c) {
    if (CPU_ISSET(c, &mine)) first = c;
  }
  ASSERT_NE(first, kNone);
  unsigned seen = 0;
  std::thread pinned([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(one), &one), 0);
    seen = usable_cores();
  });
  pinned.join();
  EXPECT_EQ(seen, 1u);
}

}  // namespace
}  // namespace distribute::internal
