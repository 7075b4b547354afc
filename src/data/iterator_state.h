// A DistributedIterator's position, for Checkpoint::track (TF checkpoints
// the iterators of its distributed datasets: tf.train.Checkpoint(iterator=it)).
//
// The position is kept by replay, not by copying the pipeline's buffers:
// what is saved is the number of steps the iterator has returned, a
// fingerprint of the input pipeline's definition (the dataset the strategy
// distributed), and the iteration counters of the pipeline's reshuffling
// shuffles as they were when the iterator was made (iteration k of a
// shuffle draws the k-th order). Restoring makes a new iterator of the same
// distributed dataset (over a private copy of its transformations, with
// those counters set back) and skips the saved number of steps: its next
// step is, bitwise, the one an uninterrupted run would have returned, with
// the same or another number of replicas (the global batches are the same;
// their split across replicas follows the strategy; the checkpoint checks
// that the replayed steps hold the saved rows). The skipped steps are
// computed again (the pipeline's maps run), so a restore costs about as
// much input work as the steps it skips.
//
// Replay needs a pipeline that gives the same elements in a new process:
// from_generator (its state is the generator's) and a shuffle without a
// seed cannot, and Checkpoint::track refuses them (UnimplementedError). A
// map function with hidden state is the user's business, as in TF.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "distribute/distributed_dataset.h"

namespace distribute::internal {

struct IteratorPosition {
  std::int64_t steps = 0;
  // Rows of the global batches of those steps (this worker's; the
  // checkpoint sums them over the workers): a replay on another replica
  // count must reach the same row (it does unless a partial batch inside
  // the stream is cut differently). Checked by Checkpoint::restore.
  std::int64_t rows = 0;
  std::uint64_t fingerprint = 0;
  std::vector<std::uint64_t> shuffle_iterations;
};

class IteratorAccess {
 public:
  static IteratorPosition position(const DistributedIterator& iterator);
  // UnimplementedError naming `what` and the transformation that cannot be
  // replayed.
  static void check_replayable(const DistributedIterator& iterator, const std::string& what);
  // A new iterator of `like`'s distributed dataset at `position`, replayed
  // on a private copy of the pipeline from this worker's own stream (no
  // collectives): raises InvalidArgumentError (naming `what`) when the
  // pipeline's shuffles differ or (one worker) it ends before the position.
  // Nothing shared changes; the fingerprint and the rows are the caller's
  // to check (over the workers).
  static DistributedIterator at(const DistributedIterator& like, const IteratorPosition& position,
                                const std::string& what);
  // The iteration counters of the pipeline's reshuffling shuffles, from the
  // last transformation to the source.
  static std::vector<std::uint64_t> shuffle_iterations(const Dataset& pipeline);
  // A hash of describe(): the same on any machine for the same definition.
  static std::uint64_t fingerprint(const DistributedIterator& iterator);
  // Its pipeline's description (the dataset given to the strategy).
  static std::string describe(const DistributedIterator& iterator);
  // The id of the strategy that distributed the iterator's dataset.
  static std::uint64_t origin(const DistributedIterator& iterator);
  // Whether the workers agree on its steps (several workers).
  static bool across_workers(const DistributedIterator& iterator);
  // The local replicas its steps are split into.
  static int num_replicas(const DistributedIterator& iterator);

 private:
  // The iterator's state; FailedPreconditionError for a moved-from one.
  static const DistributedIterator::Impl& state(const DistributedIterator& iterator);
  // The dataset the strategy distributed (per_replica_ when built directly).
  static const Dataset& definition(const DistributedDataset& dataset);
};

}  // namespace distribute::internal
