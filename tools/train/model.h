// The MLP that distribute-train trains: dense layers with ReLU between them
// and a softmax cross-entropy loss; the arithmetic is mlp_kernels.h's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distribute/distribute.h"

namespace distribute::train {

// VariableOptions with just a name.
VariableOptions named(std::string name);

// Parameters in order kernel0, bias0, kernel1, bias1, ...; kernel l is
// [in, out] (row-major), bias l is [out]; `sizes` are the layer widths from
// the input's to the output's. Glorot-uniform kernels (Keras's Dense), zero
// biases, from `seed`. Created in the current strategy's scope (mirrored).
std::vector<Variable> make_parameters(const std::vector<std::int64_t>& sizes, std::uint64_t seed);

struct Pass {
  double loss_sum = 0;        // sum of per-example cross-entropies
  std::int64_t correct = 0;   // examples whose argmax is the label
  std::vector<Tensor> grads;  // d(loss_sum * loss_scale)/d(params), when asked
};

// Forward (and, with want_grads, backward) pass of the MLP over the rows of
// x (float32 [rows, inputs]) with labels y (int32 [rows]). Gradients are of
// loss_sum * loss_scale; zero rows give zero gradients.
Pass forward_backward(const std::vector<Tensor>& params, const Tensor& x, const Tensor& y, float loss_scale,
                      bool want_grads);

// A buffer of n floats left uninitialized, for a kernel that writes every
// element (a std::vector would zero it first: 3 % of a step); own_floats
// then makes it a tensor without a copy, once written.
std::shared_ptr<float[]> uninitialized_floats(std::int64_t n);
Tensor own_floats(std::shared_ptr<float[]> buffer, Shape shape);

// The current values of `vars`, in order.
std::vector<Tensor> read_all(const std::vector<Variable>& vars);

}  // namespace distribute::train
