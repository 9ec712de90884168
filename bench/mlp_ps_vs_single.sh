#!/usr/bin/env bash
# Parameter-server training throughput vs single-process: the MNIST MLP
# (examples/mnist/mlp.json: 784-128-10, batch 64, Adam) trained
#   - single-process:  tfjob-runtime fit ...
#   - 1 PS + 1 worker: tfjob-runtime local --ps 1 --workers 1 -- fit ...
#     (a chief, a PS and a worker process on 127.0.0.1), with
#     --steps-per-execution 1 and 8,
# in the same run, alternating, median of --rounds. The figure is the
# summary's "examples_per_second" (training loop only, start-up excluded).
# 8 epochs by default: at 2 (250 steps, a fifth of a second) the figure
# is dominated by the first steps and by whoever else uses the machine.
# Thread settings are inherited as given: run with OMP_NUM_THREADS=... in the
# environment to pin every process's OpenMP pool (the header shows it).
#
# usage: bench/mlp_ps_vs_single.sh [--rounds R] [--epochs E] [--threads N]
#        (from the project root, after the build; BUILD_DIR=build by default;
#         data from ../shared/data/mnist or $MNIST_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3 epochs=8 threads=1
while (($#)); do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
data=${MNIST_DIR:-../shared/data/mnist}
runtime=${BUILD_DIR:-build}/bin/tfjob-runtime
[[ -x $runtime ]] || { echo "build first: $runtime is missing" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
common=(fit --config examples/mnist/mlp.json --data-dir "$data" --threads "$threads" --epochs "$epochs")
eps() { /usr/bin/python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["examples_per_second"]))' "$1"; }

: > "$tmp/all.txt"
for ((r = 1; r <= rounds; r++)); do
  line="round $r:"
  # 120 s cap per run: a stuck cluster must not hang the benchmark.
  timeout 120 "$runtime" "${common[@]}" --summary-json "$tmp/single.json" > "$tmp/log" 2>&1 \
    || { cat "$tmp/log" >&2; exit 1; }
  v=$(eps "$tmp/single.json"); echo "single $v" >> "$tmp/all.txt"; line+=" single $v"
  for spe in 1 8; do
    timeout 120 "$runtime" local --ps 1 --workers 1 -- "${common[@]}" --steps-per-execution "$spe" \
      --summary-json "$tmp/ps$spe.json" > "$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
    v=$(eps "$tmp/ps$spe.json"); echo "ps$spe $v" >> "$tmp/all.txt"; line+=", ps spe=$spe $v"
  done
  echo "$line examples/s"
done

/usr/bin/python3 - "$rounds" "$epochs" "$threads" "${OMP_NUM_THREADS:-unset}" "$tmp/all.txt" <<'PY'
import statistics, sys
rounds, epochs, threads, omp, path = sys.argv[1:6]
vals = {}
for line in open(path):
    k, v = line.split()
    vals.setdefault(k, []).append(float(v))
med = {k: statistics.median(v) for k, v in vals.items()}
print(f"MNIST MLP 784-128-10, batch 64, {epochs} epochs of 8000 examples, --threads {threads}, "
      f"OMP_NUM_THREADS={omp}, median of {rounds}")
print(f"  {'mode':<34} {'examples/s':>11} {'PS/single':>10}")
print(f"  {'single process (fit)':<34} {med['single']:>11.0f} {'':>10}")
for spe in ("1", "8"):
    v = med["ps" + spe]
    print(f"  {'1 PS + 1 worker, steps/exec ' + spe:<34} {v:>11.0f} {v / med['single']:>10.2f}")
best = max(med["ps1"], med["ps8"]) / med["single"]
print(f"  goal PS/single >= 0.85: {'met' if best >= 0.85 else 'NOT met'} (best {best:.2f})")
PY
