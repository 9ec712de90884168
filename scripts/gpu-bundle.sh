#!/usr/bin/env bash
# Packs the GPU check into one self-contained folder (docs/gpu.md): the GPU
# test executables, tfjob-runtime and what bench/gpu_train.sh needs (the
# script, bench_gpu_gemm, PyTorch's peer), with
# every shared library they load, the dynamic loader and the C library of
# this machine, the MNIST files, and run.sh, which runs it all through the
# bundled loader on a bare GPU host and prints `N passed, M failed`.
#
# usage: scripts/gpu-bundle.sh [--out DIR] [--portable]
#   --out DIR    where the bundle goes (default build/gpu-bundle); a folder
#                already there is replaced only if it is an earlier bundle
#   --portable   build with -DTFJOB_NATIVE=OFF (any x86-64 CPU) in
#                build/portable instead of the -march=native build in build/
#
# Builds (Release, CUDA found by CMake) only the bundle's targets, in build/
# as scripts/test.sh configures it, or in $TFJOB_BUILD_DIR. Left out: the
# NVIDIA driver's libraries (libcuda.so.1, libnvidia-*), which the GPU host
# has, and cuBLAS, cuBLASLt and NCCL (hundreds of MiB), which run.sh finds
# on the host (its PyTorch's nvidia-* Python packages or /usr/local/cuda).
set -euo pipefail
# --out and $TFJOB_BUILD_DIR, when relative, are from where this was started.
caller=$PWD
cd "$(dirname "$0")/.."

usage="usage: scripts/gpu-bundle.sh [--out DIR] [--portable]"
out=build/gpu-bundle
portable=0
while (($#)); do
  case "$1" in
    --out)
      [[ -n "${2:-}" ]] || { echo "gpu-bundle.sh: --out needs a directory ($usage)" >&2; exit 2; }
      out=$2
      [[ $out == /* ]] || out=$caller/$out
      shift 2
      ;;
    --portable) portable=1; shift ;;
    -h | --help) echo "$usage"; exit 0 ;;
    *) echo "gpu-bundle.sh: unknown argument '$1' ($usage)" >&2; exit 2 ;;
  esac
done

# A folder already at --out is replaced only when it is an earlier bundle.
if [[ -e $out ]] && ! [[ -f $out/run.sh && -f $out/exe/tfjob-runtime ]]; then
  echo "gpu-bundle.sh: $out exists and is not a GPU bundle; choose another --out" >&2
  exit 1
fi

if [[ -n ${TFJOB_BUILD_DIR:-} && $TFJOB_BUILD_DIR != /* ]]; then
  TFJOB_BUILD_DIR=$caller/$TFJOB_BUILD_DIR
fi
if ((portable)); then
  build=${TFJOB_BUILD_DIR:-build/portable}
  [[ -f $build/build.ninja ]] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTFJOB_NATIVE=OFF
else
  build=${TFJOB_BUILD_DIR:-build}
  [[ -f $build/build.ninja ]] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cache=$build/CMakeCache.txt
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$cache")
if [[ $build_type != Release ]]; then
  echo "gpu-bundle.sh: $build is a '$build_type' build; the bundle is made from a Release build" >&2
  exit 1
fi
# tfjob_gpu exists only where cmake/cuda.cmake found the toolkit.
# (The list is read whole first: grep -q's early exit could kill cmake with
# SIGPIPE, which pipefail would count as a failure.)
build_targets=$(cmake --build "$build" --target help)
if ! grep -q '^tfjob_gpu:' <<< "$build_targets"; then
  echo "gpu-bundle.sh: CMake did not find the CUDA toolkit in $build (no tfjob_gpu target; see 'tfjob: CUDA support' in its configure output)" >&2
  exit 1
fi

# kernel_math_test checks host arithmetic, which CI runs on every machine; it
# stays out so the bundle keeps under 62 MiB.
# bench_gpu_gemm (the GEMM rates bench/gpu_train.sh measures against) is a
# few kilobytes: the CUDA runtime and cuBLAS it links are the bundle's and
# the host's.
exes=(bin/tfjob-runtime tests/gpu_test tests/nccl_test tests/gpu_fit_test bin/bench_gpu_gemm)
targets=()
for e in "${exes[@]}"; do targets+=("$(basename "$e")"); done
cmake --build "$build" --target "${targets[@]}"

mnist=../shared/data/mnist
mnist_files=(t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)
for f in "${mnist_files[@]}"; do
  [[ -f $mnist/$f ]] || { echo "gpu-bundle.sh: $mnist/$f is missing (the bundle carries MNIST)" >&2; exit 1; }
done

mkdir -p "$(dirname "$out")"
stage=$(mktemp -d "$(dirname "$out")/.gpu-bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,exe,lib,src/bench,src/examples/mnist,shared/data/mnist}

# exe/: stripped copies.
for e in "${exes[@]}"; do
  strip --strip-unneeded -o "$stage/exe/$(basename "$e")" "$build/$e"
done

# lib/: the union of what the executables load, as ldd resolves it here,
# under their SONAMEs, less the driver's and the big CUDA libraries.
declare -A libs=()
loader=
while read -r name arrow path _; do
  if [[ $name == /* && $name == */ld-linux-x86-64.so.2 ]]; then
    loader=$name
    continue
  fi
  [[ $arrow == "=>" ]] || continue
  if [[ $path == not ]]; then
    echo "gpu-bundle.sh: $name is not found by ldd here" >&2
    exit 1
  fi
  case "$name" in
    libcuda.so* | libnvidia-* | libcublas.so* | libcublasLt.so* | libnccl.so*) continue ;;
  esac
  libs[$name]=$path
done < <(for e in "${exes[@]}"; do ldd "$build/$e"; done)
[[ -n $loader && -n ${libs[libc.so.6]:-} ]] || { echo "gpu-bundle.sh: ldd named no loader or libc" >&2; exit 1; }
# libcuda.so.1 (dlopened by cudart on the GPU host) loads some of these: they
# must be the bundle's, so the process has one glibc.
libdir=$(dirname "${libs[libc.so.6]}")
for name in libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libgcc_s.so.1 libstdc++.so.6; do
  [[ -n ${libs[$name]:-} ]] && continue
  if [[ -f $libdir/$name ]]; then
    libs[$name]=$libdir/$name
  else
    p=$(/sbin/ldconfig -p | awk -v n="$name" '$1 == n && /x86-64/ && p == "" {p = $NF} END {print p}')
    [[ -n $p ]] || { echo "gpu-bundle.sh: $name not found on this machine" >&2; exit 1; }
    libs[$name]=$p
  fi
done
cp -L "$loader" "$stage/lib/ld-linux-x86-64.so.2"
for name in "${!libs[@]}"; do
  cp -L "${libs[$name]}" "$stage/lib/$name"
done
chmod 755 "$stage/lib/ld-linux-x86-64.so.2"

# src/ (TFJOB_SOURCE_DIR for the tests, the project root for the benchmark)
# and shared/ beside it, where SourceDir()/../shared/data/mnist looks.
cp examples/mnist/*.json "$stage/src/examples/mnist/"
cp bench/gpu_train.sh bench/torch_mlp.py bench/mnist_idx.py "$stage/src/bench/"
for f in "${mnist_files[@]}"; do cp -L "$mnist/$f" "$stage/shared/data/mnist/"; done

# bin/: a wrapper per executable that starts it through the bundled loader
# with the bundle's library path (never LD_LIBRARY_PATH, which would give
# the bundled glibc to the host's own programs too).
for e in "${exes[@]}"; do
  n=$(basename "$e")
  cat > "$stage/bin/$n" <<EOF
#!/bin/sh
# $n from the tfjob GPU bundle (scripts/gpu-bundle.sh): runs exe/$n through
# the bundle's own dynamic loader and libraries; see README.txt.
case \$0 in */*) here=\${0%/*} ;; *) here=. ;; esac
TFJOB_BUNDLE=\$(cd "\$here/.." && pwd -P) || exit 127
# The library path run.sh or a parent wrapper of this bundle found, or env.sh's.
# shellcheck source=/dev/null
case \${TFJOB_BUNDLE_LIBPATH:-} in
  "\$TFJOB_BUNDLE/lib" | "\$TFJOB_BUNDLE/lib:"*) ;;
  *) . "\$TFJOB_BUNDLE/env.sh" || exit 127 ;;
esac
# tfjob-runtime local starts its tasks with this, not /proc/self/exe (the loader).
TFJOB_RUNTIME_SELF=\$TFJOB_BUNDLE/bin/tfjob-runtime
export TFJOB_BUNDLE TFJOB_BUNDLE_LIBPATH TFJOB_RUNTIME_SELF
exec "\$TFJOB_BUNDLE/lib/ld-linux-x86-64.so.2" --library-path "\$TFJOB_BUNDLE_LIBPATH" --argv0 "\$0" \\
  "\$TFJOB_BUNDLE/exe/$n" "\$@"
EOF
  chmod 755 "$stage/bin/$n"
done

cp scripts/gpu-bundle/env.sh scripts/gpu-bundle/run.sh scripts/gpu-bundle/README.txt "$stage/"
chmod 755 "$stage/run.sh"

# What run.sh says about the build: where and from what it was made, and
# the vector instructions a -march=native build may use, which the GPU
# host's CPU must have too.
native=$(sed -n 's/^TFJOB_NATIVE:BOOL=//p' "$cache")
{
  echo "commit $(git rev-parse --short HEAD 2> /dev/null || echo unknown)$(git diff --quiet HEAD 2> /dev/null || echo ' (with uncommitted changes)')"
  echo "built $(date -u +%Y-%m-%dT%H:%MZ) on $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), glibc $(ldd --version | head -1 | awk '{print $NF}')"
  echo "TFJOB_NATIVE $native, CUDA architectures $(sed -n 's/^TFJOB_CUDA_ARCHITECTURES:STRING=//p' "$cache")"
} > "$stage/bundle-info.txt"
: > "$stage/cpu-flags.txt"
if [[ $native == ON ]]; then
  # The extensions (as /proc/cpuinfo names them) that the compiler's own
  # code generation may use; those reached only through intrinsics (AES,
  # SHA, SSE4a, ...) are left out: no code of this project calls them.
  isa="ssse3 sse4_1 sse4_2 popcnt abm movbe avx avx2 fma f16c bmi1 bmi2
       avx512f avx512dq avx512cd avx512bw avx512vl avx512ifma avx512vbmi avx512_vbmi2 avx512_vnni
       avx512_bitalg avx512_vpopcntdq avx512_bf16 avx512_fp16 gfni"
  have=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  for f in $isa; do [[ $have == *" $f "* ]] && echo "$f"; done > "$stage/cpu-flags.txt"
fi

if [[ -n "$(find "$stage" -type l)" ]]; then
  echo "gpu-bundle.sh: the bundle has symbolic links: $(find "$stage" -type l | head -3)" >&2
  exit 1
fi
rm -rf "$out"
mv "$stage" "$out"
trap - EXIT
chmod 755 "$out"
bytes=$(du -sb "$out" | cut -f1)
mib=$(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1048576}')
echo "GPU bundle: $(cd "$out" && pwd -P) ($mib MiB)"
# A GPU host takes 64 MiB per copy; 62 leaves room for anything carried
# beside the bundle.
if ((bytes >= 62 * 1048576)); then
  echo "gpu-bundle.sh: the bundle is $mib MiB, over the 62 MiB kept under the 64 MiB a GPU host takes per copy" >&2
  exit 1
fi
