// Strategy::run over the strategy matrix.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "distribute/distribute.h"
#include "testing/strategy_matrix.h"

namespace distribute {
namespace {

using testing::message_of;
using testing::StrategyTest;
using ::testing::HasSubstr;

class RunTest : public StrategyTest {};
DISTRIBUTE_INSTANTIATE_STRATEGY_MATRIX(RunTest);

TEST_P(RunTest, ReturnsOneResultPerReplicaInReplicaOrder) {
  auto ids = strategy().run([] { return get_replica_context()->replica_id_in_sync_group(); });
  ASSERT_EQ(ids.size(), n());
  for (int r = 0; r < n(); ++r) EXPECT_EQ(ids[r], r);
}

TEST_P(RunTest, ReplicaContextDescribesTheReplica) {
  struct Seen {
    int id, num;
    Strategy* strategy;
    bool cross_replica;
    Strategy* current;
    Strategy* cross_ctx;
  };
  auto seen = strategy().run([] {
    ReplicaContext* ctx = get_replica_context();
    return Seen{ctx->replica_id_in_sync_group(), ctx->num_replicas_in_sync(), &ctx->strategy(),
                in_cross_replica_context(), &get_strategy(), get_cross_replica_context()};
  });
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(seen[r].id, r);
    EXPECT_EQ(seen[r].num, n());
    EXPECT_EQ(seen[r].strategy, &strategy());
    EXPECT_FALSE(seen[r].cross_replica);
    EXPECT_EQ(seen[r].current, &strategy());
    EXPECT_EQ(seen[r].cross_ctx, nullptr);
  }
}

TEST_P(RunTest, ReplicasRunConcurrently) {
  // Every replica waits until all have arrived: sequential execution would
  // never get there (bounded wait, so the test fails instead of hanging).
  // Fibers meet only in the library's waits (FiberTest.*).
  if (fibers()) GTEST_SKIP() << "replicas on fibers do not wait for each other outside the library";
  std::atomic<int> arrived{0};
  auto all_met = strategy().run([&] {
    arrived.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (arrived.load() < n() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    return arrived.load() == n();
  });
  for (bool met : all_met) EXPECT_TRUE(met);
}

TEST_P(RunTest, ReplicaThreadsArePersistentAndReplicaZeroIsTheCaller) {
  auto first = strategy().run([] { return std::this_thread::get_id(); });
  auto second = strategy().run([] { return std::this_thread::get_id(); });
  EXPECT_EQ(first[0], std::this_thread::get_id());
  std::set<std::thread::id> distinct(first.begin(), first.end());
  // Fibers: one thread per core, replica r on thread r % threads.
  const int threads = fibers() ? std::min(n(), usable_cpu_count()) : n();
  EXPECT_EQ(static_cast<int>(distinct.size()), threads);
  for (int r = 0; r < n(); ++r) EXPECT_EQ(first[r], first[r % threads]) << "replica " << r;
  EXPECT_EQ(first.values(), second.values());
}

TEST_P(RunTest, PerReplicaAndMirroredArgumentsAreSelectedPerReplica) {
  std::vector<Tensor> per, same;
  for (int r = 0; r < n(); ++r) {
    per.push_back(Tensor{static_cast<float>(r) + 5.f});
    same.push_back(Tensor{7.f});
  }
  PerReplica<Tensor> inputs(per);
  Mirrored<Tensor> weights(same);
  const Tensor shared{1.f, 2.f};
  auto out = strategy().run(
      [&shared](const Tensor& x, const Tensor& w, const Tensor& s) {
        EXPECT_EQ(&s, &shared);  // plain arguments are passed as is, the same object
        return x + w;
      },
      inputs, weights, shared);
  for (int r = 0; r < n(); ++r) EXPECT_EQ(out[r], (Tensor{static_cast<float>(r) + 12.f})) << "replica " << r;
}

TEST_P(RunTest, SeedExampleThreeAddsOneToEachReplicasBatch) {
  std::vector<Tensor> batch;
  for (int r = 0; r < n(); ++r) batch.push_back(Tensor{5.f + static_cast<float>(r)});
  auto updated = strategy().run([](const Tensor& input) { return input + 1.f; }, PerReplica<Tensor>(batch));
  for (int r = 0; r < n(); ++r) EXPECT_EQ(updated[r].to_string(), Tensor{6.f + static_cast<float>(r)}.to_string());
}

TEST_P(RunTest, PerReplicaArgumentWithWrongCountIsRejected) {
  PerReplica<int> wrong(std::vector<int>(static_cast<std::size_t>(n() + 1), 0));
  const std::string msg = message_of<InvalidArgumentError>([&] { strategy().run([](int x) { return x; }, wrong); });
  EXPECT_THAT(msg, HasSubstr("argument 0"));
  EXPECT_THAT(msg, HasSubstr("got " + std::to_string(n() + 1) + " values"));
}

TEST_P(RunTest, VoidFunctionsAreAllowed) {
  std::atomic<int> calls{0};
  strategy().run([&] { calls.fetch_add(1); });
  EXPECT_EQ(calls.load(), n());
}

TEST_P(RunTest, ReferenceResultsAreReturnedByValue) {
  std::vector<std::string> names;
  for (int r = 0; r < n(); ++r) names.push_back(std::string(1, static_cast<char>('a' + r)));
  auto out = strategy().run(
      [&names]() -> const std::string& { return names[static_cast<std::size_t>(get_replica_context()->replica_id_in_sync_group())]; });
  static_assert(std::is_same_v<decltype(out), PerReplica<std::string>>);
  for (int r = 0; r < n(); ++r) EXPECT_EQ(out[r], names[static_cast<std::size_t>(r)]);
}

TEST_P(RunTest, DistributeErrorIsRethrownWithItsReplicaId) {
  const int failing = n() - 1;
  std::atomic<int> finished{0};
  try {
    strategy().run([&] {
      if (get_replica_context()->replica_id_in_sync_group() == failing) throw InvalidArgumentError("bad batch");
      finished.fetch_add(1);
    });
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(e.replica_id(), failing);
    EXPECT_EQ(e.message(), "bad batch");
    EXPECT_EQ(std::string(e.what()), "replica " + std::to_string(failing) + ": bad batch");
  }
  // The other replicas ran to completion and the strategy still works.
  EXPECT_EQ(finished.load(), n() - 1);
  auto ids = strategy().run([] { return get_replica_context()->replica_id_in_sync_group(); });
  EXPECT_EQ(ids.size(), n());
}

struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
  int code = 42;
};

TEST_P(RunTest, UserExceptionTypeIsPreserved) {
  try {
    strategy().run([] {
      if (get_replica_context()->replica_id_in_sync_group() == 0) throw UserError("user failure");
    });
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "user failure");
    EXPECT_EQ(e.code, 42);
  }
}

TEST_P(RunTest, NestedRunOfTheSameStrategyRaises) {
  if (strategy().is_default()) {
    // TF allows the default strategy's run inside its own replica function.
    auto out = strategy().run([this] { return strategy().run([] { return 2; }).primary(); });
    EXPECT_EQ(out.primary(), 2);
    return;
  }
  try {
    strategy().run([this] { strategy().run([] {}); });
    FAIL() << "expected FailedPreconditionError";
  } catch (const FailedPreconditionError& e) {
    // The message names the call made (run), not the scope it enters.
    EXPECT_THAT(e.message(), HasSubstr("Strategy::run requires being in cross-replica context"));
    EXPECT_THAT(e.message(), HasSubstr("merge_call"));
  }
}

TEST_P(RunTest, RunOfAnotherStrategyInsideAReplicaFunctionRaises) {
  MirroredStrategy other({"CPU:0", "CPU:1"});
  if (strategy().is_default()) {
    // Inside the default strategy's replica function no strategy is current,
    // so entering another one is allowed, as in TF.
    auto out = strategy().run([&] { return other.run([] { return 1; }).size(); });
    EXPECT_EQ(out[0], 2);
    return;
  }
  const std::string msg = message_of<FailedPreconditionError>([&] { strategy().run([&] { other.run([] {}); }); });
  EXPECT_THAT(msg, HasSubstr("Mixing different tf.distribute.Strategy objects"));
  EXPECT_THAT(msg, HasSubstr("Strategy::run of " + other.to_string()));
}

TEST_P(RunTest, ContextIsRestoredAfterRunAndAfterFailure) {
  strategy().run([] {});
  EXPECT_FALSE(in_cross_replica_context());
  EXPECT_TRUE(get_strategy().is_default());
  EXPECT_THROW(strategy().run([] { throw CancelledError("x"); }), CancelledError);
  EXPECT_FALSE(in_cross_replica_context());
  EXPECT_TRUE(get_strategy().is_default());
  ASSERT_NE(get_replica_context(), nullptr);
  EXPECT_EQ(get_replica_context()->replica_id_in_sync_group(), 0);
}

TEST_P(RunTest, RunFromSeveralThreadsIsSerialized) {
  std::atomic<int> in_flight{0}, max_in_flight{0}, calls{0};
  auto body = [&] {
    const int now = in_flight.fetch_add(1) + 1;
    int prev = max_in_flight.load();
    while (now > prev && !max_in_flight.compare_exchange_weak(prev, now)) {
    }
    calls.fetch_add(1);
    in_flight.fetch_sub(1);
  };
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&] {
      for (int i = 0; i < 50; ++i) strategy().run(body);
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(calls.load(), 3 * 50 * n());
  EXPECT_LE(max_in_flight.load(), n());
}

// A run() that waits for another thread's run polls its interrupt check
// (Python's Ctrl-C), however long that run lasts (audit, 12-07).
TEST(RunFromSeveralThreads, AWaitingRunPollsItsInterruptCheck) {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  std::atomic<bool> inside{false}, release{false};
  std::thread other([&] {
    strategy.run([&] {
      inside = true;
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  });
  while (!inside) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::atomic<int> checks{0};
  {
    ScopedInterruptCheck interrupt(
        [&] {
          if (++checks == 3) throw CancelledError("interrupted while waiting for another run");
        },
        std::chrono::milliseconds(10));
    EXPECT_THROW(strategy.run([] {}), CancelledError);
  }
  EXPECT_EQ(checks.load(), 3);
  release = true;
  other.join();
  // The strategy runs again afterwards.
  EXPECT_EQ(strategy.run([] { return 1; }).values().size(), 2u);
}

TEST(RunDefaultState, QueriesOutsideAnyScope) {
  EXPECT_FALSE(in_cross_replica_context());
  EXPECT_FALSE(has_strategy());
  EXPECT_TRUE(get_strategy().is_default());
  EXPECT_EQ(get_cross_replica_context(), nullptr);
  ReplicaContext* ctx = get_replica_context();
  ASSERT_NE(ctx, nullptr);
  EXPECT_EQ(ctx->replica_id_in_sync_group(), 0);
  EXPECT_EQ(ctx->num_replicas_in_sync(), 1);
  EXPECT_EQ(&ctx->strategy(), &get_default_strategy());
}

TEST(RunSeedExample, ExampleTwoPrintsReplicaIds) {
  MirroredStrategy strategy({"CPU:0", "CPU:1"});
  auto values = strategy.run([] { return get_replica_context()->replica_id_in_sync_group(); });
  EXPECT_EQ(to_string(values), "PerReplica:{\n  0: 0,\n  1: 1\n}");
}

TEST(StringValuesTest, CollectivesRefuseStringsAndReleaseTheOtherReplicas) {
  MirroredStrategy strategy(testing::cpu_devices(2));
  try {
    strategy.run([] { return current_replica_context().all_reduce(ReduceOp::SUM, Tensor(std::string("a"))); });
    ADD_FAILURE() << "all_reduce of strings did not throw";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("all_reduce"));
    EXPECT_THAT(e.what(), HasSubstr("got dtype string"));
  }
  EXPECT_THROW(strategy.run([] { return current_replica_context().all_gather(Tensor(std::vector<std::string>{"a"}, {1}), 0); }),
               InvalidArgumentError);
  const auto batches = strategy.run([] { return Tensor(std::vector<std::string>{"x", "y"}, {2}); });
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([&] { strategy.gather(batches, 0); }),
              HasSubstr("got dtype string"));
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([&] { strategy.reduce(ReduceOp::SUM, batches, 0); }),
              HasSubstr("got dtype string"));
  // One replica: the same errors, although no collective is needed.
  OneDeviceStrategy one("CPU:0");
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([&] {
                one.run([] { return current_replica_context().all_reduce(ReduceOp::SUM, Tensor(std::string("a"))); });
              }),
              HasSubstr("all_reduce"));
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([&] {
                one.run([] { return current_replica_context().all_gather(Tensor(std::vector<std::string>{"a"}, {1}), 0); });
              }),
              HasSubstr("got dtype string"));
  EXPECT_THAT(testing::message_of<InvalidArgumentError>([&] { one.reduce(ReduceOp::SUM, Tensor(std::string("a"))); }),
              HasSubstr("Strategy::reduce"));
  // run() itself carries strings: a PerReplica of string tensors.
  const auto out = strategy.run([] {
    return Tensor(std::string("replica ") + std::to_string(current_replica_context().replica_id_in_sync_group()));
  });
  EXPECT_EQ(strategy.experimental_local_results(out)[1], Tensor(std::string("replica 1")));
}

}  // namespace
}  // namespace distribute

namespace distribute {
namespace {

class ValuesFromFunctionTest : public testing::StrategyTest {};

// TF's distribute_lib experimental_distribute_values_from_function: one call
// per replica with its ValueContext; run() hands replica r its value.
TEST_P(ValuesFromFunctionTest, EachReplicaGetsTheValueMadeForIt) {
  std::vector<int> calls;
  const PerReplica<Tensor> values = strategy().experimental_distribute_values_from_function([&](const ValueContext& ctx) {
    calls.push_back(ctx.replica_id_in_sync_group);
    EXPECT_EQ(ctx.num_replicas_in_sync, n());
    return Tensor{static_cast<float>(ctx.replica_id_in_sync_group), 10.f};
  });
  std::vector<int> expected(static_cast<std::size_t>(n()));
  for (int r = 0; r < n(); ++r) expected[static_cast<std::size_t>(r)] = r;
  EXPECT_EQ(calls, expected);  // once per replica, in order, on the calling thread
  ASSERT_EQ(static_cast<int>(values.size()), n());
  const auto seen = strategy().run([](const Tensor& v) {
    return v.data<float>()[0] == static_cast<float>(get_replica_context()->replica_id_in_sync_group());
  }, values);
  for (int r = 0; r < n(); ++r) EXPECT_TRUE(seen[r]) << "replica " << r;
  EXPECT_EQ(strategy().reduce(ReduceOp::SUM, values, std::nullopt),
            (Tensor{static_cast<float>(n() * (n() - 1) / 2), 10.f * static_cast<float>(n())}));
  EXPECT_THROW(strategy().experimental_distribute_values_from_function([](const ValueContext&) -> int {
    throw InvalidArgumentError("from the value function");
  }), InvalidArgumentError);
}

DISTRIBUTE_INSTANTIATE_STRATEGY_MATRIX(ValuesFromFunctionTest);

}  // namespace
}  // namespace distribute
