// distribute-train's pieces: a data-parallel MLP trainer on the
// handwritten-digits data set, written with the library's public API as a
// user would write it (TF's custom training loop with tf.distribute):
//
//   with strategy.scope(): model and optimizer variables (mirrored)
//   for each epoch:
//     for batch in strategy.experimental_distribute_dataset(ds):
//       strategy.run(step_fn, batch)   # forward/backward on the replica's
//                                      # slice, loss / GLOBAL batch size,
//                                      # all_reduce(SUM, gradients),
//                                      # optimizer update of the replica's
//                                      # copy (the same on every replica)
//       strategy.reduce(SUM, metrics)
//     checkpoint.save(dir)
//
// Every replica count gives the same training (up to float rounding of the
// gradient sum): the variables start from one seeded initialization, the
// data order depends only on (seed, epoch), and each step applies the
// gradient of the whole global batch.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "distribute/distribute.h"

namespace distribute::train {

enum class StrategyKind { kDefault, kOneDevice, kMirrored, kMultiWorker };
enum class OptimizerKind { kSgd, kAdam };

// "default", "one_device", "mirrored", "multi_worker"; InvalidArgumentError otherwise.
StrategyKind parse_strategy_kind(std::string_view name);
// "sgd", "adam"; InvalidArgumentError otherwise.
OptimizerKind parse_optimizer_kind(std::string_view name);

struct TrainConfig {
  StrategyKind strategy = StrategyKind::kMirrored;
  // Replicas of this process (mirrored, multi_worker); must be 1 for
  // default and one_device.
  int replicas = 2;
  int epochs = 20;
  // The global batch size, split across all replicas in sync.
  std::int64_t batch_size = 64;
  // TF's batch(drop_remainder=True): an epoch's last, partial batch is not
  // trained on (every step then has the full global batch).
  bool drop_remainder = false;
  // Unset: 0.05 for SGD, 0.001 for Adam.
  std::optional<double> learning_rate;
  OptimizerKind optimizer = OptimizerKind::kSgd;
  double momentum = 0.9;  // SGD only
  std::uint64_t seed = 42;
  // Hidden layer sizes; the input (64) and output (10) sizes are fixed by the data.
  std::vector<std::int64_t> hidden = {128, 128};
  // Empty: the shipped data set (default_digits_path()).
  std::string data_path;
  // Non-empty: save a checkpoint there after every epoch (created if missing).
  std::string checkpoint_dir;
  // Also save one every this many optimizer steps, in the middle of epochs
  // (0: only at the ends of epochs). A run killed at any point resumes from
  // the last one and ends with the same weights as an uninterrupted run.
  std::int64_t checkpoint_every_steps = 0;
  // Restore the latest checkpoint of checkpoint_dir (if any) and continue.
  bool resume = false;
  // With a checkpoint_dir, preemption is handled (PreemptionCheckpointHandler):
  // on SIGTERM to any worker, every worker finishes its step, one checkpoint
  // is saved at that step, and train() throws Preempted; the same command
  // with resume continues from there. Tests: a function that returns true
  // when the run is to stop, instead of SIGTERM (polled after every step).
  std::function<bool()> termination_watcher;
  // Non-empty: write the learning curve (one row per epoch) there. A
  // resumed run keeps the rows of the epochs it restored and appends.
  std::string csv_path;
  // Non-empty: draw the learning curve as a PNG there after every epoch
  // (with the earlier epochs of a resumed run when csv_path holds them).
  std::string plot_path;
  // Tests: stop every epoch after this many steps (-1: whole epochs).
  std::int64_t max_steps_per_epoch = -1;
  // Tests: return right after this many optimizer steps in all, as if the
  // process were killed there: nothing more is saved, and the result holds
  // only `steps` (-1: never).
  std::int64_t stop_after_steps = -1;
  // Progress goes there (chief only); nullptr: silent.
  std::ostream* log = nullptr;
  // A progress bar redrawn on `log` after every step (a terminal of
  // `columns` columns); otherwise one line per epoch.
  bool interactive = false;
  int columns = 80;

  double effective_learning_rate() const;
};

// Thrown by train() after the checkpoint of a preemption is saved (on every
// worker). distribute-train exits with exit_code (TF's restart code, 42).
struct Preempted {
  std::string checkpoint;  // the checkpoint saved
  std::int64_t step = 0;   // the optimizer steps it holds
  int exit_code = 42;
};

// Raises InvalidArgumentError naming the first bad field (non-positive
// batch, replicas, epochs, learning rate or layer size; resume without a
// checkpoint directory; replicas != 1 for a single-replica strategy;
// negative checkpoint_every_steps).
void validate(const TrainConfig& config);

// The strategy the config names (MirroredStrategy over CPU:0..CPU:n-1).
std::unique_ptr<Strategy> make_strategy(const TrainConfig& config);

struct EpochStats {
  int epoch = 0;        // 1-based
  double loss = 0;      // mean training loss per example over the epoch
  double accuracy = 0;  // training accuracy over the epoch
  double test_accuracy = 0;
  double seconds = 0;
  double samples_per_second = 0;
};

struct TrainResult {
  // Epochs run by this call (a resumed run lists only the new ones).
  std::vector<EpochStats> history;
  double test_accuracy = 0;
  std::int64_t steps = 0;  // optimizer steps in total, including restored ones
  // The trained parameters (kernel, bias per layer), cross-replica values.
  std::vector<Tensor> parameters;
  // Names of the model and optimizer variables whose replica copies are not
  // bitwise identical at the end (each replica updates its own copy, with
  // the same all-reduced gradients: this must stay empty).
  std::vector<std::string> diverged_variables;
  // Epoch the run started from after a restore (0: from scratch).
  int resumed_from_epoch = 0;
};

// Trains with `strategy` (its scope must not be entered). Raises the
// library's errors: NotFoundError for a missing data file,
// FailedPreconditionError for an unwritable checkpoint directory, ...
TrainResult train(Strategy& strategy, const TrainConfig& config);
// validate(config), make_strategy(config), then train.
TrainResult train(const TrainConfig& config);

}  // namespace distribute::train
