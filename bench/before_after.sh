#!/usr/bin/env bash
# One build against another in the same run, for a change that must not move
# speed (a refactoring): RING all-reduce bus bandwidth (2 processes),
# push+pull through one parameter server, single-process MNIST MLP `fit`,
# multi-worker mirrored `fit` (2 workers) and parameter-server `fit` (1 PS +
# 1 worker, steps per execution 8). Each round runs every measurement with
# both builds, which goes first alternating; the table shows the median
# over rounds of each and after/before.
#
# usage: bench/before_after.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR [--rounds R]
#        (from the project root; each build needs tfjob-runtime,
#         bench_allreduce and bench_ps_throughput)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
(($# >= 2)) || { sed -n 2,12p bench/before_after.sh >&2; exit 2; }
before=$1 after=$2
shift 2
rounds=3
bench_options rounds "$@"
for b in "$before" "$after"; do
  for t in tfjob-runtime bench_allreduce bench_ps_throughput; do
    [[ -x $b/bin/$t ]] || { echo "$b/bin/$t is missing (ninja -C $b tfjob-runtime bench_allreduce bench_ps_throughput)" >&2; exit 2; }
  done
done
bench_tmp
fit=(fit --config examples/mnist/mlp.json --data-dir "$data" --threads 1 --epochs 10)

# measure BUILD NAME: appends "NAME VALUE" lines for that build to $tmp/<which>.txt
measure() {
  local b=$1 which=$2 out="$tmp/$2.txt"
  timeout 120 "$b/bin/bench_allreduce" --procs 2 --sizes-mib 4,64 --seconds 1 > "$tmp/ar" 2>&1 || { cat "$tmp/ar" >&2; exit 1; }
  /usr/bin/python3 - "$tmp/ar" >> "$out" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        print(f"allreduce_{r['bytes'] >> 20}MiB_busbw_GBps {r['busbw_gbps']}")
PY
  timeout 120 "$b/bin/bench_ps_throughput" --runtime "$b/bin/tfjob-runtime" --sizes-mib 4,64 --reps 1 --seconds 1 \
    --warmup 1 --max-iters 2000 > "$tmp/ps" 2>&1 || { cat "$tmp/ps" >&2; exit 1; }
  /usr/bin/python3 - "$tmp/ps" >> "$out" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        if r["impl"] == "tfjob-ps":
            print(f"ps_pushpull_{r['bytes'] >> 20}MiB_GBps {r['gbps']}")
PY
  timeout 120 "$b/bin/tfjob-runtime" "${fit[@]}" --summary-json "$tmp/s.json" > "$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
  echo "fit_single_examples_per_s $(eps "$tmp/s.json")" >> "$out"
  timeout 180 "$b/bin/tfjob-runtime" local --workers 2 -- "${fit[@]}" --summary-json "$tmp/m.json" > "$tmp/log" 2>&1 \
    || { cat "$tmp/log" >&2; exit 1; }
  echo "fit_mwms2_examples_per_s $(eps "$tmp/m.json")" >> "$out"
  timeout 180 "$b/bin/tfjob-runtime" local --ps 1 --workers 1 -- "${fit[@]}" --steps-per-execution 8 \
    --summary-json "$tmp/p.json" > "$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
  echo "fit_ps_spe8_examples_per_s $(eps "$tmp/p.json")" >> "$out"
}

for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then order=(before after); else order=(after before); fi
  for which in "${order[@]}"; do
    if [[ $which == before ]]; then measure "$before" before; else measure "$after" after; fi
  done
  echo "round $r of $rounds done ($(IFS=,; echo "${order[*]}"))"
done

/usr/bin/python3 - "$tmp/before.txt" "$tmp/after.txt" "$rounds" "$before" "$after" <<'PY'
import statistics, sys
def load(path):
    vals = {}
    for line in open(path):
        k, v = line.split()
        vals.setdefault(k, []).append(float(v))
    return vals
b, a = load(sys.argv[1]), load(sys.argv[2])
print(f"median of {sys.argv[3]} rounds; before = {sys.argv[4]}, after = {sys.argv[5]}")
print(f"  {'measure':<32} {'before':>10} {'after':>10} {'after/before':>13}  (spread before | after)")
for k in b:
    mb, ma = statistics.median(b[k]), statistics.median(a[k])
    spread = lambda v: f"{min(v):.4g}-{max(v):.4g}"
    print(f"  {k:<32} {mb:>10.4g} {ma:>10.4g} {ma / mb:>13.3f}  ({spread(b[k])} | {spread(a[k])})")
PY
