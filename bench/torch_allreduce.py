"""PyTorch gloo peer for bench/allreduce.sh: all-reduce bus bandwidth of
torch.distributed with backend "gloo" between N processes on this machine,
measured exactly as bench_allreduce measures our ring.

For each N in --procs this script starts N copies of itself with --member
(separate processes, as ours), rendezvousing through a file:// init_method in
a fresh temporary directory (no port is chosen by this script; gloo binds its
own pair sockets to port 0). GLOO_SOCKET_IFNAME=lo keeps every byte on
loopback. Each member, per size of float32:
  - one all_reduce(SUM) of known values (member r contributes (i % 1024) + r
    at element i, so every sum is an exact integer in float32), checked on
    every member;
  - one more, timed, to pick K so the size runs for about --seconds (at
    least 3; the slowest member's time via all_reduce(MAX), so all agree);
  - the buffer zeroed, barrier, K timed all_reduce(SUM) in place, and the
    slowest member's elapsed time (all_reduce(MAX)) is the time of K ops.
Rank 0 prints one JSON line per (n, size):
  {"impl":"pytorch-gloo","n":N,"bytes":B,"iters":K,"seconds_per_op":t,
   "algbw_gbps":B/t/1e9,"busbw_gbps":algbw*2*(N-1)/N}
A wrong sum prints "error: ..." and the run exits 1.

usage: /usr/bin/python3 bench/torch_allreduce.py [--procs 2,4]
         [--sizes-mib 1,4,16,64] [--seconds 1.0] [--max-iters 100000]
Run with Debian's interpreter (/usr/bin/python3), which sees python3-torch.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time


def member(args):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    n, rank = args.world, args.rank
    dist.init_process_group("gloo", init_method=args.init, rank=rank, world_size=n)
    sizes = [int(s) for s in args.sizes_mib.split(",")]

    def slowest(seconds):
        t = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    warm = torch.zeros(1 << 20, dtype=torch.float32)
    for _ in range(3):
        dist.all_reduce(warm, op=dist.ReduceOp.SUM)

    for mib in sizes:
        count = mib * (1 << 20) // 4
        nbytes = count * 4
        pattern = torch.arange(count, dtype=torch.int64) % 1024
        t = (pattern + rank).to(torch.float32)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        want = (pattern * n + n * (n - 1) // 2).to(torch.float32)
        if not torch.equal(t, want):
            bad = int((t != want).nonzero()[0].item())
            print(f"error: wrong all-reduce result on rank {rank} at element {bad} of {count}: "
                  f"got {t[bad].item()}, want {want[bad].item()}", flush=True)
            return 1
        del pattern, want

        t.zero_()
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        one = slowest(time.perf_counter() - t0)
        iters = min(max(3, math.ceil(args.seconds / max(one, 1e-6))), max(3, args.max_iters))

        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        total = slowest(time.perf_counter() - t0)

        if rank == 0:
            per_op = total / iters
            algbw = nbytes / per_op / 1e9
            print(json.dumps({"impl": "pytorch-gloo", "n": n, "bytes": nbytes, "iters": iters,
                              "seconds_per_op": per_op, "algbw_gbps": algbw,
                              "busbw_gbps": algbw * 2 * (n - 1) / n}, separators=(",", ":")), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    print("done", flush=True)
    return 0


def run_group(n, args):
    with tempfile.TemporaryDirectory(prefix="torch_allreduce.") as tmp:
        init = "file://" + os.path.join(tmp, "store")
        env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
        procs = []
        for r in range(n):
            cmd = [sys.executable, os.path.abspath(__file__), "--member", "--rank", str(r), "--world", str(n),
                   "--init", init, "--sizes-mib", args.sizes_mib, "--seconds", str(args.seconds),
                   "--max-iters", str(args.max_iters)]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env))
        ok = True
        try:
            for r, p in enumerate(procs):
                finished = False
                for line in p.stdout:
                    line = line.rstrip("\n")
                    if line == "done":
                        finished = True
                        break
                    if line.startswith("error:"):
                        print(f"torch_allreduce: member {r} of {n}: {line}", file=sys.stderr)
                        break
                    if r == 0:
                        print(line, flush=True)
                if not finished:
                    ok = False
                    break
            for p in procs:
                if p.wait(timeout=60 if ok else 5) != 0:
                    ok = False
        except subprocess.TimeoutExpired:
            ok = False
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", default="2,4")
    ap.add_argument("--sizes-mib", default="1,4,16,64")
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--max-iters", type=int, default=100000)
    ap.add_argument("--member", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--init", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.member:
        return member(args)
    for n in (int(x) for x in args.procs.split(",")):
        if n < 2:
            print("torch_allreduce: --procs: a group needs at least 2 members", file=sys.stderr)
            return 2
        if not run_group(n, args):
            print(f"torch_allreduce: the group of {n} failed", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
