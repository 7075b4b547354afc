// Uses the installed library: run on two replicas, then reduce.
#include <distribute/distribute.h>

#include <iostream>

int main() {
  distribute::MirroredStrategy strategy({"CPU:0", "CPU:1"});
  auto values = strategy.run([] {
    return distribute::Tensor{static_cast<float>(distribute::get_replica_context()->replica_id_in_sync_group() + 5)};
  });
  const distribute::Tensor sum = strategy.reduce(distribute::ReduceOp::SUM, values, 0);
  std::cout << "consumer: " << sum << "\n";
  return sum == distribute::Tensor(11.f) ? 0 : 1;
}
