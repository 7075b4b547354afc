// Donation: ReplicaContext::all_reduce of handed-over tensors (the rvalue
// overloads). A large tensor that every replica donates is reduced in place
// (each replica's result is its own input buffer); anything else behaves as
// the const& overloads, and a buffer someone else can see is never written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collectives/collective_group.h"
#include "distribute/distribute.h"
#include "testing/strategy_matrix.h"

namespace distribute {
namespace {

using testing::message_of;
using testing::StrategyTest;
using testing::cpu_devices;
using testing::ctx;
using testing::rid;
using ::testing::HasSubstr;

// --- Overload resolution (compile time) --------------------------------------
// Every argument form resolves to exactly one overload; only rvalues of
// non-const tensors can reach the donating ones.
template <class A>
concept AllReducible = requires(const ReplicaContext& c, A&& a) { c.all_reduce(ReduceOp::SUM, std::forward<A>(a)); };
static_assert(AllReducible<Tensor&>);
static_assert(AllReducible<const Tensor&>);
static_assert(AllReducible<Tensor>);
static_assert(AllReducible<const Tensor>);
static_assert(AllReducible<std::vector<Tensor>&>);
static_assert(AllReducible<const std::vector<Tensor>&>);
static_assert(AllReducible<std::vector<Tensor>>);
static_assert(requires(const ReplicaContext& c, Tensor t) { c.all_reduce(ReduceOp::SUM, {t, t}); });
static_assert(requires(const ReplicaContext& c, Tensor t) { c.all_reduce(ReduceOp::SUM, {t}); });
static_assert(requires(const ReplicaContext& c) { c.all_reduce(ReduceOp::SUM, {1.f, 2.f}); });
static_assert(requires(const ReplicaContext& c) { c.all_reduce(ReduceOp::SUM, {Tensor{1.f}, Tensor{2.f}}); });
// The types of the results follow the argument.
static_assert(std::is_same_v<decltype(std::declval<const ReplicaContext&>().all_reduce(ReduceOp::SUM, Tensor{})), Tensor>);
static_assert(std::is_same_v<decltype(std::declval<const ReplicaContext&>().all_reduce(
                                 ReduceOp::SUM, std::vector<Tensor>{})),
                             std::vector<Tensor>>);

constexpr std::int64_t kSplitElements = internal::CollectiveGroup::kSplitBytes / sizeof(float);

std::uintptr_t address(const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.bytes().data()); }

// Inputs that differ per replica and element, with inexact sums (so that
// the order of summation shows in the bits).
template <class T>
Tensor input(int r, std::int64_t len, int salt = 0) {
  std::vector<T> v(static_cast<std::size_t>(len));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      v[i] = static_cast<T>(0.1 * (r + 1) + 1e-3 * static_cast<double>((i + static_cast<std::size_t>(salt)) % 97) /
                                                 (r + 3));
    } else {
      v[i] = static_cast<T>((static_cast<std::int64_t>(i) * 7 + r * 13 + salt) % 1001 - 500);
    }
  }
  return Tensor(std::move(v), Shape{len});
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.bytes().data(), b.bytes().data(), a.bytes().size()) == 0;
}

// Sizes around the split threshold (in elements of 4 bytes), odd ones
// included so that shares are uneven.
std::vector<std::int64_t> sizes() {
  return {1, kSplitElements - 1, kSplitElements, kSplitElements + 1, 3 * kSplitElements + 7, 250001};
}

class DonationTest : public StrategyTest {};
DISTRIBUTE_INSTANTIATE_STRATEGY_MATRIX(DonationTest);

// The donated result equals the const& result bit for bit (SUM and MEAN,
// float32, float64 and int32), and is the donated buffer itself on every
// replica from the split threshold up.
TEST_P(DonationTest, InPlaceResultIsBitwiseTheSharedResultAndTheDonatedBuffer) {
  const int N = n();
  for (const ReduceOp op : {ReduceOp::SUM, ReduceOp::MEAN}) {
    for (const std::int64_t len : sizes()) {
      auto check = [&]<class T>(T) {
        std::vector<std::uintptr_t> handed(static_cast<std::size_t>(N)), got(static_cast<std::size_t>(N));
        auto out = strategy().run([&] {
          const int r = rid();
          const Tensor lvalue = input<T>(r, len);
          const Tensor shared = ctx().all_reduce(op, lvalue);
          Tensor mine = input<T>(r, len);
          handed[static_cast<std::size_t>(r)] = address(mine);
          Tensor donated = ctx().all_reduce(op, std::move(mine));
          got[static_cast<std::size_t>(r)] = address(donated);
          return std::vector<Tensor>{shared, donated, lvalue};
        });
        const bool large = len * static_cast<std::int64_t>(sizeof(T)) >= static_cast<std::int64_t>(
                                                                              internal::CollectiveGroup::kSplitBytes);
        for (int r = 0; r < N; ++r) {
          const auto i = static_cast<std::size_t>(r);
          SCOPED_TRACE(std::string(reduce_op_name(op)) + " " + std::string(dtype_name(out[r][0].dtype())) + " len " +
                       std::to_string(len) + " replica " + std::to_string(r));
          EXPECT_TRUE(same_bits(out[r][1], out[r][0]));
          EXPECT_TRUE(same_bits(out[r][1], out[0][1]));
          EXPECT_TRUE(same_bits(out[r][2], input<T>(r, len)));  // the lvalue is untouched
          // One replica: the input is the result. Several: in place from
          // the split threshold up.
          if (N == 1 || large) { EXPECT_EQ(got[i], handed[i]); }
          if (N > 1 && large && r > 0) { EXPECT_FALSE(out[r][1].shares_buffer_with(out[0][1])); }
        }
      };
      check(float{});
      if (len > 1 && len < 3 * kSplitElements) {
        check(double{});
        check(std::int32_t{});
      }
    }
  }
}

// A list mixing small and large tensors and dtypes, under several packings:
// results as with the const& overload, bit for bit; tensors of split packs
// in place.
TEST_P(DonationTest, MixedListIsBitwiseTheSharedResult) {
  const int N = n();
  auto make = [](int r) {
    return std::vector<Tensor>{input<float>(r, 3),          input<float>(r, kSplitElements, 1),
                               input<std::int32_t>(r, 5),   input<float>(r, 40000, 2),
                               input<double>(r, 9000, 3),   input<float>(r, 7, 4)};
  };
  for (const std::int64_t bytes_per_pack : {std::int64_t{0}, std::int64_t{100000}, std::int64_t{16}}) {
    for (const ReduceOp op : {ReduceOp::SUM, ReduceOp::MEAN}) {
      std::vector<std::vector<std::uintptr_t>> handed(static_cast<std::size_t>(N)), got(static_cast<std::size_t>(N));
      const CommunicationOptions options{bytes_per_pack, std::nullopt};
      auto out = strategy().run([&] {
        const int r = rid();
        const std::vector<Tensor> shared = ctx().all_reduce(op, make(r), options);  // a temporary: donated too
        const std::vector<Tensor> lvalue = make(r);
        const std::vector<Tensor> kept = ctx().all_reduce(op, lvalue, options);
        std::vector<Tensor> mine = make(r);
        for (const Tensor& t : mine) handed[static_cast<std::size_t>(r)].push_back(address(t));
        std::vector<Tensor> donated = ctx().all_reduce(op, std::move(mine), options);
        EXPECT_TRUE(mine.empty());  // consumed
        for (const Tensor& t : donated) got[static_cast<std::size_t>(r)].push_back(address(t));
        std::vector<Tensor> all = kept;
        all.insert(all.end(), donated.begin(), donated.end());
        all.insert(all.end(), shared.begin(), shared.end());
        for (std::size_t t = 0; t < lvalue.size(); ++t) EXPECT_TRUE(same_bits(lvalue[t], make(r)[t]));
        return all;
      });
      for (int r = 0; r < N; ++r) {
        const auto i = static_cast<std::size_t>(r);
        ASSERT_EQ(out[r].size(), 18u);
        for (std::size_t t = 0; t < 6; ++t) {
          SCOPED_TRACE("bytes_per_pack " + std::to_string(bytes_per_pack) + " " + std::string(reduce_op_name(op)) + " replica " +
                       std::to_string(r) + " tensor " + std::to_string(t));
          EXPECT_TRUE(same_bits(out[r][6 + t], out[r][t]));
          EXPECT_TRUE(same_bits(out[r][12 + t], out[r][t]));
          EXPECT_TRUE(same_bits(out[r][t], out[0][t]));
        }
        if (N == 1) {
          for (std::size_t t = 0; t < 6; ++t) EXPECT_EQ(got[i][t], handed[i][t]);
          continue;
        }
        // The two large float32 tensors travel in split packs whatever the
        // packing here; so does the float64 one (72 KB).
        EXPECT_EQ(got[i][1], handed[i][1]) << bytes_per_pack;
        EXPECT_EQ(got[i][3], handed[i][3]) << bytes_per_pack;
        EXPECT_EQ(got[i][4], handed[i][4]) << bytes_per_pack;
        // Unless packs are tiny, the first (small) float32 tensor shares
        // the first large one's pack.
        if (bytes_per_pack != 16) { EXPECT_EQ(got[i][0], handed[i][0]) << bytes_per_pack; }
        // The small int32 tensor and the last float32 one (after the
        // float64) are packed alone: below the threshold.
        EXPECT_NE(got[i][2], handed[i][2]);
        EXPECT_NE(got[i][5], handed[i][5]);
      }
    }
  }
}

// When one replica keeps a copy, its tensor is not donated: the result is
// the shared one, correct, and the copy it kept is unchanged. In a pack, the
// other tensors stay in place.
TEST_P(DonationTest, AKeptCopyIsNeverWrittenAndTheResultIsShared) {
  const int N = n();
  if (N == 1) GTEST_SKIP() << "one replica: nothing is written";
  for (int keeper = 0; keeper < N; ++keeper) {
    std::vector<Tensor> kept(static_cast<std::size_t>(N));
    std::vector<std::vector<std::uintptr_t>> handed(static_cast<std::size_t>(N)), got(static_cast<std::size_t>(N));
    auto out = strategy().run([&] {
      const int r = rid();
      const auto i = static_cast<std::size_t>(r);
      // One tensor alone...
      Tensor x = input<float>(r, 2 * kSplitElements);
      if (r == keeper) kept[i] = x;
      const std::uintptr_t x_address = address(x);
      Tensor single = ctx().all_reduce(ReduceOp::SUM, std::move(x));
      got[i].push_back(address(single));
      handed[i].push_back(x_address);
      // ... and the middle one of three in one pack.
      std::vector<Tensor> three{input<float>(r, kSplitElements, 1), input<float>(r, kSplitElements + 3, 2),
                                input<float>(r, kSplitElements, 3)};
      Tensor middle_copy;
      if (r == keeper) middle_copy = three[1];
      for (const Tensor& t : three) handed[i].push_back(address(t));
      std::vector<Tensor> sums = ctx().all_reduce(ReduceOp::SUM, std::move(three));
      for (const Tensor& t : sums) got[i].push_back(address(t));
      if (r == keeper) { EXPECT_TRUE(same_bits(middle_copy, input<float>(r, kSplitElements + 3, 2))); }
      sums.insert(sums.begin(), single);
      return sums;
    });
    EXPECT_TRUE(same_bits(kept[static_cast<std::size_t>(keeper)], input<float>(keeper, 2 * kSplitElements)));
    // Expected sums, in replica order.
    std::vector<Tensor> expected;
    for (const auto& [len, salt] : std::vector<std::pair<std::int64_t, int>>{
             {2 * kSplitElements, 0}, {kSplitElements, 1}, {kSplitElements + 3, 2}, {kSplitElements, 3}}) {
      Tensor sum = input<float>(0, len, salt);
      for (int q = 1; q < N; ++q) sum = sum + input<float>(q, len, salt);
      expected.push_back(sum);
    }
    for (int r = 0; r < N; ++r) {
      const auto i = static_cast<std::size_t>(r);
      SCOPED_TRACE("keeper " + std::to_string(keeper) + " replica " + std::to_string(r));
      for (std::size_t t = 0; t < 4; ++t) EXPECT_TRUE(same_bits(out[r][t], expected[t])) << t;
      // Not donated by all: shared, as for a const& argument.
      EXPECT_TRUE(out[r][0].shares_buffer_with(out[0][0]));
      EXPECT_NE(got[i][0], handed[i][0]);
      EXPECT_TRUE(out[r][2].shares_buffer_with(out[0][2]));
      EXPECT_NE(got[i][2], handed[i][2]);
      // Its pack mates: in place.
      EXPECT_EQ(got[i][1], handed[i][1]);
      EXPECT_EQ(got[i][3], handed[i][3]);
    }
  }
}

// A replica calling with an lvalue (not handing anything over) keeps every
// replica on the shared path, and its tensor is never written.
TEST_P(DonationTest, AnLvalueCallerKeepsItsTensorAndTheSharedPath) {
  const int N = n();
  if (N == 1) GTEST_SKIP() << "one replica: nothing is written";
  auto out = strategy().run([&] {
    const int r = rid();
    Tensor x = input<float>(r, 3 * kSplitElements);  // non-const lvalue
    Tensor sum = r == 0 ? ctx().all_reduce(ReduceOp::MEAN, x) : ctx().all_reduce(ReduceOp::MEAN, std::move(x));
    if (r == 0) { EXPECT_TRUE(same_bits(x, input<float>(0, 3 * kSplitElements))); }
    return sum;
  });
  for (int r = 1; r < N; ++r) {
    EXPECT_TRUE(out[r].shares_buffer_with(out[0]));
    EXPECT_TRUE(same_bits(out[r], out[0]));
  }
}

// A training loop handing its value back each step stays in place (the very
// buffer it started with) and correct, for 64 KiB .. 1 MiB.
TEST_P(DonationTest, ALoopOfDonatedAllReducesStaysInPlace) {
  const int N = n();
  for (const std::int64_t bytes : {std::int64_t{64} << 10, std::int64_t{256} << 10, std::int64_t{1} << 20}) {
    const std::int64_t len = bytes / 4 + (bytes == (std::int64_t{256} << 10) ? 1 : 0);
    constexpr int kSteps = 6;
    std::vector<int> moved(static_cast<std::size_t>(N), 0);
    auto out = strategy().run([&] {
      const int r = rid();
      // Small integers: every sum is exact; after k SUM steps an element is
      // N^(k-1) * sum over replicas.
      std::vector<float> v(static_cast<std::size_t>(len));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(r + 1 + static_cast<int>(i % 5));
      Tensor x(std::move(v), Shape{len});
      Tensor m = x + 0.f;  // a second fresh buffer, reduced with MEAN
      const std::uintptr_t start = address(x), m_start = address(m);
      for (int step = 0; step < kSteps; ++step) {
        x = ctx().all_reduce(ReduceOp::SUM, std::move(x));
        m = ctx().all_reduce(ReduceOp::MEAN, std::move(m));
        if (address(x) != start || address(m) != m_start) ++moved[static_cast<std::size_t>(r)];
      }
      return std::vector<Tensor>{x, m};
    });
    float power = 1;
    for (int k = 1; k < kSteps; ++k) power *= static_cast<float>(N);
    for (int r = 0; r < N; ++r) {
      SCOPED_TRACE("bytes " + std::to_string(bytes) + " replica " + std::to_string(r));
      EXPECT_EQ(moved[static_cast<std::size_t>(r)], 0);
      const auto x = out[r][0].data<float>();
      const auto m = out[r][1].data<float>();
      for (std::size_t i = 0; i < x.size(); i += 997) {
        const float base = static_cast<float>(N * (N + 1) / 2 + N * static_cast<int>(i % 5));
        ASSERT_EQ(x[i], power * base) << i;
        // MEAN of equal values after the first step: exact in binary when
        // the division is (N = 1, 2, 4); within rounding for 3.
        ASSERT_NEAR(m[i], base / static_cast<float>(N), 1e-5f * base) << i;
      }
      ASSERT_EQ(x.back(), power * static_cast<float>(N * (N + 1) / 2 + N * static_cast<int>((x.size() - 1) % 5)));
    }
  }
}

// A thread that read a replica's tensor and dropped its copy without any
// other synchronization (a relaxed flag) must still be ordered before the
// other replicas' writes into it: the donation check acquires the buffer.
// Under ThreadSanitizer this reports a race if nothing on the count does (with
// libstdc++ the descriptor's copy, an acq_rel increment, acquires as well).
TEST(DonationOrderingTest, AReaderThatDroppedItsCopyComesBeforeTheWrites) {
  MirroredStrategy s(cpu_devices(2));
  const std::int64_t len = 2 * kSplitElements;
  for (int round = 0; round < 20; ++round) {
    std::vector<std::uintptr_t> handed(2), got(2);
    auto out = s.run([&] {
      const int r = rid();
      Tensor x = input<float>(r, len);
      handed[static_cast<std::size_t>(r)] = address(x);
      std::atomic<bool> dropped{false};
      double seen = 0;
      std::thread reader([copy = x, &dropped, &seen]() mutable {
        for (const float v : copy.data<float>()) seen += v;
        copy = Tensor();
        dropped.store(true, std::memory_order_relaxed);
      });
      while (!dropped.load(std::memory_order_relaxed)) std::this_thread::yield();
      Tensor sum = ctx().all_reduce(ReduceOp::SUM, std::move(x));
      got[static_cast<std::size_t>(r)] = address(sum);
      reader.join();
      EXPECT_GT(seen, 0);
      return sum;
    });
    EXPECT_TRUE(same_bits(out[0], out[1]));
    // The reader's copy was gone by the time of the check: donated.
    EXPECT_EQ(got, handed) << round;
  }
}

// --- Faults --------------------------------------------------------------------

class DonationFaultTest : public ::testing::TestWithParam<int> {
 protected:
  int n() const { return GetParam(); }
};
INSTANTIATE_TEST_SUITE_P(Replicas, DonationFaultTest, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& p) { return "N" + std::to_string(p.param); });

// A call that fails before the reduction starts (mismatch, a failing
// replica, a missing one) leaves the handed-over tensor as it was: same
// buffer, same contents.
TEST_P(DonationFaultTest, AFailureBeforeTheReductionLeavesTheDonationUntouched) {
  MirroredStrategy s(cpu_devices(n()), CommunicationOptions{0, 0.3});
  const std::int64_t len = 2 * kSplitElements;
  // Mismatched shapes.
  auto mismatch = s.run([&] {
    const int r = rid();
    Tensor x = input<float>(r, r == 0 ? len : len + 1);
    const std::uintptr_t before = address(x);
    std::string m = message_of<InvalidArgumentError>([&] { ctx().all_reduce(ReduceOp::SUM, std::move(x)); });
    std::string wrong;
    if (m.find("shape") == std::string::npos) wrong += "the error does not name the shape: \"" + m + "\"; ";
    if (address(x) != before) wrong += "the tensor moved to another buffer; ";
    if (!same_bits(x, input<float>(r, r == 0 ? len : len + 1))) wrong += "the tensor's contents changed; ";
    return wrong;
  });
  for (int r = 0; r < n(); ++r) EXPECT_EQ(mismatch[r], "") << "replica " << r;
  // Mismatched ops.
  auto ops = s.run([&] {
    const int r = rid();
    Tensor x = input<float>(r, len);
    message_of<InvalidArgumentError>(
        [&] { ctx().all_reduce(r == 0 ? ReduceOp::SUM : ReduceOp::MEAN, std::move(x)); });
    return same_bits(x, input<float>(r, len));
  });
  for (int r = 0; r < n(); ++r) EXPECT_TRUE(ops[r]) << r;
  // A failing replica: the others are cancelled while arriving.
  std::vector<int> untouched(static_cast<std::size_t>(n()), 0);
  try {
    s.run([&] {
      const int r = rid();
      if (r == n() - 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        throw UnavailableError("planned failure");
      }
      Tensor x = input<float>(r, len);
      message_of<CancelledError>([&] { ctx().all_reduce(ReduceOp::SUM, std::move(x)); });
      untouched[static_cast<std::size_t>(r)] = same_bits(x, input<float>(r, len)) ? 1 : 0;
      throw CancelledError("as expected");
    });
    ADD_FAILURE() << "run did not throw";
  } catch (const UnavailableError& e) {
    EXPECT_THAT(e.what(), HasSubstr("planned failure"));
  }
  for (int r = 0; r + 1 < n(); ++r) EXPECT_EQ(untouched[static_cast<std::size_t>(r)], 1) << r;
  // A missing replica: the others time out while arriving.
  std::atomic<int> left{0};
  auto late = s.run([&] {
    const int r = rid();
    Tensor x = input<float>(r, len);
    if (r == 0) {
      while (left.load() < n() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::string m = message_of<DeadlineExceededError>([&] { ctx().all_reduce(ReduceOp::SUM, std::move(x)); });
    left.fetch_add(1);
    std::string wrong;
    if (m.find("missing") == std::string::npos) wrong += "the error does not say who is missing: \"" + m + "\"; ";
    if (!same_bits(x, input<float>(r, len))) wrong += "the tensor's contents changed; ";
    return wrong;
  });
  for (int r = 0; r < n(); ++r) EXPECT_EQ(late[r], "") << "replica " << r;
  // And the group is healthy again: a donated loop runs in place.
  auto ok = s.run([&] {
    const int r = rid();
    Tensor x = input<float>(r, len);
    const std::uintptr_t start = address(x);
    for (int k = 0; k < 3; ++k) x = ctx().all_reduce(ReduceOp::MEAN, std::move(x));
    return address(x) == start;
  });
  for (int r = 0; r < n(); ++r) EXPECT_TRUE(ok[r]) << r;
}

// Random failures around donated all_reduces: every run ends, successful
// ones are exact, and no replica sees a value change under it.
TEST(DonationStressTest, RandomFailuresAroundDonatedAllReduces) {
  MirroredStrategy s(cpu_devices(3), CommunicationOptions{0, 10.0});
  const std::int64_t len = kSplitElements + 11;
  for (int run = 0; run < 300; ++run) {
    const int failing = run % 5 - 1;  // -1: none
    const int point = (run / 5) % 3;
    try {
      auto sums = s.run([&] {
        const int r = rid();
        std::vector<float> v(static_cast<std::size_t>(len), static_cast<float>(r + 1));
        Tensor x(std::move(v), Shape{len});
        for (int k = 0; k < 2; ++k) {
          if (r == failing && point == k) throw AbortedError("planned");
          x = ctx().all_reduce(ReduceOp::SUM, std::move(x));
        }
        if (r == failing && point == 2) throw AbortedError("planned");
        return x.data<float>()[static_cast<std::size_t>(len - 1)];
      });
      ASSERT_FALSE(failing >= 0 && failing < 3) << run;
      for (int r = 0; r < 3; ++r) ASSERT_EQ(sums[r], 18.f) << run;  // (1 + 2 + 3) * 3
    } catch (const AbortedError&) {
      ASSERT_TRUE(failing >= 0 && failing < 3) << run;
    }
  }
}

}  // namespace
}  // namespace distribute

namespace distribute {
namespace {

// A caller's buffer wrapped without a copy (Tensor::wrap, writable) and
// donated is reduced in place: the caller's own memory holds the result.
// One wrapped read-only is never written (the shared path instead).
TEST(DonationOfWrappedBuffers, AWritableWrappedBufferReceivesTheResult) {
  MirroredStrategy s(testing::cpu_devices(2));
  const std::size_t len = 1 << 16;  // 256 KiB: above the split threshold
  std::vector<std::vector<float>> mine(2, std::vector<float>(len));
  for (std::size_t i = 0; i < len; ++i) {
    mine[0][i] = 1.f;
    mine[1][i] = 2.f;
  }
  std::vector<std::vector<float>> kept = mine;
  for (const bool writable : {true, false}) {
    auto out = s.run([&] {
      const auto r = static_cast<std::size_t>(testing::rid());
      std::vector<float>& buffer = writable ? mine[r] : kept[r];
      // The caller keeps its vector; the owner is empty (it outlives the run).
      Tensor wrapped = Tensor::wrap(DType::kFloat32, Shape{static_cast<std::int64_t>(len)}, buffer.data(), nullptr,
                                    writable);
      return testing::ctx().all_reduce(ReduceOp::SUM, std::move(wrapped));
    });
    for (std::size_t r = 0; r < 2; ++r) {
      EXPECT_EQ(out[static_cast<int>(r)].data<float>()[len - 1], 3.f);
      const std::vector<float>& buffer = writable ? mine[r] : kept[r];
      EXPECT_EQ(out[static_cast<int>(r)].data<float>().data() == buffer.data(), writable) << "replica " << r;
      EXPECT_EQ(buffer[len - 1], writable ? 3.f : (r == 0 ? 1.f : 2.f)) << "replica " << r;
    }
  }
}

}  // namespace
}  // namespace distribute
