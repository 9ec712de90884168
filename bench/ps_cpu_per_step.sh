#!/usr/bin/env bash
# CPU per training step of the MNIST MLP (examples/mnist/mlp.json, batch 64):
# single-process `fit` against 1 PS + 1 worker (`tfjob-runtime local`, a
# chief, a PS and a worker process) with steps per execution 8 and 1. Each
# mode runs twice, for E1 and E2 epochs; CPU seconds (user + system, every
# process of the run) of the longer run less the shorter, over the steps
# between them, is the CPU a step costs with start-up left out.
# Why it matters: the examples/s of bench/mlp_ps_vs_single.sh are bounded by
# this. With C cores, parameter-server training can reach at most
#   C x (single's CPU per step) / (PS's CPU per step)
# of the single process (the "ceiling" printed), and only when all C cores
# are kept busy; a machine whose cores are also busy with something else
# takes from the three processes more than from the one.
#
# usage: bench/ps_cpu_per_step.sh [--rounds R] [--epochs E1,E2]
#        (from the project root, after the build; BUILD_DIR=build by default)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3 e1=16 e2=48
while (($#)); do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --epochs) IFS=, read -r e1 e2 <<< "$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
((e2 > e1)) || { echo "--epochs E1,E2 needs E2 > E1" >&2; exit 2; }
data=${MNIST_DIR:-../shared/data/mnist}
runtime=${BUILD_DIR:-build}/bin/tfjob-runtime
[[ -x $runtime ]] || { echo "build first: $runtime is missing" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
steps_per_epoch=125  # 8000 examples (the config's train take) / batch 64

# cpu MODE EPOCHS: CPU seconds of one run.
cpu() {
  local cmd=("$runtime")
  case "$1" in
    single) cmd+=(fit) ;;
    ps8) cmd+=(local --ps 1 --workers 1 -- fit --steps-per-execution 8) ;;
    ps1) cmd+=(local --ps 1 --workers 1 -- fit --steps-per-execution 1) ;;
  esac
  /usr/bin/time -f "%U %S" -o "$tmp/time" timeout 300 "${cmd[@]}" --config examples/mnist/mlp.json \
    --data-dir "$data" --threads 1 --epochs "$2" > "$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
  awk '{print $1 + $2}' "$tmp/time"
}
: > "$tmp/all.txt"
for ((r = 1; r <= rounds; r++)); do
  for mode in single ps8 ps1; do
    a=$(cpu "$mode" "$e1") b=$(cpu "$mode" "$e2")
    echo "$mode $a $b" >> "$tmp/all.txt"
  done
  echo "round $r done" >&2
done
/usr/bin/python3 - "$tmp/all.txt" "$e1" "$e2" "$steps_per_epoch" "$(nproc)" <<'PY'
import statistics, sys
path, e1, e2, spe, cores = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
per = {}
for line in open(path):
    mode, a, b = line.split()
    per.setdefault(mode, []).append(1000 * (float(b) - float(a)) / ((e2 - e1) * spe))
med = {m: statistics.median(v) for m, v in per.items()}
print(f"CPU ms per step, MNIST MLP batch 64, median of {len(per['single'])} rounds ({e1} vs {e2} epochs), {cores} cores")
names = {"single": "single process (fit)", "ps8": "1 PS + 1 worker, steps/exec 8", "ps1": "1 PS + 1 worker, steps/exec 1"}
for m in ("single", "ps8", "ps1"):
    ceiling = "" if m == "single" else f"   ceiling PS/single on {cores} cores: {cores * med['single'] / med[m]:.2f}"
    print(f"  {names[m]:<32} {med[m]:.3f} (min {min(per[m]):.3f}, max {max(per[m]):.3f}){ceiling}")
PY
