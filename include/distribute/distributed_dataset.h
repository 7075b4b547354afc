// Distributed input: a Dataset split across the replicas of a strategy.
//
// strategy.experimental_distribute_dataset(dataset) expects `dataset` to be
// batched with the GLOBAL batch size G and splits every global batch across
// the N replicas as TF does: replica sizes differ by at most one, larger
// first (G=4 on 3 replicas: 2, 1, 1; G=5 on 2: 3, 2). The split re-cuts the
// stream of rows (TF's rebatch), so a final partial batch is cut by the same
// sizes in turn (6 rows with G=8 on 2 replicas: 4, 2; 2 rows with G=4 on 3
// replicas: 2, 0, 0). Replicas left without rows get an empty batch (first
// dimension 0), and iteration ends only when no replica has data. Where a
// replica's rows lie inside one input batch they are a zero-copy slice of it.
// A dataset whose batch size is unknown (no batch(), or a transformation
// after it that may change it) has each element split into N pieces of
// ceil(B/N) rows (TF's legacy rebatch); scalar elements cannot be split and
// raise InvalidArgumentError. With one replica nothing is split.
//
// strategy.distribute_datasets_from_function(fn) calls fn once with an
// InputContext and gives replica r of step k element k*N + r of the dataset
// fn returns (batch it with the per-replica batch size). A last step the
// data cannot fill gives its missing replicas empty elements, except from
// get_next() and range-for with one worker and a fully known element_spec,
// which end before it, as TF's (DistributedIterator::get_next).
//
// Each step is a PerReplica<Element>: for a single-tensor dataset replica r's
// value is its batch (an Element converts to `const Tensor&`); for a tuple
// dataset it is replica r's (features, labels) tuple. TF's regrouping gives
// a tuple of PerReplica instead; regroup(step) returns exactly that.
//
// Overlap: the iterator prepares up to
// InputOptions::experimental_per_replica_buffer_size steps ahead on a
// background thread while the current step runs.
#pragma once

#include <cstdint>
#include <functional>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distribute/dataset.h"
#include "distribute/distributed_values.h"
#include "distribute/element.h"
#include "distribute/internal/input_range.h"

namespace distribute {

namespace internal {
class StepSource;
class WorkerAgreement;
}

// What distribute_datasets_from_function tells the dataset function
// (tf.distribute.InputContext).
class InputContext {
 public:
  InputContext(int num_input_pipelines = 1, int input_pipeline_id = 0, int num_replicas_in_sync = 1);

  int num_input_pipelines() const noexcept { return num_input_pipelines_; }
  int input_pipeline_id() const noexcept { return input_pipeline_id_; }
  int num_replicas_in_sync() const noexcept { return num_replicas_in_sync_; }
  // global_batch_size / num_replicas_in_sync; InvalidArgumentError when it
  // does not divide.
  std::int64_t get_per_replica_batch_size(std::int64_t global_batch_size) const;
  // "tf.distribute.InputContext(input pipeline id 0, total: 1)"
  std::string to_string() const;

 private:
  int num_input_pipelines_;
  int input_pipeline_id_;
  int num_replicas_in_sync_;
};

struct InputOptions {
  // Steps prepared ahead of the one being consumed, on a background thread;
  // 0 prepares each step inside get_next().
  int experimental_per_replica_buffer_size = 1;
  // AutoShardPolicy (dataset.h) for this call; AUTO defers to the
  // dataset's own option (Dataset::with_options), if set.
  AutoShardPolicy auto_shard_policy = AutoShardPolicy::AUTO;
};

// TF's batch_sizes_for_worker: the per-replica batch sizes that worker
// `worker_index` cuts its stream into, so that the num_workers *
// num_replicas_per_worker sub-batches of a global batch differ by at most one
// and sum to global_batch_size.
std::vector<std::int64_t> batch_sizes_for_worker(std::int64_t global_batch_size, int num_workers,
                                                 int num_replicas_per_worker, int worker_index);

// One pass over a distributed dataset. Single consumer; call from outside
// replica functions.
//
// With several workers every step is agreed on: get_next() and
// get_next_as_optional() are collectives (every worker calls them as often),
// a step exists while any worker has data, and the replicas of a worker
// whose data ended get empty batches shaped like the others' (TF's partial
// batch handling); the end comes for every worker at the same step.
namespace internal {
class IteratorAccess;  // src/data/iterator_state.h: Checkpoint's access to a position
}  // namespace internal

class DistributedIterator {
 public:
  DistributedIterator(DistributedIterator&&) noexcept;
  DistributedIterator& operator=(DistributedIterator&&) noexcept;
  ~DistributedIterator();

  // The next step; OutOfRangeError ("End of sequence") at the end.
  // FailedPreconditionError when called from inside a replica function.
  // As TF's, it ends at a last step the data cannot fill (some replicas
  // without an element) when TF makes no partial steps: an iterator of
  // distribute_datasets_from_function on one worker whose dataset's
  // element_spec is fully known (e.g. batch(n, drop_remainder=true)).
  PerReplica<Element> get_next();
  // get_next()'s steps, std::nullopt at its end: what range-for (and
  // Python's for) takes, as TF's `for` takes get_next().
  std::optional<PerReplica<Element>> next_in_loop();
  // The next step, or std::nullopt at the end (and after it). A last step
  // the data cannot fill is given, its missing replicas' elements empty
  // (TF's get_next_as_optional, always).
  std::optional<PerReplica<Element>> get_next_as_optional();

 private:
  friend class DistributedDataset;
  friend class internal::IteratorAccess;
  DistributedIterator(std::unique_ptr<internal::StepSource> source, int buffer_size,
                      std::shared_ptr<internal::WorkerAgreement> agreement);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// An Iterable of per-replica steps (TF's DistributedDataset). Iterating again
// starts over (a new epoch).
class DistributedDataset {
 public:
  int num_replicas_in_sync() const noexcept { return num_replicas_; }

  DistributedIterator make_iterator() const;

  // The spec of one replica's element of a step (TF's element_spec of a
  // distributed dataset: a PerReplicaSpec holding it once per replica): the
  // dataset's element_spec with its leading dimension per replica, -1 unless
  // every replica's batch has a fixed size (a fixed global batch, TF's
  // drop_remainder, that splits evenly). With several workers, -1 unless
  // the input is infinite, as TF's: a worker whose data ended gives empty
  // batches while another's goes on.
  ElementSpec element_spec() const;

  // TF's DistributedDataset.cardinality: the number of elements of the
  // dataset given to experimental_distribute_dataset (its global batches),
  // or of this worker's dataset from distribute_datasets_from_function;
  // Dataset::kInfiniteCardinality or kUnknownCardinality as
  // Dataset::cardinality() gives them.
  std::int64_t cardinality() const;

  using RangeIterator = internal::InputRange<DistributedIterator, PerReplica<Element>>;
  RangeIterator begin() const { return RangeIterator(std::make_shared<DistributedIterator>(make_iterator())); }
  RangeIterator end() const { return {}; }

  // Folds every step into a state: state = reduce_func(state, step), over a
  // new iterator; returns the final state.
  template <class State, class F>
  State reduce(State initial_state, F&& reduce_func) const {
    DistributedIterator it = make_iterator();
    State state = std::move(initial_state);
    while (std::optional<PerReplica<Element>> step = it.get_next_as_optional()) {
      state = reduce_func(std::move(state), *step);
    }
    return state;
  }

  // How the steps are made: replica r of a step takes the next element of
  // `per_replica` (already split), N elements a step.
  DistributedDataset(Dataset per_replica, int num_replicas, InputOptions options);

 private:
  friend class Strategy;
  friend class internal::IteratorAccess;
  Dataset per_replica_;
  // The dataset the strategy distributed (the user's pipeline, before the
  // split into replicas and workers): its definition identifies a saved
  // iterator position. per_replica_ when built directly.
  std::optional<Dataset> source_;
  int num_replicas_;
  InputOptions options_;
  // Set by a multi-worker strategy: the workers agree on every step.
  std::shared_ptr<internal::WorkerAgreement> agreement_;
  // Several workers take part: a worker whose data ended gives empty
  // batches while another's goes on.
  bool across_workers_ = false;
  // Made by distribute_datasets_from_function.
  bool from_function_ = false;
  // Whether element_spec() is fully known, once an iterator asked (-1
  // before): shared by the copies and their iterators.
  std::shared_ptr<std::atomic<int>> fully_static_ = std::make_shared<std::atomic<int>>(-1);
  std::uint64_t origin_ = 0;  // the strategy's id: its steps' origin()
};

// TF's regrouped form of a step: one PerReplica per component (for a
// (features, labels) dataset: [PerReplica features, PerReplica labels]).
std::vector<PerReplica<Tensor>> regroup(const PerReplica<Element>& step);

}  // namespace distribute
