#!/usr/bin/env bash
# The main job: installs what is missing, builds the release preset and
# trains the digits classifier data-parallel on every usable core with
# distribute-train (arguments are passed on: try --help).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target distribute-train
exec build/release/tools/train/distribute-train "$@"
