// The workers of a multi-worker strategy agree on every step of a
// distributed dataset (TF's partial-batch handling across workers): a step
// exists while any worker has data; a worker whose data ended gives its
// replicas empty batches shaped like another worker's elements; the end
// comes for every worker at the same step.
#pragma once

#include <memory>
#include <optional>

#include "distribute/distributed_values.h"
#include "distribute/element.h"
#include "transport/cross_worker.h"

namespace distribute::internal {

class WorkerAgreement {
 public:
  // `origin`: the strategy's id, for the steps made here.
  WorkerAgreement(std::shared_ptr<CrossWorker> cross, double timeout_seconds, int num_local_replicas,
                  std::uint64_t origin);

  // This worker's next step (nullopt: its data ended) -> the agreed step.
  // A collective: every worker calls it once per step.
  std::optional<PerReplica<Element>> settle(std::optional<PerReplica<Element>> local);

 private:
  std::shared_ptr<CrossWorker> cross_;
  double timeout_seconds_;
  int num_local_replicas_;
  std::uint64_t origin_;
};

}  // namespace distribute::internal
