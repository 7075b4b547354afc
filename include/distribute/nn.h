// Loss scaling for custom training loops, TF's tf.nn.compute_average_loss and
// tf.nn.scale_regularization_loss (tensorflow/python/ops/nn_impl_distribute.py):
// each replica divides its loss by the GLOBAL batch, so that the SUM of the
// replicas' gradients (what all_reduce gives) is the gradient of the mean
// loss over the global batch, whatever the number of replicas.
//
//   auto step = [&](const Tensor& x, const Tensor& y) {
//     Tensor per_example = my_loss(x, y);                       // shape [b]
//     Tensor loss = nn::compute_average_loss(per_example, {.global_batch_size = 64});
//     ...
//   };
#pragma once

#include <cstdint>
#include <optional>

#include "distribute/tensor.h"

namespace distribute::nn {

struct AverageLossOptions {
  // Weights of the examples: a scalar, or a tensor whose shape broadcasts to
  // the loss's (same rank, each dimension equal or 1, after TF's adjustment
  // of one trailing dimension: [b, 1] weights for a [b] loss, [b] weights
  // for a [b, t] loss), e.g. one weight per example, or per time step.
  std::optional<Tensor> sample_weight = std::nullopt;
  // The global batch size; unset: this replica's batch (dimension 0 of the
  // loss) times num_replicas_in_sync(), which is right when every replica
  // gets a full share. Give it when batches can be partial (the last one)
  // or some replicas get none. Must be >= 0.
  std::optional<std::int64_t> global_batch_size = std::nullopt;
};

// The sum of `per_example_loss` (rank >= 1; times the sample weights) divided
// by the global batch size (computed in double, rounded once to the result's
// dtype); 0 when that is 0 (a replica with an empty batch
// contributes 0, never NaN). A scalar of the loss's dtype (float32 for int32
// losses, float64 for int64). Without a global batch size it needs a
// replica context (inside strategy.run, or no strategy at all: one replica).
// Raises InvalidArgumentError for a scalar loss, weights that do not
// broadcast, or a negative global batch size; FailedPreconditionError in
// cross-replica context (inside a scope) without a global batch size.
Tensor compute_average_loss(const Tensor& per_example_loss, const AverageLossOptions& options = {});

// The sum of `regularization_loss` divided by num_replicas_in_sync(), so that
// adding it to every replica's loss counts it once in the summed gradient.
// A scalar of the loss's dtype (as compute_average_loss for integers).
// Raises FailedPreconditionError in cross-replica context.
Tensor scale_regularization_loss(const Tensor& regularization_loss);

}  // namespace distribute::nn
