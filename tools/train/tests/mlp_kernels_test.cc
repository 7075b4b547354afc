// The trainer's kernel variants (mlp_kernels.h): correct gradients, the
// same bits wherever the buffers sit, agreement between instruction sets,
// and the run-time choice.
#include "mlp_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "distribute/errors.h"

namespace distribute::train::kernels {
namespace {

constexpr std::int64_t kRows = 37;  // not a multiple of any packet size
const std::vector<std::int64_t> kSizes = {13, 9, 5};

struct Model {
  std::vector<std::vector<float>> kernels, biases;
  std::vector<float> x;
  std::vector<std::int32_t> labels;
};

Model random_model(std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  Model m;
  for (std::size_t l = 0; l + 1 < kSizes.size(); ++l) {
    m.kernels.emplace_back(static_cast<std::size_t>(kSizes[l] * kSizes[l + 1]));
    m.biases.emplace_back(static_cast<std::size_t>(kSizes[l + 1]));
    for (float& w : m.kernels.back()) w = uniform(rng);
    for (float& b : m.biases.back()) b = 0.1f * uniform(rng);
  }
  m.x.resize(static_cast<std::size_t>(kRows * kSizes.front()));
  for (float& v : m.x) v = uniform(rng);
  std::uniform_int_distribution<std::int32_t> label(0, static_cast<std::int32_t>(kSizes.back()) - 1);
  for (std::int64_t i = 0; i < kRows; ++i) m.labels.push_back(label(rng));
  return m;
}

// A copy of `v` that starts `offset` floats into a fresh allocation, so that
// its alignment differs from run to run of the loop below.
struct Placed {
  std::vector<float> storage;
  float* data;
  Placed(const std::vector<float>& v, std::size_t offset) : storage(v.size() + 16, -7.f) {
    data = storage.data() + offset;
    std::memcpy(data, v.data(), v.size() * sizeof(float));
  }
};

struct Output {
  PassResult pass;
  std::vector<std::vector<float>> grads;  // kernel0, bias0, kernel1, ...
};

// One forward/backward pass with every buffer placed `offset` floats in.
Output run_pass(const Table& table, const Model& m, std::size_t offset, bool want_grads = true) {
  std::vector<Placed> params;
  for (std::size_t l = 0; l < m.kernels.size(); ++l) {
    params.emplace_back(m.kernels[l], offset);
    params.emplace_back(m.biases[l], (offset + 3) % 8);
  }
  Placed x(m.x, (offset + 5) % 8);
  std::vector<Layer> layers;
  std::vector<Placed> grad_buffers;
  std::vector<LayerGrad> grads;
  for (std::size_t l = 0; l < m.kernels.size(); ++l) {
    layers.push_back({params[2 * l].data, params[2 * l + 1].data, kSizes[l], kSizes[l + 1]});
    grad_buffers.emplace_back(std::vector<float>(m.kernels[l].size()), (offset + 1) % 8);
    grad_buffers.emplace_back(std::vector<float>(m.biases[l].size()), (offset + 6) % 8);
  }
  for (std::size_t l = 0; l < m.kernels.size(); ++l) grads.push_back({grad_buffers[2 * l].data, grad_buffers[2 * l + 1].data});
  Output out;
  out.pass = table.forward_backward(layers.data(), layers.size(), x.data, m.labels.data(), kRows, 0.5f,
                                    want_grads ? grads.data() : nullptr);
  for (std::size_t i = 0; i < grad_buffers.size(); ++i) {
    const std::size_t n = i % 2 == 0 ? m.kernels[i / 2].size() : m.biases[i / 2].size();
    out.grads.emplace_back(grad_buffers[i].data, grad_buffers[i].data + n);
  }
  return out;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class MlpKernelsTest : public ::testing::TestWithParam<const Table*> {};

// The gradients are d(loss_sum * loss_scale)/d(param): checked against
// central differences of the loss, in a few coordinates of every tensor.
TEST_P(MlpKernelsTest, GradientsMatchFiniteDifferences) {
  const Table& table = *GetParam();
  Model m = random_model(1);
  const Output base = run_pass(table, m, 0);
  ASSERT_TRUE(std::isfinite(base.pass.loss_sum));
  ASSERT_GT(base.pass.loss_sum, 0);
  auto loss_of = [&](const Model& changed) { return 0.5 * run_pass(table, changed, 0, false).pass.loss_sum; };
  for (std::size_t t = 0; t < base.grads.size(); ++t) {
    std::vector<float>& param = t % 2 == 0 ? m.kernels[t / 2] : m.biases[t / 2];
    for (std::size_t k : {std::size_t{0}, param.size() / 2, param.size() - 1}) {
      const float saved = param[k];
      const float h = 1e-3f;
      param[k] = saved + h;
      const double up = loss_of(m);
      param[k] = saved - h;
      const double down = loss_of(m);
      param[k] = saved;
      const double numeric = (up - down) / (2.0 * h);
      EXPECT_NEAR(base.grads[t][k], numeric, 2e-3 + 2e-2 * std::abs(numeric))
          << table.isa << ": tensor " << t << " element " << k;
    }
  }
}

// Replicas' copies stay identical only if a result's bits do not depend on
// where malloc put the buffers: every offset gives the same bits.
TEST_P(MlpKernelsTest, ResultsDoNotDependOnAlignment) {
  const Table& table = *GetParam();
  const Model m = random_model(2);
  const Output reference = run_pass(table, m, 0);
  for (std::size_t offset = 1; offset < 8; ++offset) {
    const Output got = run_pass(table, m, offset);
    EXPECT_EQ(got.pass.loss_sum, reference.pass.loss_sum) << table.isa << " offset " << offset;
    EXPECT_EQ(got.pass.correct, reference.pass.correct) << table.isa << " offset " << offset;
    for (std::size_t t = 0; t < reference.grads.size(); ++t) {
      EXPECT_TRUE(bitwise_equal(got.grads[t], reference.grads[t])) << table.isa << " offset " << offset << " tensor " << t;
    }
  }

  const std::size_t n = 1003;
  std::vector<float> w(n), v(n), m1(n), g(n);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  for (std::size_t i = 0; i < n; ++i) {
    w[i] = uniform(rng);
    v[i] = std::abs(uniform(rng));
    m1[i] = uniform(rng);
    g[i] = uniform(rng);
  }
  auto sgd_at = [&](std::size_t offset) {
    Placed pw(w, offset), pv(m1, (offset + 2) % 8), pg(g, (offset + 4) % 8);
    Placed ow(std::vector<float>(n), (offset + 1) % 8), ov(std::vector<float>(n), (offset + 7) % 8);
    table.sgd(static_cast<std::int64_t>(n), pw.data, pv.data, pg.data, 0.05f, 0.9f, ow.data, ov.data);
    return std::vector<std::vector<float>>{{ow.data, ow.data + n}, {ov.data, ov.data + n}};
  };
  auto adam_at = [&](std::size_t offset) {
    Placed pw(w, offset), pm(m1, (offset + 2) % 8), pv(v, (offset + 3) % 8), pg(g, (offset + 4) % 8);
    Placed ow(std::vector<float>(n), (offset + 1) % 8), om(std::vector<float>(n), (offset + 5) % 8),
        ov(std::vector<float>(n), (offset + 7) % 8);
    table.adam(static_cast<std::int64_t>(n), pw.data, pm.data, pv.data, pg.data, 0.9f, 0.999f, 0.01f, 1e-7f, ow.data,
               om.data, ov.data);
    return std::vector<std::vector<float>>{{ow.data, ow.data + n}, {om.data, om.data + n}, {ov.data, ov.data + n}};
  };
  const auto sgd0 = sgd_at(0), adam0 = adam_at(0);
  for (std::size_t offset = 1; offset < 8; ++offset) {
    const auto sgd = sgd_at(offset), adam = adam_at(offset);
    for (std::size_t i = 0; i < sgd.size(); ++i) EXPECT_TRUE(bitwise_equal(sgd[i], sgd0[i])) << "sgd " << offset;
    for (std::size_t i = 0; i < adam.size(); ++i) EXPECT_TRUE(bitwise_equal(adam[i], adam0[i])) << "adam " << offset;
  }
}

// The optimizers compute Keras's formulas.
TEST_P(MlpKernelsTest, OptimizersFollowTheirFormulas) {
  const Table& table = *GetParam();
  const std::vector<float> w = {1.f, -2.f, 0.5f, 3.f, 0.f}, v = {0.1f, 0.2f, 0.f, 0.4f, 0.9f},
                           g = {0.5f, -1.f, 2.f, 0.f, -0.25f};
  const auto n = static_cast<std::int64_t>(w.size());
  std::vector<float> w_out(w.size()), v_out(w.size()), m_out(w.size());
  table.sgd(n, w.data(), v.data(), g.data(), 0.05f, 0.9f, w_out.data(), v_out.data());
  for (std::size_t i = 0; i < w.size(); ++i) {
    const float new_v = 0.9f * v[i] - 0.05f * g[i];
    EXPECT_FLOAT_EQ(v_out[i], new_v) << i;
    EXPECT_FLOAT_EQ(w_out[i], w[i] + new_v) << i;
  }
  // Adam with m = v = the same small values.
  table.adam(n, w.data(), v.data(), v.data(), g.data(), 0.9f, 0.999f, 0.01f, 1e-7f, w_out.data(), m_out.data(),
             v_out.data());
  for (std::size_t i = 0; i < w.size(); ++i) {
    const float new_m = 0.9f * v[i] + (1.f - 0.9f) * g[i];
    const float new_v = 0.999f * v[i] + (1.f - 0.999f) * g[i] * g[i];
    EXPECT_FLOAT_EQ(m_out[i], new_m) << i;
    EXPECT_FLOAT_EQ(v_out[i], new_v) << i;
    EXPECT_FLOAT_EQ(w_out[i], w[i] - 0.01f * new_m / (std::sqrt(new_v) + 1e-7f)) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, MlpKernelsTest, ::testing::ValuesIn(available()),
                         [](const ::testing::TestParamInfo<const Table*>& param_info) {
                           std::string name = param_info.param->isa;
                           for (char& c : name) {
                             if (c == '+') c = '_';
                           }
                           return name;
                         });

// Every variant computes the same function, up to rounding.
TEST(MlpKernelsChoiceTest, VariantsAgree) {
  const std::vector<const Table*> tables = available();
  const Model m = random_model(4);
  const Output reference = run_pass(*tables.front(), m, 0);
  for (const Table* table : tables) {
    const Output got = run_pass(*table, m, 0);
    EXPECT_NEAR(got.pass.loss_sum, reference.pass.loss_sum, 1e-4 * reference.pass.loss_sum) << table->isa;
    for (std::size_t t = 0; t < reference.grads.size(); ++t) {
      for (std::size_t k = 0; k < reference.grads[t].size(); ++k) {
        EXPECT_NEAR(got.grads[t][k], reference.grads[t][k], 1e-5f + 1e-4f * std::abs(reference.grads[t][k]))
            << table->isa << " tensor " << t << " element " << k;
      }
    }
  }
}

TEST(MlpKernelsChoiceTest, ChoosesTheFastestUnlessTold) {
  const std::vector<const Table*> tables = available();
  ASSERT_FALSE(tables.empty());
  EXPECT_STREQ(tables.front()->isa, "baseline");
  EXPECT_EQ(&choose(""), tables.back());
  EXPECT_EQ(&choose("baseline"), tables.front());
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    ASSERT_EQ(tables.size(), 2u);
    EXPECT_STREQ(choose("avx2").isa, "avx2+fma");
  } else {
    EXPECT_EQ(tables.size(), 1u);
    EXPECT_THROW(choose("avx2"), InvalidArgumentError);
  }
#endif
  try {
    choose("sse9");
    FAIL() << "an unknown DISTRIBUTE_TRAIN_ISA was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("'baseline' or 'avx2', got 'sse9'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace distribute::train::kernels
