// The trainer's arithmetic (the MLP's forward and backward pass, the
// optimizers' updates) on raw buffers, compiled once per instruction set
// and chosen at run time (issue 14): one binary runs on any x86-64 and uses
// AVX2 and FMA where the CPU has them.
//
// Why compiled twice and not a BLAS: Eigen's vectorization is chosen when it
// is compiled (SSE2 for baseline x86-64), so mlp_kernels_impl.cc is built
// once for baseline x86-64 and once with -mavx2 -mfma, each with Eigen's
// namespace renamed (distribute_eigen_<isa>) so that no template of one
// variant can stand in for the other's at link time (the test
// mlp_kernels_symbols checks the AVX2 object exports nothing else). A BLAS
// behind Eigen (EIGEN_USE_BLAS with Debian's OpenBLAS) was measured at the
// trainer's shapes and rejected: its OpenMP build matched the AVX2 Eigen
// step, its serial build was 10x slower, and which one a program gets
// depends on the machine's libblas alternative; it would also leave the
// softmax and the optimizers in SSE2. AVX-512 was measured slower than AVX2
// at these shapes (the 10-column output layer, 16-float packets) and is not
// built. See BENCHMARKS.md ("MLP step").
//
// Every replica of one program runs the same variant, so mirrored copies
// stay bitwise identical. Workers on machines with different instruction
// sets compute different last bits: set DISTRIBUTE_TRAIN_ISA=baseline on
// every worker of such a cluster.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace distribute::train::kernels {

// Layer l of the MLP: kernel [in, out] row-major, bias [out].
struct Layer {
  const float* kernel = nullptr;
  const float* bias = nullptr;
  std::int64_t in = 0, out = 0;
};

// Where a layer's gradients go ([in, out] and [out]).
struct LayerGrad {
  float* kernel = nullptr;
  float* bias = nullptr;
};

struct PassResult {
  double loss_sum = 0;       // sum of per-example cross-entropies
  std::int64_t correct = 0;  // examples whose argmax is the label
};

struct Table {
  const char* isa;  // "baseline" or "avx2+fma"
  // Forward pass over `rows` >= 1 examples x [rows, layers[0].in] with
  // labels in [0, layers[count-1].out); with grads (count entries), also the
  // gradients of loss_sum * loss_scale. ReLU between layers, softmax
  // cross-entropy at the end.
  PassResult (*forward_backward)(const Layer* layers, std::size_t count, const float* x, const std::int32_t* labels,
                                 std::int64_t rows, float loss_scale, const LayerGrad* grads);
  // Keras's SGD with momentum over n elements: v' = momentum * v - lr * g;
  // w' = w + v'.
  void (*sgd)(std::int64_t n, const float* w, const float* v, const float* g, float lr, float momentum, float* w_out,
              float* v_out);
  // Keras's Adam step over n elements with the bias-corrected rate lr_t:
  // m' = b1 m + (1 - b1) g; v' = b2 v + (1 - b2) g^2;
  // w' = w - lr_t m' / (sqrt(v') + epsilon).
  void (*adam)(std::int64_t n, const float* w, const float* m, const float* v, const float* g, float b1, float b2,
               float lr_t, float epsilon, float* w_out, float* m_out, float* v_out);
};

// The variants this binary has (baseline first) that this CPU can run.
std::vector<const Table*> available();

// The variant the trainer uses, chosen once: DISTRIBUTE_TRAIN_ISA
// ("baseline" or "avx2") if set, else the fastest one this CPU runs.
// InvalidArgumentError for another value of DISTRIBUTE_TRAIN_ISA, or for
// "avx2" on a CPU without AVX2 and FMA.
const Table& active();

// The same choice for a given DISTRIBUTE_TRAIN_ISA value ("" = unset).
const Table& choose(const std::string& requested);

}  // namespace distribute::train::kernels
