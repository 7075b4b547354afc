// The trainer's arithmetic against the machine's limits (issue 14, item 1),
// in one run:
//
//   BM_FmaPeak/<isa>        one core's floating-point peak: independent
//                           chains of fused multiply-adds in registers
//                           (avx2: 8-float FMAs; avx512: 16-float FMAs;
//                           sse2: 4-float multiply then add, what baseline
//                           x86-64 code can issue)
//   BM_MlpStep/<isa>/<rows>  one replica's step of distribute-train's
//                           64-128-128-10 MLP (forward, softmax
//                           cross-entropy, backward, SGD with momentum) with
//                           the kernels of tools/train/mlp_kernels.h built
//                           for <isa>, on <rows> rows (256: one replica's
//                           global batch; 128: each of 2 replicas' half)
//   BM_MlpStep/avx2_fma_two_threads/128/...  the 128-row step on two threads
//                           at once, each with its own model (what 2
//                           replicas compute, with no synchronization at
//                           all): its samples/s over the one-thread 256-row
//                           step's is the compute ceiling of the 1-to-2
//                           replica speed-up on this host
//   BM_OpenBlasGemms/<rows> the same step's eight matrix products alone
//                           (3 forward, 3 kernel gradients, 2 input
//                           gradients) through OpenBLAS's cblas_sgemm with
//                           one thread: the dense work a BLAS would do
//                           for the trainer, without the elementwise parts
//
// Every benchmark reports FLOP/s (counter "flops") counting 2 per
// multiply-add of the matrix products only; bench/run_mlp_step.sh prints
// the medians and the ratios against the peak and against OpenBLAS.
//
// OpenBLAS is loaded at run time (dlopen) from Debian's builds
// (libopenblas0-openmp, -pthread or -serial; scripts/setup.sh --bench-peers
// installs the OpenMP one), so the benchmark needs no BLAS to build; the
// OpenBLAS rows are skipped, saying so, where none is installed.
// OPENBLAS_LIB names another library file to load.
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "mlp_kernels.h"

namespace {

namespace kernels = distribute::train::kernels;

constexpr std::array<std::int64_t, 4> kWidths = {64, 128, 128, 10};

// 2 FLOPs per multiply-add of the step's matrix products: forward X W per
// layer, kernel gradients X^T dY per layer, input gradients dY W^T for every
// layer but the first.
double step_flops(std::int64_t rows) {
  double madds = 0;
  for (std::size_t l = 0; l + 1 < kWidths.size(); ++l) {
    const double mn = static_cast<double>(kWidths[l] * kWidths[l + 1]);
    madds += 2 * mn * static_cast<double>(rows);      // forward, kernel gradient
    if (l > 0) madds += mn * static_cast<double>(rows);  // input gradient
  }
  return 2 * madds;
}

// The MLP's parameters, optimizer slots, gradients and a batch.
struct Model {
  explicit Model(std::int64_t batch_rows) : rows(batch_rows) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> weight(-0.15f, 0.15f), pixel(0.f, 1.f);
    std::uniform_int_distribution<std::int32_t> label(0, 9);
    for (std::size_t l = 0; l + 1 < kWidths.size(); ++l) {
      const auto in = kWidths[l], out = kWidths[l + 1];
      kernel.emplace_back(static_cast<std::size_t>(in * out));
      for (float& w : kernel.back()) w = weight(rng);
      bias.emplace_back(static_cast<std::size_t>(out), 0.f);
      kernel_grad.emplace_back(static_cast<std::size_t>(in * out));
      bias_grad.emplace_back(static_cast<std::size_t>(out));
      kernel_velocity.emplace_back(static_cast<std::size_t>(in * out), 0.f);
      bias_velocity.emplace_back(static_cast<std::size_t>(out), 0.f);
    }
    x.resize(static_cast<std::size_t>(rows * kWidths[0]));
    for (float& p : x) p = pixel(rng);
    y.resize(static_cast<std::size_t>(rows));
    for (std::int32_t& l : y) l = label(rng);
  }

  // One training step with `table`'s kernels: the trainer's step minus the
  // all_reduce. Returns the loss sum (checked finite by the caller).
  double step(const kernels::Table& table) {
    std::vector<kernels::Layer> layers;
    std::vector<kernels::LayerGrad> grads;
    for (std::size_t l = 0; l + 1 < kWidths.size(); ++l) {
      layers.push_back({kernel[l].data(), bias[l].data(), kWidths[l], kWidths[l + 1]});
      grads.push_back({kernel_grad[l].data(), bias_grad[l].data()});
    }
    const kernels::PassResult r = table.forward_backward(layers.data(), layers.size(), x.data(), y.data(), rows,
                                                         1.f / static_cast<float>(rows), grads.data());
    for (std::size_t l = 0; l < kernel.size(); ++l) {
      table.sgd(static_cast<std::int64_t>(kernel[l].size()), kernel[l].data(), kernel_velocity[l].data(),
                kernel_grad[l].data(), 0.05f, 0.9f, kernel[l].data(), kernel_velocity[l].data());
      table.sgd(static_cast<std::int64_t>(bias[l].size()), bias[l].data(), bias_velocity[l].data(),
                bias_grad[l].data(), 0.05f, 0.9f, bias[l].data(), bias_velocity[l].data());
    }
    return r.loss_sum;
  }

  std::int64_t rows;
  std::vector<std::vector<float>> kernel, bias, kernel_grad, bias_grad, kernel_velocity, bias_velocity;
  std::vector<float> x;
  std::vector<std::int32_t> y;
};

const kernels::Table* find_table(const std::string& isa) {
  for (const kernels::Table* t : kernels::available()) {
    if (t->isa == isa) return t;
  }
  return nullptr;
}

void BM_MlpStep(benchmark::State& state, const std::string& isa) {
  const kernels::Table* table = find_table(isa);
  if (table == nullptr) {
    state.SkipWithError(("this CPU or build has no " + isa + " kernels").c_str());
    return;
  }
  Model model(state.range(0));
  double loss = 0;
  for (auto _ : state) {
    loss = model.step(*table);
    benchmark::DoNotOptimize(loss);
  }
  if (!(loss >= 0 && loss < 1e30)) state.SkipWithError("the step's loss is not finite");
  state.counters["flops"] =
      benchmark::Counter(step_flops(model.rows) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.SetItemsProcessed(state.iterations() * model.rows);
}

// --- the FMA peak -------------------------------------------------------------
// kChains independent accumulators, each updated acc = acc * a + b per
// iteration: enough chains to cover the FMA latency (4 cycles) on both FMA
// ports. `a` and `b` keep every value finite and normal.
constexpr int kChains = 12;
constexpr std::int64_t kPeakIterations = 1 << 16;

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float fma_loop_avx2(std::int64_t n, float seed) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(seed + static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (std::int64_t i = 0; i < n; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  }
  __m256 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  return _mm256_cvtss_f32(sum);
}

__attribute__((target("avx512f"))) float fma_loop_avx512(std::int64_t n, float seed) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(seed + static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (std::int64_t i = 0; i < n; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  return lanes[0];
}

float fma_loop_sse2(std::int64_t n, float seed) {
  __m128 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm_set1_ps(seed + static_cast<float>(c));
  const __m128 a = _mm_set1_ps(0.999f), b = _mm_set1_ps(0.001f);
  for (std::int64_t i = 0; i < n; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm_add_ps(_mm_mul_ps(acc[c], a), b);
  }
  __m128 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm_add_ps(sum, acc[c]);
  return _mm_cvtss_f32(sum);
}
#endif

void BM_FmaPeak(benchmark::State& state, const std::string& isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  float (*loop)(std::int64_t, float) = nullptr;
  double lanes = 0;
  if (isa == "sse2") {
    loop = fma_loop_sse2, lanes = 4;
  } else if (isa == "avx2" && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    loop = fma_loop_avx2, lanes = 8;
  } else if (isa == "avx512" && __builtin_cpu_supports("avx512f")) {
    loop = fma_loop_avx512, lanes = 16;
  }
  if (loop == nullptr) {
    state.SkipWithError(("this CPU has no " + isa).c_str());
    return;
  }
  float seed = 1.f;
  for (auto _ : state) {
    seed = loop(kPeakIterations, seed) * 1e-6f;
    benchmark::DoNotOptimize(seed);
  }
  const double flops_per_call = 2.0 * lanes * kChains * static_cast<double>(kPeakIterations);
  state.counters["flops"] =
      benchmark::Counter(flops_per_call * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
#else
  state.SkipWithError(("no " + isa + " peak loop for this architecture").c_str());
#endif
}

// --- OpenBLAS -----------------------------------------------------------------
// cblas_sgemm's signature with CBLAS's enum values (row-major 101, no
// transpose 111, transpose 112), declared here so that no BLAS header is
// needed to build.
using SgemmFn = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                         int lda, const float* b, int ldb, float beta, float* c, int ldc);
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

struct OpenBlas {
  SgemmFn sgemm = nullptr;
  std::string path, config, error;
};

const OpenBlas& openblas() {
  static const OpenBlas lib = [] {
    OpenBlas l;
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("OPENBLAS_LIB")) candidates.emplace_back(env);
    for (const char* build : {"openblas-openmp", "openblas-pthread", "openblas-serial"}) {
      candidates.push_back(std::string("/usr/lib/x86_64-linux-gnu/") + build + "/libopenblas.so.0");
    }
    for (const std::string& path : candidates) {
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) continue;
      l.sgemm = reinterpret_cast<SgemmFn>(dlsym(handle, "cblas_sgemm"));
      auto set_threads = reinterpret_cast<void (*)(int)>(dlsym(handle, "openblas_set_num_threads"));
      auto get_config = reinterpret_cast<char* (*)()>(dlsym(handle, "openblas_get_config"));
      if (l.sgemm == nullptr || set_threads == nullptr) {
        l.sgemm = nullptr;
        continue;
      }
      set_threads(1);
      l.path = path;
      if (get_config != nullptr) l.config = get_config();
      return l;
    }
    l.error = "no OpenBLAS found (scripts/setup.sh --bench-peers installs libopenblas0-openmp; OPENBLAS_LIB names one)";
    return l;
  }();
  return lib;
}

void BM_OpenBlasGemms(benchmark::State& state) {
  const OpenBlas& blas = openblas();
  if (blas.sgemm == nullptr) {
    state.SkipWithError(blas.error.c_str());
    return;
  }
  state.SetLabel(blas.path + " (" + blas.config + ")");
  const auto rows = static_cast<int>(state.range(0));
  Model model(rows);
  const std::size_t layers = kWidths.size() - 1;
  // Activations a[0] = x, a[l+1] = a[l] W_l; their gradients d[l].
  std::vector<std::vector<float>> a(layers + 1), d(layers + 1);
  for (std::size_t l = 0; l <= layers; ++l) {
    a[l].assign(static_cast<std::size_t>(rows * kWidths[l]), 0.01f);
    d[l].assign(static_cast<std::size_t>(rows * kWidths[l]), 0.01f);
  }
  a[0] = model.x;
  for (auto _ : state) {
    for (std::size_t l = 0; l < layers; ++l) {
      const int in = static_cast<int>(kWidths[l]), out = static_cast<int>(kWidths[l + 1]);
      blas.sgemm(kRowMajor, kNoTrans, kNoTrans, rows, out, in, 1.f, a[l].data(), in, model.kernel[l].data(), out,
                 0.f, a[l + 1].data(), out);
    }
    for (std::size_t l = layers; l-- > 0;) {
      const int in = static_cast<int>(kWidths[l]), out = static_cast<int>(kWidths[l + 1]);
      // dW = a^T d  ([in, rows] x [rows, out])
      blas.sgemm(kRowMajor, kTrans, kNoTrans, in, out, rows, 1.f, a[l].data(), in, d[l + 1].data(), out, 0.f,
                 model.kernel_grad[l].data(), out);
      // dX = d W^T  ([rows, out] x [out, in]), not needed for the input
      if (l > 0) {
        blas.sgemm(kRowMajor, kNoTrans, kTrans, rows, in, out, 1.f, d[l + 1].data(), out, model.kernel[l].data(),
                   out, 0.f, d[l].data(), in);
      }
    }
    benchmark::DoNotOptimize(model.kernel_grad[0].data());
    benchmark::ClobberMemory();
  }
  state.counters["flops"] =
      benchmark::Counter(step_flops(rows) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.SetItemsProcessed(state.iterations() * rows);
}

BENCHMARK_CAPTURE(BM_FmaPeak, sse2, std::string("sse2"));
BENCHMARK_CAPTURE(BM_FmaPeak, avx2, std::string("avx2"));
BENCHMARK_CAPTURE(BM_FmaPeak, avx512, std::string("avx512"));
BENCHMARK_CAPTURE(BM_MlpStep, baseline, std::string("baseline"))->Arg(256)->Arg(128);
BENCHMARK_CAPTURE(BM_MlpStep, avx2_fma, std::string("avx2+fma"))->Arg(256)->Arg(128);
BENCHMARK_CAPTURE(BM_MlpStep, avx2_fma_two_threads, std::string("avx2+fma"))->Arg(128)->Threads(2)->UseRealTime();
BENCHMARK(BM_OpenBlasGemms)->Arg(256)->Arg(128);

}  // namespace

BENCHMARK_MAIN();
