// Examples 2, 4 and 5 of TF's tf.distribute.DistributedValues docstring, in C++.
//
// Until datasets exist (next milestone), the per-replica batch [5.], [6.] that
// TF gets from a distributed dataset is built directly.
#include <iostream>

#include "distribute/distribute.h"

namespace dist = distribute;

int main() {
  try {
    dist::MirroredStrategy strategy({"CPU:0", "CPU:1"});

    // 2. Returned by run: each replica returns its id.
    auto replica_ids = strategy.run([] { return dist::get_replica_context()->replica_id_in_sync_group(); });
    std::cout << replica_ids << "\n";

    // What TF's experimental_distribute_dataset gives for the first global
    // batch [5., 6.] of from_tensor_slices([5., 6., 7., 8.]).batch(2).
    dist::PerReplica<dist::Tensor> distributed_values({dist::Tensor{5.f}, dist::Tensor{6.f}});

    // 4. As input into reduce.
    dist::Tensor reduced_value = strategy.reduce(dist::ReduceOp::SUM, distributed_values, /*axis=*/0);
    std::cout << reduced_value << "\n";

    // 5. Inspecting per-replica values locally.
    auto per_replica_values = strategy.experimental_local_results(distributed_values);
    std::cout << "(";
    for (std::size_t i = 0; i < per_replica_values.size(); ++i) {
      std::cout << (i > 0 ? ",\n " : "") << per_replica_values[i];
    }
    std::cout << ")\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
