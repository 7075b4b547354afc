"""pytest set-up: the package under test comes from PYTHONPATH (the build
tree's python/ folder; CTest's python_tests sets it)."""
import os
import sys

_build = os.environ.get("DISTRIBUTE_PYTHON_BUILD")
if _build:
  sys.path.insert(0, _build)
