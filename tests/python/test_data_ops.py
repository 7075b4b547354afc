"""tf.data pieces for real pipelines (issue 16, item 5): zip, enumerate, padded_batch,
flat_map, interleave, cache, element_spec and with_options, with the expected values
of TF's docstrings (tensorflow/python/data/ops/dataset_ops.py)."""
import numpy as np
import pytest

import distribute as dist
from distribute.compat import tf

Dataset = tf.data.Dataset


def ints(dataset):
  return [int(np.asarray(x)) for x in dataset]


def nested_ints(dataset):
  def convert(x):
    if isinstance(x, tuple):
      return tuple(convert(v) for v in x)
    if isinstance(x, dict):
      return {k: convert(v) for k, v in x.items()}
    return np.asarray(x).tolist()
  return [convert(e) for e in dataset]


def test_zip_as_tf_documents():
  a, b = Dataset.range(1, 4), Dataset.range(4, 7)
  assert nested_ints(Dataset.zip((a, b))) == [(1, 4), (2, 5), (3, 6)]
  assert nested_ints(Dataset.zip(a, b)) == [(1, 4), (2, 5), (3, 6)]
  c = Dataset.range(7, 13).batch(2)
  assert nested_ints(Dataset.zip((a, b, c))) == [(1, 4, [7, 8]), (2, 5, [9, 10]), (3, 6, [11, 12])]
  d = Dataset.range(13, 15)
  assert nested_ints(Dataset.zip((a, d))) == [(1, 13), (2, 14)]
  assert Dataset.zip((a, d)).cardinality() == 2


def test_zip_keeps_nested_structures_and_dicts():
  pairs = Dataset.from_tensor_slices(([1, 2], [10., 20.]))
  mapped = Dataset.range(2).map(lambda x: {"double": x * 2})
  got = nested_ints(Dataset.zip({"pair": pairs, "n": mapped}))
  assert got == [{"pair": (1, 10.0), "n": {"double": 0}}, {"pair": (2, 20.0), "n": {"double": 2}}]
  with pytest.raises(dist.InvalidArgumentError, match="structure of distribute.data.Datasets"):
    Dataset.zip((a for a in []))
  with pytest.raises(dist.InvalidArgumentError, match="expected datasets"):
    Dataset.zip()


def test_enumerate_as_tf_documents():
  assert nested_ints(Dataset.from_tensor_slices([1, 2, 3]).enumerate(start=5)) == [(5, 1), (6, 2), (7, 3)]
  assert nested_ints(Dataset.from_tensor_slices([(7, 8), (9, 10)]).enumerate()) == [(0, [7, 8]), (1, [9, 10])]
  pairs = Dataset.from_tensor_slices(([1, 2], [3, 4])).enumerate()
  assert nested_ints(pairs) == [(0, (1, 3)), (1, (2, 4))]


def fills():
  return Dataset.range(1, 5).map(lambda x: np.full([int(x)], int(x), dtype=np.int32))


def test_padded_batch_as_tf_documents():
  assert nested_ints(fills().padded_batch(2)) == [[[1, 0], [2, 2]], [[3, 3, 3, 0], [4, 4, 4, 4]]]
  assert nested_ints(fills().padded_batch(2, padded_shapes=5)) == [[[1, 0, 0, 0, 0], [2, 2, 0, 0, 0]],
                                                                  [[3, 3, 3, 0, 0], [4, 4, 4, 4, 0]]]
  assert nested_ints(fills().padded_batch(2, padded_shapes=5, padding_values=-1)) == [
      [[1, -1, -1, -1, -1], [2, 2, -1, -1, -1]], [[3, 3, 3, -1, -1], [4, 4, 4, 4, -1]]]
  elements = Dataset.range(2).map(lambda i: (np.array([1, 2, 3], np.int32), np.array([10], np.int32)) if int(i) == 0
                                  else (np.array([4, 5], np.int32), np.array([11, 12], np.int32)))
  got = nested_ints(elements.padded_batch(2, padded_shapes=([4], [None]), padding_values=(-1, 100)))
  assert got == [([[1, 2, 3, -1], [4, 5, -1, -1]], [[10, 100], [11, 12]])]
  with pytest.raises(dist.InvalidArgumentError, match="more than the padded shape"):
    list(fills().padded_batch(2, padded_shapes=3))
  with pytest.raises(dist.InvalidArgumentError, match="padded shape as an int or a list"):
    fills().padded_batch(2, padded_shapes="5")
  # A padding value that is not a number (nor a string component's empty
  # string) is named, as an InvalidArgumentError (it was float()'s ValueError).
  with pytest.raises(dist.InvalidArgumentError, match="expected a number for each padding value.*got 'x'"):
    fills().padded_batch(2, padding_values="x")


def test_flat_map_and_interleave_as_tf_documents():
  assert ints(Dataset.from_tensor_slices([[1, 2, 3], [4, 5, 6], [7, 8, 9]]).flat_map(Dataset.from_tensor_slices)) \
      == [1, 2, 3, 4, 5, 6, 7, 8, 9]
  six = Dataset.range(1, 6).interleave(lambda x: Dataset.from_tensors(x).repeat(6), cycle_length=2, block_length=4)
  assert ints(six) == [1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5]
  parallel = Dataset.range(1, 6).interleave(lambda x: Dataset.from_tensors(x).repeat(6), cycle_length=2,
                                            block_length=4, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
  assert ints(parallel) == ints(six)
  # The returned datasets' structure is the elements' structure.
  pairs = Dataset.range(2).flat_map(lambda x: Dataset.zip((Dataset.from_tensors(x), Dataset.from_tensors(x + 10))))
  assert nested_ints(pairs) == [(0, 10), (1, 11)]
  with pytest.raises(dist.InvalidArgumentError, match="to return a distribute.data.Dataset"):
    list(Dataset.range(2).flat_map(lambda x: x))


def test_cache_reads_the_first_iteration_afterwards():
  calls = []

  def square(x):
    calls.append(int(x))
    return x * x

  cached = Dataset.range(5).map(square).cache()
  assert ints(cached) == [0, 1, 4, 9, 16]
  assert ints(cached) == [0, 1, 4, 9, 16]
  assert len(calls) == 5
  with pytest.raises(dist.UnimplementedError, match="to a file"):
    Dataset.range(3).cache("/tmp/cache")


def test_element_spec_as_tf_prints_it():
  assert repr(Dataset.from_tensor_slices([1, 2, 3]).element_spec) == "TensorSpec(shape=(), dtype=tf.int32, name=None)"
  assert Dataset.range(10).batch(3).element_spec == tf.TensorSpec(shape=(None,), dtype="int64")
  assert Dataset.range(10).batch(3, drop_remainder=True).element_spec == tf.TensorSpec(shape=(3,), dtype="int64")
  spec = Dataset.from_tensor_slices({"image": np.zeros((4, 8, 8), np.float32), "label": np.arange(4)}).element_spec
  assert spec == {"image": tf.TensorSpec((8, 8), "float32"), "label": tf.TensorSpec((), "int64")}
  assert fills().element_spec == tf.TensorSpec((None,), "int32")
  assert Dataset.range(3).enumerate().element_spec == (tf.TensorSpec((), "int64"), tf.TensorSpec((), "int64"))


def test_distributed_element_spec_is_per_replica():
  s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
  data = Dataset.from_tensor_slices((np.zeros((8, 3), np.float32), np.arange(8))).batch(4, drop_remainder=True)
  spec = s.experimental_distribute_dataset(data).element_spec
  assert repr(spec[0]) == ("PerReplicaSpec(TensorSpec(shape=(2, 3), dtype=tf.float32, name=None), "
                           "TensorSpec(shape=(2, 3), dtype=tf.float32, name=None))")
  one = dist.MirroredStrategy(["CPU:0"])
  assert one.experimental_distribute_dataset(data).element_spec == (tf.TensorSpec((4, 3), "float32"),
                                                                    tf.TensorSpec((4,), "int64"))


def test_with_options_round_trips_the_auto_shard_policy():
  options = tf.data.Options()
  assert options.experimental_distribute.auto_shard_policy == tf.data.experimental.AutoShardPolicy.AUTO
  options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
  d = Dataset.range(4).with_options(options).batch(2)
  assert d.options().experimental_distribute.auto_shard_policy == tf.data.experimental.AutoShardPolicy.DATA
  assert ints(d.unbatch()) == [0, 1, 2, 3]
  off = tf.data.Options()
  off.experimental_distribute.auto_shard_policy = "OFF"
  assert d.with_options(off).options().experimental_distribute.auto_shard_policy.name == "OFF"
  assert d.with_options(tf.data.Options()).options().experimental_distribute.auto_shard_policy.name == "DATA"
  with pytest.raises(dist.UnimplementedError, match="HINT"):
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.HINT
  with pytest.raises(dist.InvalidArgumentError, match="AutoShardPolicy"):
    options.experimental_distribute.auto_shard_policy = "SOMETIMES"
  with pytest.raises(dist.InvalidArgumentError, match="distribute.data.Options"):
    Dataset.range(2).with_options({"auto_shard_policy": "OFF"})


def test_element_spec_of_a_parallel_python_map_does_not_hold_the_gil():
  # The first element is computed on pipeline threads that call Python.
  slow = Dataset.range(8).map(lambda x: x * 2, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2).batch(4)
  assert slow.element_spec == tf.TensorSpec((None,), "int64")
  s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
  spec = s.experimental_distribute_dataset(slow).element_spec
  assert spec == dist.data.PerReplicaSpec(tf.TensorSpec((None,), "int64"), tf.TensorSpec((None,), "int64"))
