"""The optional dependencies of some tests (torch, mpirun): a test skips
without one, except under CTest, which sets DISTRIBUTE_REQUIRE_TORCH=1 (and
DISTRIBUTE_REQUIRE_MPI=1 in a build with MPI): scripts/setup.sh installs
them, so a missing one fails there instead of passing silently."""
import importlib
import os
import shutil

import pytest


def torch():
  """The torch module, or a skip (a failure when required)."""
  if os.environ.get("DISTRIBUTE_REQUIRE_TORCH") == "1":
    return importlib.import_module("torch")  # an ImportError: install python3-torch (scripts/setup.sh)
  return pytest.importorskip("torch")


def mpirun():
  """mpirun's path, or a skip (a failure when required)."""
  path = shutil.which("mpirun")
  if path is None:
    if os.environ.get("DISTRIBUTE_REQUIRE_MPI") == "1":
      pytest.fail("mpirun not found (openmpi-bin; scripts/setup.sh installs it), and DISTRIBUTE_REQUIRE_MPI=1")
    pytest.skip("mpirun (openmpi-bin) is not installed")
  return path
