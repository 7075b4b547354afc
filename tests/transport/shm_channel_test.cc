// ShmChannel outside MPI: the segment names left behind by a creator that
// ended during start-up. (The collectives through the segment are tested
// under mpirun: tests/multiworker.)
#include "transport/shm_channel.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

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

}  // namespace
}  // namespace distribute::internal
