#!/usr/bin/env bash
# Parameter-server training of an embedding model, pulling only the rows each
# batch uses vs pulling whole tables (the old path), in the same run:
# bench/embedding_job.json, a bag of 4 ids per example into an Embedding of
# 1,000,000 x 64 float32 (256 MB) split over 2 PS tasks (--partitioner
# fixed:2), then Dense 32 and Dense 2, Adagrad; 2 workers; batch 64.
#   rows: fit --ps-pull rows   (each step pulls the <= 256 rows its batch uses
#                               from the shards that hold them)
#   full: fit --ps-pull full   (each step pulls both 128 MB shards)
# Both push only the rows the batch touched (sparse gradients), and both
# prefetch (--ps-prefetch true, the default). The data are generated here: ids
# drawn from a power law over the table (a few ids are common, most rare, as
# real categorical features are), label = a fixed function of the ids.
# The figure is the chief's summary "examples_per_second" (training loop
# only), median of --rounds, the two modes alternating.
#
# usage: bench/embedding_ps.sh [--rounds R] [--steps-rows N] [--steps-full N]
#        (steps per run of each mode: full-table steps are slow, so fewer)
#        (from the project root, after the build; BUILD_DIR=build by default)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rounds=3 steps_rows=1000 steps_full=40
bench_options "rounds steps_rows steps_full" "$@"
need_built "$runtime"
bench_tmp
/usr/bin/python3 - "$tmp" <<'PY'
import random, sys
d = sys.argv[1]
rng = random.Random(11)
rows = 1_000_000
def example():
    ids = [min(rows - 1, int(rows * rng.random() ** 3)) for _ in range(4)]
    label = (sum((i * 2654435761) >> 7 & 1 for i in ids) >= 2) * 1
    return ids + [label]
for name, n in (("embedding_train.csv", 64000), ("embedding_eval.csv", 2000)):
    with open(f"{d}/{name}", "w") as f:
        f.write("a,b,c,d,label\n")
        for _ in range(n):
            f.write(",".join(map(str, example())) + "\n")
PY

# Steps per run: the job file's one epoch is cut with steps_per_epoch.
for mode in rows full; do
  steps=$([[ $mode == rows ]] && echo "$steps_rows" || echo "$steps_full")
  /usr/bin/python3 - "$tmp" "$mode" "$steps" <<'PY'
import json, sys
d, mode, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
job = json.load(open("bench/embedding_job.json"))
job["steps_per_epoch"] = steps
json.dump(job, open(f"{d}/job-{mode}.json", "w"))
PY
done
run() {  # mode
  timeout 300 "$runtime" local --ps 2 --workers 2 -- fit --config "$tmp/job-$1.json" --data-dir "$tmp" \
    --partitioner fixed:2 --ps-pull "$1" --summary-json "$tmp/$1.json" \
    > "$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
  /usr/bin/python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["examples_per_second"]))' \
    "$tmp/$1.json" | tee -a "$tmp/$1.txt"
}
for ((r = 1; r <= rounds; r++)); do
  rows=$(run rows); full=$(run full)
  echo "round $r: rows $rows, full tables $full examples/s"
done

/usr/bin/python3 - "$tmp" "$rounds" <<'PY'
import statistics, sys
d, rounds = sys.argv[1], sys.argv[2]
med = {m: statistics.median(float(x) for x in open(f"{d}/{m}.txt")) for m in ("rows", "full")}
print(f"Embedding 1,000,000 x 64 float32 over 2 PS (fixed:2), 2 workers, batch 64, median of {rounds}")
print(f"  {'mode':<36} {'examples/s':>11}")
print(f"  {'rows the batch uses (--ps-pull rows)':<36} {med['rows']:>11.0f}")
print(f"  {'whole tables (--ps-pull full)':<36} {med['full']:>11.0f}")
print(f"  rows / full: {med['rows'] / med['full']:.1f}x")
PY
