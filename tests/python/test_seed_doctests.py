"""The specification's own examples: the five doctests of the
DistributedValues docstring in TF's tensorflow/python/types/distribute.py,
run by Python's doctest with only the import (``tf`` is
distribute.compat.tf) and the device names (GPU:i -> CPU:i) changed.

The examples come from ../shared/seed/distribute.py when it is there, else
from the copy of the examples and their output kept here
(seed_examples.txt). As TF's own doctest runner (tf_doctest.py) does, the
comparison normalizes whitespace: example 5's expected tuple is written
over two lines."""

import ast
import doctest
import os
import pathlib

import pytest

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = pathlib.Path(os.environ.get("DISTRIBUTE_SOURCE_DIR", HERE.parent.parent))


def seed_examples():
  seed = SOURCE.parent / "shared" / "seed" / "distribute.py"
  if seed.exists():
    for node in ast.walk(ast.parse(seed.read_text())):
      if isinstance(node, ast.ClassDef) and node.name == "DistributedValues":
        return ast.get_docstring(node, clean=True), str(seed)
  return (HERE / "seed_examples.txt").read_text(), str(HERE / "seed_examples.txt")


def test_the_five_examples_pass_exactly():
  from distribute.compat import tf
  text, name = seed_examples()
  text = text.replace('"GPU:', '"CPU:')
  parser = doctest.DocTestParser()
  test = parser.get_doctest(text, {"tf": tf}, "DistributedValues", name, 0)
  assert sum(1 for e in test.examples if e.want) == 5, "expected the seed's five examples with output"
  runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
  failures = []
  runner.run(test, out=failures.append)
  assert runner.failures == 0, "".join(failures)
  assert runner.tries >= 20


def test_the_kept_copy_matches_the_seed():
  seed = SOURCE.parent / "shared" / "seed" / "distribute.py"
  if not seed.exists():
    pytest.skip("the seed (../shared/seed/distribute.py) is not there: the kept copy is used alone")
  text, _ = seed_examples()
  kept = (HERE / "seed_examples.txt").read_text()
  parser = doctest.DocTestParser()
  want = [(e.source, e.want) for e in parser.get_examples(text)]
  got = [(e.source, e.want) for e in parser.get_examples(kept)]
  assert got == want


def test_tensors_print_as_tfs_under_compat_tf():
  import numpy as np
  from distribute.compat import tf
  t = tf.constant(np.array([5.], np.float32))
  assert repr(t) == "<tf.Tensor: shape=(1,), dtype=float32, numpy=array([5.], dtype=float32)>"
  assert str(t) == "tf.Tensor([5.], shape=(1,), dtype=float32)"
  assert tf.errors.OpError is tf.errors.Error


def test_the_example_script_prints_the_five_outputs():
  """examples/python/seed_examples.py, run as a user would: its output is
  the five examples' expected output, in order."""
  import subprocess
  import sys
  script = SOURCE / "examples" / "python" / "seed_examples.py"
  out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True).stdout
  text, _ = seed_examples()
  wants = [e.want for e in doctest.DocTestParser().get_examples(text) if e.want]
  assert len(wants) == 5
  assert out.split() == " ".join(wants).split()
