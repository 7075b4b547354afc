#!/usr/bin/env bash
# Installs the Debian 12 packages the project needs, only those missing.
# Idempotent and non-interactive; run as root or with sudo available.
#
# Usage: scripts/setup.sh [--bench-peers]
#   --bench-peers  also install what bench/run_train_peers.sh compares
#                  against: OpenBLAS (libopenblas0-openmp) for Debian's
#                  PyTorch (installed in any case), and point the system BLAS and
#                  LAPACK (libblas.so.3, liblapack.so.3 alternatives) at
#                  OpenBLAS, which python3-torch then loads.
set -euo pipefail

bench_peers=0
for arg in "$@"; do
  case $arg in
    --bench-peers) bench_peers=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "setup: unknown option '$arg' (expected --bench-peers)" >&2
      exit 2
      ;;
  esac
done

packages=(
  g++ cmake ninja-build          # toolchain
  libgtest-dev libgmock-dev      # tests
  libbenchmark-dev libeigen3-dev # bench/ (Eigen: the MLP step the input benchmark compares against)
  openmpi-bin libopenmpi-dev     # MultiWorkerMirroredStrategy, its mpirun tests, the MPI benchmarks
  nlohmann-json3-dev             # parses TF_CONFIG (src/cluster/); header-only, build-time only
  libisal-dev                    # ISA-L's CRC32C for checkpoints and TFRecord files (src/core/); linked by consumers too
  libprotobuf-dev protobuf-compiler # tf.train.Example for parse_example (src/data/example.proto); protobuf-lite linked by consumers too
  libboost-context-dev           # replicas as fibers (src/runtime/fiber.cc); linked by consumers too
  zlib1g-dev                     # GZIP/ZLIB TFRecord and text files (src/data/record_io.cc); linked by consumers too
  libcli11-dev                   # distribute-train's command line (tools/train/); header-only, build-time only
  libcairo2-dev fonts-dejavu-core # distribute-train's --plot PNG (tools/train/plot.cc): cairo + FreeType, DejaVu Sans read at run time
  pkg-config                     # finds cairo for tools/train/; the install check builds a program with distribute.pc
  python3-dev pybind11-dev python3-numpy python3-pytest  # the Python package (python/) and its pytest suite, for /usr/bin/python3
  libdlpack-dev                  # the DLPack ABI (header only) of Tensor.__dlpack__ (python/_core.cc)
  python3-torch                  # the PyTorch example (examples/python/torch_digits.py) and its test
  iproute2 util-linux            # tests/net/: ip netns, veth, bridge; unshare for each host's name
  clang-14 libclang-rt-14-dev    # fuzz/ (scripts/fuzz.sh): clang++-14 and its libFuzzer, ASan and UBSan runtimes; the thread-safety preset
)
if ((bench_peers)); then
  packages+=(libopenblas0-openmp)  # bench/run_train_peers.sh: PyTorch on OpenBLAS
fi

# Points the system BLAS/LAPACK at OpenBLAS (OpenMP build), whatever else
# (the reference libblas3, another OpenBLAS flavour) is installed beside it.
use_openblas() {
  local arch name target
  arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
  for name in libblas.so.3 liblapack.so.3; do
    target=/usr/lib/$arch/openblas-openmp/$name
    if [[ $(update-alternatives --query "$name-$arch" 2>/dev/null | sed -n 's/^Value: //p') != "$target" ]]; then
      echo "setup: $name -> $target"
      "${sudo_cmd[@]}" update-alternatives --set "$name-$arch" "$target"
    fi
  done
}

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  sudo_cmd=(sudo)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all packages present"
else
  echo "setup: installing ${missing[*]}"
  if ((${#sudo_cmd[@]} > 0)); then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if ((bench_peers)); then
  use_openblas
fi
