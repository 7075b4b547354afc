// An in-process stand-in for the cross-worker transport: threads of one
// process play the workers (as gloo's tests do), so that the multi-worker
// code paths above the transport (worker agreement in distributed input,
// cross-worker collectives, variable creation checks, checkpoint commit)
// run in the ordinary test suite and under ThreadSanitizer, not only under
// mpirun.
//
// make_local_cross_workers(n) returns n channels joined to one hub; give
// channel w to the MultiWorkerMirroredStrategy of the thread playing worker
// w (MultiWorkerMirroredStrategy(options, channel)). Every channel keeps the
// CrossWorker contract (cross_worker.h): calls matched in order by a header
// (what, kind, dtype, size), WorkersMismatchError on every worker when they
// differ, sums in worker order (the same bits on every worker), deadlines
// naming the workers not heard from, cancellation, failure reports and
// departures (UnavailableError naming the peer), a broken channel after any
// of these (FailedPreconditionError). It moves bytes with memcpy under one
// mutex: a test transport, not a fast one.
#pragma once

#include <memory>
#include <vector>

#include "transport/cross_worker.h"

namespace distribute::internal {

std::vector<std::shared_ptr<CrossWorker>> make_local_cross_workers(int num_workers);

}  // namespace distribute::internal
