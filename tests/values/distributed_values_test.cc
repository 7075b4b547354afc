// Tests of PerReplica / Mirrored: construction, access, iteration, the
// is_distributed_values trait and TF's printed layout.
#include "distribute/distributed_values.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "distribute/errors.h"
#include "distribute/tensor.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <class T>
std::string Streamed(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

template <class T>
bool IsDistributed(const T&) {
  return is_distributed_values_v<T>;
}

// ---------------------------------------------------------------------------
// Construction and access

TEST(PerReplica, ConstructAndAccess) {
  const PerReplica<int> p(std::vector<int>{10, 20, 30});
  EXPECT_EQ(p.size(), 3);
  EXPECT_THAT(p.values(), ElementsAre(10, 20, 30));
  EXPECT_EQ(p.at(0), 10);
  EXPECT_EQ(p.at(1), 20);
  EXPECT_EQ(p.at(2), 30);
  EXPECT_EQ(p[0], 10);
  EXPECT_EQ(p[2], 30);
  EXPECT_EQ(p.primary(), 10);
  EXPECT_EQ(&p.primary(), &p.values().front());
  EXPECT_EQ(&p[1], &p.values()[1]);
}

TEST(Mirrored, ConstructAndAccess) {
  const Tensor w{1.f, 2.f};
  const Mirrored<Tensor> m(std::vector<Tensor>(3, w));
  EXPECT_EQ(m.size(), 3);
  for (int r = 0; r < m.size(); ++r) {
    EXPECT_EQ(m[r], w);
    // Mirrored tensors may share one buffer: copies of a Tensor do.
    EXPECT_TRUE(m.at(r).shares_buffer_with(w));
  }
  EXPECT_EQ(m.primary(), w);
}

TEST(DistributedValues, SingleReplica) {
  const PerReplica<double> p(std::vector<double>{2.5});
  EXPECT_EQ(p.size(), 1);
  EXPECT_EQ(p.primary(), 2.5);
  EXPECT_EQ(p[0], 2.5);
  EXPECT_THROW(p[1], InvalidArgumentError);
}

TEST(DistributedValues, EmptyListError) {
  EXPECT_THROW(PerReplica<int>(std::vector<int>{}), InvalidArgumentError);
  EXPECT_THROW(Mirrored<int>(std::vector<int>{}), InvalidArgumentError);
  EXPECT_THROW(PerReplica<Tensor>(std::vector<Tensor>{}), InvalidArgumentError);
  EXPECT_THROW(DistributedValues<int>(std::vector<int>{}), InvalidArgumentError);
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([] { PerReplica<int>(std::vector<int>{}); }),
              HasSubstr("got none"));
}

TEST(DistributedValues, OutOfRangeError) {
  const PerReplica<int> p(std::vector<int>{1, 2});
  EXPECT_THROW(p.at(2), InvalidArgumentError);
  EXPECT_THROW(p.at(-1), InvalidArgumentError);
  EXPECT_THROW(p[2], InvalidArgumentError);
  EXPECT_THROW(p[-1], InvalidArgumentError);
  const Mirrored<int> m(std::vector<int>{1, 1, 1});
  EXPECT_THROW(m.at(3), InvalidArgumentError);
  EXPECT_NO_THROW(m.at(2));

  const std::string msg = testing::message_of<InvalidArgumentError>([&] { p.at(2); });
  EXPECT_THAT(msg, HasSubstr("[0, 2)"));
  EXPECT_THAT(msg, HasSubstr("got 2"));
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([&] { m[-1]; }), HasSubstr("got -1"));
}

TEST(DistributedValues, Iteration) {
  const PerReplica<int> p(std::vector<int>{3, 1, 4, 1, 5});
  int sum = 0;
  for (int v : p) sum += v;
  EXPECT_EQ(sum, 14);
  EXPECT_EQ(std::accumulate(p.begin(), p.end(), 0), 14);
  EXPECT_EQ(std::vector<int>(p.begin(), p.end()), (std::vector<int>{3, 1, 4, 1, 5}));
  EXPECT_EQ(p.end() - p.begin(), 5);

  const Mirrored<Tensor> m(std::vector<Tensor>{Tensor{1, 2}, Tensor{1, 2}});
  int n = 0;
  for (const Tensor& t : m) {
    EXPECT_EQ(t, (Tensor{1, 2}));
    ++n;
  }
  EXPECT_EQ(n, 2);
}

TEST(DistributedValues, Equality) {
  EXPECT_TRUE(PerReplica<int>(std::vector<int>{1, 2}) == PerReplica<int>(std::vector<int>{1, 2}));
  EXPECT_FALSE(PerReplica<int>(std::vector<int>{1, 2}) == PerReplica<int>(std::vector<int>{2, 1}));
  EXPECT_FALSE(PerReplica<int>(std::vector<int>{1}) == PerReplica<int>(std::vector<int>{1, 1}));
}

TEST(DistributedValues, CopiesShareTensorBuffers) {
  const PerReplica<Tensor> p(std::vector<Tensor>{Tensor{5.f}, Tensor{6.f}});
  const PerReplica<Tensor> q = p;  // NOLINT(performance-unnecessary-copy-initialization)
  ASSERT_EQ(q.size(), 2);
  EXPECT_TRUE(q[0].shares_buffer_with(p[0]));
  EXPECT_TRUE(q[1].shares_buffer_with(p[1]));
  EXPECT_FALSE(q[0].shares_buffer_with(q[1]));
}

// ---------------------------------------------------------------------------
// Trait

static_assert(is_distributed_values_v<PerReplica<int>>);
static_assert(is_distributed_values_v<Mirrored<int>>);
static_assert(is_distributed_values_v<PerReplica<Tensor>>);
static_assert(is_distributed_values_v<Mirrored<Tensor>>);
static_assert(is_distributed_values_v<DistributedValues<float>>);
static_assert(is_distributed_values_v<const PerReplica<int>&>);
static_assert(is_distributed_values_v<Mirrored<Tensor>&&>);
static_assert(is_distributed_values_v<const volatile Mirrored<int>>);
static_assert(!is_distributed_values_v<int>);
static_assert(!is_distributed_values_v<Tensor>);
static_assert(!is_distributed_values_v<const Tensor&>);
static_assert(!is_distributed_values_v<std::vector<int>>);
static_assert(!is_distributed_values_v<std::vector<PerReplica<int>>>);
static_assert(!is_distributed_values_v<PerReplica<int>*>);
static_assert(std::is_base_of_v<DistributedValues<int>, PerReplica<int>>);
static_assert(std::is_base_of_v<DistributedValues<int>, Mirrored<int>>);
static_assert(std::is_same_v<PerReplica<Tensor>::value_type, Tensor>);

TEST(IsDistributedValues, Runtime) {
  const PerReplica<int> p(std::vector<int>{1});
  const Mirrored<Tensor> m(std::vector<Tensor>{Tensor{1.f}});
  EXPECT_TRUE(IsDistributed(p));
  EXPECT_TRUE(IsDistributed(m));
  EXPECT_TRUE(is_distributed_values<PerReplica<int>>::value);
  EXPECT_FALSE(IsDistributed(1));
  EXPECT_FALSE(IsDistributed(Tensor{1.f}));
  EXPECT_FALSE(IsDistributed(std::vector<int>{1}));
  EXPECT_FALSE(is_distributed_values<int>::value);
}

// ---------------------------------------------------------------------------
// Printing

TEST(DistributedValuesPrint, PerReplicaOfTensors) {
  const PerReplica<Tensor> p(std::vector<Tensor>{Tensor{5.f}, Tensor{6.f}});
  const std::string want =
      "PerReplica:{\n"
      "  0: Tensor([5.], shape=(1,), dtype=float32),\n"
      "  1: Tensor([6.], shape=(1,), dtype=float32)\n"
      "}";
  EXPECT_EQ(Streamed(p), want);
  EXPECT_EQ(to_string(p), want);
}

TEST(DistributedValuesPrint, MirroredOfInts) {
  const Mirrored<int> m(std::vector<int>{1, 1});
  const std::string want = "Mirrored:{\n  0: 1,\n  1: 1\n}";
  EXPECT_EQ(Streamed(m), want);
  EXPECT_EQ(to_string(m), want);
}

TEST(DistributedValuesPrint, SingleReplica) {
  EXPECT_EQ(to_string(PerReplica<int>(std::vector<int>{7})), "PerReplica:{\n  0: 7\n}");
  EXPECT_EQ(to_string(Mirrored<Tensor>(std::vector<Tensor>{Tensor(11.f)})),
            "Mirrored:{\n  0: Tensor(11.0, shape=(), dtype=float32)\n}");
}

TEST(DistributedValuesPrint, ManyReplicasAndMultiLineValues) {
  EXPECT_EQ(to_string(PerReplica<int>(std::vector<int>{0, 1, 2})), "PerReplica:{\n  0: 0,\n  1: 1,\n  2: 2\n}");
  // A 2-D tensor keeps its own newlines.
  EXPECT_EQ(to_string(Mirrored<Tensor>(std::vector<Tensor>{Tensor{{1, 2}, {3, 4}}})),
            "Mirrored:{\n  0: Tensor(\n[[1 2]\n [3 4]], shape=(2, 2), dtype=int32)\n}");
}

TEST(DistributedValuesPrint, StreamComposes) {
  std::ostringstream os;
  os << "v=" << Mirrored<int>(std::vector<int>{4}) << ";";
  EXPECT_EQ(os.str(), "v=Mirrored:{\n  0: 4\n};");
}

// ---------------------------------------------------------------------------
// Thread safety (run under TSan too)

TEST(DistributedValuesThreads, ConcurrentReads) {
  const PerReplica<Tensor> p(std::vector<Tensor>{Tensor{1.f, 2.f}, Tensor{3.f, 4.f}, Tensor{5.f, 6.f}});
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&p, &failures, t] {
      for (int i = 0; i < 200; ++i) {
        const PerReplica<Tensor> copy = p;
        const int r = (t + i) % 3;
        const bool ok = copy[r].shares_buffer_with(p[r]) &&
                        copy.at(r).sum().item<float>() == static_cast<float>(4 * r + 3) &&
                        (i % 50 != 0 || to_string(copy) == to_string(p));
        if (!ok) failures.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace distribute
