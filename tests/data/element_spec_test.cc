// Dataset::element_spec, DistributedDataset::element_spec and
// Dataset::with_options/options. Expected specs follow TF's
// (tensorflow/python/data/ops/dataset_ops.py docstrings; batch without
// drop_remainder has a None leading dimension).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "distribute/dataset.h"
#include "distribute/distribute.h"
#include "distribute/errors.h"
#include "testing/helpers.h"

namespace distribute {
namespace {

using ::distribute::testing::cpu_devices;
using ::distribute::testing::message_of;
using ::testing::HasSubstr;
using i64 = std::int64_t;

Tensor floats(Shape shape) { return Tensor::zeros(DType::kFloat32, std::move(shape)); }

TEST(ElementSpec, PrintsAsTF) {
  // TF: from_tensor_slices([1, 2, 3]).element_spec
  EXPECT_EQ(Dataset::from_tensor_slices(Tensor{1, 2, 3}).element_spec().to_string(),
            "TensorSpec(shape=(), dtype=tf.int32, name=None)");
  EXPECT_EQ(Dataset::range(10).batch(3).element_spec().to_string(),
            "TensorSpec(shape=(None,), dtype=tf.int64, name=None)");
  EXPECT_EQ(Dataset::range(10).batch(3, true).element_spec().to_string(),
            "TensorSpec(shape=(3,), dtype=tf.int64, name=None)");
  const Dataset pairs = Dataset::from_tensor_slices(std::vector<Tensor>{floats({6, 8, 8}), Tensor{1, 2, 3, 4, 5, 6}});
  EXPECT_EQ(pairs.element_spec().to_string(),
            "(TensorSpec(shape=(8, 8), dtype=tf.float32, name=None), TensorSpec(shape=(), dtype=tf.int32, name=None))");
  EXPECT_EQ(Dataset::zip({Dataset::range(3)}).element_spec().to_string(),
            "(TensorSpec(shape=(), dtype=tf.int64, name=None),)");
}

TEST(ElementSpec, FollowsEveryStaticTransformation) {
  const Dataset images = Dataset::from_tensor_slices(floats({10, 4}));
  const TensorSpec row{DType::kFloat32, {4}};
  EXPECT_EQ(images.element_spec(), (ElementSpec{{row}, false}));
  for (const Dataset& d : {images.shuffle(4, 1), images.repeat(2), images.take(3), images.skip(1), images.shard(2, 0),
                           images.prefetch(1), images.cache(), images.filter([](const Element&) { return true; })}) {
    EXPECT_EQ(d.element_spec(), (ElementSpec{{row}, false})) << d.describe();
  }
  EXPECT_EQ(images.batch(5).unbatch().element_spec(), (ElementSpec{{row}, false}));
  EXPECT_EQ(images.batch(4, true).rebatch(2).element_spec(), (ElementSpec{{{DType::kFloat32, {2, 4}}}, false}));
  EXPECT_EQ(images.batch(4).rebatch(2).element_spec(), (ElementSpec{{{DType::kFloat32, {-1, 4}}}, false}));
  EXPECT_EQ(images.batch(4, true).rebatch(3).element_spec(), (ElementSpec{{{DType::kFloat32, {-1, 4}}}, false}));
  EXPECT_EQ(images.enumerate().element_spec(), (ElementSpec{{{DType::kInt64, {}}, row}, true}));
  EXPECT_EQ(images.padded_batch(2, {{6}}, {}, true).element_spec(), (ElementSpec{{{DType::kFloat32, {2, 6}}}, false}));
  EXPECT_EQ(images.padded_batch(2).element_spec(), (ElementSpec{{{DType::kFloat32, {-1, 4}}}, false}));
  EXPECT_EQ(images.padded_batch(2, {{-1}}).element_spec(), (ElementSpec{{{DType::kFloat32, {-1, -1}}}, false}));
  EXPECT_EQ(Dataset::from_tensors(Element::tuple({floats({2, 3}), Tensor(i64{1})})).element_spec(),
            (ElementSpec{{{DType::kFloat32, {2, 3}}, {DType::kInt64, {}}}, true}));
}

TEST(ElementSpec, AfterAUserFunctionKnowsRanksAndDtypesNotSizes) {
  const Dataset squares = Dataset::range(5).map([](const Element& e) -> Element {
    const i64 x = e.tensor().item<i64>();
    return Tensor(std::vector<double>(static_cast<std::size_t>(x + 1), 1.0), Shape{x + 1});
  });
  EXPECT_EQ(squares.element_spec(), (ElementSpec{{{DType::kFloat64, {-1}}}, false}));
  EXPECT_EQ(squares.padded_batch(2).element_spec(), (ElementSpec{{{DType::kFloat64, {-1, -1}}}, false}));
  EXPECT_EQ(squares.batch(2, true).element_spec(), (ElementSpec{{{DType::kFloat64, {2, -1}}}, false}));
  const Dataset flat = Dataset::range(3).flat_map([](const Element& e) { return Dataset::from_tensors(e).repeat(2); });
  EXPECT_EQ(flat.element_spec(), (ElementSpec{{{DType::kInt64, {}}}, false}));
  EXPECT_THAT(message_of<FailedPreconditionError>(
                  [] { Dataset::range(0).map([](const Element& e) { return e; }).element_spec(); }),
              HasSubstr("comes from its first element, and it has none"));
}

TEST(ElementSpec, ReadingItLeavesTheDatasetsIterationStateAlone) {
  // Reading the first element of a map over a reshuffling shuffle must not
  // count as an iteration of the shuffle, nor fill a cache.
  const auto make = [] { return Dataset::range(30).shuffle(30, 5).map([](const Element& e) { return e; }); };
  const Dataset probed = make(), untouched = make();
  probed.element_spec();
  std::vector<i64> a, b;
  for (const Element& e : probed) a.push_back(e.tensor().item<i64>());
  for (const Element& e : untouched) b.push_back(e.tensor().item<i64>());
  EXPECT_EQ(a, b);
  auto calls = std::make_shared<int>(0);
  const Dataset cached = Dataset::range(3)
                             .map([calls](const Element& e) {
                               ++*calls;
                               return e;
                             })
                             .cache()
                             .map([](const Element& e) { return e; });
  cached.element_spec();
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const Element& e : cached) (void)e;
  }
  EXPECT_EQ(*calls, 1 + 3);  // the probe's one element, then one filling iteration
}

TEST(ElementSpec, EveryElementMatchesTheSpec) {
  const Dataset images =
      Dataset::from_tensor_slices(std::vector<Tensor>{floats({11, 3}), Tensor(std::vector<i64>(11, 1), Shape{11})});
  const auto ragged = Dataset::range(1, 7).map([](const Element& e) -> Element {
    return Tensor(std::vector<float>(static_cast<std::size_t>(e.tensor().item<i64>()), 1.f),
                  Shape{e.tensor().item<i64>()});
  });
  for (const Dataset& d : {images.batch(4), images.batch(4, true), images.batch(4).rebatch(2), images.enumerate(),
                           Dataset::zip({images.batch(2), ragged.padded_batch(2)}), ragged.padded_batch(4, {{8}}),
                           images.batch(3).unbatch(), ragged}) {
    const ElementSpec spec = d.element_spec();
    for (const Element& e : d) {
      ASSERT_EQ(e.is_tuple(), spec.is_tuple) << d.describe();
      ASSERT_EQ(e.size(), spec.components.size()) << d.describe();
      for (std::size_t c = 0; c < e.size(); ++c) {
        const TensorSpec& s = spec.components[c];
        EXPECT_EQ(e[c].dtype(), s.dtype) << d.describe();
        ASSERT_EQ(static_cast<std::size_t>(e[c].rank()), s.shape.size()) << d.describe();
        for (std::size_t k = 0; k < s.shape.size(); ++k) {
          if (s.shape[k] >= 0) {
            EXPECT_EQ(e[c].shape()[k], s.shape[k]) << d.describe() << " component " << c;
          }
        }
      }
    }
  }
}

TEST(ElementSpec, OfADistributedDatasetIsOneReplicasShare) {
  MirroredStrategy two(cpu_devices(2));
  const Dataset d = Dataset::from_tensor_slices(floats({16, 5}));
  EXPECT_EQ(two.experimental_distribute_dataset(d.batch(8, true)).element_spec(),
            (ElementSpec{{{DType::kFloat32, {4, 5}}}, false}));
  EXPECT_EQ(two.experimental_distribute_dataset(d.batch(8)).element_spec(),
            (ElementSpec{{{DType::kFloat32, {-1, 5}}}, false}));
  EXPECT_EQ(two.experimental_distribute_dataset(d.batch(7, true)).element_spec(),
            (ElementSpec{{{DType::kFloat32, {-1, 5}}}, false}));
  MirroredStrategy one(cpu_devices(1));
  EXPECT_EQ(one.experimental_distribute_dataset(d.batch(8)).element_spec(), d.batch(8).element_spec());
  const DistributedDataset per_replica =
      two.distribute_datasets_from_function([&](const InputContext&) { return d.batch(3, true); });
  EXPECT_EQ(per_replica.element_spec(), (ElementSpec{{{DType::kFloat32, {3, 5}}}, false}));
}

TEST(Options, MergeAlongThePipelineLaterOnesWinning) {
  const auto with = [](AutoShardPolicy p) {
    Options o;
    o.experimental_distribute.auto_shard_policy = p;
    return o;
  };
  const Dataset d = Dataset::range(8);
  EXPECT_FALSE(d.options().experimental_distribute.auto_shard_policy.has_value());
  EXPECT_EQ(d.with_options(with(AutoShardPolicy::DATA))
                .batch(2)
                .with_options({})
                .options()
                .experimental_distribute.auto_shard_policy,
            AutoShardPolicy::DATA);
  EXPECT_EQ(d.with_options(with(AutoShardPolicy::DATA))
                .map([](const Element& e) { return e; })
                .with_options(with(AutoShardPolicy::OFF))
                .options()
                .experimental_distribute.auto_shard_policy,
            AutoShardPolicy::OFF);
  EXPECT_EQ(Dataset::zip({d, d.with_options(with(AutoShardPolicy::FILE))})
                .options()
                .experimental_distribute.auto_shard_policy,
            AutoShardPolicy::FILE);
  // Options leave the elements and the description alone.
  const Dataset optioned = d.with_options(with(AutoShardPolicy::OFF));
  EXPECT_EQ(optioned.describe(), d.describe());
  EXPECT_EQ(optioned.cardinality(), 8);
  std::vector<i64> got;
  for (const Element& e : optioned) got.push_back(e.tensor().item<i64>());
  EXPECT_EQ(got, (std::vector<i64>{0, 1, 2, 3, 4, 5, 6, 7}));
}

}  // namespace
}  // namespace distribute
