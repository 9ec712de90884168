#!/usr/bin/env bash
# Installs exactly the Debian packages the build, tests and benchmarks need.
# Idempotent: packages already present are skipped by apt, and apt-get update
# runs only when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libcpprest-dev libcpp-httplib-dev prometheus-cpp-dev nlohmann-json3-dev libyaml-cpp-dev libeigen3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libssl-dev zlib1g-dev
  python3-torch python3-numpy
  libhdf5-dev libfarmhash-dev  # Keras .weights.h5 (HDF5); the hash Keras' lookups bucket unknown strings with
  python3-h5py python3-protobuf  # tests: reading .weights.h5 back; an independent TFRecord writer
  openmpi-bin libopenmpi-dev  # the OpenMPI peer of bench/allreduce.sh
  golang-go golang-github-masterminds-sprig-dev golang-github-ghodss-yaml-dev
  prometheus  # promtool and a real Prometheus for the monitoring tests
  clang libclang-rt-14-dev libomp-14-dev  # scripts/fuzz.sh, scripts/sanitize.sh: libFuzzer, sanitizers, OpenMP
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
