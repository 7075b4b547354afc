"""TF's data files from Python (issue 16, item 6): string tensors,
TextLineDataset, TFRecordDataset and tf.io.parse_example, over files written
by tests/data/testdata/make_tf_files.py, an independent writer of the
formats (standard-library Python; EXPECTED.md lists the contents)."""
import importlib.util
import os
import pathlib

import numpy as np
import pytest

import distribute as dist
from distribute.compat import tf

HERE = pathlib.Path(__file__).resolve().parent
TF_FILES = HERE.parent / "data" / "testdata" / "tf_files"


def writer():
  """The independent writer, as a module (to write files at test time)."""
  spec = importlib.util.spec_from_file_location("make_tf_files", HERE.parent / "data" / "testdata" / "make_tf_files.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def f(name):
  return str(TF_FILES / name)


def strings(dataset):
  return [e.numpy() for e in dataset]


def test_string_tensors_convert_print_and_compare_as_tf():
  t = tf.constant([b"alpha", "b\n"])
  assert t.dtype == "string" and t.shape == (2,)
  assert repr(t) == "<tf.Tensor: shape=(2,), dtype=string, numpy=array([b'alpha', b'b\\n'], dtype=object)>"
  assert str(t) == "tf.Tensor([b'alpha' b'b\\n'], shape=(2,), dtype=string)"
  assert tf.constant("h\u00e9").numpy() == "h\u00e9".encode("utf-8")  # str is UTF-8, as tf.constant
  assert repr(tf.constant(b"x")) == "<tf.Tensor: shape=(), dtype=string, numpy=b'x'>"
  assert t.numpy().tolist() == [b"alpha", b"b\n"]
  assert t[1].numpy() == b"b\n" and len(t) == 2
  assert (t == tf.constant(np.array([b"alpha", b"b\n"]))).all()  # elementwise, as TF's
  assert (t != tf.constant(np.array([b"alpha", b"c"]))).tolist() == [False, True]
  assert dist.convert_to_tensor(np.array([["a", "b"], ["c", "d"]])).shape == (2, 2)
  with pytest.raises(dist.InvalidArgumentError, match="cannot convert a tensor of dtype string to float32"):
    tf.constant(t, tf.float32)
  with pytest.raises(dist.InvalidArgumentError, match="non-ragged"):
    tf.constant([["a"], ["b", "c"]])
  with pytest.raises(BufferError):
    memoryview(t)


def test_text_line_dataset_gives_the_lines_as_tf():
  assert strings(tf.data.TextLineDataset(f("lines_a.txt"))) == [b"alpha", b"beta", b"", b"gamma"]
  assert strings(tf.data.TextLineDataset([f("lines_b.txt"), f("lines_c.txt"), pathlib.Path(f("lines_a.txt"))])) == \
      [b"one", b"two", b"alpha", b"beta", b"", b"gamma"]
  spec = tf.data.TextLineDataset(f("lines_a.txt")).element_spec
  assert spec == tf.TensorSpec(shape=(), dtype="string")
  assert repr(spec) == "TensorSpec(shape=(), dtype=tf.string, name=None)"


def test_tfrecord_dataset_reads_the_independent_writers_records(tmp_path):
  assert strings(tf.data.TFRecordDataset(f("records.tfrecord"))) == \
      [b"hello", b"", b"\x00\xffbinary\n", bytes(i % 251 for i in range(1000))]
  # Files written now, by the writer module: random binary records.
  rng = np.random.default_rng(7)
  records = [rng.bytes(int(n)) for n in rng.integers(0, 300, size=50)]
  writer().write_tfrecord(tmp_path / "random.tfrecord", records)
  assert strings(tf.data.TFRecordDataset(str(tmp_path / "random.tfrecord"))) == records


def test_compressed_files_as_tf(tmp_path):
  plain = strings(tf.data.TFRecordDataset(f("records.tfrecord")))
  assert strings(tf.data.TFRecordDataset(f("records.tfrecord.gz"), compression_type="GZIP")) == plain
  assert strings(tf.data.TFRecordDataset(f("records.tfrecord.zlib"), compression_type="ZLIB")) == plain
  assert strings(tf.data.TextLineDataset(f("two_members.txt.gz"), compression_type="GZIP")) == [b"a", b"b", b"c"]
  # Written now by Python's gzip module: records of random bytes.
  import gzip
  rng = np.random.default_rng(3)
  records = [rng.bytes(int(n)) for n in rng.integers(0, 5000, size=40)]
  path = tmp_path / "random.tfrecord"
  writer().write_tfrecord(path, records)
  (tmp_path / "random.tfrecord.gz").write_bytes(gzip.compress(path.read_bytes()))
  assert strings(tf.data.TFRecordDataset(str(tmp_path / "random.tfrecord.gz"), compression_type="GZIP",
                                         buffer_size=1000)) == records


def test_num_parallel_reads_interleaves_the_files_as_tf():
  shards = [f(f"shard-{k}.tfrecord") for k in range(4)]
  names = tf.data.Dataset.from_tensor_slices(shards)  # a dataset of file names, as TF accepts
  assert strings(tf.data.TFRecordDataset(names, num_parallel_reads=2)) == [
      b"k0-r0", b"k1-r0", b"k0-r1", b"k1-r1", b"k0-r2", b"k1-r2",
      b"k2-r0", b"k3-r0", b"k2-r1", b"k3-r1", b"k2-r2", b"k3-r2"]


def test_a_damaged_record_raises_data_loss_naming_file_and_offset(tmp_path):
  data = bytearray((TF_FILES / "records.tfrecord").read_bytes())
  data[62 + 12 + 10] ^= 1
  path = tmp_path / "damaged.tfrecord"
  path.write_bytes(bytes(data))
  it = iter(tf.data.TFRecordDataset(str(path)))
  assert [next(it).numpy() for _ in range(3)] == [b"hello", b"", b"\x00\xffbinary\n"]
  with pytest.raises(tf.errors.DataLossError, match=f"corrupted record at offset 62 of '{path}'"):
    next(it)
  with pytest.raises(dist.InvalidArgumentError, match="unsupported compression_type 'BZ2'"):
    tf.data.TFRecordDataset(f("records.tfrecord"), compression_type="BZ2")
  with pytest.raises(tf.errors.NotFoundError, match="missing.txt"):
    list(tf.data.TextLineDataset(str(tmp_path / "missing.txt")))


SPEC = {
    "id": tf.io.FixedLenFeature([1], tf.int64),
    "xy": tf.io.FixedLenFeature([2], tf.float32),
    "label": tf.io.FixedLenFeature([], tf.int64),
    "name": tf.io.FixedLenFeature([], tf.string),
}


def test_parse_example_gives_one_tensor_per_feature():
  records = tf.constant(strings(tf.data.TFRecordDataset(f("examples.tfrecord"))))
  parsed = tf.io.parse_example(records, SPEC)
  assert sorted(parsed) == ["id", "label", "name", "xy"]
  np.testing.assert_array_equal(parsed["id"].numpy(), [[0], [1], [2], [3], [4]])
  assert parsed["xy"].dtype == "float32"
  np.testing.assert_array_equal(parsed["xy"].numpy(), [[0, 0], [.5, -1.25], [1, -2.5], [1.5, -3.75], [2, -5]])
  np.testing.assert_array_equal(parsed["label"].numpy(), [-1, -4, -7, -10, -13])
  assert parsed["name"].numpy().tolist() == [b"ex0", b"ex1", b"ex2", b"ex3", b"ex4"]
  one = tf.io.parse_single_example(records[3], {"extra": tf.io.FixedLenFeature([], tf.float32)})
  assert float(one["extra"]) == 7.0


def test_parse_example_defaults_and_errors():
  records = strings(tf.data.TFRecordDataset(f("examples_missing.tfrecord")))
  with pytest.raises(tf.errors.InvalidArgumentError, match="example 1: feature 'xy'.*required"):
    tf.io.parse_example(records, SPEC)
  with_default = dict(SPEC, xy=tf.io.FixedLenFeature([2], tf.float32, default_value=[9.0, 8.0]))
  np.testing.assert_array_equal(tf.io.parse_example(records, with_default)["xy"].numpy(), [[0, 0], [9, 8]])
  with pytest.raises(tf.errors.InvalidArgumentError, match="'xy' has 2 float value"):
    tf.io.parse_example(records[:1], dict(SPEC, xy=tf.io.FixedLenFeature([3], tf.float32)))
  with pytest.raises(tf.errors.InvalidArgumentError, match="expected dtype int64, float32 or string, got int32"):
    tf.io.parse_example(records, {"id": tf.io.FixedLenFeature([1], tf.int32)})
  with pytest.raises(tf.errors.InvalidArgumentError, match="cannot parse a tf.train.Example"):
    tf.io.parse_example([b"\xff\xff"], SPEC)


def test_a_tfrecord_pipeline_trains_data_parallel():
  """The porting case: TFRecordDataset -> batch -> map(parse_example) ->
  experimental_distribute_dataset -> run -> reduce."""
  strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
  spec = {"xy": SPEC["xy"], "label": SPEC["label"]}
  ds = tf.data.TFRecordDataset(f("examples.tfrecord")).batch(4).map(lambda r: tf.io.parse_example(r, spec))
  total = 0.0
  for batch in strategy.experimental_distribute_dataset(ds):
    per_replica = strategy.run(lambda b: tf.constant(np.asarray(b["xy"]).sum(axis=0)), args=(batch,))
    total += float(np.asarray(strategy.reduce("sum", per_replica, axis=None)).sum())
  assert total == pytest.approx(sum(i * 0.5 - i * 1.25 for i in range(5)))


def test_collectives_refuse_string_tensors():
  strategy = dist.MirroredStrategy(["CPU:0", "CPU:1"])
  with pytest.raises(dist.InvalidArgumentError, match="all_reduce.*got dtype string"):
    strategy.run(lambda: dist.get_replica_context().all_reduce("sum", tf.constant("a")))
  out = strategy.run(lambda: tf.constant(f"r{dist.get_replica_context().replica_id_in_sync_group}"))
  assert [v.numpy() for v in strategy.experimental_local_results(out)] == [b"r0", b"r1"]


def test_indexing_keeps_trailing_nul_bytes_and_numbers_are_refused():
  # A serialized Example whose last value is 0 ends in a NUL byte.
  records = tf.constant([b"ab\x00", b"\x00\x00"])
  assert records[0].numpy() == b"ab\x00"
  assert [r.numpy() for r in records] == [b"ab\x00", b"\x00\x00"]
  assert records[:1].numpy().tolist() == [b"ab\x00"]
  with pytest.raises(dist.InvalidArgumentError, match="cannot convert text"):
    tf.constant("1", tf.float32)
  with pytest.raises(dist.InvalidArgumentError, match="got dtype string"):
    records * 2
  with pytest.raises(dist.InvalidArgumentError, match="got dtype string"):
    float(tf.constant("1.5"))


def test_one_replica_strategies_refuse_strings_in_collectives_too():
  one = dist.OneDeviceStrategy("CPU:0")
  with pytest.raises(dist.InvalidArgumentError, match="got dtype string"):
    one.run(lambda: dist.get_replica_context().all_reduce("sum", tf.constant("a")))
  with pytest.raises(dist.InvalidArgumentError, match="got dtype string"):
    one.reduce("sum", tf.constant("a"), axis=None)
  two = dist.MirroredStrategy(["CPU:0", "CPU:1"])
  batches = two.run(lambda: tf.constant([b"x", b"y"]))
  with pytest.raises(dist.InvalidArgumentError, match="got dtype string"):
    two.gather(batches, axis=0)
