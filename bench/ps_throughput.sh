#!/usr/bin/env bash
# Push+pull throughput through ONE parameter server, 4 MiB and 64 MiB float32
# tensors, over loopback: our PS (tfjob-runtime as task ps:0, its own
# process) vs raw TCP request/response of the same sizes (the ceiling) vs a
# PyTorch RPC parameter server (TensorPipe, TCP only), measured in the same
# run. GB/s = 2 * bytes * iterations / seconds, 1 GB = 1e9 bytes. Each round
# runs bench_ps_throughput (ours and raw alternate inside it) and then
# torch_rpc_ps.py; the table shows the median over rounds.
#
# usage: bench/ps_throughput.sh [--rounds R] [--seconds S] [--sizes-mib 4,64]
#        (from the project root, after the build; BUILD_DIR=build by default)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
# The TCP data plane, as between hosts or pods, so raw TCP is its ceiling:
# on one host the PS would otherwise carry payloads in shared memory
# (docs/parameter-server.md), which raw TCP does not bound.
export TFJOB_PS_SHM=0
rounds=3 seconds=1.0 sizes_mib=4,64
bench_options "rounds seconds sizes_mib" "$@"
sizes=$sizes_mib
bench=$build/bin/bench_ps_throughput
need_built "$runtime" "$bench"
need_torch torch.distributed.rpc
bench_tmp
for ((r = 1; r <= rounds; r++)); do
  timeout 120 "$bench" --runtime "$runtime" --sizes-mib "$sizes" --reps 1 --seconds "$seconds" --warmup 1 --max-iters 2000 \
    | tee -a "$tmp/all.jsonl" > "$tmp/round.jsonl"
  # TensorPipe logs its shutdown on stderr through glog; keep it out of the table.
  timeout 120 /usr/bin/python3 bench/torch_rpc_ps.py --sizes-mib "$sizes" --reps 1 --seconds "$seconds" --warmup 1 \
    --max-iters 2000 2> "$tmp/torch.err" | tee -a "$tmp/all.jsonl" >> "$tmp/round.jsonl" \
    || { cat "$tmp/torch.err" >&2; exit 1; }
  /usr/bin/python3 - "$r" "$tmp/round.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
print(f"round {sys.argv[1]}: " + ", ".join(f"{r['impl']} {r['bytes'] >> 20} MiB {r['gbps']:.2f} GB/s" for r in rows))
PY
done

/usr/bin/python3 - "$rounds" "$tmp/all.jsonl" <<'PY'
import json, statistics, sys
rounds = int(sys.argv[1])
rows = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
peer = next((r["peer"] for r in rows if "peer" in r), "pytorch rpc")
med = {}
for impl in ("tfjob-ps", "raw-tcp", "pytorch-rpc"):
    for size in sorted({r["bytes"] for r in rows}):
        vals = [r["gbps"] for r in rows if r["impl"] == impl and r["bytes"] == size]
        if vals:
            med[impl, size] = statistics.median(vals)
print(f"Push+pull through one parameter server over 127.0.0.1, GB/s = 2*bytes*iterations/s (1e9 B), median of {rounds}")
print(f"  peer: {peer}")
print(f"  {'size':>7} {'tfjob-ps':>9} {'raw-tcp':>9} {'pytorch':>9} {'ours/raw':>9} {'ours/pytorch':>13}")
ok_raw = ok_torch = True
for size in sorted({r["bytes"] for r in rows}):
    ours, raw, torch = med.get(("tfjob-ps", size)), med.get(("raw-tcp", size)), med.get(("pytorch-rpc", size))
    r1, r2 = ours / raw, ours / torch
    ok_raw &= r1 >= 0.6
    ok_torch &= r2 >= 1.5
    print(f"  {size >> 20:>3} MiB {ours:>9.3f} {raw:>9.3f} {torch:>9.3f} {r1:>9.2f} {r2:>13.2f}")
print(f"  goals: ours/raw >= 0.60: {'met' if ok_raw else 'NOT met'}; ours/pytorch >= 1.50: {'met' if ok_torch else 'NOT met'}")
PY
