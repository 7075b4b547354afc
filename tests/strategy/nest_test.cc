// Nested structures (distribute/nest.h) through run, reduce, all_reduce,
// experimental_local_results and merge_call, with TF's nest rules: tuples
// and maps are regrouped, every replica must give the same structure, and
// the first difference is named.
#include "distribute/nest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "distribute/distribute.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

using ::testing::AllOf;
using testing::cpu_devices;
using testing::ctx;
using ::testing::HasSubstr;
using testing::message_of;
using testing::rid;
using Dict = std::map<std::string, Tensor>;

TEST(Nest, RunReturningATupleGivesATupleOfPerReplicaToUnpack) {
  MirroredStrategy strategy(cpu_devices(3));
  auto [loss, count] =
      strategy.run([] { return std::make_tuple(Tensor(1.5f * static_cast<float>(rid())), rid() + 1); });
  static_assert(std::is_same_v<decltype(loss), PerReplica<Tensor>>);
  static_assert(std::is_same_v<decltype(count), PerReplica<int>>);
  EXPECT_EQ(loss.values(), (std::vector<Tensor>{Tensor(0.f), Tensor(1.5f), Tensor(3.f)}));
  EXPECT_EQ(count.values(), (std::vector<int>{1, 2, 3}));
  // TF's `loss, n = strategy.run(...)` then reduce each.
  EXPECT_EQ(strategy.reduce(ReduceOp::SUM, loss), Tensor(4.5f));
  EXPECT_EQ(strategy.reduce(ReduceOp::SUM, count), Tensor(6));
  // The values remember their strategy, as run's do.
  EXPECT_EQ(loss.origin(), strategy.id());
}

TEST(Nest, RunReturningADictRegroupsByKeyAndNamesDifferentKeys) {
  MirroredStrategy strategy(cpu_devices(2));
  const std::map<std::string, PerReplica<Tensor>> out = strategy.run([] {
    return Dict{{"loss", Tensor(static_cast<float>(rid()))}, {"n", Tensor(2)}};
  });
  EXPECT_EQ(out.at("loss").values(), (std::vector<Tensor>{Tensor(0.f), Tensor(1.f)}));
  EXPECT_EQ(out.at("n").values(), (std::vector<Tensor>{Tensor(2), Tensor(2)}));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] {
                strategy.run([] {
                  return std::make_tuple(Tensor(1), rid() == 0 ? Dict{{"a", Tensor(1)}} : Dict{{"b", Tensor(1)}});
                });
              }),
              AllOf(HasSubstr("Strategy::run: expected the same structure from every replica"),
                    HasSubstr("replica 1's has keys {'b'} at [1] and replica 0's {'a'}")));
}

TEST(Nest, ReduceTakesTuplesVectorsDictsAndPerReplicaOfThem) {
  MirroredStrategy strategy(cpu_devices(2));
  const auto [a, b] = strategy.reduce(ReduceOp::SUM, std::make_tuple(PerReplica<Tensor>({Tensor(1.f), Tensor(2.f)}),
                                                                     Mirrored<Tensor>({Tensor(5.), Tensor(5.)})));
  EXPECT_EQ(a, Tensor(3.f));
  EXPECT_EQ(b, Tensor(10.));
  const std::vector<Tensor> list = strategy.reduce(
      ReduceOp::MEAN, PerReplica<std::vector<Tensor>>({{Tensor(1.f), Tensor(10.f)}, {Tensor(3.f), Tensor(30.f)}}));
  EXPECT_EQ(list, (std::vector<Tensor>{Tensor(2.f), Tensor(20.f)}));
  const std::map<std::string, Tensor> dict = strategy.reduce(
      ReduceOp::SUM,
      std::map<std::string, PerReplica<Tensor>>{{"x", PerReplica<Tensor>({Tensor{1.f, 2.f}, Tensor{3.f, 4.f}})}},
      /*axis=*/0);
  EXPECT_EQ(dict.at("x"), Tensor(10.f));
  const auto per_replica_dict = strategy.run([] { return Dict{{"x", Tensor(static_cast<float>(rid()))}}; });
  EXPECT_EQ(strategy.reduce(ReduceOp::SUM, per_replica_dict).at("x"), Tensor(1.f));
  EXPECT_THAT(
      message_of<InvalidArgumentError>([&] {
        strategy.reduce(ReduceOp::SUM, PerReplica<std::vector<Tensor>>({{Tensor(1.f)}, {Tensor(1.f), Tensor(2.f)}}));
      }),
      HasSubstr("replica 1's has 2 element(s) at the top and replica 0's 1"));
  EXPECT_THAT(message_of<InvalidArgumentError>([&] {
                strategy.reduce(ReduceOp::SUM,
                                PerReplica<Dict>({Dict{{"a", Tensor(1)}}, Dict{{"a", Tensor(1)}, {"b", Tensor(2)}}}));
              }),
              HasSubstr("replica 1's has keys {'a', 'b'} at the top and replica 0's {'a'}"));
}

TEST(Nest, AllReduceOfStructuresFusesTheLeavesAndChecksTheStructure) {
  MirroredStrategy strategy(cpu_devices(3));
  const auto out = strategy.run([] {
    const float r = static_cast<float>(rid());
    const auto [t, d] =
        ctx().all_reduce(ReduceOp::SUM, std::make_tuple(Tensor(r), Dict{{"g", Tensor{r, 2 * r}}, {"h", Tensor(1.0)}}));
    return std::vector<Tensor>{t, d.at("g"), d.at("h")};
  });
  for (const auto& v : out) {
    EXPECT_EQ(v[0], Tensor(3.f));
    EXPECT_EQ(v[1], (Tensor{3.f, 6.f}));
    EXPECT_EQ(v[2], Tensor(3.0));
  }
  // Same number and shapes of tensors, other keys: refused on every replica.
  std::vector<std::string> errors(3);
  EXPECT_THROW(strategy.run([&] {
    try {
      ctx().all_reduce(ReduceOp::SUM, Dict{{rid() == 2 ? "other" : "g", Tensor(1.f)}});
    } catch (const InvalidArgumentError& e) {
      errors[static_cast<std::size_t>(rid())] = e.what();
      throw;
    }
  }),
               InvalidArgumentError);
  for (const std::string& e : errors)
    EXPECT_THAT(e, HasSubstr("replica(s) 2 passed other lengths or keys than replica 0"));
}

TEST(Nest, LocalResultsAndMergeCallSeeStructures) {
  MirroredStrategy strategy(cpu_devices(2));
  auto [x, y] = strategy.run([] { return std::make_pair(rid(), Tensor(static_cast<float>(rid()))); });
  const std::vector<std::tuple<int, Tensor, int>> local = strategy.experimental_local_results(std::make_tuple(x, y, 7));
  ASSERT_EQ(local.size(), 2u);
  EXPECT_EQ(local[1], std::make_tuple(1, Tensor(1.f), 7));
  const std::vector<std::map<std::string, int>> dicts =
      strategy.experimental_local_results(std::map<std::string, PerReplica<int>>{{"r", x}});
  EXPECT_EQ(dicts[0].at("r"), 0);
  EXPECT_EQ(dicts[1].at("r"), 1);
  // A plain structure is one result, as a plain value is.
  EXPECT_EQ(strategy.experimental_local_results(std::make_tuple(1, 2)).size(), 1u);

  const auto sums = strategy.run([] {
    return ctx().merge_call(
        [](Strategy& s, const std::tuple<PerReplica<Tensor>, PerReplica<Tensor>>& pair,
           const std::map<std::string, PerReplica<Tensor>>& dict) {
          return s.reduce(ReduceOp::SUM, std::get<0>(pair)) + s.reduce(ReduceOp::SUM, std::get<1>(pair)) +
                 s.reduce(ReduceOp::SUM, dict.at("k"));
        },
        std::make_tuple(Tensor(1.f), Tensor(static_cast<float>(rid()))), Dict{{"k", Tensor(10.f)}});
  });
  for (const Tensor& t : sums) EXPECT_EQ(t, Tensor(23.f));  // 2 + 1 + 20
}

TEST(Nest, RegroupListGivesAVectorOfPerReplica) {
  const PerReplica<std::vector<int>> v({{1, 2}, {3, 4}});
  const std::vector<PerReplica<int>> grouped = nest::regroup_list(v);
  ASSERT_EQ(grouped.size(), 2u);
  EXPECT_EQ(grouped[0].values(), (std::vector<int>{1, 3}));
  EXPECT_EQ(grouped[1].values(), (std::vector<int>{2, 4}));
}

}  // namespace
}  // namespace distribute
