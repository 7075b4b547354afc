// Replica-context collectives (all_reduce, all_gather, merge_call),
// Strategy::gather, and the fault behaviour of the collective engine.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
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
using testing::values_of;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }


// n runs of two all_reduces and an all_gather; every result must be exact.
void expect_healthy(Strategy& s, int runs = 100) {
  const int n = s.num_replicas_in_sync();
  for (int i = 0; i < runs; ++i) {
    auto ok = s.run([&] {
      const int r = rid();
      Tensor a = ctx().all_reduce(ReduceOp::SUM, Tensor{static_cast<float>(r + 1), static_cast<float>(i)});
      Tensor g = ctx().all_gather(Tensor{static_cast<std::int32_t>(r)}, 0);
      Tensor m = ctx().all_reduce(ReduceOp::MEAN, Tensor{static_cast<std::int32_t>(2 * r)});
      bool good = values_of<float>(a) == std::vector<float>{static_cast<float>(n * (n + 1) / 2),
                                                             static_cast<float>(n * i)};
      for (int q = 0; q < n; ++q) good = good && g.data<std::int32_t>()[static_cast<std::size_t>(q)] == q;
      good = good && m.item<std::int32_t>() == n - 1;
      return good;
    });
    for (int r = 0; r < n; ++r) ASSERT_TRUE(ok[r]) << "run " << i << " replica " << r;
  }
}

// ---------------------------------------------------------------------------
// Over the strategy matrix.

class CollectivesTest : public StrategyTest {};
DISTRIBUTE_INSTANTIATE_STRATEGY_MATRIX(CollectivesTest);

TEST_P(CollectivesTest, AllReduceSumAndMeanOfOneTensor) {
  const int N = n();
  auto out = strategy().run([] {
    const auto v = static_cast<float>(rid() + 1);
    return std::vector<Tensor>{ctx().all_reduce(ReduceOp::SUM, Tensor{v, 10 * v}),
                               ctx().all_reduce(ReduceOp::MEAN, Tensor{v, 10 * v}),
                               ctx().all_reduce(ReduceOp::SUM, Tensor{{v, 2 * v, 3 * v}, {4 * v, 5 * v, 6 * v}}),
                               ctx().all_reduce(ReduceOp::MEAN, Tensor{static_cast<std::int32_t>(rid() + 1)})};
  });
  const float s = static_cast<float>(N * (N + 1) / 2);
  const float mean = static_cast<float>(N + 1) / 2.f;
  for (int r = 0; r < N; ++r) {
    EXPECT_EQ(out[r][0], (Tensor{s, 10 * s})) << r;
    EXPECT_EQ(out[r][1], (Tensor{mean, 10 * mean})) << r;
    EXPECT_EQ(out[r][2], (Tensor{{s, 2 * s, 3 * s}, {4 * s, 5 * s, 6 * s}})) << r;
    EXPECT_EQ(out[r][3], Tensor{static_cast<std::int32_t>((N + 1) / 2)}) << r;  // integer MEAN truncates
  }
}

TEST_P(CollectivesTest, AllReduceOfAListLikeTheDocstring) {
  // TF: all_reduce(SUM, [Tensor(1.), Tensor(2.)]) on 2 replicas -> [2., 4.].
  const int N = n();
  auto out = strategy().run([] { return ctx().all_reduce(ReduceOp::SUM, std::vector<Tensor>{Tensor{1.f}, Tensor{2.f}}); });
  for (int r = 0; r < N; ++r) {
    ASSERT_EQ(out[r].size(), 2u);
    EXPECT_EQ(out[r][0], Tensor{static_cast<float>(N)});
    EXPECT_EQ(out[r][1], Tensor{static_cast<float>(2 * N)});
  }
}

TEST_P(CollectivesTest, ResultsOfOneLargeAllReduceShareOneBuffer) {
  // From kSplitBytes up the replicas reduce shares of one output buffer,
  // which every replica's result is; below, each replica reduces on its own.
  constexpr std::int64_t kLarge = internal::CollectiveGroup::kSplitBytes / sizeof(float);
  const Tensor big(std::vector<float>(static_cast<std::size_t>(kLarge), 1.5f), Shape{kLarge});
  auto out = strategy().run([&] { return ctx().all_reduce(ReduceOp::SUM, big); });
  auto lists = strategy().run([&] {
    return ctx().all_reduce(ReduceOp::SUM, std::vector<Tensor>{Tensor{1.f}, big, Tensor{2.f, 3.f}});
  });
  auto small = strategy().run([] { return ctx().all_reduce(ReduceOp::SUM, Tensor{1.f, 2.f, 3.f}); });
  const auto N = static_cast<float>(n());
  for (int r = 0; r < n(); ++r) {
    ASSERT_EQ(out[r].shape(), Shape{kLarge});
    EXPECT_EQ(out[r].data<float>()[0], 1.5f * N);
    EXPECT_EQ(out[r].data<float>()[static_cast<std::size_t>(kLarge - 1)], 1.5f * N);
    // One pack of the three tensors (bytes_per_pack 0), split: one buffer.
    ASSERT_EQ(lists[r].size(), 3u);
    EXPECT_EQ(lists[r][0], Tensor{N});
    EXPECT_EQ(lists[r][2], (Tensor{2.f * N, 3.f * N}));
    EXPECT_EQ(lists[r][1].data<float>()[static_cast<std::size_t>(kLarge / 2)], 1.5f * N);
    EXPECT_EQ(small[r], (Tensor{N, 2.f * N, 3.f * N}));
    if (r == 0) continue;
    EXPECT_TRUE(out[0].shares_buffer_with(out[r])) << r;
    EXPECT_TRUE(lists[0][0].shares_buffer_with(lists[r][0])) << r;
    EXPECT_TRUE(lists[0][0].shares_buffer_with(lists[r][2])) << r;
    EXPECT_FALSE(small[0].shares_buffer_with(small[r])) << r;
  }
}

TEST_P(CollectivesTest, ALoopOfLargeAllReducesReusesOneOutputBuffer) {
  // A training loop that drops each step's result before the next call
  // cycles through one shared buffer, not two: the working set of an
  // all-reduce of S bytes stays at N inputs + 1 output.
  if (n() == 1) GTEST_SKIP() << "one replica: the input is the result";
  constexpr std::int64_t kLarge = internal::CollectiveGroup::kSplitBytes / sizeof(float);
  auto addresses = strategy().run([&] {
    const Tensor mine(std::vector<float>(static_cast<std::size_t>(kLarge), 1.f), Shape{kLarge});
    std::vector<std::int64_t> seen;
    for (int step = 0; step < 6; ++step) {
      const Tensor sum = ctx().all_reduce(ReduceOp::SUM, mine);
      seen.push_back(static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(sum.bytes().data())));
    }
    return seen;
  });
  for (int r = 0; r < n(); ++r) {
    for (std::size_t step = 1; step < addresses[r].size(); ++step) {
      EXPECT_EQ(addresses[r][step], addresses[r][0]) << "replica " << r << " step " << step;
    }
  }
  // Holding a result keeps its buffer: the next call gets another one.
  auto held = strategy().run([&] {
    const Tensor mine(std::vector<float>(static_cast<std::size_t>(kLarge), 1.f), Shape{kLarge});
    const Tensor first = ctx().all_reduce(ReduceOp::SUM, mine);
    const Tensor second = ctx().all_reduce(ReduceOp::SUM, mine);
    return std::vector<Tensor>{first, second};
  });
  EXPECT_FALSE(held[0][0].shares_buffer_with(held[0][1]));
  EXPECT_EQ(held[0][0].data<float>()[0], static_cast<float>(n()));
  EXPECT_EQ(held[0][1].data<float>()[0], static_cast<float>(n()));
}

TEST_P(CollectivesTest, MixedDtypeListAndSmallPacks) {
  const int N = n();
  for (std::int64_t bytes_per_pack : {std::int64_t{0}, std::int64_t{8}, std::int64_t{4}}) {
    auto out = strategy().run([&] {
      const int r = rid();
      std::vector<Tensor> values{Tensor{static_cast<float>(r + 1)},
                                 Tensor{static_cast<std::int32_t>(r), static_cast<std::int32_t>(2 * r)},
                                 Tensor{0.5f * static_cast<float>(r), 1.f, 2.f},
                                 Tensor{static_cast<float>(r)},
                                 Tensor{std::vector<std::int64_t>{r, r, r, r}, Shape{2, 2}}};
      return ctx().all_reduce(ReduceOp::SUM, values, CommunicationOptions{bytes_per_pack, std::nullopt});
    });
    const auto tri = static_cast<std::int32_t>(N * (N - 1) / 2);
    for (int r = 0; r < N; ++r) {
      ASSERT_EQ(out[r].size(), 5u);
      EXPECT_EQ(out[r][0], Tensor{static_cast<float>(N * (N + 1) / 2)}) << bytes_per_pack;
      EXPECT_EQ(out[r][1], (Tensor{tri, 2 * tri})) << bytes_per_pack;
      EXPECT_EQ(out[r][2], (Tensor{0.5f * static_cast<float>(tri), static_cast<float>(N), 2.f * static_cast<float>(N)}))
          << bytes_per_pack;
      EXPECT_EQ(out[r][3], Tensor{static_cast<float>(tri)}) << bytes_per_pack;
      EXPECT_EQ(out[r][4], (Tensor{std::vector<std::int64_t>(4, tri), Shape{2, 2}})) << bytes_per_pack;
    }
  }
}

TEST_P(CollectivesTest, SumIsBitwiseTheSequentialSumInReplicaOrder) {
  const int N = n();
  constexpr std::size_t kLen = 40000;  // 160 KB: the split path
  auto input = [](int r, std::size_t i) {
    return 0.1f * static_cast<float>(r + 1) + 1e-3f * static_cast<float>(i % 97) / static_cast<float>(r + 3);
  };
  std::vector<std::uint32_t> expected(kLen);
  for (std::size_t i = 0; i < kLen; ++i) {
    float acc = input(0, i);
    for (int q = 1; q < N; ++q) acc += input(q, i);
    expected[i] = std::bit_cast<std::uint32_t>(acc);
  }
  std::vector<Tensor> inputs;
  for (int r = 0; r < N; ++r) {
    std::vector<float> v(kLen);
    for (std::size_t i = 0; i < kLen; ++i) v[i] = input(r, i);
    inputs.emplace_back(std::move(v), Shape{static_cast<std::int64_t>(kLen)});
  }
  const PerReplica<Tensor> per(inputs);
  for (int run = 0; run < 50; ++run) {
    auto out = strategy().run([](const Tensor& t) { return ctx().all_reduce(ReduceOp::SUM, t); }, per);
    for (int r = 0; r < N; ++r) {
      const auto d = out[r].data<float>();
      ASSERT_EQ(d.size(), kLen);
      ASSERT_EQ(std::memcmp(d.data(), expected.data(), kLen * sizeof(float)), 0) << "run " << run << " replica " << r;
    }
  }
}

TEST_P(CollectivesTest, ManyCollectivesInOneRun) {
  const int N = n();
  auto out = strategy().run([] {
    std::vector<float> got;
    Tensor x{static_cast<float>(rid() + 1)};
    for (int k = 0; k < 20; ++k) {
      Tensor s = ctx().all_reduce(k % 2 == 0 ? ReduceOp::SUM : ReduceOp::MEAN, x + static_cast<float>(k));
      got.push_back(s.item<float>());
    }
    return got;
  });
  for (int r = 0; r < N; ++r) {
    for (int k = 0; k < 20; ++k) {
      const float sum = static_cast<float>(N * (N + 1) / 2 + N * k);
      EXPECT_EQ(out[r][static_cast<std::size_t>(k)], k % 2 == 0 ? sum : sum / static_cast<float>(N)) << r << " " << k;
    }
  }
}

TEST_P(CollectivesTest, LargeTensorSum) {
  const int N = n();
  constexpr std::size_t kLen = 300000;
  auto out = strategy().run([] {
    const int r = rid();
    std::vector<float> v(kLen);
    for (std::size_t i = 0; i < kLen; ++i) v[i] = static_cast<float>(i % 1000) + static_cast<float>(r);
    return ctx().all_reduce(ReduceOp::SUM, Tensor(std::move(v), Shape{static_cast<std::int64_t>(kLen)}));
  });
  for (int r = 0; r < N; ++r) {
    const auto d = out[r].data<float>();
    ASSERT_EQ(d.size(), kLen);
    for (std::size_t i = 0; i < kLen; ++i) {
      ASSERT_EQ(d[i], static_cast<float>(N) * static_cast<float>(i % 1000) + static_cast<float>(N * (N - 1) / 2))
          << "element " << i << " replica " << r;
    }
  }
}

TEST_P(CollectivesTest, AllGatherAxis0EqualAndUnequalSizes) {
  const int N = n();
  auto out = strategy().run([] {
    const int r = rid();
    Tensor equal{{static_cast<float>(r), 10.f * static_cast<float>(r)}};  // (1, 2)
    std::vector<std::int32_t> rows;
    for (int k = 0; k <= r; ++k) rows.insert(rows.end(), {r, k});
    Tensor unequal(rows, Shape{r + 1, 2});  // replica r contributes r+1 rows
    return std::vector<Tensor>{ctx().all_gather(equal, 0), ctx().all_gather(unequal, 0)};
  });
  std::vector<float> eq;
  std::vector<std::int32_t> uneq;
  for (int q = 0; q < N; ++q) {
    eq.insert(eq.end(), {static_cast<float>(q), 10.f * static_cast<float>(q)});
    for (int k = 0; k <= q; ++k) uneq.insert(uneq.end(), {q, k});
  }
  for (int r = 0; r < N; ++r) {
    EXPECT_EQ(out[r][0], (Tensor{eq, Shape{N, 2}})) << r;
    EXPECT_EQ(out[r][1], (Tensor{uneq, Shape{N * (N + 1) / 2, 2}})) << r;
  }
}

TEST_P(CollectivesTest, AllGatherAxis1AndNegativeAxis) {
  const int N = n();
  auto out = strategy().run([] {
    const auto v = static_cast<float>(rid());
    Tensor t{{v, v + 0.5f}, {-v, -v - 0.5f}};  // (2, 2)
    std::vector<float> w(static_cast<std::size_t>(2 * (rid() + 1)), v);
    Tensor unequal(w, Shape{2, rid() + 1});
    return std::vector<Tensor>{ctx().all_gather(t, 1), ctx().all_gather(t, -1), ctx().all_gather(t, -2),
                               ctx().all_gather(unequal, -1)};
  });
  std::vector<float> row0, row1, axis0, un0;
  for (int q = 0; q < N; ++q) {
    const auto v = static_cast<float>(q);
    row0.insert(row0.end(), {v, v + 0.5f});
    row1.insert(row1.end(), {-v, -v - 0.5f});
    axis0.insert(axis0.end(), {v, v + 0.5f, -v, -v - 0.5f});
    for (int k = 0; k <= q; ++k) un0.push_back(v);
  }
  std::vector<float> by_axis1 = row0;
  by_axis1.insert(by_axis1.end(), row1.begin(), row1.end());
  std::vector<float> un = un0;
  un.insert(un.end(), un0.begin(), un0.end());
  for (int r = 0; r < N; ++r) {
    EXPECT_EQ(out[r][0], (Tensor{by_axis1, Shape{2, 2 * N}})) << r;
    EXPECT_EQ(out[r][1], (Tensor{by_axis1, Shape{2, 2 * N}})) << r;
    EXPECT_EQ(out[r][2], (Tensor{axis0, Shape{2 * N, 2}})) << r;
    EXPECT_EQ(out[r][3], (Tensor{un, Shape{2, N * (N + 1) / 2}})) << r;
  }
}

TEST_P(CollectivesTest, AllGatherOfAScalarOrBadAxisRaises) {
  strategy().run([] {
    EXPECT_THAT(message_of<InvalidArgumentError>([] { ctx().all_gather(Tensor::scalar(1.f), 0); }), HasSubstr("rank"));
    EXPECT_THAT(message_of<InvalidArgumentError>([] { ctx().all_gather(Tensor{1.f, 2.f}, 1); }), HasSubstr("axis"));
    EXPECT_THAT(message_of<InvalidArgumentError>([] { ctx().all_gather(Tensor{1.f, 2.f}, -2); }), HasSubstr("axis"));
  });
  expect_healthy(strategy(), 3);
}

TEST_P(CollectivesTest, StrategyGatherDocstringExamples) {
  const int N = n();
  // Each replica holds [[1], [2]]: axis 0 gives shape (2n, 1).
  auto per = strategy().run([] { return Tensor{{std::int32_t{1}}, {std::int32_t{2}}}; });
  std::vector<std::int32_t> expected;
  for (int q = 0; q < N; ++q) expected.insert(expected.end(), {1, 2});
  EXPECT_EQ(strategy().gather(per, 0), (Tensor{expected, Shape{2 * N, 1}}));

  // Each replica holds range(6).reshape(1, 2, 3).
  auto cube = strategy().run([] { return Tensor(std::vector<std::int32_t>{0, 1, 2, 3, 4, 5}, Shape{1, 2, 3}); });
  std::vector<std::int32_t> a0, a1, a2;
  for (int q = 0; q < N; ++q) a0.insert(a0.end(), {0, 1, 2, 3, 4, 5});
  for (int q = 0; q < N; ++q) a1.insert(a1.end(), {0, 1, 2, 3, 4, 5});
  for (int row = 0; row < 2; ++row) {
    for (int q = 0; q < N; ++q) a2.insert(a2.end(), {3 * row, 3 * row + 1, 3 * row + 2});
  }
  EXPECT_EQ(strategy().gather(cube, 0), (Tensor{a0, Shape{N, 2, 3}}));
  EXPECT_EQ(strategy().gather(cube, 1), (Tensor{a1, Shape{1, 2 * N, 3}}));
  EXPECT_EQ(strategy().gather(cube, 2), (Tensor{a2, Shape{1, 2, 3 * N}}));
  EXPECT_EQ(strategy().gather(cube, -1), (Tensor{a2, Shape{1, 2, 3 * N}}));
  {
    auto scope = strategy().scope();
    EXPECT_EQ(strategy().gather(cube, 1), (Tensor{a1, Shape{1, 2 * N, 3}}));
  }

  // A plain tensor comes back unchanged.
  Tensor plain{{1.f, 2.f}};
  Tensor back = strategy().gather(plain, 1);
  EXPECT_EQ(back, plain);
  EXPECT_TRUE(back.shares_buffer_with(plain));

  EXPECT_THROW(strategy().gather(strategy().run([] { return Tensor::scalar(1.f); }), 0), InvalidArgumentError);
}

TEST_P(CollectivesTest, StrategyGatherInsideReplicaFunctionRaises) {
  Strategy* s = &strategy();
  auto msgs = strategy().run([s] {
    PerReplica<Tensor> v(std::vector<Tensor>(static_cast<std::size_t>(s->num_replicas_in_sync()), Tensor{1.f}));
    return message_of<FailedPreconditionError>([&] { s->gather(v, 0); });
  });
  for (const std::string& m : msgs.values()) EXPECT_THAT(m, HasSubstr("all_gather"));
}

TEST_P(CollectivesTest, MergeCallRunsOnceInCrossReplicaContext) {
  const int N = n();
  std::atomic<int> calls{0};
  const auto caller = std::this_thread::get_id();
  Strategy* self = &strategy();
  auto out = strategy().run([&] {
    const int r = rid();
    return ctx().merge_call(
        [&](Strategy& s, const PerReplica<int>& ids, const PerReplica<std::string>& names) {
          calls.fetch_add(1);
          EXPECT_EQ(&s, self);
          EXPECT_EQ(get_replica_context(), nullptr);
          EXPECT_TRUE(in_cross_replica_context());
          EXPECT_EQ(get_cross_replica_context(), self);
          EXPECT_EQ(std::this_thread::get_id(), caller);  // replica 0's thread
          std::string all;
          EXPECT_EQ(static_cast<int>(ids.values().size()), N);
          for (int q = 0; q < N; ++q) {
            EXPECT_EQ(ids[q], 10 * q);
            all += names[q];
          }
          return all;
        },
        10 * r, std::string(1, static_cast<char>('a' + r)));
  });
  EXPECT_EQ(calls.load(), 1);
  std::string expected;
  for (int q = 0; q < N; ++q) expected += static_cast<char>('a' + q);
  for (int r = 0; r < N; ++r) EXPECT_EQ(out[r], expected);
  // Back in replica context after merge_call.
  auto after = strategy().run([] {
    ctx().merge_call([](Strategy&) {});
    return get_replica_context() != nullptr && !in_cross_replica_context();
  });
  for (int r = 0; r < N; ++r) EXPECT_TRUE(after[r]);
}

TEST_P(CollectivesTest, MergeCallDistributedResults) {
  const int N = n();
  auto out = strategy().run([] {
    int own = ctx().merge_call([](Strategy&, const PerReplica<int>& v) {
      std::vector<int> doubled;
      for (int x : v) doubled.push_back(2 * x + 1);
      return PerReplica<int>(doubled);
    }, rid());
    Tensor mirrored = ctx().merge_call([](Strategy& s, const PerReplica<Tensor>& v) {
      Tensor total = s.reduce(ReduceOp::SUM, v);
      return Mirrored<Tensor>(std::vector<Tensor>(v.values().size(), total));
    }, Tensor{static_cast<float>(rid())});
    return std::make_pair(own, mirrored);
  });
  for (int r = 0; r < N; ++r) {
    EXPECT_EQ(out.first[r], 2 * r + 1);
    EXPECT_EQ(out.second[r], Tensor{static_cast<float>(N * (N - 1) / 2)});
  }
}

TEST_P(CollectivesTest, MergeCallVoidAndExceptions) {
  std::atomic<int> calls{0};
  strategy().run([&] { ctx().merge_call([&](Strategy&, const PerReplica<int>&) { calls.fetch_add(1); }, rid()); });
  EXPECT_EQ(calls.load(), 1);
  const std::string m = message_of<NotFoundError>([&] {
    strategy().run([] { return ctx().merge_call([](Strategy&) -> int { throw NotFoundError("from merge_fn"); }); });
  });
  EXPECT_THAT(m, HasSubstr("from merge_fn"));
  EXPECT_THROW(strategy().run([] { ctx().merge_call([](Strategy&) { throw std::out_of_range("std error"); }); }),
               std::out_of_range);
  expect_healthy(strategy(), 3);
}

TEST_P(CollectivesTest, CollectiveOfAnotherReplicasContextRaises) {
  auto captured = strategy().run([] { return get_replica_context(); });
  ReplicaContext* c0 = captured[0];
  // From a thread of our own (default state).
  std::string msg;
  bool is_default_ctx = false;
  std::thread t([&] {
    is_default_ctx = get_replica_context() == c0;
    if (!is_default_ctx) {
      msg = message_of<FailedPreconditionError>([&] { c0->all_reduce(ReduceOp::SUM, Tensor{1.f}); });
    }
  });
  t.join();
  if (!is_default_ctx) {
    EXPECT_THAT(msg, HasSubstr("all_reduce"));
  }
  // In cross-replica context.
  {
    auto scope = strategy().scope();
    EXPECT_THAT(message_of<FailedPreconditionError>([&] { c0->all_gather(Tensor{1.f}, 0); }),
                HasSubstr("cross-replica"));
  }
  // Inside a run, with a context that is not the running replica's.
  ReplicaContext* dflt = get_replica_context();
  if (n() > 1) {
    auto msgs = strategy().run([&] {
      const int r = rid();
      std::string a = message_of<FailedPreconditionError>([&] { dflt->all_reduce(ReduceOp::SUM, Tensor{1.f}); });
      std::string b = message_of<FailedPreconditionError>(
          [&] { captured[(r + 1) % static_cast<int>(captured.size())]->all_reduce(ReduceOp::SUM, Tensor{1.f}); });
      return a + "|" + b;
    });
    for (const std::string& m : msgs.values()) EXPECT_THAT(m, HasSubstr("mismatching ReplicaContext"));
  }
  expect_healthy(strategy(), 3);
}

TEST_P(CollectivesTest, CommunicationOptionsValidation) {
  auto msgs = strategy().run([] {
    std::string s;
    s += message_of<InvalidArgumentError>(
        [] { ctx().all_reduce(ReduceOp::SUM, Tensor{1.f}, CommunicationOptions{0, 0.0}); });
    s += message_of<InvalidArgumentError>(
        [] { ctx().all_gather(Tensor{1.f}, 0, CommunicationOptions{0, -1.0}); });
    s += message_of<InvalidArgumentError>(
        [] { ctx().all_reduce(ReduceOp::SUM, Tensor{1.f}, CommunicationOptions{-1, std::nullopt}); });
    return s;
  });
  for (const std::string& m : msgs.values()) {
    EXPECT_THAT(m, HasSubstr("timeout_seconds"));
    EXPECT_THAT(m, HasSubstr("bytes_per_pack"));
  }
  expect_healthy(strategy(), 3);
}

TEST_P(CollectivesTest, MergeCallInTheDefaultState) {
  // TF's testMergeCall: in the default replica context merge_call runs fn
  // with the default strategy.
  ReplicaContext* rc = get_replica_context();
  ASSERT_NE(rc, nullptr);
  std::string got = rc->merge_call(
      [](Strategy& s, const PerReplica<std::string>& v) {
        EXPECT_TRUE(s.is_default());
        EXPECT_EQ(get_replica_context(), nullptr);
        EXPECT_TRUE(in_cross_replica_context());
        return v.values().at(0) + "_bar";
      },
      std::string("foo"));
  EXPECT_EQ(got, "foo_bar");
  EXPECT_NE(get_replica_context(), nullptr);
  EXPECT_FALSE(in_cross_replica_context());
  // The default context's collectives work outside run too.
  EXPECT_EQ(rc->all_reduce(ReduceOp::SUM, Tensor{3.f}), Tensor{3.f});
}

TEST(CommunicationOptionsTest, StrategyConstructorValidates) {
  EXPECT_THAT(message_of<InvalidArgumentError>([] { MirroredStrategy s(cpu_devices(2), CommunicationOptions{0, 0.0}); }),
              HasSubstr("timeout_seconds"));
  EXPECT_THAT(message_of<InvalidArgumentError>([] { MirroredStrategy s(cpu_devices(2), CommunicationOptions{0, -2.0}); }),
              HasSubstr("timeout_seconds"));
  EXPECT_THAT(message_of<InvalidArgumentError>([] { MirroredStrategy s(cpu_devices(2), CommunicationOptions{-1, 1.0}); }),
              HasSubstr("bytes_per_pack"));
  MirroredStrategy ok(cpu_devices(2), CommunicationOptions{16, 5.0});
  EXPECT_EQ(ok.communication_options().bytes_per_pack, 16);
  EXPECT_EQ(ok.communication_options().timeout_seconds, 5.0);
  MirroredStrategy dflt(cpu_devices(2));
  EXPECT_EQ(dflt.communication_options().timeout_seconds, 60.0);
}

// ---------------------------------------------------------------------------
// Faults, on MirroredStrategy with 2, 3 and 4 replicas.

class FaultTest : public ::testing::TestWithParam<int> {
 protected:
  int n() const { return GetParam(); }
  std::unique_ptr<MirroredStrategy> make(double timeout = 0.3) {
    return std::make_unique<MirroredStrategy>(cpu_devices(n()), CommunicationOptions{0, timeout});
  }
};
INSTANTIATE_TEST_SUITE_P(Replicas, FaultTest, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& p) { return "N" + std::to_string(p.param); });

TEST_P(FaultTest, AFailingReplicaReleasesTheOthersAtOnce) {
  auto s = make(30.0);  // long timeout: only the abort can release them
  for (int failing = 0; failing < n(); ++failing) {
    std::atomic<std::int64_t> thrown_at{0};
    std::vector<double> released_ms(static_cast<std::size_t>(n()), -1);
    std::vector<std::string> messages(static_cast<std::size_t>(n()));
    try {
      s->run([&] {
        const int r = rid();
        if (r == failing) {
          std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the others are waiting by now
          thrown_at.store(Clock::now().time_since_epoch().count());
          throw UnavailableError("planned failure");
        }
        try {
          ctx().all_reduce(ReduceOp::SUM, Tensor{1.f});
        } catch (const CancelledError& e) {
          const Clock::time_point t0{Clock::duration{thrown_at.load()}};
          released_ms[static_cast<std::size_t>(r)] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
          messages[static_cast<std::size_t>(r)] = e.what();
          throw;
        }
      });
      ADD_FAILURE() << "run did not throw";
    } catch (const UnavailableError& e) {
      EXPECT_EQ(e.replica_id(), failing);
      EXPECT_THAT(e.what(), HasSubstr("planned failure"));
    }
    for (int r = 0; r < n(); ++r) {
      if (r == failing) continue;
      const auto i = static_cast<std::size_t>(r);
      EXPECT_GE(released_ms[i], 0) << "replica " << r << " was not cancelled";
      // At once, not at the 30 s timeout (a bound loose enough for a loaded
      // machine and the sanitizers).
      EXPECT_LT(released_ms[i], 5000) << "replica " << r;
      EXPECT_THAT(messages[i], HasSubstr("replica " + std::to_string(failing) + " failed"));
      EXPECT_THAT(messages[i], HasSubstr("planned failure"));
    }
    expect_healthy(*s, failing == 0 ? 100 : 5);
  }
}

TEST_P(FaultTest, AMissingReplicaTimesOutNamingArrivedAndMissing) {
  auto s = make(0.3);
  const int late = n() % 2 == 0 ? n() - 1 : 0;
  std::atomic<int> left{0};
  std::vector<double> waited(static_cast<std::size_t>(n()), -1);
  auto msgs = s->run([&] {
    const int r = rid();
    if (r == late) {
      const auto start = Clock::now();
      while (left.load() < n() - 1 && seconds_since(start) < 2.0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return message_of<DeadlineExceededError>([] { ctx().all_reduce(ReduceOp::SUM, Tensor{1.f}); });
    }
    const auto start = Clock::now();
    std::string m = message_of<DeadlineExceededError>([] { ctx().all_reduce(ReduceOp::SUM, Tensor{1.f}); });
    waited[static_cast<std::size_t>(r)] = seconds_since(start);
    left.fetch_add(1);
    return m;
  });
  std::string arrived = "[", missing = "[" + std::to_string(late) + "]";
  for (int q = 0; q < n(); ++q) {
    if (q == late) continue;
    arrived += (arrived.size() > 1 ? ", " : "") + std::to_string(q);
  }
  arrived += "]";
  for (int r = 0; r < n(); ++r) {
    EXPECT_THAT(msgs[r], HasSubstr("all_reduce")) << r;
    EXPECT_THAT(msgs[r], HasSubstr("#1")) << r;
    EXPECT_THAT(msgs[r], HasSubstr("arrived " + arrived)) << r;
    EXPECT_THAT(msgs[r], HasSubstr("missing " + missing)) << r;
    if (r == late) continue;
    EXPECT_GE(waited[static_cast<std::size_t>(r)], 0.25) << r;
    EXPECT_LE(waited[static_cast<std::size_t>(r)], 1.0) << r;
  }
  expect_healthy(*s);
}

TEST_P(FaultTest, AReplicaReturningEarlyIsAMismatch) {
  auto s = make(30.0);  // found at once, not at the deadline
  for (int early : {0, n() - 1}) {
    std::vector<double> waited(static_cast<std::size_t>(n()), -1);
    auto msgs = s->run([&] {
      const int r = rid();
      if (r == early) return std::string("returned");
      const auto start = Clock::now();
      std::string m = message_of<InvalidArgumentError>([] { ctx().all_reduce(ReduceOp::SUM, Tensor{1.f}); });
      waited[static_cast<std::size_t>(r)] = seconds_since(start);
      return m;
    });
    for (int r = 0; r < n(); ++r) {
      if (r == early) continue;
      EXPECT_THAT(msgs[r], HasSubstr("replica " + std::to_string(early) + " returned from its replica function"));
      EXPECT_LT(waited[static_cast<std::size_t>(r)], 5.0) << r;
    }
    expect_healthy(*s, 5);
  }
}

// Every replica makes a call differing from replica 0's in one respect; each
// must raise InvalidArgumentError naming both sides, without hanging.
TEST_P(FaultTest, MismatchedCallsRaiseTheSameErrorOnEveryReplica) {
  auto s = make(30.0);  // found at once, not at the deadline
  struct Case {
    const char* name;
    std::function<void(int)> call;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"shape",
       [](int r) { ctx().all_reduce(ReduceOp::SUM, Tensor::zeros(DType::kFloat32, {r == 0 ? 10 : 11})); },
       {"(10,)", "(11,)", "replica 1"}},
      {"dtype",
       [](int r) { ctx().all_reduce(ReduceOp::SUM, Tensor::zeros(r == 0 ? DType::kFloat32 : DType::kInt32, {3})); },
       {"float32", "int32"}},
      {"count",
       [](int r) {
         ctx().all_reduce(ReduceOp::SUM, std::vector<Tensor>(r == 0 ? 1u : 2u, Tensor{1.f}));
       },
       {"1 tensor(s)", "2"}},
      {"op", [](int r) { ctx().all_reduce(r == 0 ? ReduceOp::SUM : ReduceOp::MEAN, Tensor{1.f}); },
       {"SUM", "MEAN"}},
      {"kind",
       [](int r) {
         if (r == 0) {
           ctx().all_reduce(ReduceOp::SUM, Tensor{1.f});
         } else {
           ctx().all_gather(Tensor{1.f}, 0);
         }
       },
       {"all_reduce", "all_gather", "#1"}},
      {"gather_shape",
       [](int r) { ctx().all_gather(Tensor::zeros(DType::kFloat32, {2, r == 0 ? 3 : 4}), 0); },
       {"(2, 3)", "(2, 4)"}},
  };
  for (const Case& c : cases) {
    const auto start = Clock::now();
    auto msgs = s->run([&] {
      const int r = rid();
      return message_of<InvalidArgumentError>([&] { c.call(r); });
    });
    EXPECT_LT(seconds_since(start), 5.0) << c.name;  // no hang, not the 30 s timeout
    for (int r = 0; r < n(); ++r) {
      for (const std::string& e : c.expected) EXPECT_THAT(msgs[r], HasSubstr(e)) << c.name << " replica " << r;
      EXPECT_EQ(msgs[r], msgs[0]) << c.name;
    }
    expect_healthy(*s, 10);
  }
  expect_healthy(*s, 100);
}

// run() rethrows a planned failure wherever it happens among three
// all_reduces; every run ends and successful runs are exact.
TEST(FaultStressTest, RandomFailuresOnFourReplicas) {
  MirroredStrategy s(cpu_devices(4), CommunicationOptions{0, 10.0});
  std::mt19937 rng(12345);
  int failed_runs = 0;
  for (int run = 0; run < 2000; ++run) {
    const int failing = static_cast<int>(rng() % 6) - 1;  // -1 (none) or a replica; 4 also none
    const int point = static_cast<int>(rng() % 4);        // before all_reduce 0, 1, 2, or after the last
    const bool plan = failing >= 0 && failing < 4;
    try {
      auto sums = s.run([&] {
        const int r = rid();
        float total = 0;
        for (int k = 0; k < 3; ++k) {
          if (plan && r == failing && point == k) throw AbortedError("planned " + std::to_string(run));
          total += ctx().all_reduce(ReduceOp::SUM, Tensor{static_cast<float>(r + k)}).item<float>();
        }
        if (plan && r == failing && point == 3) throw AbortedError("planned " + std::to_string(run));
        return total;
      });
      ASSERT_FALSE(plan) << "run " << run << " should have failed";
      for (int r = 0; r < 4; ++r) ASSERT_EQ(sums[r], 30.f) << run;  // 6 + 10 + 14
    } catch (const AbortedError& e) {
      ASSERT_TRUE(plan) << run;
      ASSERT_EQ(e.replica_id(), failing) << run;
      ASSERT_THAT(e.what(), HasSubstr("planned " + std::to_string(run)));
      ++failed_runs;
    }
  }
  EXPECT_GT(failed_runs, 1000);
  expect_healthy(s, 100);
}

TEST_P(FaultTest, PerCallTimeoutOverridesTheStrategyDefault) {
  MirroredStrategy s(cpu_devices(n()));  // 60 s default
  std::atomic<int> left{0};
  std::vector<double> waited(static_cast<std::size_t>(n()), -1);
  auto msgs = s.run([&] {
    const int r = rid();
    if (r == 0) {
      const auto start = Clock::now();
      while (left.load() < n() - 1 && seconds_since(start) < 2.0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return std::string("late");
    }
    const auto start = Clock::now();
    std::string m = message_of<DeadlineExceededError>(
        [] { ctx().all_reduce(ReduceOp::SUM, Tensor{1.f}, CommunicationOptions{0, 0.2}); });
    waited[static_cast<std::size_t>(r)] = seconds_since(start);
    left.fetch_add(1);
    return m;
  });
  for (int r = 1; r < n(); ++r) {
    EXPECT_THAT(msgs[r], HasSubstr("missing [0]"));
    EXPECT_GE(waited[static_cast<std::size_t>(r)], 0.15) << r;
    EXPECT_LE(waited[static_cast<std::size_t>(r)], 1.0) << r;
  }
  expect_healthy(s);
}

}  // namespace
}  // namespace distribute
