#!/usr/bin/env bash
# The main job: installs what is missing, builds the release preset and runs
# the example that prints the seed examples' results.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target distributed_values
exec build/release/examples/distributed_values "$@"
