// The MLP: its parameters as mirrored variables and its forward/backward pass
// over the kernels of mlp_kernels.h.
#include "model.h"

#include <cmath>
#include <random>
#include <utility>

#include "mlp_kernels.h"

namespace distribute::train {

VariableOptions named(std::string name) {
  VariableOptions options;
  options.name = std::move(name);
  return options;
}

std::vector<Variable> make_parameters(const std::vector<std::int64_t>& sizes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Variable> params;
  for (std::size_t l = 0; l + 1 < sizes.size(); ++l) {
    const std::int64_t in = sizes[l], out = sizes[l + 1];
    // Glorot uniform, as Keras's Dense layers start.
    const auto limit = static_cast<float>(std::sqrt(6.0 / static_cast<double>(in + out)));
    std::uniform_real_distribution<float> uniform(-limit, limit);
    std::vector<float> kernel(static_cast<std::size_t>(in * out));
    for (float& w : kernel) w = uniform(rng);
    const std::string prefix = "dense" + std::to_string(l);
    params.emplace_back(Tensor(std::move(kernel), {in, out}), named(prefix + "/kernel"));
    params.emplace_back(Tensor::zeros(DType::kFloat32, {out}), named(prefix + "/bias"));
  }
  return params;
}

std::shared_ptr<float[]> uninitialized_floats(std::int64_t n) {
  return std::shared_ptr<float[]>(new float[static_cast<std::size_t>(n)]);
}
Tensor own_floats(std::shared_ptr<float[]> buffer, Shape shape) {
  const float* data = buffer.get();
  return Tensor::wrap(DType::kFloat32, std::move(shape), data, std::move(buffer), /*writable=*/true);
}

Pass forward_backward(const std::vector<Tensor>& params, const Tensor& x, const Tensor& y, float loss_scale,
                      bool want_grads) {
  Pass pass;
  const std::size_t layers = params.size() / 2;
  const std::int64_t rows = x.dim(0);
  if (rows == 0) {
    if (want_grads) {
      for (const Tensor& p : params) pass.grads.push_back(Tensor::zeros(DType::kFloat32, p.shape()));
    }
    return pass;
  }
  std::vector<kernels::Layer> spec(layers);
  for (std::size_t l = 0; l < layers; ++l) {
    const Tensor& kernel = params[2 * l];
    spec[l] = {kernel.data<float>().data(), params[2 * l + 1].data<float>().data(), kernel.dim(0), kernel.dim(1)};
  }
  // The kernels write the gradients into these buffers, which then become
  // the gradient tensors without a copy (left uninitialized: the kernels
  // write every element).
  std::vector<std::shared_ptr<float[]>> buffers;
  std::vector<kernels::LayerGrad> grads;
  if (want_grads) {
    for (const Tensor& p : params) buffers.push_back(uninitialized_floats(p.num_elements()));
    for (std::size_t l = 0; l < layers; ++l) grads.push_back({buffers[2 * l].get(), buffers[2 * l + 1].get()});
  }
  const kernels::PassResult r =
      kernels::active().forward_backward(spec.data(), layers, x.data<float>().data(), y.data<std::int32_t>().data(),
                                         rows, loss_scale, want_grads ? grads.data() : nullptr);
  pass.loss_sum = r.loss_sum;
  pass.correct = r.correct;
  for (std::size_t i = 0; i < buffers.size(); ++i) pass.grads.push_back(own_floats(std::move(buffers[i]), params[i].shape()));
  return pass;
}

std::vector<Tensor> read_all(const std::vector<Variable>& vars) {
  std::vector<Tensor> out;
  out.reserve(vars.size());
  for (const Variable& v : vars) out.push_back(v.value());
  return out;
}

}  // namespace distribute::train
