"""PyTorch RPC peer for bench/ps_throughput.sh: push+pull GB/s through one
parameter server built on torch.distributed.rpc.

Two processes on 127.0.0.1: this one is the worker (rank 1); it starts a
child running this script with --role ps (rank 0), which holds one float32
tensor per size. Each iteration is
    rpc_sync("ps", push_add, (name, delta))   # PS: param.add_(delta)
    rpc_sync("ps", pull, (name,))             # PS: returns param
so the tensor crosses the wire twice, and GB/s = 2 * bytes * iterations /
seconds (1 GB = 1e9 bytes), exactly as bench_ps_throughput computes ours.

Transport settings, chosen to make this a loopback *network* comparison:
  - TensorPipe backend with _transports=["uv"] (libuv TCP sockets; the "shm"
    shared-memory and "ibv" InfiniBand transports are left out) and
    _channels=["basic"] (tensor bytes go over that same TCP connection; the
    "cma" cross-memory-attach channel, which would copy between processes
    with process_vm_readv, and "mpt_uv" are left out).
  - TP_SOCKET_IFNAME=lo, so nothing leaves the machine. The two processes
    rendezvous through a file:// init_method in a fresh temporary directory:
    this script chooses no port (TensorPipe binds its own listening socket
    to port 0 and publishes the address through that store).
  - pull returns the PS tensor itself (no clone): with one worker nothing
    mutates it during the send, and it is the cheapest choice for the peer.
  - num_worker_threads=4 (one request is in flight at a time).

Each timed loop stops at --max-iters or --seconds, after --warmup untimed
iterations. Prints one JSON object per line per (repetition, size).

Run with Debian's interpreter (/usr/bin/python3), which sees python3-torch.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import torch
import torch.distributed.rpc as rpc

_PARAMS = {}
_LOCK = threading.Lock()


def create(name, numel):
    with _LOCK:
        _PARAMS[name] = torch.zeros(numel, dtype=torch.float32)


def push_add(name, delta):
    with _LOCK:
        _PARAMS[name].add_(delta)


def pull(name):
    with _LOCK:
        return _PARAMS[name]


def options(init):
    return rpc.TensorPipeRpcBackendOptions(
        num_worker_threads=4,
        rpc_timeout=60,
        init_method=init,
        _transports=["uv"],
        _channels=["basic"],
    )


def time_loop(warmup, max_iters, seconds, one):
    for _ in range(warmup):
        one()
    iterations = 0
    elapsed = 0.0
    t0 = time.perf_counter()
    while iterations < max_iters:
        one()
        iterations += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            break
    return iterations, elapsed


def run_worker(args):
    rendezvous = tempfile.TemporaryDirectory(prefix="tfjob-torch-rpc-")
    init = "file://" + os.path.join(rendezvous.name, "store")
    env = dict(os.environ, TP_SOCKET_IFNAME="lo")
    os.environ["TP_SOCKET_IFNAME"] = "lo"
    ps = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", "ps", "--init", init], env=env)
    try:
        rpc.init_rpc("worker", rank=1, world_size=2, rpc_backend_options=options(init))
        sizes = [int(s) for s in args.sizes_mib.split(",")]
        deltas = {}
        for mib in sizes:
            numel = mib * (1 << 20) // 4
            name = f"v{mib}"
            rpc.rpc_sync("ps", create, args=(name, numel))
            deltas[name] = torch.ones(numel, dtype=torch.float32)
        for rep in range(args.reps):
            for mib in sizes:
                name = f"v{mib}"
                delta = deltas[name]

                def one():
                    rpc.rpc_sync("ps", push_add, args=(name, delta))
                    got = rpc.rpc_sync("ps", pull, args=(name,))
                    if got.numel() != delta.numel():
                        raise SystemExit("pull returned the wrong tensor")

                iterations, seconds = time_loop(args.warmup, args.max_iters, args.seconds, one)
                nbytes = delta.numel() * 4
                print(json.dumps({
                    "impl": "pytorch-rpc",
                    "peer": f"pytorch {torch.__version__} rpc/tensorpipe uv+basic",
                    "rep": rep,
                    "bytes": nbytes,
                    "iterations": iterations,
                    "seconds": seconds,
                    "gbps": 2.0 * nbytes * iterations / seconds / 1e9 if seconds > 0 else 0.0,
                }), flush=True)
        rpc.shutdown()
    finally:
        try:
            ps.wait(timeout=30)
        except subprocess.TimeoutExpired:
            ps.kill()
            ps.wait()
        rendezvous.cleanup()


def run_ps(args):
    os.environ["TP_SOCKET_IFNAME"] = "lo"
    rpc.init_rpc("ps", rank=0, world_size=2, rpc_backend_options=options(args.init))
    rpc.shutdown()  # waits until the worker shuts down too


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=["worker", "ps"], default="worker")
    ap.add_argument("--init", default="", help="the worker's file:// rendezvous (set for the ps role)")
    ap.add_argument("--sizes-mib", default="4,64")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--max-iters", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.role == "ps":
        run_ps(args)
    else:
        run_worker(args)


if __name__ == "__main__":
    main()
