#!/usr/bin/env bash
# All-reduce bus bandwidth, float32 sum in place between N processes on this
# machine over 127.0.0.1: our RING (services/collective, bench_allreduce) vs
# PyTorch's gloo backend (torch_allreduce.py) vs OpenMPI's MPI_Allreduce over
# TCP (mpi_allreduce.c under Debian's openmpi-bin, --mca btl tcp,self), all
# measured in the same run and the same way: per size, one checked
# all-reduce of known values, one to pick the iteration count, then a barrier
# and K timed all-reduces (about --seconds, at least 3); the time is the
# slowest member's. busbw = algbw * 2(n-1)/n (as nccl-tests define it),
# algbw = bytes / time per operation, 1 GB = 1e9 bytes. Each round runs the
# three in turn at each (n, size), which one goes first rotating; the table
# shows medians over rounds and whether the goals hold: ours >= 1.5 x gloo
# and >= 1.0 x OpenMPI at every size >= 1 MiB.
# With more processes than cores (4 on a 2-core machine) every
# implementation is oversubscribed alike.
#
# usage: bench/allreduce.sh [--rounds R] [--seconds S] [--procs 2,4]
#                           [--sizes-mib 1,4,16,64]
#        (from the project root, after the build; BUILD_DIR=build by default;
#         needs openmpi-bin and libopenmpi-dev, which scripts/setup.sh installs)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rounds=3 seconds=1.0 procs=2,4 sizes_mib=1,4,16,64
bench_options "rounds seconds procs sizes_mib" "$@"
sizes=$sizes_mib
bench=$build/bin/bench_allreduce
need_built "$bench"
need_torch torch.distributed
for t in mpicc mpirun; do
  command -v $t > /dev/null || { echo "$t is missing: openmpi-bin and libopenmpi-dev (scripts/setup.sh installs them)" >&2; exit 2; }
done

# The OpenMPI peer is built here, not by CMake, so the build needs no MPI.
mpi_bin=$build/bench/mpi_allreduce
if [[ ! -x $mpi_bin || bench/mpi_allreduce.c -nt $mpi_bin ]]; then
  mkdir -p "$(dirname "$mpi_bin")"
  mpicc -O2 -Wall -Wextra -o "$mpi_bin" bench/mpi_allreduce.c -lm
fi

run() {  # impl n size-mib: appends that measurement's JSON line to $tmp/round.jsonl
  case $1 in
    ours) timeout 300 "$bench" --procs "$2" --sizes-mib "$3" --seconds "$seconds" ;;
    gloo) timeout 300 /usr/bin/python3 bench/torch_allreduce.py --procs "$2" --sizes-mib "$3" --seconds "$seconds" ;;
    mpi) timeout 300 mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self --mca btl_tcp_if_include lo \
           -np "$2" "$mpi_bin" --sizes-mib "$3" --seconds "$seconds" 2> "$tmp/mpi.err" \
           || { cat "$tmp/mpi.err" >&2; echo "openmpi with $2 processes failed" >&2; return 1; } ;;
  esac >> "$tmp/round.jsonl"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
IFS=, read -ra ns <<< "$procs"
IFS=, read -ra ss <<< "$sizes"
impls=(ours gloo mpi)
for ((r = 1; r <= rounds; r++)); do
  : > "$tmp/round.jsonl"
  # The three take turns at each (n, size), first place rotating, so a slow
  # spell of this machine falls on all of them alike.
  k=0
  for n in "${ns[@]}"; do
    for s in "${ss[@]}"; do
      for ((i = 0; i < 3; i++)); do run "${impls[(r + k + i) % 3]}" "$n" "$s"; done
      k=$((k + 1))
    done
  done
  cat "$tmp/round.jsonl" >> "$tmp/all.jsonl"
  /usr/bin/python3 - "$r" "$tmp/round.jsonl" <<'PY'
import json, sys
rows = sorted((json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")), key=lambda r: (r["n"], r["bytes"]))
for impl in ("tfjob-ring", "pytorch-gloo", "openmpi"):
    print(f"round {sys.argv[1]} {impl:>12} busbw GB/s: " + "  ".join(
        f"n={r['n']} {r['bytes'] / 2**20:g}M {r['busbw_gbps']:.2f}" for r in rows if r["impl"] == impl))
PY
done

/usr/bin/python3 - "$rounds" "$tmp/all.jsonl" "$(nproc)" <<'PY'
import json, statistics, sys
rounds, cores = int(sys.argv[1]), int(sys.argv[3])
rows = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
impls = ("tfjob-ring", "pytorch-gloo", "openmpi")
keys = sorted({(r["n"], r["bytes"]) for r in rows})
med = {}
for impl in impls:
    for key in keys:
        vals = [r["busbw_gbps"] for r in rows if r["impl"] == impl and (r["n"], r["bytes"]) == key]
        if len(vals) != rounds:
            sys.exit(f"allreduce.sh: {impl} n={key[0]} {key[1]} bytes has {len(vals)} results, want {rounds}")
        med[impl, key] = statistics.median(vals)
print(f"All-reduce bus bandwidth, float32 sum in place over 127.0.0.1, GB/s, median of {rounds} rounds "
      f"({cores} cores here)")
print("  busbw = algbw x 2(n-1)/n (nccl-tests), algbw = bytes / time per op (slowest member), 1 GB = 1e9 bytes")
print(f"  {'n':>2} {'size':>7} {'tfjob-ring':>11} {'pytorch-gloo':>13} {'openmpi':>8} {'ours/gloo':>10} {'ours/openmpi':>13}")
miss_gloo, miss_mpi = [], []
for n, size in keys:
    ours, gloo, mpi = (med[i, (n, size)] for i in impls)
    r_gloo, r_mpi = ours / gloo, ours / mpi
    where = f"n={n} {size / 2**20:g} MiB"
    if size >= 1 << 20:
        if r_gloo < 1.5:
            miss_gloo.append(f"{where}: {r_gloo:.2f}")
        if r_mpi < 1.0:
            miss_mpi.append(f"{where}: {r_mpi:.2f}")
    print(f"  {n:>2} {size / 2**20:>3g} MiB {ours:>11.3f} {gloo:>13.3f} {mpi:>8.3f} {r_gloo:>10.2f} {r_mpi:>13.2f}")
print("  goals at every size >= 1 MiB: "
      f"ours >= 1.5 x gloo: {'met' if not miss_gloo else 'NOT met (' + '; '.join(miss_gloo) + ')'}; "
      f"ours >= 1.0 x OpenMPI: {'met' if not miss_mpi else 'NOT met (' + '; '.join(miss_mpi) + ')'}")
if any(n > cores for n, _ in keys):
    print(f"  note: groups larger than {cores} processes oversubscribe this machine's {cores} cores (all three alike)")
PY
