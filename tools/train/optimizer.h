// The optimizers of distribute-train: Keras's SGD with momentum and Adam.
#pragma once

#include <memory>
#include <vector>

#include "distribute/distribute.h"
#include "trainer.h"

namespace distribute::train {

// Applies gradients. Called in replica context by every replica with the
// same all-reduced gradients: an assign to a mirrored variable of
// aggregation NONE there updates the replica's own copy (as in current TF),
// and the same arithmetic on the same inputs keeps the copies bitwise
// identical, with no further synchronization (as DDP's optimizer steps run
// in every process). Slots are mirrored variables created in the strategy's
// scope like the parameters.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void apply(const std::vector<Tensor>& grads) = 0;
  virtual void track(Checkpoint& checkpoint) const = 0;
  virtual std::vector<Variable> slots() const = 0;
};

// The optimizer `config` names, over `params`, with its slots created in the
// current strategy's scope.
std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& config, const std::vector<Variable>& params);

}  // namespace distribute::train
