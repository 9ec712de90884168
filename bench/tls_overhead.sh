#!/usr/bin/env bash
# What mutual TLS between a job's tasks costs (docs/security.md): the same
# transports with and without TLS, measured in the same run, alternating
# which goes first: all-reduce bus bandwidth of the ring between 2 processes
# (bench_allreduce [--tls]) and push+pull GB/s through one PS
# (bench_ps_throughput --impls ours [--tls]). For scale, OpenSSL's own
# AES-128-GCM rate on one core here (`openssl speed`, 16 KiB blocks): TLS
# 1.3 encrypts every byte once and decrypts it once, with that cipher first
# in the runtime's preference. Medians over rounds; TLS / plain is the cost.
#
# usage: bench/tls_overhead.sh [--rounds R] [--seconds S]
#        (from the project root, after the build; BUILD_DIR=build by default)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
# Clear text over TCP against TLS over TCP: on one host the clear-text PS
# would otherwise carry payloads in shared memory, which TLS never does.
export TFJOB_PS_SHM=0
rounds=3 seconds=1.0
bench_options "rounds seconds" "$@"
need_built "$build/bin/bench_allreduce" "$build/bin/bench_ps_throughput" "$runtime"
command -v openssl > /dev/null || { echo "openssl is missing" >&2; exit 2; }
bench_tmp
ring() { timeout 300 "$build/bin/bench_allreduce" --procs 2 --sizes-mib 1,16,64 --seconds "$seconds" "$@"; }
ps() {
  timeout 300 "$build/bin/bench_ps_throughput" --runtime "$build/bin/tfjob-runtime" --impls ours --reps 1 \
    --seconds "$seconds" --warmup 1 "$@"
}
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then
    ring --tls; ring; ps --tls; ps
  else
    ring; ring --tls; ps; ps --tls
  fi >> "$tmp/all.jsonl"
done
aes=$(openssl speed -bytes 16384 -seconds 1 -evp aes-128-gcm 2> /dev/null | awk '/^AES-128-GCM/ {print $2}')

/usr/bin/python3 - "$rounds" "$tmp/all.jsonl" "$aes" <<'PY'
import json, statistics, sys
rounds, aes = int(sys.argv[1]), sys.argv[3]
rows = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
def med(impl, size, field):
    vals = [r[field] for r in rows if r["impl"] == impl and r["bytes"] == size]
    if len(vals) != rounds:
        sys.exit(f"tls_overhead.sh: {impl} {size} bytes has {len(vals)} results, want {rounds}")
    return statistics.median(vals)
print(f"Mutual TLS vs plain TCP, same run, median of {rounds} rounds, GB/s (1 GB = 1e9 bytes)")
print(f"  {'transport':<28} {'size':>7} {'plain':>7} {'TLS':>7} {'TLS/plain':>10}")
for plain, tls, field, what in (("tfjob-ring", "tfjob-ring-tls", "busbw_gbps", "all-reduce busbw, 2 procs"),
                                ("tfjob-ps", "tfjob-ps-tls", "gbps", "PS push+pull")):
    for size in sorted({r["bytes"] for r in rows if r["impl"] == plain}):
        p, t = med(plain, size, field), med(tls, size, field)
        print(f"  {what:<28} {size / 2**20:>3g} MiB {p:>7.3f} {t:>7.3f} {t / p:>10.2f}")
if aes:
    gbps = float(aes.rstrip("k")) * 1000 / 1e9
    print(f"  OpenSSL AES-128-GCM on one core here: {gbps:.2f} GB/s (16 KiB blocks): the cipher's own ceiling")
PY
