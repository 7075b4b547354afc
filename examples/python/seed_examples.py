"""The five examples of the specification (TF's DistributedValues docstring),
written as a TF program would write them, with distribute.compat.tf in
place of tensorflow and CPU devices in place of GPUs.

  PYTHONPATH=build/release/python /usr/bin/python3 examples/python/seed_examples.py
"""
from distribute.compat import tf

# 1. Created from a distributed dataset.
strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
dataset = tf.data.Dataset.from_tensor_slices([5., 6., 7., 8.]).batch(2)
dataset_iterator = iter(strategy.experimental_distribute_dataset(dataset))
distributed_values = next(dataset_iterator)
print(repr(distributed_values))


# 2. Returned by run.
@tf.function
def run():
  ctx = tf.distribute.get_replica_context()
  return ctx.replica_id_in_sync_group


print(repr(strategy.run(run)))


# 3. As input into run.
@tf.function
def plus_one(input):
  return input + 1.0


print(repr(strategy.run(plus_one, args=(distributed_values,))))

# 4. As input into reduce.
print(repr(strategy.reduce(tf.distribute.ReduceOp.SUM, distributed_values, axis=0)))

# 5. Inspecting the per-replica values locally.
print(repr(strategy.experimental_local_results(distributed_values)))
