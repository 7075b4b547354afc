// Distributed input throughput, against references measured in the same run.
//
// Data: digits-sized rows (64 float32 pixels + an int32 label = 260 bytes),
// 1797 rows, global batch 256 on a 2-replica MirroredStrategy.
//   BM_MemcpyBatch          memcpy of one global batch's bytes (the reference)
//   BM_DistributedStep/B    one get_next() of the distributed iterator over
//                           from_tensor_slices(...).batch(256).repeat(), with
//                           B steps prepared ahead (0: in get_next itself)
//   BM_DistributedShuffled  the same with shuffle(1797) before batch, so every
//                           batch is gathered (one copy of its bytes)
//   BM_MlpStep              forward + backward of a 64-128-128-10 MLP on one
//                           replica's 128 rows (Eigen): what input must outpace
//   BM_MlpStepFedByPipeline/B  get_next of the shuffled pipeline, then the
//                           MLP step: the excess over BM_MlpStep is input stall
// Every step is checked (two replicas, 128 rows each, labels in range), so a
// broken pipeline cannot look fast.
#include <benchmark/benchmark.h>

#include <Eigen/Dense>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "distribute/distribute.h"

namespace {

namespace dist = distribute;

constexpr std::int64_t kRows = 1797;
constexpr std::int64_t kGlobalBatch = 256;
constexpr std::int64_t kRowBytes = 64 * 4 + 4;

struct Data {
  dist::Tensor images, labels;
};

const Data& data() {
  static const Data d = [] {
    std::mt19937 rng(1);
    std::uniform_int_distribution<int> pixel(0, 16), label(0, 9);
    std::vector<float> images(static_cast<std::size_t>(kRows * 64));
    std::vector<std::int32_t> labels(static_cast<std::size_t>(kRows));
    for (float& p : images) p = static_cast<float>(pixel(rng));
    for (std::int32_t& l : labels) l = label(rng);
    return Data{dist::Tensor(std::move(images), {kRows, 64}), dist::Tensor(std::move(labels), {kRows})};
  }();
  return d;
}

void check_step(const dist::PerReplica<dist::Element>& step) {
  if (step.size() != 2) throw std::logic_error("expected 2 replicas");
  for (const dist::Element& e : step) {
    if (e[0].dim(0) != e[1].dim(0) || e[0].dim(1) != 64) throw std::logic_error("malformed per-replica batch");
  }
}

void BM_MemcpyBatch(benchmark::State& state) {
  std::vector<char> src(static_cast<std::size_t>(kGlobalBatch * kRowBytes), 1), dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(src.size()));
  state.SetItemsProcessed(state.iterations() * kGlobalBatch);
}
BENCHMARK(BM_MemcpyBatch);

void distributed_steps(benchmark::State& state, const dist::Dataset& dataset) {
  dist::MirroredStrategy strategy({"CPU:0", "CPU:1"});
  dist::InputOptions options;
  options.experimental_per_replica_buffer_size = static_cast<int>(state.range(0));
  auto it = strategy.experimental_distribute_dataset(dataset, options).make_iterator();
  for (auto _ : state) {
    auto step = it.get_next();
    check_step(step);
    benchmark::DoNotOptimize(step);
  }
  state.SetBytesProcessed(state.iterations() * kGlobalBatch * kRowBytes);
  state.SetItemsProcessed(state.iterations() * kGlobalBatch);
}

void BM_DistributedStep(benchmark::State& state) {
  distributed_steps(state, dist::Dataset::from_tensor_slices({data().images, data().labels}).batch(kGlobalBatch).repeat());
}
BENCHMARK(BM_DistributedStep)->Arg(0)->Arg(1)->Arg(4)->UseRealTime();

void BM_DistributedShuffled(benchmark::State& state) {
  distributed_steps(state, dist::Dataset::from_tensor_slices({data().images, data().labels})
                               .shuffle(kRows, 7)
                               .batch(kGlobalBatch)
                               .repeat());
}
BENCHMARK(BM_DistributedShuffled)->Arg(0)->Arg(1)->UseRealTime();

// One replica's training step of the reference MLP: forward, softmax
// cross-entropy, backward (gradients of all weights), on `x` [rows, 64].
class Mlp {
 public:
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  Mlp() : w1_(random(64, 128)), w2_(random(128, 128)), w3_(random(128, 10)) {}

  float step(const float* pixels, const std::int32_t* labels, Eigen::Index rows) {
    if (rows == 0) return 0.f;
    Eigen::Map<const Mat> x(pixels, rows, 64);
    Mat h1 = (x * w1_).cwiseMax(0.f);
    Mat h2 = (h1 * w2_).cwiseMax(0.f);
    Mat logits = h2 * w3_;
    Mat d3 = (logits.colwise() - logits.rowwise().maxCoeff()).array().exp().matrix();
    d3 = d3.array().colwise() / d3.rowwise().sum().array();
    for (Eigen::Index i = 0; i < rows; ++i) d3(i, labels[i]) -= 1.f;
    d3 /= static_cast<float>(rows);
    Mat gw3 = h2.transpose() * d3;
    Mat d2 = (d3 * w3_.transpose()).cwiseProduct((h2.array() > 0.f).cast<float>().matrix());
    Mat gw2 = h1.transpose() * d2;
    Mat d1 = (d2 * w2_.transpose()).cwiseProduct((h1.array() > 0.f).cast<float>().matrix());
    Mat gw1 = x.transpose() * d1;
    return gw1.sum() + gw2.sum() + gw3.sum();
  }

 private:
  static Mat random(Eigen::Index r, Eigen::Index c) {
    std::mt19937 rng(static_cast<unsigned>(r * 1000 + c));
    std::normal_distribution<float> normal(0.f, 0.1f);
    Mat m(r, c);
    for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
    return m;
  }
  Mat w1_, w2_, w3_;
};

void BM_MlpStep(benchmark::State& state) {
  Mlp mlp;
  const auto b = kGlobalBatch / 2;
  for (auto _ : state) {
    benchmark::DoNotOptimize(mlp.step(data().images.data<float>().data(), data().labels.data<std::int32_t>().data(), b));
  }
  state.SetItemsProcessed(state.iterations() * b);
}
BENCHMARK(BM_MlpStep);

// A replica's step as a training loop runs it: take the next distributed
// batch, then the MLP step on replica 0's half. Compared with BM_MlpStep, the
// difference is the time the step waits for input (with a prefetching
// iterator the next batch is cut while the MLP runs).
void BM_MlpStepFedByPipeline(benchmark::State& state) {
  dist::MirroredStrategy strategy({"CPU:0", "CPU:1"});
  dist::InputOptions options;
  options.experimental_per_replica_buffer_size = static_cast<int>(state.range(0));
  auto dataset = dist::Dataset::from_tensor_slices({data().images, data().labels})
                     .shuffle(kRows, 7)
                     .batch(kGlobalBatch)
                     .repeat();
  auto it = strategy.experimental_distribute_dataset(dataset, options).make_iterator();
  Mlp mlp;
  for (auto _ : state) {
    auto step = it.get_next();
    check_step(step);
    const dist::Element& mine = step[0];
    benchmark::DoNotOptimize(mlp.step(mine[0].data<float>().data(), mine[1].data<std::int32_t>().data(), mine[0].dim(0)));
  }
  state.SetItemsProcessed(state.iterations() * kGlobalBatch / 2);
}
BENCHMARK(BM_MlpStepFedByPipeline)->Arg(0)->Arg(1)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
