"""The Python package over the C++ core: values without copies, run, reduce,
collectives, datasets, errors and the bad inputs users make."""

import threading
import time
import traceback
import weakref

import numpy as np
import pytest

import _deps

import distribute as dist
from distribute import errors


@pytest.fixture(scope="module")
def two():
  return dist.MirroredStrategy(["CPU:0", "CPU:1"])


# --- Tensors and numpy ------------------------------------------------------


def test_a_numpy_array_is_wrapped_without_a_copy():
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  t = dist.convert_to_tensor(a)
  assert t._data_address() == a.ctypes.data
  assert t.shape == (3, 4) and t.dtype == "float32"
  view = np.asarray(t)
  assert view.ctypes.data == a.ctypes.data  # and back, still no copy
  assert not view.flags.writeable  # tensors are immutable
  np.testing.assert_array_equal(view, a)


def test_a_large_array_is_wrapped_not_copied():
  big = np.zeros(16 << 20, dtype=np.float32)  # 64 MiB; the time it takes is in BENCHMARKS.md
  assert dist.convert_to_tensor(big)._data_address() == big.ctypes.data


def test_a_tensor_keeps_its_array_alive():
  t = dist.convert_to_tensor(np.full(5, 7, dtype=np.int64))
  import gc
  gc.collect()
  np.testing.assert_array_equal(np.asarray(t), [7] * 5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_dlpack_export_shares_the_buffer_with_numpy(dtype):
  a = np.arange(6, dtype=dtype).reshape(2, 3)
  t = dist.convert_to_tensor(a)
  assert t.__dlpack_device__() == (1, 0)  # kDLCPU, device 0
  view = np.from_dlpack(t)
  assert view.ctypes.data == a.ctypes.data and view.dtype == dtype and view.shape == (2, 3)
  assert not view.flags.writeable
  np.testing.assert_array_equal(view, a)


def test_dlpack_export_to_torch_outlives_the_tensor_and_its_array():
  torch = _deps.torch()
  import gc
  t = dist.convert_to_tensor(np.arange(4, dtype=np.float32) * 2)
  address = t._data_address()
  x = torch.from_dlpack(t)
  assert x.data_ptr() == address
  del t
  gc.collect()
  assert x.tolist() == [0.0, 2.0, 4.0, 6.0]  # the consumer keeps the buffer
  scalar = torch.from_dlpack(dist.convert_to_tensor(np.float64(3.5)))
  assert scalar.shape == () and scalar.item() == 3.5


def test_an_unconsumed_dlpack_capsule_frees_its_tensor():
  import gc
  import weakref

  class Owner(np.ndarray):
    pass

  a = np.ones(8, np.float32).view(Owner)
  alive = weakref.ref(a)
  t = dist.convert_to_tensor(a)
  capsule = t.__dlpack__()
  del a, t
  gc.collect()
  assert alive() is not None  # the capsule holds the tensor, the tensor the array
  del capsule
  gc.collect()
  assert alive() is None


def test_non_contiguous_input_is_copied_once(monkeypatch):
  from distribute import _tensor
  copies = []
  contiguous = np.ascontiguousarray

  def counting(a, *args, **kwargs):
    copies.append(contiguous(a, *args, **kwargs))
    return copies[-1]

  monkeypatch.setattr(_tensor.np, "ascontiguousarray", counting)
  a = np.arange(20, dtype=np.float64).reshape(4, 5)[:, 1]
  t = dist.convert_to_tensor(a)
  np.testing.assert_array_equal(np.asarray(t), [1, 6, 11, 16])
  # One copy, and the tensor wraps that copy itself (no second one).
  assert len(copies) == 1
  assert np.shares_memory(np.asarray(t), copies[0]) and not np.shares_memory(np.asarray(t), a)


def test_python_numbers_and_lists_convert_as_tf_does():
  assert dist.convert_to_tensor(1.5).dtype == "float32"
  assert dist.convert_to_tensor(3).dtype == "int32"
  assert dist.convert_to_tensor([[1., 2.], [3., 4.]]).shape == (2, 2)


SUPPORTED = r"float32, float64, int32, int64"


@pytest.mark.parametrize("bad, message", [
    (np.zeros(3, dtype=np.float16), SUPPORTED + r".*got dtype float16"),
    (np.zeros(3, dtype=bool), SUPPORTED + r".*got dtype bool"),
    (np.zeros(3, dtype=np.uint8), SUPPORTED + r".*got dtype uint8"),
    ([b"text", 1], r"expected a rectangular \(non-ragged\) list of strings, got \[b'text', 1\]"),
    (object(), r"expected a tensor, a numpy array, .* or a number, got object"),
    ({1, 2}, r"expected a tensor, a numpy array, .* or a number, got set"),
])
def test_unsupported_values_raise_naming_the_supported_dtypes(bad, message):
  with pytest.raises(errors.InvalidArgumentError, match=message):
    dist.convert_to_tensor(bad)


def test_torch_tensors_of_other_dtypes_raise_naming_the_supported_ones():
  torch = _deps.torch()
  with pytest.raises(errors.InvalidArgumentError, match=SUPPORTED + r"\), got torch.bfloat16"):
    dist.convert_to_tensor(torch.zeros(3, dtype=torch.bfloat16))
  with pytest.raises(errors.InvalidArgumentError, match=SUPPORTED + r".*got dtype float16"):
    dist.convert_to_tensor(torch.zeros(3, dtype=torch.float16))


def test_errors_have_tfs_base_name():
  assert errors.OpError is errors.Error
  with pytest.raises(errors.OpError):
    dist.convert_to_tensor(object())


def test_ragged_lists_raise():
  with pytest.raises(errors.InvalidArgumentError, match="ragged"):
    dist.convert_to_tensor([[1., 2.], [3.]])


def test_tensor_arithmetic_keeps_the_dtype():
  t = dist.convert_to_tensor(np.array([1., 2.], dtype=np.float32))
  u = t + 1.0
  assert isinstance(u, dist.Tensor) and u.dtype == "float32"
  np.testing.assert_array_equal(np.asarray(2 * u - t), [3., 4.])


def test_python_numbers_take_the_tensors_dtype_in_arithmetic():
  # As TF converts a Python number to the tensor's dtype: a float32 scalar
  # loss times 0.5 stays float32 (numpy alone would widen a 0-d array).
  loss = dist.convert_to_tensor(np.float32(2))
  assert (loss * 0.5).dtype == "float32" and (0.5 * loss).dtype == "float32"
  assert (dist.convert_to_tensor(np.int32(2)) + 1).dtype == "int32"
  assert (dist.convert_to_tensor(np.int64(2)) - 3).dtype == "int64"
  with pytest.raises(errors.InvalidArgumentError, match="representable as int32, got 1.5"):
    dist.convert_to_tensor(np.int32(2)) * 1.5
  v = dist.Variable(np.float32(1))
  v.assign_sub(loss * 0.25)
  assert float(v.numpy()) == 0.5


def test_tensors_compare_and_test_true_as_tfs_eager_tensors():
  three = dist.convert_to_tensor(np.float32(3))
  assert three == 3.0 and three != 2 and not (three == 2.0)
  assert three > 2 and three >= 3 and three < 4 and three <= 3 and not three < 3
  vector = dist.convert_to_tensor(np.array([0., 2.], np.float32))
  np.testing.assert_array_equal(vector > 1, [False, True])
  np.testing.assert_array_equal(vector == 2.0, [False, True])
  # Two tensors compare elementwise too (TF's ==).
  np.testing.assert_array_equal(vector == dist.convert_to_tensor(np.array([0., 3.], np.float32)), [True, False])
  pred, labels = dist.convert_to_tensor(np.array([1, 2, 3, 4])), dist.convert_to_tensor(np.array([1, 0, 3, 0]))
  assert np.mean(np.asarray(pred == labels)) == 0.5
  assert not bool(dist.convert_to_tensor(np.array([0.], np.float32)))
  assert bool(dist.convert_to_tensor(np.array([2.], np.float32)))
  with pytest.raises(ValueError, match="ambiguous"):
    bool(vector)
  # An index must be an integer scalar; a scalar has no length and no items.
  assert [10, 11, 12][dist.convert_to_tensor(np.int32(1))] == 11
  with pytest.raises(TypeError, match="integer scalar"):
    [10, 11, 12][dist.convert_to_tensor(np.float32(1.9))]
  with pytest.raises(TypeError):
    list(three)
  assert [float(x) for x in vector] == [0.0, 2.0]


def test_tfs_replica_id_compares_with_an_int(two):
  from distribute.compat import tf
  first = two.run(lambda: 1.0 if tf.distribute.get_replica_context().replica_id_in_sync_group == 0 else 0.0)
  assert [float(np.asarray(x)) for x in two.experimental_local_results(first)] == [1.0, 0.0]


def test_misaligned_arrays_are_copied_once():
  raw = np.frombuffer(bytes(17), dtype=np.uint8)
  misaligned = raw[1:].view(np.float64)  # contiguous, 1 byte past an 8-byte boundary
  assert misaligned.flags.c_contiguous and not misaligned.flags.aligned
  t = dist.convert_to_tensor(misaligned)
  assert t.shape == (2,) and t._data_address() != misaligned.ctypes.data
  np.testing.assert_array_equal(np.asarray(t), [0., 0.])


def test_out_of_range_values_and_unknown_dtypes_raise_the_librarys_error():
  with pytest.raises(errors.InvalidArgumentError, match="within int64's range, got 18446744073709551616"):
    dist.convert_to_tensor(2**64)
  with pytest.raises(errors.InvalidArgumentError, match="expected a dtype of the supported ones"):
    dist.convert_to_tensor(1.0, "bfloat16")
  # Negative seeds are TF's int64 seeds; beyond 64 bits they are refused.
  rows = lambda seed: [int(x) for x in dist.data.Dataset.range(8).shuffle(8, seed=seed)]
  assert rows(-1) == rows(-1) and sorted(rows(-1)) == list(range(8))
  with pytest.raises(errors.InvalidArgumentError, match="seed"):
    dist.data.Dataset.range(8).shuffle(8, seed=2**64)


# --- run, reduce, local results -----------------------------------------------


def test_run_returns_per_replica_and_nested_structures(two):
  def step():
    ctx = dist.get_replica_context()
    r = ctx.replica_id_in_sync_group
    return {"loss": np.float32(r + 1.0), "pair": (np.array([r], dtype=np.int32), r * 10)}

  out = two.run(step)
  assert isinstance(out["loss"], dist.PerReplica)
  assert isinstance(out["pair"][0], dist.PerReplica) and isinstance(out["pair"][1], dist.PerReplica)
  assert two.experimental_local_results(out["pair"][1]) == (0, 10)
  total = two.reduce("sum", out["loss"])
  assert float(total) == 3.0
  mean = two.reduce(dist.ReduceOp.MEAN, out, axis=None)
  assert float(mean["loss"]) == 1.5


def test_dict_subclasses_keep_their_type_through_run_and_all_reduce(two):
  import collections
  import types

  def step():
    ctx = dist.get_replica_context()
    sums = collections.defaultdict(float)
    sums["loss"] = np.float32(ctx.replica_id_in_sync_group + 1)
    counts = collections.Counter(b=np.int32(2), a=np.int32(1))
    frozen = types.MappingProxyType({"y": np.float32(4)})
    return ctx.all_reduce("sum", (sums, counts, frozen))

  sums, counts, frozen = two.run(step)
  assert type(sums) is collections.defaultdict and sums.default_factory is float
  assert type(counts) is collections.Counter and list(counts) == ["b", "a"]  # the instance's own order
  assert type(frozen) is types.MappingProxyType
  assert [float(np.asarray(x)) for x in two.experimental_local_results(sums["loss"])] == [3.0, 3.0]
  assert [int(np.asarray(x)) for x in two.experimental_local_results(counts["a"])] == [2, 2]
  assert [float(np.asarray(x)) for x in two.experimental_local_results(frozen["y"])] == [8.0, 8.0]


def test_run_passes_each_replica_its_value_and_kwargs(two):
  pr = dist.PerReplica([np.array([1.], np.float32), np.array([2.], np.float32)])
  out = two.run(lambda x, scale: x * scale, args=(pr,), kwargs={"scale": 10.0})
  assert [float(v[0]) for v in out.values] == [10., 20.]


def test_reduce_of_a_mirrored_value_as_tf(two):
  m = dist.values.Mirrored([np.array([1.0, 2.0], np.float32)] * 2)
  np.testing.assert_array_equal(np.asarray(two.reduce("mean", m, axis=None)), [1.0, 2.0])  # the value itself
  np.testing.assert_array_equal(np.asarray(two.reduce("sum", m, axis=None)), [2.0, 4.0])  # its copies summed
  assert float(np.asarray(two.reduce("sum", m, axis=0))) == 6.0


def test_input_options_reach_the_core(two):
  threads = set()

  def record(x):
    threads.add(threading.get_ident())
    return x

  ds = dist.data.Dataset.range(8).map(record).batch(4)
  for buffer_size in (0, 3):
    threads.clear()
    options = dist.InputOptions(experimental_per_replica_buffer_size=buffer_size, auto_shard_policy="OFF")
    steps = [two.experimental_local_results(s) for s in two.experimental_distribute_dataset(ds, options)]
    assert [[np.asarray(v).tolist() for v in s] for s in steps] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    # No buffer: the steps are made inside get_next, on this thread.
    assert (threads == {threading.get_ident()}) == (buffer_size == 0)
    fn = two.distribute_datasets_from_function(lambda ctx: dist.data.Dataset.range(4).batch(1), options)
    assert len(list(fn)) == 2
  with pytest.raises(errors.InvalidArgumentError, match="experimental_per_replica_buffer_size"):
    dist.InputOptions(experimental_per_replica_buffer_size=-1)
  with pytest.raises(errors.InvalidArgumentError, match="auto_shard_policy"):
    dist.InputOptions(auto_shard_policy="HOSTS")
  with pytest.raises(errors.InvalidArgumentError, match="expected options to be a distribute.InputOptions"):
    two.experimental_distribute_dataset(dist.data.Dataset.range(8).batch(4), {"experimental_per_replica_buffer_size": 2})
  # TF's replication modes: PER_REPLICA is not supported (no longer ignored),
  # and placing the dataset on the device needs it.
  ds = dist.data.Dataset.range(8).batch(4)
  with pytest.raises(errors.UnimplementedError, match="PER_REPLICA is not supported"):
    two.experimental_distribute_dataset(ds, dist.InputOptions(experimental_replication_mode="PER_REPLICA"))
  with pytest.raises(errors.UnimplementedError, match="PER_REPLICA is not supported"):
    two.distribute_datasets_from_function(lambda ctx: ds, dist.InputOptions(experimental_replication_mode="PER_REPLICA"))
  with pytest.raises(errors.InvalidArgumentError, match="needs replication mode PER_REPLICA, got PER_WORKER"):
    two.experimental_distribute_dataset(ds, dist.InputOptions(experimental_place_dataset_on_device=True))
  assert len(list(two.experimental_distribute_dataset(
      ds, dist.InputOptions(experimental_replication_mode="PER_WORKER", experimental_fetch_to_device=True)))) == 2


def test_reduce_with_axis_divides_by_the_total_count(two):
  pr = dist.PerReplica([np.array([5., 6.], np.float32), np.array([7.], np.float32)])
  assert float(two.reduce("mean", pr, axis=0)) == 6.0
  with pytest.raises(errors.InvalidArgumentError, match="ReduceOp"):
    two.reduce("max", pr)


def test_replica_functions_run_concurrently_on_the_replica_threads(two):
  seen = set()
  meet = threading.Barrier(2, timeout=10)  # broken (an error) unless both run at once

  def step():
    seen.add(threading.get_ident())
    meet.wait()

  two.run(step)
  assert len(seen) == 2


def test_a_replica_exception_keeps_its_type_and_traceback_and_releases_the_others(two):
  class Boom(Exception):
    pass

  def step():
    ctx = dist.get_replica_context()
    if ctx.replica_id_in_sync_group == 1:
      raise Boom("replica one failed")
    ctx.all_reduce("sum", np.ones(3, np.float32))  # waits for replica 1: released at once

  start = time.perf_counter()
  with pytest.raises(Boom, match="replica one failed") as e:
    two.run(step)
  assert time.perf_counter() - start < 10  # released at once, not at the 60 s deadline
  frames = [f.name for f in traceback.extract_tb(e.value.__traceback__)]
  assert "step" in frames
  # The strategy stays usable.
  out = two.run(lambda: dist.get_replica_context().all_reduce("sum", np.ones(2, np.float32)))
  np.testing.assert_array_equal(np.asarray(out.values[0]), [2., 2.])


def test_run_inside_run_raises(two):
  with pytest.raises(errors.FailedPreconditionError,
                     match=r"Strategy.run: expected a call in cross-replica context, got one from the replica "
                           r"function of replica [01] of .*merge_call"):
    two.run(lambda: two.run(lambda: 1))
  # The strategy stays usable.
  assert two.experimental_local_results(two.run(lambda: np.int64(7))) == (7, 7)
  # (The same object from every replica, as the cached int 7, is returned
  # as it is: TF's regroup.)
  assert two.run(lambda: 7) == 7


def test_different_structures_on_replicas_raise(two):
  def step():
    r = dist.get_replica_context().replica_id_in_sync_group
    return (1, 2) if r == 0 else (1, 2, 3)

  with pytest.raises(ValueError, match="replica 1"):
    two.run(step)


@pytest.mark.parametrize("first, second", [(np.float32(1), {"a": 1}), ({"a": 1}, np.float32(1)),
                                           ([1], (1,)), ({"a": 1}, {"b": 1})])
def test_a_leaf_against_a_structure_on_replicas_raises(two, first, second):
  def step():
    return first if dist.get_replica_context().replica_id_in_sync_group == 0 else second

  with pytest.raises(ValueError, match="expected the same nested structure in replica 0's and replica 1's value"):
    two.run(step)
  with pytest.raises(ValueError, match="replica 1's"):
    two.experimental_distribute_values_from_function(lambda ctx: first if ctx.replica_id_in_sync_group == 0
                                                     else second)


def test_values_of_another_strategy_are_refused(two):
  other = dist.MirroredStrategy(["CPU:0", "CPU:1"])
  out = other.run(lambda: np.float32(1))
  with pytest.raises(errors.InvalidArgumentError, match="another one"):
    two.run(lambda x: x, args=(out,))
  with pytest.raises(errors.InvalidArgumentError, match="another one"):
    two.reduce("sum", out)
  moved = dist.PerReplica(other.experimental_local_results(out))
  assert float(two.reduce("sum", moved)) == 2.0


def test_wrong_replica_count_raises(two):
  with pytest.raises(errors.InvalidArgumentError, match="expected 2 values"):
    two.run(lambda x: x, args=(dist.PerReplica([1, 2, 3]),))


# --- collectives ------------------------------------------------------------------


def test_all_reduce_all_gather_merge_call(two):
  def step():
    ctx = dist.get_replica_context()
    r = ctx.replica_id_in_sync_group
    summed = ctx.all_reduce("sum", {"a": np.array([r + 1.], np.float32), "b": (np.array([2 * r], np.int64),)})
    gathered = ctx.all_gather(np.array([r, r], np.int32), axis=0)
    merged = ctx.merge_call(lambda strategy, x: strategy.reduce("sum", x), args=(np.float32(r + 1),))
    return summed["a"], summed["b"][0], gathered, merged

  a, b, g, m = two.run(step)
  for r in range(2):
    np.testing.assert_array_equal(np.asarray(a.values[r]), [3.])
    np.testing.assert_array_equal(np.asarray(b.values[r]), [2])
    np.testing.assert_array_equal(np.asarray(g.values[r]), [0, 0, 1, 1])
  # merge_call gave every replica the same tensor, which run returns as it
  # is (TF's regroup of one object).
  assert isinstance(m, dist.Tensor) and float(m) == 3.0


def test_merge_call_and_run_regroup_as_tf(two):
  lr = 0.1
  marker = object()

  def step():
    ctx = dist.get_replica_context()
    r = ctx.replica_id_in_sync_group
    # The same object from every replica reaches merge_fn as it is; a
    # PerReplica or Mirrored result comes back as this replica's value.
    scaled = ctx.merge_call(lambda strategy, g, rate: strategy.reduce("sum", g) * rate,
                            args=(np.float32(r + 1), lr))
    own = ctx.merge_call(lambda strategy, g: g, args=(np.float32(10 * r),))
    mirrored = ctx.merge_call(lambda strategy: dist.Mirrored([np.float32(5), np.float32(5)]))
    return scaled, own, mirrored, None, marker, r

  scaled, own, mirrored, none, same, r = two.run(step)
  assert float(scaled) == pytest.approx(0.3)
  assert [float(np.asarray(x)) for x in two.experimental_local_results(own)] == [0.0, 10.0]
  assert isinstance(mirrored, dist.PerReplica) and [float(x) for x in mirrored.values] == [5.0, 5.0]
  assert none is None and same is marker  # the same object from every replica: itself
  assert isinstance(r, dist.PerReplica) and r.values == (0, 1)


def test_all_reduce_of_one_array_any_layout_and_its_errors(two):
  # One array takes a shorter path (wrapped in C++); strided and
  # non-native-order arrays, and bad dtypes, still get convert()'s handling.
  def step(layout):
    ctx = dist.get_replica_context()
    r = ctx.replica_id_in_sync_group
    base = np.arange(8, dtype=np.float64).reshape(2, 4) * (r + 1)
    value = {"contiguous": base, "strided": base[:, ::2], "big-endian": base.astype(">f8"),
             "mean": base}[layout]
    return ctx.all_reduce("mean" if layout == "mean" else dist.ReduceOp.SUM, value)

  base = np.arange(8, dtype=np.float64).reshape(2, 4)
  expected = {"contiguous": 3 * base, "strided": 3 * base[:, ::2], "big-endian": 3 * base, "mean": 1.5 * base}
  for layout, want in expected.items():
    out = two.run(step, args=(layout,))
    for r in range(2):
      got = np.asarray(out.values[r])
      assert got.dtype == np.float64
      np.testing.assert_array_equal(got, want)
  with pytest.raises(errors.InvalidArgumentError, match="supported dtypes.*got dtype bool"):
    two.run(lambda: dist.get_replica_context().all_reduce("sum", np.ones(3, np.bool_)))
  with pytest.raises(errors.InvalidArgumentError, match="expected ReduceOp"):
    two.run(lambda: dist.get_replica_context().all_reduce("max", np.ones(3, np.float32)))


def test_the_benchmark_hook_runs_the_cxx_loop_and_checks_its_input(two):
  # bench/python_bench.py's C++ reference (_benchmark_all_reduce): the loop
  # runs on the strategy's replicas and checks its first sum.
  assert two._core._benchmark_all_reduce(256 << 10, 5) > 0
  for bytes_, calls in ((6, 1), (0, 1), (4096, 0)):
    with pytest.raises(errors.InvalidArgumentError, match="positive multiple of 4 bytes"):
      two._core._benchmark_all_reduce(bytes_, calls)


def test_arrays_wrapped_by_all_reduce_are_released(two):
  # The collective keeps its inputs for two calls; the last reference is
  # then dropped on a replica thread inside a wait, and the array released
  # once that thread has the GIL again.
  released = []

  def step():
    ctx = dist.get_replica_context()
    first = np.ones(1 << 16, np.float32)
    weakref.finalize(first, released.append, ctx.replica_id_in_sync_group)
    ctx.all_reduce("sum", first)
    del first
    for _ in range(3):
      ctx.all_reduce("sum", np.ones(4, np.float32))
    return int(ctx.replica_id_in_sync_group in released)

  out = two.run(step)
  # Each replica's own array is gone by its third following call.
  assert sorted(released) == [0, 1]
  assert all(int(v) == 1 for v in two.experimental_local_results(out))


def test_in_place_all_reduce_writes_the_callers_arrays(two):
  arrays = [np.full(1 << 16, r + 1.0, np.float32) for r in range(2)]  # 256 KiB each

  def step():
    r = dist.get_replica_context().replica_id_in_sync_group
    dist.get_replica_context().all_reduce_in_place("sum", [arrays[r]])

  addresses = [a.ctypes.data for a in arrays]
  two.run(step)
  for a, address in zip(arrays, addresses):
    assert a.ctypes.data == address and a[0] == 3.0 and a[-1] == 3.0


def test_allocate_shared_gives_zeroed_writable_arrays_one_per_local_replica(two):
  # In one process: ordinary memory, one block per replica, reduced in place.
  blocks = two.experimental_allocate_shared((3, 1 << 14), "float32")  # 192 KiB each
  assert len(blocks) == 2
  for b in blocks:
    assert b.shape == (3, 1 << 14) and b.dtype == np.float32 and b.flags.writeable and not b.any()
  assert blocks[0].ctypes.data != blocks[1].ctypes.data
  addresses = [b.ctypes.data for b in blocks]

  def step():
    r = dist.get_replica_context().replica_id_in_sync_group
    blocks[r][:] = r + 1
    dist.get_replica_context().all_reduce_in_place("sum", blocks[r])

  two.run(step)
  assert [b.ctypes.data for b in blocks] == addresses
  assert all((b == 3).all() for b in blocks)
  assert dist.get_strategy().experimental_allocate_shared(4, np.int64)[0].tolist() == [0, 0, 0, 0]
  with pytest.raises(errors.InvalidArgumentError, match="expected dtype float32, float64, int32 or int64, got uint8"):
    two.experimental_allocate_shared(4, np.uint8)
  with pytest.raises(errors.InvalidArgumentError):
    two.experimental_allocate_shared((-1, 2))


def test_in_place_all_reduce_of_small_arrays_copies_back_safely(two):
  # Below the in-place threshold the sums are copied back after a barrier.
  arrays = [np.full(7, r + 1, np.int64) for r in range(2)]
  for _ in range(50):
    two.run(lambda: dist.get_replica_context().all_reduce_in_place(
        "sum", arrays[dist.get_replica_context().replica_id_in_sync_group]))
  assert arrays[0][0] == arrays[1][0] == 3 * 2**49


def test_in_place_all_reduce_really_is_in_place_and_handles_aliases(two):
  from distribute import _core
  big = [np.full(1 << 16, r + 1.0, np.float32) for r in range(2)]  # 256 KiB each
  counts = {}

  def step():
    r = dist.get_replica_context().replica_id_in_sync_group
    counts[r] = _core.all_reduce_into("SUM", [big[r]], None)

  two.run(step)
  assert counts == {0: 1, 1: 1}  # reduced in the arrays themselves, no copy
  assert big[0][0] == big[1][-1] == 3.0
  # The same array twice (tied weights): not donated, both get the sum once.
  tied = [np.full(1 << 16, r + 1.0, np.float32) for r in range(2)]

  def tied_step():
    r = dist.get_replica_context().replica_id_in_sync_group
    counts[r] = _core.all_reduce_into("SUM", [tied[r], tied[r]], None)

  two.run(tied_step)
  assert counts == {0: 0, 1: 0}
  assert tied[0][0] == tied[1][-1] == 3.0


def test_in_place_all_reduce_of_mixed_strided_and_read_only_arrays(two):
  # A strided array takes the copying path; a read-only one is refused.
  big = [np.zeros((1 << 16) * 2, np.float32) for _ in range(2)]
  small = [np.full(5, 2.0, np.float64) for _ in range(2)]

  def step():
    r = dist.get_replica_context().replica_id_in_sync_group
    strided = big[r][::2]
    strided[:] = r + 1.0
    dist.get_replica_context().all_reduce_in_place("sum", {"strided": strided, "small": small[r]})

  two.run(step)
  for r in range(2):
    np.testing.assert_array_equal(big[r][::2][:3], [3.0, 3.0, 3.0])
    assert big[r][1] == 0.0  # the gaps untouched
    np.testing.assert_array_equal(small[r], [4.0] * 5)
  frozen = np.ones(4, np.float32)
  frozen.flags.writeable = False
  with pytest.raises(errors.InvalidArgumentError, match="expected writable arrays"):
    two.run(lambda: dist.get_replica_context().all_reduce_in_place("sum", [frozen]))


def test_collectives_outside_a_replica_raise(two):
  with two.scope():
    assert dist.get_replica_context() is None  # as TF's None
    assert dist.in_cross_replica_context()
    assert dist.get_strategy() is two
  assert dist.get_replica_context() is not None  # the default replica context
  with pytest.raises(errors.FailedPreconditionError, match="not in a replica context"):
    with two.scope():
      from distribute import _core
      _core.all_reduce("SUM", [dist.convert_to_tensor(1.0)], None)


def test_error_classes_share_one_base():
  for cls in errors.BY_CODE.values():
    assert issubclass(cls, errors.Error)
  assert issubclass(errors.InvalidArgumentError, ValueError)


# --- datasets ------------------------------------------------------------------------


def test_dataset_ops_with_python_functions_and_structures():
  x = np.arange(12, dtype=np.float32).reshape(6, 2)
  y = np.arange(6, dtype=np.int64)
  ds = dist.data.Dataset.from_tensor_slices({"x": x, "y": y})
  ds = ds.map(lambda e: {"x": np.asarray(e["x"]) * 2, "y": e["y"]}).filter(lambda e: int(e["y"]) % 2 == 0)
  ds = ds.batch(2).repeat(2).take(3).prefetch(1)
  batches = list(ds)
  assert len(batches) == 3
  np.testing.assert_array_equal(np.asarray(batches[0]["y"]), [0, 2])
  np.testing.assert_array_equal(np.asarray(batches[0]["x"]), [[0, 2], [8, 10]])
  shuffled = [int(v) for v in dist.data.Dataset.range(10).shuffle(10, seed=3)]
  assert sorted(shuffled) == list(range(10)) and shuffled != list(range(10))


def test_map_tuple_elements_unpack_and_errors_propagate():
  ds = dist.data.Dataset.from_tensor_slices((np.arange(3, dtype=np.int32), np.arange(3, dtype=np.int32)))
  assert [int(v) for v in ds.map(lambda a, b: a + b)] == [0, 2, 4]

  def bad(v):
    raise KeyError("in the pipeline")

  with pytest.raises(KeyError, match="in the pipeline"):
    list(dist.data.Dataset.range(3).map(bad))
  with pytest.raises(errors.InvalidArgumentError,
                     match=r"Dataset.map: an element component is not a supported tensor: .*got object"):
    list(dist.data.Dataset.range(3).map(lambda v: object()))
  with pytest.raises(errors.InvalidArgumentError, match=r"Dataset.from_tensor_slices: .*got set"):
    dist.data.Dataset.from_tensor_slices({1, 2})
  # Text is a string tensor, as in TF.
  assert [t.numpy() for t in dist.data.Dataset.range(2).map(lambda v: "text")] == [b"text", b"text"]


def test_gather_concatenates_the_replicas_values_as_tf(two):
  out = two.run(lambda: np.full((1, 2), dist.get_replica_context().replica_id_in_sync_group, np.float32))
  np.testing.assert_array_equal(np.asarray(two.gather(out, axis=0)), [[0, 0], [1, 1]])
  np.testing.assert_array_equal(np.asarray(two.gather(out, axis=1)), [[0, 0, 1, 1]])
  nested = two.gather({"a": out, "b": (out,)}, axis=0)
  np.testing.assert_array_equal(np.asarray(nested["b"][0]), [[0, 0], [1, 1]])


@pytest.mark.parametrize("kwargs, message", [
    ({"cluster_resolver": object()}, r"expected cluster_resolver=None .*got object"),
    ({"communication_options": {"timeout_seconds": 5}}, r"expected communication_options to be an .*got dict"),
    ({"communication_options": dist.experimental.CommunicationOptions(timeout_seconds=5), "timeout_seconds": 6},
     r"expected one timeout, got timeout_seconds=6 and communication_options.timeout_seconds=5"),
])
def test_multi_worker_strategy_takes_tfs_arguments_and_refuses_bad_ones(kwargs, message):
  # (Refused before any MPI start-up; the accepted forms run under mpirun:
  # multi_worker_script.py.)
  with pytest.raises(errors.InvalidArgumentError, match=message):
    dist.MultiWorkerMirroredStrategy(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"bytes_per_pack": -1}, r"expected bytes_per_pack to be a non-negative int, got -1"),
    ({"timeout_seconds": 0}, r"expected timeout_seconds to be None or a positive number, got 0"),
    ({"implementation": "NCCL"}, r"expected implementation AUTO or RING .*got 'NCCL'"),
])
def test_communication_options_refuse_bad_values(kwargs, message):
  with pytest.raises(errors.InvalidArgumentError, match=message):
    dist.experimental.CommunicationOptions(**kwargs)


def test_communication_options_bound_a_collective(two):
  options = dist.experimental.CommunicationOptions(timeout_seconds=0.3)

  def step():
    ctx = dist.get_replica_context()
    if ctx.replica_id_in_sync_group == 1:
      time.sleep(1.5)  # late, past replica 0's deadline
    return ctx.all_reduce("sum", np.ones(2, np.float32), options=options)

  start = time.monotonic()
  with pytest.raises(errors.DeadlineExceededError):
    two.run(step)
  assert time.monotonic() - start < 10


@pytest.mark.parametrize("first, second", [({"a": 1, "b": 2}, {"b": 2, "c": 1}), ([1, 2], (2, 1)),
                                           ([1, 2], [1, 2, 3])])
def test_collectives_of_different_structures_on_replicas_raise(two, first, second):
  def step(method):
    ctx = dist.get_replica_context()
    mine = first if ctx.replica_id_in_sync_group == 0 else second
    value = _nest_of_arrays(mine)
    if method == "all_gather":
      return ctx.all_gather(value, 0)
    return getattr(ctx, method)("sum", value)

  for method in ("all_reduce", "all_reduce_in_place", "all_gather"):
    with pytest.raises(errors.InvalidArgumentError,
                       match=rf"ReplicaContext.{method}: expected every replica to pass replica 0's nested structure, "
                             rf"got a different one from replica\(s\) \[1\]"):
      two.run(step, args=(method,))
  # The same structure on both: summed.
  out = two.run(lambda: dist.get_replica_context().all_reduce("sum", {"a": np.ones(2, np.float32), "b": [np.ones(1)]}))
  np.testing.assert_array_equal(np.asarray(two.experimental_local_results(out)[1]["b"][0]), [2.])


def _nest_of_arrays(structure):
  if isinstance(structure, dict):
    return {k: _nest_of_arrays(v) for k, v in structure.items()}
  if isinstance(structure, (list, tuple)):
    return type(structure)(_nest_of_arrays(v) for v in structure)
  return np.full(2, float(structure), np.float32)


def test_a_replica_that_changes_its_structure_alone_raises(two):
  def step(change):
    ctx = dist.get_replica_context()
    value = [np.ones(2, np.float32), np.ones(2, np.float32)]
    if change and ctx.replica_id_in_sync_group == 1:
      value = (value[0], value[1])  # a tuple where replica 0 keeps its list
    return ctx.all_reduce("sum", value)

  for _ in range(2):
    two.run(step, args=(False,))  # checked once, then remembered
  with pytest.raises(errors.InvalidArgumentError):
    two.run(step, args=(True,))
  out = two.run(step, args=(False,))  # in step again
  np.testing.assert_array_equal(np.asarray(two.experimental_local_results(out)[0][1]), [2., 2.])


def test_the_structure_check_keeps_the_calls_timeout(two):
  options = dist.experimental.CommunicationOptions(timeout_seconds=0.3)

  def step():
    ctx = dist.get_replica_context()
    if ctx.replica_id_in_sync_group == 1:
      time.sleep(1.5)
    return ctx.all_reduce("sum", {"late": np.ones(2, np.float32), "other": [np.ones(1, np.float32)]},
                          options=options)

  start = time.monotonic()
  with pytest.raises(errors.DeadlineExceededError):
    two.run(step)
  assert time.monotonic() - start < 10


@pytest.mark.parametrize("value, dtype, message", [
    (1.5, "int32", r"expected values representable as int32, got 1.5"),
    (2147483648.0, "int32", r"expected values representable as int32, got 2147483648.0"),
    (np.array([2**64 - 1], np.uint64), "int64", r"expected values representable as int64, got 18446744073709551615"),
    (3_000_000_000, "int32", r"expected values representable as int32, got 3000000000"),
    (np.array([1.0, np.nan]), "int64", r"expected values representable as int64, got nan"),
    (np.array([1.0]), "float16", r"expected a dtype of the supported ones"),
])
def test_conversion_to_a_dtype_refuses_values_it_would_change(value, dtype, message):
  with pytest.raises(errors.InvalidArgumentError, match=message):
    dist.convert_to_tensor(value, dtype=dtype)


def test_conversion_to_a_dtype_keeps_exact_values():
  assert np.asarray(dist.convert_to_tensor(2.0, dtype="int32")).tolist() == 2
  assert np.asarray(dist.convert_to_tensor(np.array([1, 2]), dtype="float32")).dtype == np.float32
  t = dist.convert_to_tensor(dist.convert_to_tensor(np.array([4.0], np.float64)), dtype="int64")
  assert t.dtype == "int64" and np.asarray(t).tolist() == [4]
  with pytest.raises(errors.InvalidArgumentError):
    dist.Variable(3_000_000_000, dtype="int32")
  with pytest.raises(errors.InvalidArgumentError, match="got 1.5"):
    dist.Variable(np.array([1.5]), dtype="int32")
  # A Python float is not rounded to float32 on its way to another dtype.
  assert np.asarray(dist.convert_to_tensor(123456789.0, dtype="int32")).tolist() == 123456789
  assert np.asarray(dist.convert_to_tensor(2147483647.0, dtype="int32")).tolist() == 2147483647
  assert np.asarray(dist.convert_to_tensor(0.1, dtype="float64")).tolist() == 0.1


def test_local_results_and_update_check_the_per_replica_values(two):
  with pytest.raises(errors.InvalidArgumentError, match=r"expected 2 values per replica"):
    two.experimental_local_results((dist.PerReplica([np.float32(1)]),))
  with two.scope():
    v = dist.Variable(np.zeros(2, np.float32))
  with pytest.raises(errors.InvalidArgumentError,
                     match=r"StrategyExtended.update: expected 2 values per distributed argument .*got 3"):
    two.extended.update(v, lambda var, x: var.assign(x), args=(dist.PerReplica([np.ones(2, np.float32)] * 3),))


def test_a_variable_keeps_its_strategy_alive():
  import gc

  def make():
    s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
    with s.scope():
      return dist.Variable(1.0, synchronization="ON_READ", aggregation="SUM")

  v = make()
  gc.collect()
  assert float(np.asarray(v.numpy())) == 2.0  # its strategy's two components, summed


def test_next_after_the_end_of_a_dataset_raises_stop_iteration_again():
  it = iter(dist.data.Dataset.range(2))
  assert [int(next(it)), int(next(it))] == [0, 1]
  for _ in range(2):  # the end stays the end
    with pytest.raises(StopIteration):
      next(it)


def test_distributed_dataset_iteration_protocol(two):
  ds = dist.data.Dataset.from_tensor_slices(np.arange(8, dtype=np.float32)).batch(4)
  dds = two.experimental_distribute_dataset(ds)
  it = iter(dds)
  first = next(it)
  assert isinstance(first, dist.PerReplica)
  np.testing.assert_array_equal(np.asarray(first.values[1]), [2., 3.])
  assert it.get_next_as_optional().has_value()
  assert not it.get_next_as_optional().has_value()
  with pytest.raises(StopIteration):
    next(it)
  with pytest.raises(errors.OutOfRangeError):
    it.get_next()
  total = dds.reduce(np.float32(0), lambda s, step: s + float(two.reduce("sum", step, axis=0)))
  assert total == 28.0
  with pytest.raises(errors.InvalidArgumentError, match="call the batch method"):
    two.experimental_distribute_dataset(dist.data.Dataset.range(4))


def test_distribute_datasets_from_function(two):
  contexts = []

  def make(ctx):
    contexts.append(ctx)
    return dist.data.Dataset.range(4).batch(ctx.get_per_replica_batch_size(4))

  steps = list(two.distribute_datasets_from_function(make))
  assert contexts[0].num_replicas_in_sync == 2 and contexts[0].num_input_pipelines == 1
  # Replica r of each step takes its own next element: batches [0, 1] and [2, 3].
  assert len(steps) == 1
  np.testing.assert_array_equal(np.asarray(steps[0].values[0]), [0, 1])
  np.testing.assert_array_equal(np.asarray(steps[0].values[1]), [2, 3])


def test_a_functions_statically_shaped_dataset_ends_its_loop_at_a_partial_step(two):
  # TF: one worker, a fully known element_spec: no partial steps for `for`
  # and get_next; get_next_as_optional and reduce give the last one padded.
  dd = two.distribute_datasets_from_function(lambda ctx: dist.data.Dataset.range(10).batch(2, drop_remainder=True))
  assert len(list(dd)) == 2
  it = iter(dd)
  it.get_next(), it.get_next()
  with pytest.raises(errors.OutOfRangeError):
    it.get_next()
  it = iter(dd)
  optionals = [it.get_next_as_optional() for _ in range(4)]
  assert [o.has_value() for o in optionals] == [True, True, True, False]
  last = two.experimental_local_results(optionals[2].get_value())
  assert np.asarray(last[0]).tolist() == [8, 9] and np.asarray(last[1]).shape == (0,)
  assert dd.reduce(0, lambda n, step: n + 1) == 3
  # A varying batch size keeps the partial step in the loop too.
  assert len(list(two.distribute_datasets_from_function(lambda ctx: dist.data.Dataset.range(9).batch(3)))) == 2


def test_a_distributed_datasets_cardinality_is_its_inputs(two):
  # TF's DistributedDataset.cardinality, a property: the global batches of
  # the distributed dataset, or the elements of the function's dataset.
  ds = dist.data.Dataset.range(10).batch(4)
  assert two.experimental_distribute_dataset(ds).cardinality == 3
  assert two.experimental_distribute_dataset(ds.repeat()).cardinality == dist.data.INFINITE_CARDINALITY
  assert two.experimental_distribute_dataset(
      ds.filter(lambda b: True)).cardinality == dist.data.UNKNOWN_CARDINALITY
  from_function = two.distribute_datasets_from_function(lambda ctx: dist.data.Dataset.range(6).batch(2))
  assert from_function.cardinality == 3 and from_function.cardinality.numpy() == 3


def test_training_a_linear_model_matches_one_replica():
  rng = np.random.default_rng(0)
  x = rng.standard_normal((64, 3)).astype(np.float32)
  y = (x @ np.array([1., -2., .5], np.float32)).astype(np.float32)

  def train(strategy):
    w = np.zeros(3, np.float32)
    ds = dist.data.Dataset.from_tensor_slices((x, y)).batch(16)
    for _ in range(5):
      for batch in strategy.experimental_distribute_dataset(ds):
        def step(xb, yb):
          xb, yb = np.asarray(xb), np.asarray(yb)
          grad = 2 * xb.T @ (xb @ w - yb) / 16  # per global batch
          return dist.get_replica_context().all_reduce("sum", grad)
        g = strategy.experimental_local_results(strategy.run(step, args=batch))[0]
        w = w - 0.1 * np.asarray(g)
    return w

  np.testing.assert_allclose(train(dist.MirroredStrategy(["CPU:0"])), train(dist.MirroredStrategy(["CPU:0", "CPU:1"])),
                             rtol=1e-5, atol=1e-6)


def test_torch_tensors_are_wrapped_without_a_copy():
  torch = _deps.torch()
  t = torch.arange(6, dtype=torch.float32)
  wrapped = dist.convert_to_tensor(t)
  assert wrapped._data_address() == t.data_ptr()


def test_one_replica_results_are_plain_values_as_in_tf():
  one = dist.OneDeviceStrategy("CPU:0")
  assert one.run(lambda: 7) == 7
  assert one.experimental_local_results(one.run(lambda: 7)) == (7,)


def test_big_endian_arrays_are_converted():
  a = np.arange(4, dtype=">f4")
  np.testing.assert_array_equal(np.asarray(dist.convert_to_tensor(a)), [0, 1, 2, 3])


def test_a_variable_copies_its_initial_value():
  a = np.zeros(3, np.float32)
  v = dist.Variable(a)
  a[0] = 5
  assert float(v.numpy()[0]) == 0.0


def test_a_variable_keeps_no_view_of_what_it_was_given(two):
  # TF assigns into the variable's own buffer: later writes to the caller's
  # array, buffer or torch tensor do not reach the variable.
  v = dist.Variable(np.zeros(3, np.float32))
  buf = np.ones(3, np.float32)
  v.assign(buf)
  buf[:] = 7
  np.testing.assert_array_equal(v.numpy(), [1, 1, 1])
  view = memoryview(np.full(3, 2, np.float32))
  v.assign(view)
  np.asarray(view)[:] = 9
  np.testing.assert_array_equal(v.numpy(), [2, 2, 2])
  torch = pytest.importorskip("torch")
  w = torch.zeros(3)
  from_torch = dist.Variable(w)
  w += 1
  np.testing.assert_array_equal(from_torch.numpy(), [0, 0, 0])
  with two.scope():
    mirrored = dist.Variable(np.zeros(2, np.float32))
  source = np.full(2, 3, np.float32)
  mirrored.assign(source)
  source[:] = 8
  for value in mirrored.values:
    np.testing.assert_array_equal(np.asarray(value), [3, 3])


EXIT_SCRIPT = """
import time, numpy as np, distribute as dist
def slow(x):
  time.sleep(0.05)
  return x
ds = dist.data.Dataset.range(100).map(slow).prefetch(8)
it = iter(ds)
next(it)
s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
dit = iter(s.experimental_distribute_dataset(dist.data.Dataset.range(100).map(slow).batch(4)))
next(dit)
print("leaving", flush=True)
"""


def test_the_interpreter_exits_cleanly_with_live_pipelines(tmp_path):
  import subprocess
  import sys
  script = tmp_path / "exit.py"
  script.write_text(EXIT_SCRIPT)
  for _ in range(3):
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "leaving" in done.stdout, done.stdout + done.stderr


def _python_thread_states():
  import ctypes
  api = ctypes.pythonapi
  api.PyInterpreterState_Head.restype = ctypes.c_void_p
  api.PyInterpreterState_ThreadHead.restype = ctypes.c_void_p
  api.PyInterpreterState_ThreadHead.argtypes = [ctypes.c_void_p]
  api.PyThreadState_Next.restype = ctypes.c_void_p
  api.PyThreadState_Next.argtypes = [ctypes.c_void_p]
  n, state = 0, api.PyInterpreterState_ThreadHead(api.PyInterpreterState_Head())
  while state:
    n += 1
    state = api.PyThreadState_Next(state)
  return n


def test_pipeline_threads_free_their_python_thread_states():
  # A parallel map's worker threads call Python; each keeps its thread
  # state while it lives, and frees it when its iterator ends it.
  ds = dist.data.Dataset.range(8).map(lambda x: x, num_parallel_calls=4)
  list(ds)
  before = _python_thread_states()
  for _ in range(30):
    assert [int(x) for x in ds] == list(range(8))
  assert _python_thread_states() <= before + 4  # (30 x 4 threads before the fix)


DROPPED_SCOPE_SCRIPT = """
import gc, distribute as dist
s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
scope = s.scope()
scope.__enter__()
holder = [scope]
del scope
seen = []
def fn():
  if dist.get_replica_context().replica_id_in_sync_group == 0:  # replica 0 runs on this thread
    try:
      holder[0].__exit__(None, None, None)
    except dist.errors.FailedPreconditionError:
      pass  # not the innermost context here: refused, and kept open
    holder.clear()  # the scope's last reference, dropped inside the replica function
    gc.collect()
    seen.append(dist.get_replica_context() is not None)
s.run(fn)
print("replica context kept", seen == [True], "scope left open", dist.get_strategy() is s, flush=True)
"""


def test_a_scope_dropped_where_it_is_not_innermost_leaks_rather_than_pop_another(tmp_path):
  # Freeing a scope that is not the thread's innermost context must not pop
  # what is (here replica 0's replica context): it is left open instead.
  import subprocess
  import sys
  script = tmp_path / "dropped_scope.py"
  script.write_text(DROPPED_SCOPE_SCRIPT)
  done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
  assert done.returncode == 0, done.stdout + done.stderr
  assert "replica context kept True scope left open True" in done.stdout, done.stdout + done.stderr


def test_a_scope_exited_on_another_thread_raises_and_stays_open(two):
  cm = two.scope()
  cm.__enter__()
  errors_seen = []

  def exit_elsewhere():
    try:
      cm.__exit__(None, None, None)
    except errors.FailedPreconditionError as e:
      errors_seen.append(str(e))

  t = threading.Thread(target=exit_elsewhere)
  t.start()
  t.join()
  assert len(errors_seen) == 1 and "must be exited there" in errors_seen[0], errors_seen
  assert dist.get_strategy() is two  # still open on this thread
  cm.__exit__(None, None, None)
  assert not dist.has_strategy()


def test_a_scope_exited_out_of_order_raises(two):
  other = dist.OneDeviceStrategy("CPU:0")
  outer = two.scope()
  outer.__enter__()
  with pytest.raises(errors.FailedPreconditionError):
    other.scope().__enter__()  # scopes of different strategies do not nest (TF's rule)
  # Exiting it inside its own run's replica context (replica 0 runs on this
  # thread), where it is not the innermost context, is refused.
  refused = []

  def fn():
    if dist.get_replica_context().replica_id_in_sync_group == 0:
      try:
        outer.__exit__(None, None, None)
      except errors.FailedPreconditionError as e:
        refused.append(str(e))

  two.run(fn)
  assert len(refused) == 1 and "reverse order" in refused[0], refused
  assert dist.get_strategy() is two
  outer.__exit__(None, None, None)
  assert not dist.has_strategy()
