#!/usr/bin/env bash
# Installs the Debian 12 packages the project needs, only those missing.
# Idempotent and non-interactive; run as root or with sudo available.
set -euo pipefail

packages=(
  g++ cmake ninja-build          # toolchain
  libgtest-dev libgmock-dev      # tests
  libbenchmark-dev libeigen3-dev # bench/ (Eigen: the MLP step the input benchmark compares against)
  openmpi-bin libopenmpi-dev     # MultiWorkerMirroredStrategy, its mpirun tests, the MPI benchmarks
  nlohmann-json3-dev             # parses TF_CONFIG (src/cluster/); header-only, build-time only
  libisal-dev                    # ISA-L's CRC32C for checkpoints (src/checkpoint/); linked by consumers too
  libcli11-dev                   # distribute-train's command line (tools/train/); header-only, build-time only
  libcairo2-dev fonts-dejavu-core # distribute-train's --plot PNG (tools/train/plot.cc): cairo + FreeType, DejaVu Sans read at run time
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
