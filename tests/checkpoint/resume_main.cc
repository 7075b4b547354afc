// The natural input loop, resumable: from_tensor_slices(...).shuffle(n,
// seed).batch(b).repeat() on 2 replicas, a checkpoint of the iterator, the
// step and a running hash of every row consumed after every step, resumed
// from the latest checkpoint in `dir` when there is one. Prints
// "resumed at step S" (or "started") and, after `steps` steps, "hash H".
// run_resume.sh kills it with SIGKILL at random moments and checks that the
// resumed runs end with the uninterrupted run's hash.
// Usage: checkpoint_resume <dir> <steps>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "distribute/distribute.h"

namespace dist = distribute;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: checkpoint_resume <dir> <steps>\n";
    return 2;
  }
  const std::string dir = argv[1];
  const std::int64_t steps = std::atoll(argv[2]);
  std::vector<std::int64_t> rows(1000);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<std::int64_t>(i);
  dist::Dataset pipeline = dist::Dataset::from_tensor_slices(dist::Tensor(rows, dist::Shape{1000}))
                               .shuffle(200, /*seed=*/11)
                               .batch(48)  // 20 full batches and one of 40 an epoch
                               .repeat();
  dist::MirroredStrategy strategy({"CPU:0", "CPU:1"});
  dist::DistributedIterator it = strategy.experimental_distribute_dataset(pipeline).make_iterator();
  std::int64_t step = 0;
  std::uint64_t hash = 1469598103934665603ull;
  dist::Checkpoint ckpt({.max_to_keep = 2});
  ckpt.track("iterator", it);
  ckpt.track("step", &step);
  ckpt.track("hash", &hash);
  if (std::optional<std::string> latest = dist::latest_checkpoint(dir)) {
    ckpt.restore(*latest);
    std::cout << "resumed at step " << step << std::endl;
  } else {
    std::cout << "started" << std::endl;
  }
  while (step < steps) {
    const dist::PerReplica<dist::Element> batch = it.get_next();
    for (const dist::Element& e : batch) {
      for (std::int64_t v : e[0].data<std::int64_t>()) hash = (hash ^ static_cast<std::uint64_t>(v)) * 1099511628211ull;
    }
    ++step;
    ckpt.save(dir);
  }
  std::cout << "hash " << hash << std::endl;
  return 0;
}
