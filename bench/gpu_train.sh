#!/usr/bin/env bash
# Training throughput on a GPU: tfjob-runtime fit --device gpu against
# PyTorch on the same GPU, and against tfjob-runtime on this machine's CPU,
# measured in the same run, alternating, median of --rounds. Two models, both
# Adam on MNIST images 0..7999:
#   mlp   examples/mnist/mlp.json: 784-128-10, batch 64 (launch-bound)
#   wide  784-4096-4096-10, batch 512 (matrix-product-bound)
# First the device's measured cuBLAS GEMM rates (bench_gpu_gemm: FP32, TF32,
# BF16, FP16 at 8192^3, one JSON line each); then, for the wide model, a
# --mixed-precision bfloat16 run too, and the achieved TFLOP/s of both runs
# as fractions of those rates (FLOPs per example: 2 per multiply-add,
# forward + backward = 3x forward), with a verdict line for issue 45's goal:
# the bfloat16 run at >= 50% of the measured BF16 rate.
# Prints "no GPU" and exits 0 where tfjob-runtime sees none.
#
# usage: bench/gpu_train.sh [--rounds R] [--epochs E] [--cpu-threads N]
#        (from the project root, after the build; MNIST from ../shared/data/mnist
#         or $MNIST_DIR; PyTorch from $PYTHON, default python3, which must
#         have CUDA for the peer to run; the runtime is build/bin/tfjob-runtime
#         or $TFJOB_RUNTIME, e.g. the GPU bundle's bin/tfjob-runtime wrapper,
#         a relative path taken from the project root; the GEMM benchmark is
#         build/bin/bench_gpu_gemm or $TFJOB_GEMM_BENCH, built here when
#         missing and the build can)
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3 epochs=5 cpu_threads=$(nproc)
while (($#)); do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --cpu-threads) cpu_threads=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
data=${MNIST_DIR:-../shared/data/mnist}
python=${PYTHON:-python3}
runtime=${TFJOB_RUNTIME:-build/bin/tfjob-runtime}
[[ -x $runtime ]] || { echo "build first: $runtime is missing" >&2; exit 2; }
gemm=${TFJOB_GEMM_BENCH:-build/bin/bench_gpu_gemm}
if [[ ! -x $gemm && -z ${TFJOB_GEMM_BENCH:-} && -f build/build.ninja ]]; then
  cmake --build build --target bench_gpu_gemm > /dev/null 2>&1 || true
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The wide model: mlp.json with two 4096-wide hidden layers and batch 512.
"$python" - examples/mnist/mlp.json "$tmp/wide.json" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))
job["name"] = "mnist-wide-mlp"
job["model"]["layers"] = [{"type": "Flatten"},
                          {"type": "Dense", "units": 4096, "activation": "relu"},
                          {"type": "Dense", "units": 4096, "activation": "relu"},
                          {"type": "Dense", "units": 10, "activation": "softmax"}]
job["batch_size"] = 512
json.dump(job, open(sys.argv[2], "w"))
PY

# Does this runtime see a GPU? (One short run that also warms the driver.)
if ! "$runtime" fit --config examples/mnist/mlp.json --data-dir "$data" --device gpu --epochs 1 \
     > "$tmp/probe.out" 2> "$tmp/probe.err"; then
  if grep -q "flag --device gpu" "$tmp/probe.err"; then
    echo "no GPU: $(sed 's/^tfjob-runtime: error: //' "$tmp/probe.err")"
    exit 0
  fi
  cat "$tmp/probe.err" >&2
  exit 1
fi
grep "fit: replica on" "$tmp/probe.out" | head -1
torch_ok=1
"$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2> /dev/null || torch_ok=0
((torch_ok)) || echo "note: $python has no torch with CUDA; the PyTorch column is skipped"

# The device's GEMM rates, before the training runs heat it.
: > "$tmp/gemm.jsonl"
if [[ -x $gemm ]]; then
  "$gemm" > "$tmp/gemm.jsonl" || echo "note: $gemm failed; the fractions of the GEMM rates are skipped"
  sed 's/^/gemm: /' "$tmp/gemm.jsonl"
else
  echo "note: $gemm is missing (ninja -C build bench_gpu_gemm); the fractions of the GEMM rates are skipped"
fi

eps() { "$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["examples_per_second"])' "$1"; }
acc() { "$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["eval_accuracy"])' "$1"; }

bench_model() {  # name job hidden batch epochs cpu_epochs [bf16]
  local name=$1 job=$2 hidden=$3 batch=$4 ep=$5 cpu_ep=$6 bf16=${7:-}
  local gpu=() torch=() cpu=() r
  for ((r = 1; r <= rounds; r++)); do
    "$runtime" fit --config "$job" --data-dir "$data" --device gpu --epochs "$ep" \
      --summary-json "$tmp/gpu.json" > /dev/null
    gpu+=("$(eps "$tmp/gpu.json")")
    cp "$tmp/gpu.json" "$tmp/$name-f32-$r.json"
    if [[ -n $bf16 ]]; then
      if "$runtime" fit --config "$job" --data-dir "$data" --device gpu --epochs "$ep" --mixed-precision bfloat16 \
        --summary-json "$tmp/$name-bf16-$r.json" > /dev/null 2> "$tmp/bf16.err"; then
        echo "$name round $r: tfjob gpu mixed_bfloat16 $(eps "$tmp/$name-bf16-$r.json") examples/s"
      elif grep -q "needs compute capability" "$tmp/bf16.err"; then
        # A GPU without bfloat16 tensor cores: the float32 figures only.
        echo "note: no bfloat16 run: $(sed 's/^tfjob-runtime: error: //' "$tmp/bf16.err")"
        bf16=
      else
        cat "$tmp/bf16.err" >&2
        exit 1
      fi
    fi
    if ((torch_ok)); then
      "$python" bench/torch_mlp.py --data-dir "$data" --device cuda --hidden "$hidden" --batch-size "$batch" \
        --epochs "$ep" > "$tmp/torch.json"
      torch+=("$(eps "$tmp/torch.json")")
    fi
    "$runtime" fit --config "$job" --data-dir "$data" --device cpu --threads "$cpu_threads" --epochs "$cpu_ep" \
      --summary-json "$tmp/cpu.json" > /dev/null
    cpu+=("$(eps "$tmp/cpu.json")")
    local last_torch=n/a
    ((${#torch[@]})) && last_torch=${torch[-1]}
    echo "$name round $r: tfjob gpu ${gpu[-1]}, pytorch gpu $last_torch, tfjob cpu ${cpu[-1]} examples/s"
  done
  "$python" - "$name" "$hidden" "$batch" "$ep" "$rounds" "$(acc "$tmp/gpu.json")" \
    "${gpu[*]}" "${torch[*]-}" "${cpu[*]}" <<'PY'
import statistics, sys
name, hidden, batch, ep, rounds, accuracy = sys.argv[1:7]
gpu, torch, cpu = ([float(v) for v in a.split()] for a in sys.argv[7:10])
g, c = statistics.median(gpu), statistics.median(cpu)
print(f"{name}: 784-{hidden.replace(',', '-')}-10, batch {batch}, {ep} epochs of 8000 examples, median of {rounds}")
print(f"  tfjob-runtime, GPU : {g:12.0f} examples/s  (eval_accuracy {float(accuracy):.4f})")
if torch:
    t = statistics.median(torch)
    print(f"  pytorch, same GPU  : {t:12.0f} examples/s")
    print(f"  ratio tfjob GPU / pytorch GPU: {g / t:.2f}  (goal >= 1.0)")
print(f"  tfjob-runtime, CPU : {c:12.0f} examples/s")
print(f"  ratio tfjob GPU / tfjob CPU  : {g / c:.2f}")
PY
  if [[ -n $bf16 ]]; then
    "$python" - "$name" "$hidden" "$batch" "$tmp/gemm.jsonl" "$tmp"/"$name"-f32-*.json -- \
      "$tmp"/"$name"-bf16-*.json <<'PY'
import json, statistics, sys
name, hidden, batch, gemm_file = sys.argv[1:5]
rest = sys.argv[5:]
f32_files, bf16_files = rest[:rest.index("--")], rest[rest.index("--") + 1:]
widths = [784] + [int(h) for h in hidden.split(",")] + [10]
# 2 FLOPs per multiply-add; a Dense layer's backward pass is two products
# (input and weight gradients) of the forward's size: 3x forward in all.
forward = 2 * sum(a * b for a, b in zip(widths, widths[1:]))
per_example = 3 * forward
rates = {}
for line in open(gemm_file):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    if "tflops" in j:
        rates[j["type"]] = j["tflops"]

def steady(path):
    # Examples/s over the epochs after the first (cuBLAS' and the pool's
    # warm-up is in the first); the whole run's when there is one epoch.
    s = json.load(open(path))
    h = s.get("history", [])
    if len(h) >= 2 and sum(e["seconds"] for e in h[1:]) > 0:
        return sum(e["steps"] for e in h[1:]) * int(batch) / sum(e["seconds"] for e in h[1:]), s
    return s["examples_per_second"], s

def run(files):
    vals = [steady(f) for f in files]
    return statistics.median(v for v, _ in vals), vals[-1][1]

print(f"{name}: achieved matrix rate, {per_example / 1e6:.1f} MFLOP per example "
      f"(784-{hidden.replace(',', '-')}-10: 2 per multiply-add, forward + backward = 3x forward); "
      "examples/s over the epochs after the first, median of the rounds")
verdict = None
for label, files, against in (("float32", f32_files, ("fp32", "tf32")), ("mixed_bfloat16", bf16_files, ("bf16",))):
    eps, summary = run(files)
    tflops = eps * per_example / 1e12
    line = f"  {label:15s}: {eps:12.0f} examples/s = {tflops:7.2f} TFLOP/s (eval_accuracy {summary.get('eval_accuracy', float('nan')):.4f})"
    for t in against:
        if t in rates:
            line += f"; {tflops / rates[t]:.1%} of the measured {t.upper()} GEMM rate ({rates[t]:.1f} TFLOP/s)"
    print(line)
    if label == "mixed_bfloat16":
        verdict = tflops / rates["bf16"] if "bf16" in rates else None
if verdict is None:
    print(f"verdict: {name} in bfloat16: no measured BF16 GEMM rate here (bench_gpu_gemm missing or skipped bf16)")
else:
    met = "met" if verdict >= 0.5 else "NOT met"
    print(f"verdict: {name} in bfloat16 at {verdict:.1%} of the measured BF16 GEMM rate: goal >= 50% {met}")
PY
  fi
}

bench_model mlp examples/mnist/mlp.json 128 64 "$epochs" "$epochs"
bench_model wide "$tmp/wide.json" 4096,4096 512 $((epochs * 2)) 1 bf16
