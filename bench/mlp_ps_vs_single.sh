#!/usr/bin/env bash
# Parameter-server training throughput vs single-process: the MNIST MLP
# (examples/mnist/mlp.json: 784-128-10, batch 64, Adam) trained
#   - single-process:  tfjob-runtime fit ...
#   - 1 PS + 1 worker: tfjob-runtime local --ps 1 --workers 1 -- fit ...
#     (a chief, a PS and a worker process on 127.0.0.1; their data plane
#     carries tensors in shared memory, TFJOB_PS_SHM=0 in the environment
#     makes it TCP), with
#     --steps-per-execution 1 and 8,
# in the same run, alternating, over --rounds (5): min / median / max of the
# summary's "examples_per_second" (training loop only, start-up excluded),
# and where a step's time goes, in ms per step (medians): the single
# process's input / compute / apply (its summary's step_seconds) beside the
# PS worker's input / pull wait / compute / push / metrics / push wait at the
# closure's end, and the rest of its closure time (other) (the chief's
# summary's worker_step_seconds), with how many closures the worker runs at
# once on average: closures overlap, so a closure's pull wait includes time
# another closure computes.
# After each round, bench_cpu_pair (bench/cpu_pair.cc) measures what
# handing work between the two CPUs costs at that moment: a cache line's
# round trip and a 400 KiB hand-off. On a VM the host may run its two
# virtual CPUs on cores that share a last-level cache or not, and that can
# change within seconds; the PS job hands every step's tensors and wake-ups
# between processes, the single process does not (docs/parameter-server.md,
# "The slow periods: whether the two CPUs share a cache"). The round lines
# print it, so a slow round can be read beside the machine's state.
# 8 epochs by default: at 2 (250 steps, a fifth of a second) the figure
# is dominated by the first steps and by whoever else uses the machine.
# Thread settings are inherited as given: run with OMP_NUM_THREADS=... in the
# environment to pin every process's OpenMP pool (the header shows it).
#
# usage: bench/mlp_ps_vs_single.sh [--rounds R] [--epochs E] [--threads N]
#        (from the project root, after the build; BUILD_DIR=build by default;
#         data from ../shared/data/mnist or $MNIST_DIR)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rounds=5 epochs=8 threads=1
bench_options "rounds epochs threads" "$@"
need_built "$runtime" "$build/bin/bench_cpu_pair"
bench_tmp
common=(fit --config examples/mnist/mlp.json --data-dir "$data" --threads "$threads" --epochs "$epochs")

: > "$tmp/all.txt"
# record MODE JSON: the examples/s and the step breakdown of one run.
record() {
  /usr/bin/python3 - "$1" "$2" >> "$tmp/all.txt" <<'PY'
import json, sys
mode, path = sys.argv[1], sys.argv[2]
j = json.load(open(path))
out = {"mode": mode, "eps": j["examples_per_second"], "ms": {}}
steps = 0
if "step_seconds" in j:  # the single process (sync strategies)
    t = j["step_seconds"]; steps = t.get("steps", 0)
    for k in ("input", "compute", "apply"): out["ms"][k] = t.get(k, 0)
elif "worker_step_seconds" in j:  # the chief of a PS run
    t = j["worker_step_seconds"]; steps = t.get("steps", 0)
    parts = ("input", "pull_wait", "compute", "push", "record", "push_wait")
    for k in parts: out["ms"][k] = t.get(k, 0)
    out["ms"]["other"] = t.get("closure", 0) - sum(t.get(k, 0) for k in parts)
    # Closure seconds per training second: how many closures the worker
    # runs at once on average (the coordinator keeps two in flight per worker).
    if j.get("train_seconds"): out["in_flight"] = t.get("closure", 0) / j["train_seconds"]
if steps:
    out["ms"] = {k: 1000 * v / steps for k, v in out["ms"].items()}
print(json.dumps(out))
PY
}
for ((r = 1; r <= rounds; r++)); do
  line="round $r:"
  # 120 s cap per run: a stuck cluster must not hang the benchmark.
  timeout 120 "$runtime" "${common[@]}" --summary-json "$tmp/single.json" > "$tmp/log" 2>&1 \
    || { cat "$tmp/log" >&2; exit 1; }
  record single "$tmp/single.json"; line+=" single $(printf %.0f "$(eps "$tmp/single.json")")"
  for spe in 1 8; do
    timeout 120 "$runtime" local --ps 1 --workers 1 -- "${common[@]}" --steps-per-execution "$spe" \
      --summary-json "$tmp/ps$spe.json" > "$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
    record "ps$spe" "$tmp/ps$spe.json"; line+=", ps spe=$spe $(printf %.0f "$(eps "$tmp/ps$spe.json")")"
  done
  pair=$("$build/bin/bench_cpu_pair")
  echo "$pair" >> "$tmp/pair.txt"
  read -r trip handoff one <<< "$(sed -E 's/[a-z_]+=//g' <<< "$pair")"
  echo "$line examples/s; CPU pair: cache line round trip $trip ns, 400 KiB hand-off $handoff us ($one on one CPU)"
done

/usr/bin/python3 - "$rounds" "$epochs" "$threads" "${OMP_NUM_THREADS:-unset}" "$tmp/all.txt" "$tmp/pair.txt" <<'PY'
import json, statistics, sys
rounds, epochs, threads, omp, path, pair_path = sys.argv[1:7]
runs = {}
for line in open(path):
    r = json.loads(line)
    runs.setdefault(r["mode"], []).append(r)
eps = {m: sorted(r["eps"] for r in rs) for m, rs in runs.items()}
med = {m: statistics.median(v) for m, v in eps.items()}
print(f"MNIST MLP 784-128-10, batch 64, {epochs} epochs of 8000 examples, --threads {threads}, "
      f"OMP_NUM_THREADS={omp}, {rounds} rounds")
print(f"  {'mode':<32} {'min':>8} {'median':>8} {'max':>8}  examples/s   {'PS/single (median)':>18}")
names = {"single": "single process (fit)", "ps1": "1 PS + 1 worker, steps/exec 1", "ps8": "1 PS + 1 worker, steps/exec 8"}
for m in ("single", "ps1", "ps8"):
    v = eps[m]
    ratio = "" if m == "single" else f"{med[m] / med['single']:.2f}"
    print(f"  {names[m]:<32} {v[0]:>8.0f} {med[m]:>8.0f} {v[-1]:>8.0f}               {ratio:>18}")
print("  where a step's time goes, ms per step (median over rounds):")
for m in ("single", "ps1", "ps8"):
    keys = list(runs[m][0]["ms"].keys())
    parts = [f"{k} {statistics.median(r['ms'][k] for r in runs[m]):.3f}" for k in keys]
    if "in_flight" in runs[m][0]:
        parts.append(f"closures in flight {statistics.median(r['in_flight'] for r in runs[m]):.2f}")
    print(f"    {names[m]:<30} " + ", ".join(parts))
trips = sorted(float(l.split()[0].split("=")[1]) for l in open(pair_path))
print(f"  CPU pair after each round, cache line round trip ns: min {trips[0]:.0f}, median "
      f"{statistics.median(trips):.0f}, max {trips[-1]:.0f}")
for spe, goal in (("8", 0.85), ("1", 0.70)):
    ratio = med["ps" + spe] / med["single"]
    print(f"  goal median PS/single >= {goal} at steps/exec {spe}: {'met' if ratio >= goal else 'NOT met'} ({ratio:.2f})")
PY
