// Tests of device-name parsing and of the device lists strategies accept.
#include "distribute/device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "distribute/errors.h"
#include "distribute/strategies.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

using ::testing::HasSubstr;

std::string FullName(int index) { return "/job:localhost/replica:0/task:0/device:CPU:" + std::to_string(index); }

// ---------------------------------------------------------------------------
// parse_device: accepted names

struct Accepted {
  const char* name;
  int index;
};

class ParseDeviceAccepted : public ::testing::TestWithParam<Accepted> {};

TEST_P(ParseDeviceAccepted, Canonicalizes) {
  const Accepted& c = GetParam();
  const DeviceSpec d = parse_device(c.name);
  EXPECT_EQ(d.type, "CPU");
  EXPECT_EQ(d.index, c.index);
  EXPECT_EQ(d.short_name(), "CPU:" + std::to_string(c.index));
  EXPECT_EQ(d.full_name(), FullName(c.index));
  EXPECT_EQ(d, (DeviceSpec{"CPU", c.index}));
  // Canonical names parse back to the same device.
  EXPECT_EQ(parse_device(d.short_name()), d);
  EXPECT_EQ(parse_device(d.full_name()), d);
}

INSTANTIATE_TEST_SUITE_P(Names, ParseDeviceAccepted,
                         ::testing::Values(Accepted{"CPU:0", 0}, Accepted{"cpu:3", 3}, Accepted{"/cpu:1", 1},
                                           Accepted{"/device:CPU:2", 2},
                                           Accepted{"/job:localhost/replica:0/task:0/device:CPU:0", 0},
                                           Accepted{"/job:localhost/device:CPU:5", 5}, Accepted{"CPU:12", 12},
                                           Accepted{"Cpu:4", 4}, Accepted{"/device:cpu:6", 6},
                                           Accepted{"/replica:0/task:0/device:CPU:8", 8},
                                           Accepted{"/task:0/device:CPU:9", 9},
                                           Accepted{"/job:localhost/replica:0/device:CPU:1", 1},
                                           Accepted{"/job:localhost/cpu:2", 2}));

TEST(ParseDevice, SpecNames) {
  const DeviceSpec d{"CPU", 7};
  EXPECT_EQ(d.short_name(), "CPU:7");
  EXPECT_EQ(d.full_name(), "/job:localhost/replica:0/task:0/device:CPU:7");
  EXPECT_EQ(parse_device("/job:localhost/replica:0/task:0/device:CPU:0").short_name(), "CPU:0");
  EXPECT_EQ(parse_device("cpu:3").full_name(), "/job:localhost/replica:0/task:0/device:CPU:3");
  EXPECT_NE(parse_device("CPU:1"), parse_device("CPU:2"));
}

// ---------------------------------------------------------------------------
// parse_device: rejected names

class ParseDeviceRejected : public ::testing::TestWithParam<const char*> {};

TEST_P(ParseDeviceRejected, InvalidArgumentQuotingTheName) {
  const std::string name = GetParam();
  EXPECT_THROW(parse_device(name), InvalidArgumentError);
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([&] { parse_device(name); }), HasSubstr("'" + name + "'"));
}

INSTANTIATE_TEST_SUITE_P(Names, ParseDeviceRejected,
                         ::testing::Values("", "CPU", "CPU:", "CPU:-1", "CPU:x", "CPU:1x", "CPU:99999999999",
                                           "GPU:0", "TPU:0", "/job:worker/task:0/device:CPU:0",
                                           "/job:localhost/task:1/device:CPU:0",
                                           "/job:localhost/replica:1/device:CPU:0", "/job:localhost",
                                           "/device:CPU:0/device:CPU:1", "//CPU:0", "/", "/device:CPU:0/",
                                           "/device:GPU:0", "/job:localhost/replica:0/task:0"));

TEST(ParseDevice, GpuMessageMentionsGpuSupport) {
  for (const char* name : {"GPU:0", "gpu:1", "/device:GPU:0", "/job:localhost/replica:0/task:0/device:GPU:0"}) {
    SCOPED_TRACE(name);
    const std::string msg = testing::message_of<InvalidArgumentError>([&] { parse_device(name); });
    EXPECT_THAT(msg, HasSubstr("GPU support"));
    EXPECT_THAT(msg, HasSubstr(std::string("'") + name + "'"));
  }
}

TEST(ParseDevice, MessagesSayWhatWasExpected) {
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([] { parse_device("TPU:0"); }), HasSubstr("CPU"));
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([] { parse_device("CPU:x"); }), HasSubstr("non-negative integer"));
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([] { parse_device("/job:worker/task:0/device:CPU:0"); }),
              HasSubstr("worker"));
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([] { parse_device("/job:localhost/task:1/device:CPU:0"); }),
              HasSubstr("task"));
}

// ---------------------------------------------------------------------------
// Strategy constructors

TEST(MirroredStrategyDevices, EmptyListError) {
  EXPECT_THROW(MirroredStrategy(std::vector<std::string>{}), InvalidArgumentError);
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([] { MirroredStrategy s(std::vector<std::string>{}); }),
              HasSubstr("at least one device"));
}

TEST(MirroredStrategyDevices, DuplicatesError) {
  EXPECT_THROW(MirroredStrategy({"CPU:0", "CPU:0"}), InvalidArgumentError);
  EXPECT_THROW(MirroredStrategy({"CPU:0", "/device:CPU:0"}), InvalidArgumentError);
  EXPECT_THROW(MirroredStrategy({"cpu:1", "CPU:2", "/job:localhost/replica:0/task:0/device:CPU:1"}),
               InvalidArgumentError);

  const std::string msg = testing::message_of<InvalidArgumentError>([] { MirroredStrategy s({"CPU:0", "/device:CPU:0"}); });
  EXPECT_THAT(msg, HasSubstr("CPU:0"));
  EXPECT_THAT(msg, HasSubstr("positions 0 and 1"));
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([] { MirroredStrategy s({"CPU:1", "CPU:2", "cpu:1"}); }),
              HasSubstr("positions 0 and 2"));
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([] { MirroredStrategy s({"CPU:3", "CPU:4", "CPU:5", "/cpu:4"}); }),
              HasSubstr("positions 1 and 3"));
}

TEST(MirroredStrategyDevices, MalformedOrUnknownError) {
  EXPECT_THROW(MirroredStrategy({"CPU:0", "CPU:x"}), InvalidArgumentError);
  EXPECT_THROW(MirroredStrategy({"GPU:0"}), InvalidArgumentError);
  EXPECT_THROW(MirroredStrategy({""}), InvalidArgumentError);
  EXPECT_THROW(MirroredStrategy({"CPU:0", "/job:worker/task:0/device:CPU:1"}), InvalidArgumentError);
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([] { MirroredStrategy s({"CPU:0", "CPU:x"}); }),
              HasSubstr("'CPU:x'"));
}

TEST(MirroredStrategyDevices, MoreReplicasThanCores) {
  MirroredStrategy s({"CPU:0", "CPU:7", "CPU:12"});
  EXPECT_EQ(s.num_replicas_in_sync(), 3);
  EXPECT_EQ(s.devices(), (std::vector<DeviceSpec>{{"CPU", 0}, {"CPU", 7}, {"CPU", 12}}));
  EXPECT_FALSE(s.is_default());
}

TEST(MirroredStrategyDevices, KeepsListedOrderAndCanonicalizes) {
  MirroredStrategy s({"/job:localhost/replica:0/task:0/device:CPU:12", "cpu:0", "/device:CPU:3"});
  ASSERT_EQ(s.num_replicas_in_sync(), 3);
  EXPECT_EQ(s.devices()[0], (DeviceSpec{"CPU", 12}));
  EXPECT_EQ(s.devices()[1], (DeviceSpec{"CPU", 0}));
  EXPECT_EQ(s.devices()[2], (DeviceSpec{"CPU", 3}));
}

TEST(MirroredStrategyDevices, DefaultHasOneReplicaPerUsableCpu) {
  MirroredStrategy s;
  const int n = usable_cpu_count();
  EXPECT_GE(n, 1);
  EXPECT_LE(n, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  EXPECT_EQ(s.num_replicas_in_sync(), n);
  ASSERT_EQ(static_cast<int>(s.devices().size()), n);
  for (int i = 0; i < n; ++i) EXPECT_EQ(s.devices()[static_cast<std::size_t>(i)], (DeviceSpec{"CPU", i}));
}

TEST(MirroredStrategyDevices, DefaultOnAThreadPinnedToOneCpuHasOneReplica) {
  // The mask is the calling thread's: as under taskset -c N, or an mpirun
  // rank bound to one core.
  int replicas = 0;
  int count = 0;
  testing::run_on_one_cpu([&] {
    count = usable_cpu_count();
    MirroredStrategy s;
    replicas = s.num_replicas_in_sync();
  });
  EXPECT_EQ(count, 1);
  EXPECT_EQ(replicas, 1);
}

// Run by CTest under `taskset -c 0` with DISTRIBUTE_EXPECTED_CPUS=1 (see
// tests/CMakeLists.txt); skipped when run without it.
TEST(MirroredStrategyDevices, DefaultMatchesTheLauncher) {
  const char* expected = std::getenv("DISTRIBUTE_EXPECTED_CPUS");
  if (expected == nullptr) GTEST_SKIP() << "DISTRIBUTE_EXPECTED_CPUS is not set";
  const int n = std::stoi(expected);
  EXPECT_EQ(usable_cpu_count(), n);
  MirroredStrategy s;
  EXPECT_EQ(s.num_replicas_in_sync(), n);
}

TEST(OneDeviceStrategyDevices, AcceptsOneCpu) {
  OneDeviceStrategy s("/job:localhost/replica:0/task:0/device:CPU:3");
  EXPECT_EQ(s.num_replicas_in_sync(), 1);
  EXPECT_EQ(s.devices(), (std::vector<DeviceSpec>{{"CPU", 3}}));
}

TEST(OneDeviceStrategyDevices, RejectsGpuAndMalformed) {
  EXPECT_THROW(OneDeviceStrategy("GPU:0"), InvalidArgumentError);
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([] { OneDeviceStrategy s("GPU:0"); }), HasSubstr("GPU support"));
  EXPECT_THROW(OneDeviceStrategy("CPU"), InvalidArgumentError);
  EXPECT_THROW(OneDeviceStrategy(""), InvalidArgumentError);
}

}  // namespace
}  // namespace distribute
