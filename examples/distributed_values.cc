// The five examples of TF's tf.distribute.DistributedValues docstring, in
// C++, from a real distributed dataset on two replicas.
#include <iostream>

#include "distribute/distribute.h"

namespace dist = distribute;

namespace {

void print_tuple(const std::vector<dist::Element>& values) {
  std::cout << "(";
  for (std::size_t i = 0; i < values.size(); ++i) std::cout << (i > 0 ? ",\n " : "") << values[i];
  std::cout << ")\n";
}

}  // namespace

int main() {
  try {
    dist::MirroredStrategy strategy({"CPU:0", "CPU:1"});
    const dist::Dataset dataset = dist::Dataset::from_tensor_slices({5.f, 6.f, 7.f, 8.f}).batch(2);

    // 1. Created from a DistributedDataset.
    auto dataset_iterator = strategy.experimental_distribute_dataset(dataset).make_iterator();
    auto distributed_values = dataset_iterator.get_next();
    std::cout << "1. " << distributed_values << "\n";

    // 2. Returned by run.
    auto replica_ids = strategy.run([] { return dist::current_replica_context().replica_id_in_sync_group(); });
    std::cout << "2. " << replica_ids << "\n";

    // 3. As input into run.
    auto updated_value = strategy.run([](const dist::Tensor& input) { return input + 1.f; }, distributed_values);
    std::cout << "3. " << updated_value << "\n";

    // 4. As input into reduce.
    dist::Tensor reduced_value = strategy.reduce(dist::ReduceOp::SUM, distributed_values, /*axis=*/0);
    std::cout << "4. " << reduced_value << "\n";

    // 5. Inspecting per-replica values locally.
    std::cout << "5. ";
    print_tuple(strategy.experimental_local_results(distributed_values));
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
