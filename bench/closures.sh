#!/usr/bin/env bash
# Scheduling overhead: no-op closures per second through one
# ClusterCoordinator and 2 worker processes, for inflight_per_worker 1, 4 and
# 16 (bench/closures.cc says how it is measured). There is no peer for this
# figure in this run; the table compares against the goal and shows the
# in-flight speed-up over inflight_per_worker=1.
#
# usage: bench/closures.sh [--rounds R] [--closures N] [--mode processes|threads]
#        (from the project root, after the build; BUILD_DIR=build by default)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rounds=3 closures=20000 mode=processes
bench_options "rounds closures mode" "$@"
bench=$build/bin/bench_closures
need_built "$bench"
bench_tmp
# One worker pair for all rounds; settings alternate within each round. The
# per-run time cap keeps the whole benchmark bounded even if it is slow.
timeout 120 "$bench" --workers 2 --closures "$closures" --inflight 1,4,16 --reps "$rounds" --seconds 12 --warmup 500 \
  --mode "$mode" > "$tmp/all.jsonl"

/usr/bin/python3 - "$rounds" "$tmp/all.jsonl" <<'PY'
import json, statistics, sys
rounds = int(sys.argv[1])
rows = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
for r in rows:
    print(f"round {r['rep'] + 1}: inflight {r['inflight_per_worker']:>2}: {r['closures']} closures in "
          f"{r['seconds']:.2f} s = {r['closures_per_second']:.0f}/s" + (" (time cap hit)" if r["timed_out"] else ""))
ks = sorted({r["inflight_per_worker"] for r in rows})
med = {k: statistics.median(r["closures_per_second"] for r in rows if r["inflight_per_worker"] == k) for k in ks}
print(f"No-op closures/s, 1 coordinator + {rows[0]['workers']} workers ({rows[0]['mode']}), 127.0.0.1, median of {rounds}")
print(f"  {'inflight/worker':>15} {'closures/s':>11} {'vs inflight 1':>14} {'vs goal 20000':>14}")
for k in ks:
    print(f"  {k:>15} {med[k]:>11.0f} {med[k] / med[ks[0]]:>14.2f} {med[k] / 20000:>14.2f}")
best = max(med.values())
print(f"  goal >= 20000 closures/s: {'met' if best >= 20000 else 'NOT met'} (best {best:.0f})")
PY
