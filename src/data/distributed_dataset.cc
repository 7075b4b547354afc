// Splitting input across replicas (TF's input_lib / RebatchDatasetV2).
//
// A distributed dataset is a stream of per-replica elements cut from the
// user's dataset; a step takes the next N of them, replica r getting the r-th
// (TF's MultiDeviceIterator hands them round-robin to the devices).
//   - experimental_distribute_dataset with a known global batch size G:
//     rebatch(batch_sizes_for_worker(G, 1, N, 0)), which re-cuts the rows
//     into sizes floor(G/N)+1 (for the first G mod N replicas) and floor(G/N).
//   - unknown batch size: every element is split into N pieces of ceil(B/N)
//     rows (TF's legacy rebatch), the trailing pieces smaller or empty.
//   - distribute_datasets_from_function: the function's dataset as it is.
// When the stream ends inside a step, the replicas still without an element
// get an empty one shaped like the step's first element (TF's dummy value),
// so a step exists while any replica has data. (Except for get_next() of
// distribute_datasets_from_function on one worker with fully static shapes,
// where TF makes no partial steps: the iteration ends there.)
#include "distribute/distributed_dataset.h"

#include <cstdint>
#include <limits>
#include <utility>

#include "data/batching.h"
#include "data/dataset_node.h"
#include "data/iterator_state.h"
#include "data/prefetcher.h"
#include "data/worker_agreement.h"
#include "core/fnv1a.h"
#include "distribute/errors.h"
#include "distribute/strategy.h"
#include "strategy/context.h"

namespace distribute {
namespace internal {

// A step, and whether the stream ended inside it (its last replicas got
// empty elements).
struct SourceStep {
  PerReplica<Element> step;
  bool padded = false;
};

// Builds steps of N elements from the per-replica stream.
class StepSource {
 public:
  StepSource(Dataset::Iterator stream, int num_replicas, std::uint64_t origin)
      : stream_(std::move(stream)), num_replicas_(num_replicas), origin_(origin) {}

  std::optional<SourceStep> next() {
    // pending_ persists across calls: an exception from the pipeline loses
    // only the element it was raised for.
    while (static_cast<int>(pending_.size()) < num_replicas_ && !ended_) {
      std::optional<Element> e = stream_.get_next_as_optional();
      if (!e.has_value()) {
        ended_ = true;
        break;
      }
      pending_.push_back(std::move(*e));
    }
    if (pending_.empty()) return std::nullopt;
    const bool padded = static_cast<int>(pending_.size()) < num_replicas_;
    while (static_cast<int>(pending_.size()) < num_replicas_) pending_.push_back(empty_like(pending_.front()));
    SourceStep out{PerReplica<Element>(std::move(pending_), ProducedBy{origin_}), padded};
    pending_.clear();
    return out;
  }

 private:
  Dataset::Iterator stream_;
  int num_replicas_;
  std::uint64_t origin_;  // the strategy's id
  std::vector<Element> pending_;
  bool ended_ = false;
};

namespace {

// TF's legacy rebatch: each element split into N pieces of ceil(B/N) rows.
class SplitNode final : public UnaryNode {
 public:
  SplitNode(Dataset input, int pieces) : UnaryNode(std::move(input)), pieces_(pieces) {}
  std::shared_ptr<const DatasetNode> with_input(Dataset input) const override {
    return copy_with_input<SplitNode>(std::move(input));
  }
  std::optional<std::int64_t> static_batch_size() const override { return std::nullopt; }
  std::unique_ptr<ElementIterator> make_iterator() const override {
    class It final : public ElementIterator {
     public:
      It(std::unique_ptr<ElementIterator> input, int pieces) : input_(std::move(input)), pieces_(pieces) {}
      std::optional<Element> next() override {
        if (!current_.has_value() || piece_ == pieces_) {
          current_.reset();
          std::optional<Element> e = input_->next();
          if (!e.has_value()) return std::nullopt;
          for (const Tensor& c : e->components()) {
            if (c.rank() == 0) {
              throw InvalidArgumentError("experimental_distribute_dataset: expected a batched dataset (elements of "
                                         "rank >= 1, split along their first dimension across the " +
                                         std::to_string(pieces_) + " replicas), got a scalar element; call the "
                                         "batch method on the dataset with the global batch size first");
            }
          }
          rows_ = batch_dim(*e, "experimental_distribute_dataset");
          current_ = std::move(e);
          piece_ = 0;
        }
        const std::int64_t per = (rows_ + pieces_ - 1) / pieces_;
        const std::int64_t begin = std::min(rows_, per * piece_);
        const std::int64_t end = std::min(rows_, begin + per);
        ++piece_;
        return slice_element(*current_, begin, end);
      }

     private:
      std::unique_ptr<ElementIterator> input_;
      int pieces_;
      std::optional<Element> current_;
      std::int64_t rows_ = 0;
      int piece_ = 0;
    };
    return std::make_unique<It>(iterate(input_), pieces_);
  }
  std::string describe() const override { return "Split(" + std::to_string(pieces_) + ") <- " + input_.describe(); }
  // Pieces of ceil(B/N) rows: fixed only when B is fixed and N divides it.
  std::optional<ElementSpec> static_element_spec() const override {
    ElementSpec spec = input_.element_spec();
    for (TensorSpec& c : spec.components) {
      if (c.shape.empty()) continue;
      c.shape[0] = c.shape[0] > 0 && c.shape[0] % pieces_ == 0 ? c.shape[0] / pieces_ : -1;
    }
    return spec;
  }
  std::int64_t cardinality() const override {
    const std::int64_t n = input_cardinality();
    std::int64_t total = 0;  // at most INT64_MAX
    return n < 0 ? n : __builtin_mul_overflow(n, std::int64_t{pieces_}, &total) ? std::numeric_limits<std::int64_t>::max()
                                                                                 : total;
  }

 private:
  int pieces_;
};

// TF raises when an unbatched dataset is distributed (its rebatch needs
// elements of rank >= 1), not at the first step: so does this, on every
// worker alike (each decides from its own pipeline, without messages).
// Pipelines whose rank is known only when iterated (map, generators) are
// still checked at their first element (SplitNode).
void require_batched(const Dataset& dataset, int num_replicas) {
  if (num_replicas <= 1 || dataset.static_batch_size().has_value()) return;
  if (dataset.node()->static_min_rank() != std::optional<int>(0)) return;
  throw InvalidArgumentError("experimental_distribute_dataset: expected a batched dataset (elements of rank >= 1, "
                             "split along their first dimension across the " + std::to_string(num_replicas) +
                             " replicas), got scalar elements from " + dataset.describe() + "; call the batch "
                             "method on the dataset with the global batch size first, e.g. dataset.batch(" +
                             std::to_string(num_replicas * 8) + ")");
}

void require_outside_replica_function(const char* method) {
  const ThreadMode* mode = current_mode();
  if (mode != nullptr && mode->replica != nullptr) {
    throw FailedPreconditionError(std::string(method) +
                                  " should be called from outside of the replica function (replica " +
                                  std::to_string(mode->replica->replica_id_in_sync_group()) +
                                  "), e.g. strategy.run(replica_fn, iterator.get_next())");
  }
}

}  // namespace
}  // namespace internal

InputContext::InputContext(int num_input_pipelines, int input_pipeline_id, int num_replicas_in_sync)
    : num_input_pipelines_(num_input_pipelines),
      input_pipeline_id_(input_pipeline_id),
      num_replicas_in_sync_(num_replicas_in_sync) {
  if (num_input_pipelines < 1 || input_pipeline_id < 0 || input_pipeline_id >= num_input_pipelines ||
      num_replicas_in_sync < 1) {
    throw InvalidArgumentError("InputContext: expected num_input_pipelines >= 1, 0 <= input_pipeline_id < "
                               "num_input_pipelines and num_replicas_in_sync >= 1, got (" +
                               std::to_string(num_input_pipelines) + ", " + std::to_string(input_pipeline_id) + ", " +
                               std::to_string(num_replicas_in_sync) + ")");
  }
}

std::int64_t InputContext::get_per_replica_batch_size(std::int64_t global_batch_size) const {
  if (global_batch_size % num_replicas_in_sync_ != 0) {
    throw InvalidArgumentError("The global batch size " + std::to_string(global_batch_size) +
                               " is not divisible by num_replicas_in_sync " + std::to_string(num_replicas_in_sync_));
  }
  return global_batch_size / num_replicas_in_sync_;
}

std::string InputContext::to_string() const {
  return "tf.distribute.InputContext(input pipeline id " + std::to_string(input_pipeline_id_) +
         ", total: " + std::to_string(num_input_pipelines_) + ")";
}

std::vector<std::int64_t> batch_sizes_for_worker(std::int64_t global_batch_size, int num_workers,
                                                 int num_replicas_per_worker, int worker_index) {
  if (global_batch_size < 0 || num_workers < 1 || num_replicas_per_worker < 1 || worker_index < 0 ||
      worker_index >= num_workers) {
    throw InvalidArgumentError("batch_sizes_for_worker: expected global_batch_size >= 0, num_workers >= 1, "
                               "num_replicas_per_worker >= 1 and 0 <= worker_index < num_workers, got (" +
                               std::to_string(global_batch_size) + ", " + std::to_string(num_workers) + ", " +
                               std::to_string(num_replicas_per_worker) + ", " + std::to_string(worker_index) + ")");
  }
  // All sub-batches of the global batch, larger ones first, then worker w's
  // share is the list rotated left by w * R (TF's assignment).
  const std::int64_t subs = static_cast<std::int64_t>(num_workers) * num_replicas_per_worker;
  const std::int64_t floor = global_batch_size / subs;
  const std::int64_t num_ceil = global_batch_size - subs * floor;
  std::vector<std::int64_t> all(static_cast<std::size_t>(subs), floor);
  for (std::int64_t i = 0; i < num_ceil; ++i) all[static_cast<std::size_t>(i)] += 1;
  std::vector<std::int64_t> mine(all.size());
  const std::size_t shift = static_cast<std::size_t>(worker_index) * static_cast<std::size_t>(num_replicas_per_worker);
  for (std::size_t i = 0; i < all.size(); ++i) mine[i] = all[(i + shift) % all.size()];
  return mine;
}

namespace {

// The rows of a step's global batch (its elements' first components).
std::int64_t rows_of(const PerReplica<Element>& step) {
  std::int64_t rows = 0;
  for (const Element& e : step) {
    if (e.size() > 0) rows += e[0].rank() > 0 ? e[0].dim(0) : 1;
  }
  return rows;
}

}  // namespace

struct DistributedIterator::Impl {
  std::unique_ptr<internal::StepSource> source;
  // With a buffer: a background thread runs `source` ahead of the consumer.
  std::unique_ptr<internal::Prefetcher<internal::SourceStep>> prefetcher;
  // Several workers: settles each step with the others (on the consumer's
  // thread, so that it is ordered with the other collectives).
  std::shared_ptr<internal::WorkerAgreement> agreement;
  // For a checkpoint of the position (data/iterator_state.h): the dataset
  // this iterator came from, the steps it returned, and its pipeline's
  // shuffle counters as they were before it was made.
  std::optional<DistributedDataset> dataset;
  std::int64_t steps = 0;
  std::int64_t rows = 0;  // rows of the global batches returned (first component)
  std::vector<std::uint64_t> shuffle_iterations;
  // Made by distribute_datasets_from_function of a strategy of one worker.
  bool one_worker_from_function = false;
  // Whether the dataset's element_spec is fully known (-1: not asked yet),
  // shared by its iterators: asked once, as it may read an element.
  std::shared_ptr<std::atomic<int>> fully_static;
  // A padded step kept while whole_steps_only_here() decides (it may
  // raise: the step is not lost).
  std::optional<internal::SourceStep> held;

  // `whole_steps_only`: get_next()'s call, which ends at a padded step
  // where TF makes no partial steps (whole_steps_only_here()).
  std::optional<PerReplica<Element>> next(bool whole_steps_only = false) {
    // (An interrupt of the wait for the prefetcher loses nothing; see
    // distribute/interrupt.h.)
    std::optional<internal::SourceStep> made = std::move(held);
    held.reset();
    if (!made.has_value()) made = prefetcher ? prefetcher->next(/*interruptible=*/true) : source->next();
    if (made.has_value() && made->padded && whole_steps_only) {
      held = std::move(made);
      const bool ends = whole_steps_only_here();
      made = std::move(held);
      held.reset();
      if (ends) return std::nullopt;
    }
    std::optional<PerReplica<Element>> step;
    if (made.has_value()) step = std::move(made->step);
    if (agreement) step = agreement->settle(std::move(step));
    if (step.has_value()) {
      ++steps;
      rows += rows_of(*step);
    }
    return step;
  }

  // TF's get_next without partial-batch handling (input_lib's
  // _enable_get_next_as_optional false): distribute_datasets_from_function
  // on one worker whose dataset's element_spec is fully known. (Asked only
  // at a padded step, the data's last: element_spec may read an element.)
  bool whole_steps_only_here() const {
    if (!dataset.has_value() || !one_worker_from_function) return false;
    int known = fully_static->load(std::memory_order_acquire);
    if (known < 0) {
      known = 1;
      for (const TensorSpec& c : dataset->element_spec().components) {
        for (std::int64_t d : c.shape) {
          if (d < 0) known = 0;
        }
      }
      fully_static->store(known, std::memory_order_release);
    }
    return known == 1;
  }
};

DistributedIterator::DistributedIterator(std::unique_ptr<internal::StepSource> source, int buffer_size,
                                         std::shared_ptr<internal::WorkerAgreement> agreement)
    : impl_(std::make_unique<Impl>()) {
  impl_->source = std::move(source);
  impl_->agreement = std::move(agreement);
  if (buffer_size > 0) {
    internal::StepSource* src = impl_->source.get();
    impl_->prefetcher = std::make_unique<internal::Prefetcher<internal::SourceStep>>(
        [src] { return src->next(); }, static_cast<std::size_t>(buffer_size));
  }
}

DistributedIterator::DistributedIterator(DistributedIterator&&) noexcept = default;
DistributedIterator& DistributedIterator::operator=(DistributedIterator&&) noexcept = default;
DistributedIterator::~DistributedIterator() {
  if (!impl_) return;
  // A forked child's copy: the parent's producer may have been inside the
  // source at the fork (distribute/internal/owner_process.h): it is left.
  if (impl_->prefetcher && impl_->prefetcher->forked_child()) (void)impl_->source.release();
  impl_->prefetcher.reset();  // stop the thread before the source it reads
}

std::optional<PerReplica<Element>> DistributedIterator::get_next_as_optional() {
  internal::require_outside_replica_function("DistributedIterator::get_next_as_optional");
  internal::require_not_moved_from(impl_.get(), "DistributedIterator::get_next_as_optional");
  return impl_->next();
}

PerReplica<Element> DistributedIterator::get_next() {
  std::optional<PerReplica<Element>> step = next_in_loop();
  if (!step.has_value()) throw OutOfRangeError("End of sequence");
  return std::move(*step);
}

std::optional<PerReplica<Element>> DistributedIterator::next_in_loop() {
  internal::require_outside_replica_function("DistributedIterator::get_next");
  internal::require_not_moved_from(impl_.get(), "DistributedIterator::get_next");
  return impl_->next(/*whole_steps_only=*/true);
}

DistributedDataset::DistributedDataset(Dataset per_replica, int num_replicas, InputOptions options)
    : per_replica_(std::move(per_replica)), num_replicas_(num_replicas), options_(options) {
  if (num_replicas_ < 1) {
    throw InvalidArgumentError("DistributedDataset: expected num_replicas >= 1, got " + std::to_string(num_replicas_));
  }
  if (options_.experimental_per_replica_buffer_size < 0) {
    throw InvalidArgumentError("InputOptions: expected experimental_per_replica_buffer_size >= 0, got " +
                               std::to_string(options_.experimental_per_replica_buffer_size));
  }
}

ElementSpec DistributedDataset::element_spec() const {
  ElementSpec spec = per_replica_.element_spec();
  if (across_workers_ && per_replica_.cardinality() != Dataset::kInfiniteCardinality) {
    for (TensorSpec& component : spec.components) {
      if (!component.shape.empty()) component.shape[0] = -1;
    }
  }
  return spec;
}

std::int64_t DistributedDataset::cardinality() const {
  return source_ ? source_->cardinality() : per_replica_.cardinality();
}

DistributedIterator DistributedDataset::make_iterator() const {
  std::vector<std::uint64_t> shuffle_iterations = internal::IteratorAccess::shuffle_iterations(per_replica_);
  DistributedIterator it(
      std::make_unique<internal::StepSource>(per_replica_.make_iterator(), num_replicas_, origin_),
                             options_.experimental_per_replica_buffer_size, agreement_);
  it.impl_->dataset = *this;
  it.impl_->one_worker_from_function = from_function_ && !across_workers_;
  it.impl_->fully_static = fully_static_;
  it.impl_->shuffle_iterations = std::move(shuffle_iterations);
  return it;
}

std::vector<PerReplica<Tensor>> regroup(const PerReplica<Element>& step) {
  const std::size_t components = step.primary().size();
  // Every replica's element must have replica 0's structure (a dataset
  // function of distribute_datasets_from_function may make any).
  for (std::size_t r = 1; r < step.values().size(); ++r) {
    const Element& e = step.values()[r];
    if (e.size() != components || e.is_tuple() != step.primary().is_tuple()) {
      auto form = [](const Element& x) {
        return x.is_tuple() ? "a tuple of " + std::to_string(x.size()) + " components" : std::string("one tensor");
      };
      throw InvalidArgumentError("regroup: expected every replica's element to have replica 0's structure, " +
                                 form(step.primary()) + ", got " + form(e) + " from replica " + std::to_string(r));
    }
  }
  std::vector<PerReplica<Tensor>> out;
  out.reserve(components);
  for (std::size_t c = 0; c < components; ++c) {
    std::vector<Tensor> values;
    values.reserve(step.values().size());
    for (const Element& e : step) values.push_back(e[c]);
    out.emplace_back(std::move(values), internal::ProducedBy{step.origin()});
  }
  return out;
}

DistributedDataset Strategy::experimental_distribute_dataset(const Dataset& dataset, const InputOptions& options) {
  internal::require_batched(dataset, num_replicas_in_sync());
  DistributedDataset out = [&] {
    const int n = num_replicas_in_sync();
    if (num_workers() > 1) return distribute_across_workers(dataset, options);
    if (n == 1) return DistributedDataset(dataset, 1, options);
    if (std::optional<std::int64_t> global = dataset.static_batch_size()) {
      return DistributedDataset(internal::rebatch_for_distribution(dataset, batch_sizes_for_worker(*global, 1, n, 0)),
                                n, options);
    }
    return DistributedDataset(Dataset(std::make_shared<internal::SplitNode>(dataset, n)), n, options);
  }();
  out.origin_ = id_;
  out.source_ = dataset;
  return out;
}

DistributedDataset Strategy::distribute_across_workers(const Dataset& dataset, const InputOptions& options) {
  const int n = num_replicas_in_sync();
  const int r = num_local_replicas();
  const auto split = [&](const Dataset& d) { return Dataset(std::make_shared<internal::SplitNode>(d, n)); };
  // Each worker's batches cut into its replicas' shares (TF's rebatch of a
  // worker's own data).
  const auto rebatch_for_worker = [&](const Dataset& d) {
    if (std::optional<std::int64_t> global = d.static_batch_size()) {
      return internal::rebatch_for_distribution(d, batch_sizes_for_worker(*global, num_workers(), r, worker_index()));
    }
    return split(d);
  };
  const internal::DatasetNode* files = internal::find_file_source(dataset);
  const auto by_files = [&] {
    return rebatch_for_worker(internal::shard_by_files(dataset, num_workers(), worker_index()));
  };
  // InputOptions' policy for this call, else the dataset's own (with_options).
  const AutoShardPolicy policy =
      options.auto_shard_policy != AutoShardPolicy::AUTO
          ? options.auto_shard_policy
          : dataset.options().experimental_distribute.auto_shard_policy.value_or(AutoShardPolicy::AUTO);
  const Dataset per_worker = [&] {
    switch (policy) {
      case AutoShardPolicy::AUTO:
        // FILE when the dataset reads at least one file per worker, else DATA.
        if (files != nullptr && files->num_files() >= static_cast<std::size_t>(num_workers())) return by_files();
        return split(dataset).shard(num_workers(), worker_index());
      case AutoShardPolicy::DATA:
        return split(dataset).shard(num_workers(), worker_index());
      case AutoShardPolicy::OFF:
        return rebatch_for_worker(dataset);
      case AutoShardPolicy::FILE:
        if (files == nullptr) {
          throw InvalidArgumentError("experimental_distribute_dataset: AutoShardPolicy::FILE needs a dataset that "
                                     "reads a list of files (Dataset::from_csv_files), got " + dataset.describe() +
                                     "; use AutoShardPolicy::DATA (or AUTO)");
        }
        if (files->num_files() < static_cast<std::size_t>(num_workers())) {
          throw InvalidArgumentError("experimental_distribute_dataset: AutoShardPolicy::FILE expected at least one "
                                     "file per worker (" + std::to_string(num_workers()) + "), got " +
                                     std::to_string(files->num_files()) + " files; use AutoShardPolicy::DATA");
        }
        return by_files();
    }
    throw InternalError("experimental_distribute_dataset: unknown AutoShardPolicy");
  }();
  DistributedDataset out(per_worker, r, options);
  out.agreement_ =
      std::make_shared<internal::WorkerAgreement>(cross_worker_, *communication_options_.timeout_seconds, r, id_);
  out.across_workers_ = num_workers() > 1;
  return out;
}

DistributedDataset Strategy::distribute_datasets_from_function(
    const std::function<Dataset(const InputContext&)>& dataset_fn, const InputOptions& options) {
  if (!dataset_fn) {
    throw InvalidArgumentError("Strategy::distribute_datasets_from_function: expected a function, got an empty one");
  }
  // One input pipeline per worker; each local replica takes one element per
  // step.
  const int n = num_replicas_in_sync();
  const InputContext context =
      kind_ == Kind::kMirrored || kind_ == Kind::kMultiWorker ? InputContext(num_workers(), worker_index(), n)
                                                              : InputContext();
  DistributedDataset out(dataset_fn(context), num_local_replicas(), options);
  out.origin_ = id_;
  out.from_function_ = true;
  if (num_workers() > 1) {
    out.agreement_ = std::make_shared<internal::WorkerAgreement>(cross_worker_, *communication_options_.timeout_seconds,
                                                                 num_local_replicas(), id_);
    out.across_workers_ = true;
  }
  return out;
}

Tensor Strategy::reduce(ReduceOp op, const PerReplica<Element>& value, std::optional<int> axis) {
  check_origin(value.origin(), "Strategy::reduce");
  std::vector<Tensor> tensors;
  tensors.reserve(value.values().size());
  for (const Element& e : value) {
    if (e.is_tuple()) {
      throw InvalidArgumentError("Strategy::reduce: expected single-tensor elements, got tuples of " +
                                 std::to_string(e.size()) + " components; reduce one component, e.g. regroup(value)[0]");
    }
    tensors.push_back(e.tensor());
  }
  return reduce(op, PerReplica<Tensor>(std::move(tensors)), axis);
}

}  // namespace distribute

// --- A position for Checkpoint::track (data/iterator_state.h) ---------------

namespace distribute::internal {

namespace {

// The iteration counters of the pipeline's reshuffling shuffles.
std::vector<std::atomic<std::uint64_t>*> counters_of(const Dataset& pipeline) {
  std::vector<std::atomic<std::uint64_t>*> counters;
  for_each_node(pipeline, [&](const DatasetNode& node) {
    if (std::atomic<std::uint64_t>* c = node.iteration_counter()) counters.push_back(c);
  });
  return counters;
}

}  // namespace

std::vector<std::uint64_t> IteratorAccess::shuffle_iterations(const Dataset& pipeline) {
  std::vector<std::uint64_t> values;
  for (std::atomic<std::uint64_t>* c : counters_of(pipeline)) values.push_back(c->load());
  return values;
}

const Dataset& IteratorAccess::definition(const DistributedDataset& dataset) {
  return dataset.source_ ? *dataset.source_ : dataset.per_replica_;
}

const DistributedIterator::Impl& IteratorAccess::state(const DistributedIterator& iterator) {
  if (!iterator.impl_) throw FailedPreconditionError("Checkpoint: the tracked DistributedIterator was moved from");
  return *iterator.impl_;
}

std::uint64_t IteratorAccess::origin(const DistributedIterator& iterator) {
  return state(iterator).dataset->origin_;
}
bool IteratorAccess::across_workers(const DistributedIterator& iterator) {
  return state(iterator).agreement != nullptr;
}
int IteratorAccess::num_replicas(const DistributedIterator& iterator) {
  return state(iterator).dataset->num_replicas_;
}

IteratorPosition IteratorAccess::position(const DistributedIterator& iterator) {
  const auto& impl = state(iterator);
  return IteratorPosition{impl.steps, impl.rows, fnv1a(definition(*impl.dataset).describe()), impl.shuffle_iterations};
}

void IteratorAccess::check_replayable(const DistributedIterator& iterator, const std::string& what) {
  const DistributedDataset& dataset = *state(iterator).dataset;
  for_each_node(dataset.per_replica_, [&](const DatasetNode& node) {
    if (const char* reason = node.unreplayable()) {
      throw UnimplementedError(what + ": the iterator's position cannot be saved: its input pipeline has " + reason +
                               "; give the shuffle a seed, or build the input from a source the pipeline reads (" +
                               definition(dataset).describe() + ")");
    }
  });
}

std::uint64_t IteratorAccess::fingerprint(const DistributedIterator& iterator) {
  return fnv1a(describe(iterator));
}

std::string IteratorAccess::describe(const DistributedIterator& iterator) {
  return definition(*state(iterator).dataset).describe();
}

DistributedIterator IteratorAccess::at(const DistributedIterator& like, const IteratorPosition& position,
                                       const std::string& what) {
  // A private copy of the pipeline, its shuffles set to the iterations they
  // were at when the saved iterator was made: nothing shared changes, so a
  // failed restore leaves every dataset as it was.
  DistributedDataset dataset = *state(like).dataset;
  dataset.per_replica_ = private_copy(dataset.per_replica_);
  const std::vector<std::atomic<std::uint64_t>*> counters = counters_of(dataset.per_replica_);
  if (counters.size() != position.shuffle_iterations.size()) {
    throw InvalidArgumentError(what + " holds " + std::to_string(position.shuffle_iterations.size()) +
                               " shuffle state(s), the tracked iterator's pipeline has " +
                               std::to_string(counters.size()));
  }
  for (std::size_t k = 0; k < counters.size(); ++k) counters[k]->store(position.shuffle_iterations[k]);
  DistributedIterator out = dataset.make_iterator();
  // The steps are replayed from this worker's own stream, without the
  // workers' agreement (a replay error stays on its worker; the checkpoint
  // agrees on the outcome afterwards). A worker whose data ended earlier
  // had empty steps from then on.
  DistributedIterator::Impl& impl = *out.impl_;
  for (std::int64_t step = 0; step < position.steps; ++step) {
    std::optional<SourceStep> s = impl.prefetcher ? impl.prefetcher->next() : impl.source->next();
    if (!s.has_value()) {
      if (impl.agreement) break;
      throw InvalidArgumentError(what + " was saved after " + std::to_string(position.steps) +
                                 " steps, but the tracked iterator's pipeline ends after " + std::to_string(step));
    }
    impl.rows += rows_of(s->step);
  }
  impl.steps = position.steps;
  return out;
}

}  // namespace distribute::internal
