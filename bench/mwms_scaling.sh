#!/usr/bin/env bash
# Synchronous data-parallel throughput vs one process: the MNIST MLP
# (examples/mnist/mlp.json: 784-128-10, global batch 64, Adam) trained
#   - one process:         tfjob-runtime fit ...              (one_device)
#   - 2 worker processes:  tfjob-runtime local --workers 2 -- fit ...
#                          (multi_worker_mirrored: each worker computes 32
#                          rows of every batch of 64, ring all-reduce)
#   - for reference, 2 replicas in one process (--strategy mirrored)
# in the same run, alternating, median of --rounds. The figure is the
# summary's "examples_per_second" (training loop only, start-up excluded),
# so all three are measured on the same global batch and the same steps.
# The multi-worker run's rank 0 also reports where its step time went
# (input, compute, all-reduce, apply: the summary's "step_seconds").
#
# On a machine with fewer cores than processes (this project's CI has 2)
# the workers share the cores they would each need, so the ratio shows the
# cost of synchronisation, not a speed-up.
#
# usage: bench/mwms_scaling.sh [--rounds R] [--epochs E]
#        (from the project root, after the build; BUILD_DIR=build by default;
#         data from ../shared/data/mnist or $MNIST_DIR)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rounds=3 epochs=3
bench_options "rounds epochs" "$@"
need_built "$runtime"
bench_tmp
common=(fit --config examples/mnist/mlp.json --data-dir "$data" --epochs "$epochs")
run() {  # name, then the command
  local name=$1; shift
  # 120 s cap per run: a stuck group must not hang the benchmark.
  timeout 120 "$@" --summary-json "$tmp/$name.json" > "$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
  cp "$tmp/$name.json" "$tmp/$name.$r.json"
}

for ((r = 1; r <= rounds; r++)); do
  run single "$runtime" "${common[@]}"
  run mwms2 "$runtime" local --workers 2 -- "${common[@]}"
  run mirrored2 "$runtime" "${common[@]}" --strategy mirrored --replicas 2
  /usr/bin/python3 - "$tmp" "$r" <<'PY'
import json, sys
d, r = sys.argv[1], sys.argv[2]
v = {n: round(json.load(open(f"{d}/{n}.{r}.json"))["examples_per_second"]) for n in ("single", "mwms2", "mirrored2")}
print(f"round {r}: one process {v['single']}, 2 workers {v['mwms2']}, mirrored x2 {v['mirrored2']} examples/s")
PY
done

/usr/bin/python3 - "$tmp" "$rounds" "$(nproc)" <<'PY'
import json, statistics, sys
d, rounds, cores = sys.argv[1], int(sys.argv[2]), sys.argv[3]
runs = {n: [json.load(open(f"{d}/{n}.{r}.json")) for r in range(1, rounds + 1)] for n in ("single", "mwms2", "mirrored2")}
med = {n: statistics.median(x["examples_per_second"] for x in v) for n, v in runs.items()}
acc = {n: v[-1]["eval_accuracy"] for n, v in runs.items()}
print(f"MNIST MLP, global batch 64, median of {rounds} ({cores} cores)")
print(f"  {'':24} {'examples/s':>11} {'vs one process':>15} {'eval_accuracy':>14}")
for n, label in (("single", "one process"), ("mwms2", "2 worker processes"), ("mirrored2", "mirrored, 2 replicas")):
    print(f"  {label:24} {med[n]:>11.0f} {med[n] / med['single']:>15.2f} {acc[n]:>14.4f}")
# Per-step cost of the median multi-worker run, from its rank 0.
mid = sorted(runs["mwms2"], key=lambda x: x["examples_per_second"])[len(runs["mwms2"]) // 2]
one = sorted(runs["single"], key=lambda x: x["examples_per_second"])[len(runs["single"]) // 2]
def per_step(x):
    s = x["step_seconds"]
    return {k: 1e3 * s[k] / s["steps"] for k in ("input", "compute", "all_reduce", "apply")}
a, b = per_step(mid), per_step(one)
print("  per step (ms)            input  compute  all-reduce  apply   total")
for label, p in (("one process", b), ("2 workers, rank 0", a)):
    print(f"  {label:24} {p['input']:>5.3f} {p['compute']:>8.3f} {p['all_reduce']:>11.3f} {p['apply']:>6.3f} {sum(p.values()):>7.3f}")
PY
