// A multi-worker training stand-in under PreemptionCheckpointHandler, for
// run_preemption.sh: MultiWorkerMirroredStrategy (one replica per worker),
// the natural input loop (from_tensor_slices(...).shuffle(n, seed).batch(b)
// .repeat()), a mirrored variable and a running hash of every step's global
// sum, all in one checkpoint in `dir`. The handler restores the latest
// checkpoint there; SIGTERM to any worker makes every worker save at the
// same step and exit with status 42 (the handler's default exit). After
// construction each worker writes its pid to <pid_dir>/worker<W> (the
// script signals only then), and prints "resumed at step S". After `steps`
// steps worker 0 prints "hash H W" (H the running hash, W the variable's
// bits).
// Usage: mpirun -np 2 checkpoint_preemption <dir> <steps> <pid_dir>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "distribute/distribute.h"

namespace dist = distribute;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: checkpoint_preemption <dir> <steps> <pid_dir>\n";
    return 2;
  }
  const std::string dir = argv[1], pid_dir = argv[3];
  const std::int64_t steps = std::atoll(argv[2]);
  dist::MultiWorkerMirroredStrategy strategy;
  dist::StrategyScope scope = strategy.scope();
  std::vector<std::int64_t> rows(1000);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<std::int64_t>(i);
  dist::Dataset pipeline = dist::Dataset::from_tensor_slices(dist::Tensor(rows, dist::Shape{1000}))
                               .shuffle(200, /*seed=*/11)
                               .batch(48)
                               .repeat();
  dist::DistributedIterator it = strategy.experimental_distribute_dataset(pipeline).make_iterator();
  dist::Variable w(dist::Tensor(0.f));
  std::uint64_t hash = 1469598103934665603ull;
  dist::Checkpoint ckpt({.max_to_keep = 2});
  ckpt.track("iterator", it);
  ckpt.track("w", w);
  ckpt.track("hash", &hash);
  dist::PreemptionCheckpointHandler handler(ckpt, dir);
  const int worker = strategy.worker_index();
  std::ofstream(pid_dir + "/worker" + std::to_string(worker)) << ::getpid() << "\n";
  std::cout << "worker " << worker << " resumed at step " << handler.total_run_calls() << std::endl;
  for (std::int64_t step = handler.total_run_calls(); step < steps; ++step) {
    handler.run([&] {
      const dist::PerReplica<dist::Element> batch = it.get_next();
      dist::PerReplica<dist::Tensor> sums = strategy.run([](const dist::Element& e) {
        std::int64_t s = 0;
        for (std::int64_t v : e[0].data<std::int64_t>()) s = s * 3 + v;
        return dist::Tensor(s);
      }, batch);
      const std::int64_t total = strategy.reduce(dist::ReduceOp::SUM, sums).data<std::int64_t>()[0];
      hash = (hash ^ static_cast<std::uint64_t>(total)) * 1099511628211ull;
      w.assign(dist::Tensor(w.value().data<float>()[0] * 0.5f + static_cast<float>(total % 97)));
      // A step of about a millisecond, so that the signal lands mid-run.
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    });
  }
  if (worker == 0) {
    std::cout << "hash " << hash << " " << std::bit_cast<std::uint32_t>(w.value().data<float>()[0]) << std::endl;
  }
  return 0;
}
