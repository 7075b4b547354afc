#!/usr/bin/env bash
# The TF data files under testdata/tf_files are what the independent writer
# (testdata/make_tf_files.py, standard-library Python) writes: regenerates
# them into a temporary directory and compares byte for byte.
# Usage: check_tf_files.sh <python3>
set -euo pipefail
python=$1
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$python" "$here/testdata/make_tf_files.py" "$out"
status=0
for f in "$here"/testdata/tf_files/*; do
  name=$(basename "$f")
  [ "$name" = EXPECTED.md ] && continue
  if ! cmp -s "$f" "$out/$name"; then
    echo "testdata/tf_files/$name differs from what make_tf_files.py writes" >&2
    status=1
  fi
done
exit $status
