#!/bin/bash
# The GPU check, from the bundle scripts/gpu-bundle.sh made (docs/gpu.md):
#   1. where the CUDA libraries come from (the bundle, the host's Python
#      nvidia-* packages, /usr/local/cuda), and the driver
#   2. self-containment: every executable loads only the bundle's libraries
#      and those CUDA libraries
#   3. gpu_test, nccl_test, gpu_fit_test: each case
#   4. MNIST with --device gpu: the MLP to eval_accuracy >= 0.92, the CNN
#      to >= 0.97
#   5. bench/gpu_train.sh --rounds 1 against PyTorch ($PYTHON, default
#      python3) on the same GPU: first the device's measured cuBLAS FP32,
#      TF32, BF16 and FP16 GEMM rates (bench_gpu_gemm), then the wide MLP in
#      float32 and in mixed_bfloat16 as fractions of them, with the verdict
#      on the >= 50%-of-BF16 goal (a figure, not a pass or fail)
# GPU cases where no GPU is visible are skipped, with the reason. The last
# line is `N passed, M failed`; the exit status is 0 when nothing failed.
# Runs with an empty environment (env -i) too; sets nothing that reaches the
# host's programs (no LD_LIBRARY_PATH). Temporary files: one mktemp folder,
# removed at exit.
set -euo pipefail
[[ -n ${PATH:-} ]] || PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
b=$(cd "$(dirname "$0")" && pwd -P)
export TFJOB_BUNDLE=$b
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tfjob-gpu-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
if [[ -z ${HOME:-} ]]; then
  export HOME=$tmp/home
  mkdir -p "$HOME"
fi
# The tests' own temporary folders (tests/support: MakeTempDir).
export TEST_TMPDIR=$tmp/tests
mkdir -p "$TEST_TMPDIR"
began=$SECONDS

passed=0 failed=0 skipped=0
ok() { passed=$((passed + 1)); echo "  PASSED   $*"; }
bad() { failed=$((failed + 1)); echo "  FAILED   $*"; }
skip() { skipped=$((skipped + 1)); echo "  SKIPPED  $*"; }
finish() {
  echo
  echo "== summary: $((SECONDS - began)) s =="
  ((skipped == 0)) || echo "$skipped skipped (each SKIPPED line above says why)"
  echo "$passed passed, $failed failed"
  exit $((failed > 0 ? 1 : 0))
}
# `timeout` where the host has it: a hang must not eat the GPU time.
limit() {
  local s=$1
  shift
  if command -v timeout > /dev/null; then timeout -k 10 "$s" "$@"; else "$@"; fi
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}'; }

echo "== bundle =="
sed 's/^/  /' "$b/bundle-info.txt"
echo "  host: $(uname -srm), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) CPUs"
if command -v nvidia-smi > /dev/null; then
  limit 30 nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1 |
    sed 's/^/  nvidia-smi: /' || true
else
  echo "  nvidia-smi: not on this host"
fi
# A -march=native build runs only where the CPU has what the build machine's had.
if [[ -s $b/cpu-flags.txt ]]; then
  have=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  lacking=()
  while read -r f; do [[ $have == *" $f "* ]] || lacking+=("$f"); done < "$b/cpu-flags.txt"
  if ((${#lacking[@]})); then
    bad "cpu: the bundle was built with -march=native; this CPU lacks ${lacking[*]} (make it with scripts/gpu-bundle.sh --portable)"
  else
    ok "cpu: has the $(wc -l < "$b/cpu-flags.txt") instruction-set extensions the -march=native build may use"
  fi
fi

echo
echo "== CUDA libraries =="
# shellcheck source=/dev/null
. "$b/env.sh"
while read -r lib dir; do
  [[ -n $lib ]] || continue
  where=
  [[ $dir == "$b/lib" ]] && where=" (the bundle)"
  printf '  %-18s %s%s\n' "$lib" "$dir" "$where"
done <<< "$TFJOB_BUNDLE_FOUND"
if [[ -n $TFJOB_BUNDLE_DRIVER ]]; then
  printf '  %-18s %s (%s)\n' libcuda.so.1 "$TFJOB_BUNDLE_DRIVER" "$TFJOB_BUNDLE_DRIVER_HOW"
else
  printf '  %-18s %s\n' libcuda.so.1 "not found (no NVIDIA driver): the GPU cases will skip"
fi
echo "  library path: $TFJOB_BUNDLE_LIBPATH"
if [[ -n $TFJOB_BUNDLE_MISSING ]]; then
  for lib in $TFJOB_BUNDLE_MISSING; do
    bad "$lib: not in the bundle's lib/, the Python nvidia packages' nvidia/*/lib (${PYTHON:-python3}), /usr/local/cuda/lib64, /usr/local/cuda/lib, /usr/lib/x86_64-linux-gnu or /usr/lib64"
  done
  finish
fi

echo
echo "== self-containment =="
allowed=":${TFJOB_BUNDLE_LIBPATH}:"
exes=(gpu_test nccl_test gpu_fit_test tfjob-runtime bench_gpu_gemm)
for n in "${exes[@]}"; do
  rc=0
  "$b/lib/ld-linux-x86-64.so.2" --library-path "$TFJOB_BUNDLE_LIBPATH" --list "$b/exe/$n" > "$tmp/list" 2>&1 || rc=$?
  offending=()
  count=0
  while IFS= read -r line; do
    if [[ $line == *"not found"* ]]; then
      offending+=("$line")
    elif [[ $line =~ =\>\ (/[^ ]*)/[^/\ ]+\ \( ]]; then
      count=$((count + 1))
      [[ $allowed == *":${BASH_REMATCH[1]}:"* ]] || offending+=("$line")
    fi
  done < "$tmp/list"
  if ((rc != 0)) && ((${#offending[@]} == 0)); then
    bad "exe/$n: the bundled loader cannot list it (exit $rc): $(head -3 "$tmp/list" | tr '\n' ' ')"
  elif ((${#offending[@]})); then
    bad "exe/$n loads libraries from outside the bundle and the CUDA directories:"
    printf '             %s\n' "${offending[@]}"
  else
    ok "exe/$n: its $count libraries all come from the library path"
  fi
done

# One gtest executable: each case's result, the skipped ones with gtest's
# reason, the failed ones with their messages.
gtest() {
  local n=$1 secs=$2 rc=0 start
  echo
  echo "== $n =="
  start=$(now)
  TFJOB_BIN_DIR=$b/bin TFJOB_SOURCE_DIR=$b/src limit "$secs" "$b/bin/$n" --gtest_color=no > "$tmp/$n.log" 2>&1 ||
    rc=$?
  local took
  took=$(since "$start")
  awk '
    /^\[ RUN      \] / { name = $4; body = ""; skipped = 0; reason = ""; next }
    name != "" && /^\[ +(OK|FAILED|SKIPPED) +\] / {
      id = $4; sub(/,$/, "", id)
      if (id != name) next
      if ($2 == "OK") print "P\t" name
      else if ($2 == "SKIPPED") print "S\t" name "\t" (reason == "" ? "(gtest printed no reason)" : reason)
      else { print "F\t" name; printf "%s", body }
      name = ""; next
    }
    name != "" {
      if ($0 ~ /: Skipped$/) { skipped = 1; next }
      if (skipped) { reason = (reason == "" ? $0 : reason " " $0); next }
      body = body "M\t" $0 "\n"
    }
  ' "$tmp/$n.log" > "$tmp/$n.cases"
  local kind name reason cases=0 fails=0 shown=0
  while IFS=$'\t' read -r kind name reason; do
    case $kind in
      P) ok "$name"; cases=$((cases + 1)) ;;
      S) skip "$name: $reason"; cases=$((cases + 1)) ;;
      F) bad "$name"; cases=$((cases + 1)); fails=$((fails + 1)); shown=0 ;;
      M) if ((shown < 25)); then echo "             $name${reason:+	$reason}"; fi; shown=$((shown + 1)) ;;
    esac
  done < "$tmp/$n.cases"
  if ((rc == 124 || rc == 137)); then
    bad "$n: stopped after $secs s (timeout); its last lines:"
    tail -15 "$tmp/$n.log" | sed 's/^/             /'
  elif ((rc != 0 && fails == 0)); then
    bad "$n exited with status $rc and no failed case: its last lines:"
    tail -15 "$tmp/$n.log" | sed 's/^/             /'
  elif ((cases == 0)); then
    bad "$n ran no test case: its last lines:"
    tail -15 "$tmp/$n.log" | sed 's/^/             /'
  fi
  echo "  ($n: $cases cases, exit $rc, $took s)"
}
gtest gpu_test 150
gtest nccl_test 60
gtest gpu_fit_test 210

echo
echo "== MNIST with --device gpu =="
mnist() {  # model bar
  local m=$1 bar=$2 rc=0 start took acc
  start=$(now)
  limit 180 "$b/bin/tfjob-runtime" fit --config "$b/src/examples/mnist/$m.json" --data-dir "$b/shared/data/mnist" \
    --device gpu --summary-json "$tmp/$m.json" > "$tmp/$m.out" 2> "$tmp/$m.err" || rc=$?
  took=$(since "$start")
  if ((rc == 0)); then
    acc=$(awk -F'[,{}]' '{
      for (i = 1; i <= NF; i++) if (a == "" && $i ~ /^[[:space:]]*"eval_accuracy":/) { a = $i; sub(/^[^:]*:[[:space:]]*/, "", a) }
    } END { print a }' "$tmp/$m.json")
    grep -m1 'fit: replica on' "$tmp/$m.out" | sed 's/^/  /' || true
    if [[ -n $acc ]] && awk -v a="$acc" -v b="$bar" 'BEGIN {exit !(a + 0 >= b + 0)}'; then
      ok "MNIST $m on the GPU: eval_accuracy $acc >= $bar, $took s"
    else
      bad "MNIST $m on the GPU: eval_accuracy ${acc:-missing from the summary}, below $bar, $took s"
    fi
  elif ((rc == 2)) && [[ $(wc -l < "$tmp/$m.err") -eq 1 ]] &&
    grep -Eq 'flag --device gpu: (no CUDA device is visible|this build has no CUDA support)' "$tmp/$m.err"; then
    skip "MNIST $m on the GPU: $(cat "$tmp/$m.err")"
  else
    bad "MNIST $m on the GPU: exit $rc after $took s:"
    tail -15 "$tmp/$m.err" | sed 's/^/             /'
  fi
}
mnist mlp 0.92
mnist cnn 0.97

echo
echo "== bench/gpu_train.sh --rounds 1 --epochs 3 (tfjob GPU vs PyTorch on the same GPU) =="
rc=0
start=$(now)
TFJOB_RUNTIME=$b/bin/tfjob-runtime TFJOB_GEMM_BENCH=$b/bin/bench_gpu_gemm MNIST_DIR=$b/shared/data/mnist \
  PYTHON=${PYTHON:-python3} limit 300 bash "$b/src/bench/gpu_train.sh" --rounds 1 --epochs 3 > "$tmp/bench.out" 2>&1 ||
  rc=$?
took=$(since "$start")
sed 's/^/  /' "$tmp/bench.out"
if ((rc == 0)) && grep -q '^no GPU: ' "$tmp/bench.out"; then
  skip "bench/gpu_train.sh: $(sed -n 's/^no GPU: //p' "$tmp/bench.out" | head -1)"
elif ((rc == 0)); then
  ok "bench/gpu_train.sh, $took s"
  # The GEMM rates and the wide MLP's fractions of them (issue 45).
  if grep -q '^gemm: .*"type": "bf16".*"tflops"' "$tmp/bench.out" && grep -q '^verdict: ' "$tmp/bench.out"; then
    ok "bench_gpu_gemm: measured rates; $(sed -n 's/^verdict: //p' "$tmp/bench.out" | head -1)"
  elif grep -q '^gemm: .*"type": "bf16".*"skipped"' "$tmp/bench.out"; then
    skip "bench_gpu_gemm: no BF16 rate on this GPU: $(grep -o '"skipped": "[^"]*"' "$tmp/bench.out" | head -1)"
  else
    bad "bench_gpu_gemm: no measured BF16 GEMM rate or no verdict line in bench/gpu_train.sh's output"
  fi
else
  bad "bench/gpu_train.sh: exit $rc after $took s"
fi

finish
