#!/usr/bin/env bash
# What CUDA costs a task that does not use it: the GPU build's tfjob-runtime
# (the GPU image's) against tfjob-runtime-cpu (the CPU image's) from the same
# build, no GPU visible (CUDA_VISIBLE_DEVICES=""), in the same run:
#   - an idle parameter server (the MNIST MLP job's PS, TF_CONFIG set): the
#     time from exec to "serving on", and its resident memory once serving;
#   - a 2-epoch single-process `fit` of the MNIST MLP (--threads 1): wall
#     time and peak resident memory.
# Medians over R rounds, the two binaries alternating. The goal (issue 45):
# the GPU build within 10 % of the CPU build on each figure, which holds
# because cuBLAS and NCCL are opened only when a task uses a GPU
# (common/shared_library.h); a verdict line per figure.
#
# usage: bench/cuda_cost.sh [--rounds R]
#        (from the project root, after the build; BUILD_DIR=build by default;
#         data from ../shared/data/mnist or $MNIST_DIR)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rounds=5
bench_options "rounds" "$@"
cpu=$build/bin/tfjob-runtime-cpu
need_built "$runtime" "$cpu"
if ! ldd "$runtime" | grep -q libcudart; then
  echo "$runtime is built without CUDA (no toolkit, or -DTFJOB_CUDA=OFF): it is the CPU program, nothing to compare" >&2
  exit 2
fi
bench_tmp

CUDA_VISIBLE_DEVICES= /usr/bin/python3 - "$rounds" "$runtime" "$cpu" "$data" "$tmp" <<'PY'
import json, os, socket, statistics, subprocess, sys, time

rounds, gpu_bin, cpu_bin, data, tmp = int(sys.argv[1]), *sys.argv[2:]
config = "examples/mnist/mlp.json"

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port

def rss_kb(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")

def idle_ps(binary):
    port = free_port()
    env = dict(os.environ, TF_CONFIG=json.dumps({
        "cluster": {"chief": ["127.0.0.1:1"], "ps": [f"127.0.0.1:{port}"], "worker": ["127.0.0.1:2"]},
        "task": {"type": "ps", "index": 0}}))
    log = os.path.join(tmp, "ps.log")
    with open(log, "w") as out:
        start = time.monotonic()
        p = subprocess.Popen([binary, "fit", "--config", config, "--data-dir", data], env=env, stdout=out,
                             stderr=subprocess.STDOUT)
        try:
            while "serving on" not in open(log).read():
                if p.poll() is not None:
                    sys.exit(f"{binary}: the PS exited ({p.returncode}) before serving:\n{open(log).read()}")
                if time.monotonic() - start > 60:
                    sys.exit(f"{binary}: the PS did not serve within 60 s")
                time.sleep(0.002)
            started = time.monotonic() - start
            time.sleep(1.0)  # idle, as a PS waits for its chief
            rss = rss_kb(p.pid)
        finally:
            p.terminate()
            p.wait()
    return started, rss

def fit(binary):
    out = os.path.join(tmp, "time.txt")
    r = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", out, binary, "fit", "--config", config,
                        "--data-dir", data, "--epochs", "2", "--threads", "1"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"{binary} fit failed ({r.returncode}):\n{r.stderr[-2000:]}")
    wall, peak = open(out).read().split()[-2:]
    return float(wall), int(peak)

figures = {"gpu": {k: [] for k in ("ps_start", "ps_rss", "fit_s", "fit_rss")}}
figures["cpu"] = {k: [] for k in figures["gpu"]}
for _ in range(rounds):
    for name, binary in (("gpu", gpu_bin), ("cpu", cpu_bin)):
        s, r = idle_ps(binary)
        figures[name]["ps_start"].append(s)
        figures[name]["ps_rss"].append(r / 1024)
        w, m = fit(binary)
        figures[name]["fit_s"].append(w)
        figures[name]["fit_rss"].append(m / 1024)

rows = [("idle PS: start to serving (s)", "ps_start"), ("idle PS: resident memory (MiB)", "ps_rss"),
        ("2-epoch fit: wall time (s)", "fit_s"), ("2-epoch fit: peak resident memory (MiB)", "fit_rss")]
print(f"CUDA's cost to a task without a GPU (CUDA_VISIBLE_DEVICES=\"\"), medians of {rounds} rounds")
print(f"  {'':40} {'GPU build':>10} {'CPU build':>10} {'GPU/CPU':>8}")
verdicts = []
for title, key in rows:
    g, c = statistics.median(figures["gpu"][key]), statistics.median(figures["cpu"][key])
    ratio = g / c
    print(f"  {title:40} {g:10.3f} {c:10.3f} {ratio:8.3f}")
    verdicts.append((title, ratio))
for title, ratio in verdicts:
    print(f"verdict: {title}: GPU build {ratio:.2f}x the CPU build's, goal <= 1.10: {'MET' if ratio <= 1.10 else 'NOT MET'}")
PY
