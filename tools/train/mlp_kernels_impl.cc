// One variant of the trainer's kernels (mlp_kernels.h). Built once per
// instruction set by tools/train/CMakeLists.txt with
// -DDISTRIBUTE_KERNEL_ISA=<name> -DEigen=distribute_eigen_<name> and that
// set's flags. Everything here but the exported table is in a namespace of
// its own or has internal linkage: no inline function of a standard header
// is instantiated on builtin types here (they would be shared with the
// other variant at link time), which the mlp_kernels_symbols test checks.
#include <Eigen/Dense>
#include <cmath>
#include <vector>

#include "mlp_kernels.h"

#if !defined(DISTRIBUTE_KERNEL_ISA) || !defined(DISTRIBUTE_KERNEL_ISA_NAME)
#error "build with -DDISTRIBUTE_KERNEL_ISA=<identifier> -DDISTRIBUTE_KERNEL_ISA_NAME=\"<name>\""
#endif

namespace distribute::train::kernels::DISTRIBUTE_KERNEL_ISA {
namespace {

using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowVec = Eigen::Matrix<float, 1, Eigen::Dynamic>;
using Array = Eigen::Array<float, Eigen::Dynamic, 1>;

// A thread's temporaries, kept from one pass to the next: a training loop
// calls with the same shapes every step, and Eigen's matrices keep their
// storage when assigned a result of their own size, so a step allocates
// nothing of its own after the first (at 256 rows the activations are
// 128 KiB, glibc's mmap threshold: allocated afresh each step they cost a
// page fault per 4 KiB, a fifth of the step).
struct Workspace {
  std::vector<Mat> acts;    // inputs of each layer
  std::vector<Mat> deltas;  // gradients of the loss by each layer's output
  Mat z, probs, back;
  Eigen::VectorXf row_max, denom;
  RowVec bias_grad;
};

PassResult forward_backward(const Layer* layers, std::size_t count, const float* x, const std::int32_t* labels,
                            std::int64_t rows, float loss_scale, const LayerGrad* grads) {
  auto kernel = [&](std::size_t l) { return Eigen::Map<const Mat>(layers[l].kernel, layers[l].in, layers[l].out); };
  auto bias = [&](std::size_t l) { return Eigen::Map<const RowVec>(layers[l].bias, layers[l].out); };
  const Eigen::Map<const Mat> input(x, rows, layers[0].in);
  thread_local Workspace ws;
  ws.acts.resize(count);
  ws.deltas.resize(count);
  // The input of layer l: the caller's x for the first, else a kept matrix.
  auto act = [&](std::size_t l) -> Eigen::Ref<const Mat> {
    if (l == 0) return input;
    return ws.acts[l];
  };
  for (std::size_t l = 0; l < count; ++l) {
    Mat& z = l + 1 < count ? ws.acts[l + 1] : ws.z;
    z.resize(rows, layers[l].out);
    z.noalias() = act(l) * kernel(l);
    z.rowwise() += bias(l);
    if (l + 1 < count) z = z.cwiseMax(0.f);
  }
  const Mat& logits = ws.z;
  PassResult result;
  ws.row_max = logits.rowwise().maxCoeff();
  ws.probs = (logits.colwise() - ws.row_max).array().exp().matrix();
  ws.denom = ws.probs.rowwise().sum();
  ws.probs = ws.probs.array().colwise() / ws.denom.array();
  for (Eigen::Index i = 0; i < rows; ++i) {
    const Eigen::Index label = labels[i];
    const double p = static_cast<double>(ws.probs(i, label));
    result.loss_sum -= std::log(p > 1e-30 ? p : 1e-30);
    Eigen::Index best = 0;
    logits.row(i).maxCoeff(&best);
    if (best == label) ++result.correct;
  }
  if (grads == nullptr) return result;

  ws.deltas[count - 1] = ws.probs;
  for (Eigen::Index i = 0; i < rows; ++i) ws.deltas[count - 1](i, labels[i]) -= 1.f;
  ws.deltas[count - 1] *= loss_scale;
  for (std::size_t l = count; l-- > 0;) {
    const Mat& delta = ws.deltas[l];
    // Written straight into the caller's gradient buffers.
    Eigen::Map<Mat>(grads[l].kernel, layers[l].in, layers[l].out).noalias() = act(l).transpose() * delta;
    // Summed into an aligned temporary: Eigen's vectorized column sum takes
    // a path that depends on the destination's alignment, and the caller's
    // buffer may have any.
    ws.bias_grad = delta.colwise().sum();
    Eigen::Map<RowVec>(grads[l].bias, layers[l].out) = ws.bias_grad;
    if (l > 0) {
      ws.back.resize(rows, layers[l].in);
      ws.back.noalias() = delta * kernel(l).transpose();
      ws.deltas[l - 1] = ws.back.cwiseProduct((ws.acts[l].array() > 0.f).cast<float>().matrix());
    }
  }
  return result;
}

Eigen::Map<const Array> in(const float* p, std::int64_t n) { return {p, n}; }
Eigen::Map<Array> out(float* p, std::int64_t n) { return {p, n}; }

void sgd(std::int64_t n, const float* w, const float* v, const float* g, float lr, float momentum, float* w_out,
         float* v_out) {
  out(v_out, n) = momentum * in(v, n) - lr * in(g, n);
  out(w_out, n) = in(w, n) + in(v_out, n);
}

void adam(std::int64_t n, const float* w, const float* m, const float* v, const float* g, float b1, float b2,
          float lr_t, float epsilon, float* w_out, float* m_out, float* v_out) {
  out(m_out, n) = b1 * in(m, n) + (1.f - b1) * in(g, n);
  out(v_out, n) = b2 * in(v, n) + (1.f - b2) * in(g, n).square();
  out(w_out, n) = in(w, n) - lr_t * in(m_out, n) / (in(v_out, n).sqrt() + epsilon);
}

}  // namespace

extern const Table kTable;
const Table kTable{DISTRIBUTE_KERNEL_ISA_NAME, &forward_backward, &sgd, &adam};

}  // namespace distribute::train::kernels::DISTRIBUTE_KERNEL_ISA
