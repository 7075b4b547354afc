#include "runtime/cpu_count.h"

#include "testing/helpers.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace distribute::internal {
namespace {

namespace fs = std::filesystem;

// --- cpu.max (cgroup v2) ---------------------------------------------------------

TEST(CgroupV2CpuMax, QuotaOverPeriodRoundedUp) {
  EXPECT_EQ(parse_cgroup_v2_cpu_max("200000 100000\n"), 2u);
  EXPECT_EQ(parse_cgroup_v2_cpu_max("200000 100000"), 2u);
  EXPECT_EQ(parse_cgroup_v2_cpu_max("150000 100000\n"), 2u);  // 1.5 CPUs: 2 threads get work done
  EXPECT_EQ(parse_cgroup_v2_cpu_max("100001 100000\n"), 2u);
  EXPECT_EQ(parse_cgroup_v2_cpu_max("100000 100000\n"), 1u);
  EXPECT_EQ(parse_cgroup_v2_cpu_max("50000 100000\n"), 1u);  // half a CPU is still one
  EXPECT_EQ(parse_cgroup_v2_cpu_max("1000 1000000\n"), 1u);
  EXPECT_EQ(parse_cgroup_v2_cpu_max("6400000 100000\n"), 64u);
  EXPECT_EQ(parse_cgroup_v2_cpu_max("  300000\t100000  \n"), 3u);
}

TEST(CgroupV2CpuMax, MaxIsNoQuota) {
  EXPECT_EQ(parse_cgroup_v2_cpu_max("max 100000\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_v2_cpu_max("max 100000"), std::nullopt);
}

TEST(CgroupV2CpuMax, MalformedIsNoQuota) {
  for (const char* text :
       {"", "\n", "200000", "max", "200000 100000 7", "abc 100000", "200000 abc", "-200000 100000", "200000 -100000",
        "0 100000", "200000 0", "2e5 100000", "200000x 100000", "99999999999999999999999 100000", "max max"}) {
    EXPECT_EQ(parse_cgroup_v2_cpu_max(text), std::nullopt) << "'" << text << "'";
  }
}

TEST(CgroupV2CpuMax, HugeQuotaDoesNotOverflow) {
  EXPECT_EQ(parse_cgroup_v2_cpu_max("18446744073709551615 1\n"), std::numeric_limits<unsigned>::max());
}

// --- cpu.cfs_quota_us / cpu.cfs_period_us (cgroup v1) ----------------------------

TEST(CgroupV1Cfs, QuotaOverPeriodRoundedUp) {
  EXPECT_EQ(parse_cgroup_v1_cfs("200000\n", "100000\n"), 2u);
  EXPECT_EQ(parse_cgroup_v1_cfs("250000", "100000"), 3u);
  EXPECT_EQ(parse_cgroup_v1_cfs("50000\n", "100000\n"), 1u);
}

TEST(CgroupV1Cfs, MinusOneIsNoQuota) { EXPECT_EQ(parse_cgroup_v1_cfs("-1\n", "100000\n"), std::nullopt); }

TEST(CgroupV1Cfs, MalformedIsNoQuota) {
  EXPECT_EQ(parse_cgroup_v1_cfs("", "100000\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_v1_cfs("200000\n", ""), std::nullopt);
  EXPECT_EQ(parse_cgroup_v1_cfs("abc\n", "100000\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_v1_cfs("-2\n", "100000\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_v1_cfs("0\n", "100000\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_v1_cfs("200000\n", "0\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_v1_cfs("200000 1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_v1_cfs("max\n", "100000\n"), std::nullopt);
}

// --- The hierarchy ---------------------------------------------------------------

// A fake /sys/fs/cgroup, removed at the end of the test.
class FakeCgroupRoot {
 public:
  FakeCgroupRoot() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() /
            ("distribute-cgroup-" + std::string(info->name()) + "-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  ~FakeCgroupRoot() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  FakeCgroupRoot(const FakeCgroupRoot&) = delete;
  FakeCgroupRoot& operator=(const FakeCgroupRoot&) = delete;

  // Writes `contents` to root/<relative>, creating the directories.
  void write(const std::string& relative, const std::string& contents) const {
    const fs::path path = root_ / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << contents;
  }
  void mkdir(const std::string& relative) const { fs::create_directories(root_ / relative); }
  const fs::path& path() const { return root_; }

 private:
  fs::path root_;
};

TEST(CgroupCpuLimit, V2ReadsTheProcessCgroup) {
  FakeCgroupRoot root;
  root.write("kubepods/pod1/ctr/cpu.max", "200000 100000\n");
  EXPECT_EQ(cgroup_cpu_limit("0::/kubepods/pod1/ctr\n", root.path()), 2u);
}

TEST(CgroupCpuLimit, V2ParentQuotaLimitsTheChild) {
  FakeCgroupRoot root;
  root.write("kubepods/cpu.max", "max 100000\n");
  root.write("kubepods/pod1/cpu.max", "300000 100000\n");
  root.write("kubepods/pod1/ctr/cpu.max", "max 100000\n");
  EXPECT_EQ(cgroup_cpu_limit("0::/kubepods/pod1/ctr\n", root.path()), 3u);
  // The smallest level wins, wherever it is.
  root.write("kubepods/pod1/ctr/cpu.max", "500000 100000\n");
  EXPECT_EQ(cgroup_cpu_limit("0::/kubepods/pod1/ctr\n", root.path()), 3u);
  root.write("kubepods/pod1/ctr/cpu.max", "100000 100000\n");
  EXPECT_EQ(cgroup_cpu_limit("0::/kubepods/pod1/ctr\n", root.path()), 1u);
}

TEST(CgroupCpuLimit, V2NoQuotaAnywhere) {
  FakeCgroupRoot root;
  root.write("user.slice/cpu.max", "max 100000\n");
  root.mkdir("user.slice/session-1.scope");  // no cpu.max: the cpu controller is not enabled there
  EXPECT_EQ(cgroup_cpu_limit("0::/user.slice/session-1.scope\n", root.path()), std::nullopt);
  EXPECT_EQ(cgroup_cpu_limit("0::/\n", root.path()), std::nullopt);
  EXPECT_EQ(cgroup_cpu_limit("", root.path()), std::nullopt);
}

TEST(CgroupCpuLimit, V2MalformedFileIsSkipped) {
  FakeCgroupRoot root;
  root.write("a/b/cpu.max", "garbage\n");
  EXPECT_EQ(cgroup_cpu_limit("0::/a/b\n", root.path()), std::nullopt);
  root.write("a/cpu.max", "400000 100000\n");
  EXPECT_EQ(cgroup_cpu_limit("0::/a/b\n", root.path()), 4u);
}

TEST(CgroupCpuLimit, ContainerWhoseCgroupIsMountedAsTheRoot) {
  // A cgroup namespace shows "/"; without one, /proc/self/cgroup names the
  // host's path, which does not exist under the container's mount: the walk
  // up reaches the mount's root, the container's own cgroup.
  FakeCgroupRoot root;
  root.write("cpu.max", "200000 100000\n");
  EXPECT_EQ(cgroup_cpu_limit("0::/\n", root.path()), 2u);
  EXPECT_EQ(cgroup_cpu_limit("0::/system.slice/docker-0123abcd.scope\n", root.path()), 2u);
}

TEST(CgroupCpuLimit, V2InTheHybridLayout) {
  FakeCgroupRoot root;
  root.write("unified/app/cpu.max", "200000 100000\n");
  EXPECT_EQ(cgroup_cpu_limit("1:name=systemd:/app\n0::/app\n", root.path()), 2u);
}

TEST(CgroupCpuLimit, V1CpuController) {
  FakeCgroupRoot root;
  root.write("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "150000\n");
  root.write("cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  root.write("cpu,cpuacct/docker/cpu.cfs_quota_us", "-1\n");
  root.write("cpu,cpuacct/docker/cpu.cfs_period_us", "100000\n");
  const std::string self =
      "12:memory:/docker/abc\n"
      "4:cpu,cpuacct:/docker/abc\n"
      "1:name=systemd:/docker/abc\n";
  EXPECT_EQ(cgroup_cpu_limit(self, root.path()), 2u);
}

TEST(CgroupCpuLimit, V1SeparateCpuHierarchyAndParentQuota) {
  // As on this project's CI machines: cpu and cpuacct mounted apart.
  FakeCgroupRoot root;
  root.write("cpu/batch/cpu.cfs_quota_us", "300000\n");
  root.write("cpu/batch/cpu.cfs_period_us", "100000\n");
  root.write("cpu/batch/job/cpu.cfs_quota_us", "-1\n");
  root.write("cpu/batch/job/cpu.cfs_period_us", "100000\n");
  // cpuacct is not the cpu controller: its files do not count.
  root.write("cpuacct/batch/job/cpu.cfs_quota_us", "100000\n");
  root.write("cpuacct/batch/job/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cpu_limit("2:cpuacct:/batch/job\n1:cpu:/batch/job\n0::/\n", root.path()), 3u);
}

TEST(CgroupCpuLimit, V1MissingPeriodOrMalformedIsSkipped) {
  FakeCgroupRoot root;
  root.write("cpu/a/cpu.cfs_quota_us", "200000\n");  // no period file
  root.write("cpu/cpu.cfs_quota_us", "lots\n");
  root.write("cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cpu_limit("3:cpu:/a\n", root.path()), std::nullopt);
}

TEST(CgroupCpuLimit, V1AndV2BothCount) {
  FakeCgroupRoot root;
  root.write("unified/x/cpu.max", "400000 100000\n");
  root.write("cpu/x/cpu.cfs_quota_us", "200000\n");
  root.write("cpu/x/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cpu_limit("3:cpu:/x\n0::/x\n", root.path()), 2u);
}

TEST(CgroupCpuLimit, MalformedProcSelfCgroupIsIgnored) {
  FakeCgroupRoot root;
  root.write("cpu.max", "200000 100000\n");
  for (const char* self : {"garbage\n", "0:\n", "0::relative/path\n", "::\n", "\n\n"}) {
    EXPECT_EQ(cgroup_cpu_limit(self, root.path()), std::nullopt) << self;
  }
  // A path climbing out of the hierarchy reads only the root.
  root.write("cpu.max", "200000 100000\n");
  EXPECT_EQ(cgroup_cpu_limit("0::/../../etc\n", root.path()), 2u);
}

TEST(CgroupCpuLimit, MissingRootIsNoQuota) {
  EXPECT_EQ(cgroup_cpu_limit("0::/a\n3:cpu:/a\n", "/nonexistent/distribute-cgroup"), std::nullopt);
}

// --- This process ------------------------------------------------------------------

unsigned process_affinity_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  return static_cast<unsigned>(CPU_COUNT(&set));
}

TEST(UsableCores, CountsTheAffinityMaskCappedByTheQuota) {
  const unsigned mask = process_affinity_count();
  EXPECT_EQ(affinity_cpu_count(), mask);
  const auto quota = process_cgroup_cpu_limit();
  EXPECT_EQ(usable_cores(), quota ? std::max(1u, std::min(mask, *quota)) : mask);
  EXPECT_LE(usable_cores(), std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_GE(usable_cores(), 1u);
}

TEST(UsableCores, SeesAThreadPinnedToOneCore) {
  // As under taskset -c N or an mpirun rank bound to a core: replicas must
  // then count one core, whatever the machine has.
  unsigned seen = 0;
  testing::run_on_one_cpu([&] { seen = usable_cores(); });
  EXPECT_EQ(seen, 1u);
}

// Run by CTest under `taskset -c 0` with DISTRIBUTE_EXPECTED_CPUS=1 (see
// tests/CMakeLists.txt); skipped when run without it.
TEST(UsableCores, MatchesTheLauncher) {
  const char* expected = std::getenv("DISTRIBUTE_EXPECTED_CPUS");
  if (expected == nullptr) GTEST_SKIP() << "DISTRIBUTE_EXPECTED_CPUS is not set";
  EXPECT_EQ(usable_cores(), static_cast<unsigned>(std::stoul(expected)));
}

TEST(Loadavg, ReadsTheRunnableCount) {
  EXPECT_EQ(parse_loadavg_running("0.52 0.58 0.59 2/383 12345\n"), 2u);
  EXPECT_EQ(parse_loadavg_running("1.69 1.44 1.48 17/85 23559"), 17u);
  EXPECT_EQ(parse_loadavg_running("0.52 0.58 0.59 x/383 12345"), std::nullopt);
  EXPECT_EQ(parse_loadavg_running("0.52 0.58 0.59 2383 12345"), std::nullopt);
  EXPECT_EQ(parse_loadavg_running("0.52 0.58"), std::nullopt);
  EXPECT_EQ(parse_loadavg_running(""), std::nullopt);
}

TEST(Loadavg, ThisMachineReportsAPlausibleCount) {
  // The file exists on Linux and counts at least this thread.
  std::ifstream file("/proc/loadavg");
  std::string text;
  if (!std::getline(file, text)) GTEST_SKIP() << "no /proc/loadavg";
  const std::optional<unsigned> running = parse_loadavg_running(text);
  ASSERT_TRUE(running.has_value()) << text;
  EXPECT_GE(*running, 1u) << text;
  (void)runnable_threads_fit_cpus();  // reads the file (its answer depends on the machine's load)
}

TEST(Loadavg, MoreRunnableThreadsThanCpusDoNotFit) {
  // As many spinning threads as online CPUs, with this one: one more
  // runnable thread than CPUs, whatever else the machine runs.
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (online < 1 || online > 256) GTEST_SKIP() << "online CPUs: " << online;
  std::atomic<bool> stop{false};
  std::atomic<long> started{0};
  std::vector<std::thread> spinners;
  for (long i = 0; i < online; ++i) {
    spinners.emplace_back([&] {
      started.fetch_add(1);
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  }
  while (started.load() < online) std::this_thread::yield();
  // A snapshot: a spinner may be between time slices at the instant of the
  // read, so the answer must come out false within a few reads.
  bool fit = true;
  for (int attempt = 0; attempt < 50 && fit; ++attempt) fit = runnable_threads_fit_cpus();
  stop = true;
  for (std::thread& t : spinners) t.join();
  EXPECT_FALSE(fit);
}

}  // namespace
}  // namespace distribute::internal
