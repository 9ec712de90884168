#!/usr/bin/env bash
# Training throughput on a GPU: tfjob-runtime fit --device gpu against
# PyTorch on the same GPU, and against tfjob-runtime on this machine's CPU,
# measured in the same run, alternating, median of --rounds. Two models, both
# Adam on MNIST images 0..7999:
#   mlp   examples/mnist/mlp.json: 784-128-10, batch 64 (launch-bound)
#   wide  784-4096-4096-10, batch 512 (matrix-product-bound)
# Prints "no GPU" and exits 0 where tfjob-runtime sees none.
#
# usage: bench/gpu_train.sh [--rounds R] [--epochs E] [--cpu-threads N]
#        (from the project root, after the build; MNIST from ../shared/data/mnist
#         or $MNIST_DIR; PyTorch from $PYTHON, default python3, which must
#         have CUDA for the peer to run; the runtime is build/bin/tfjob-runtime
#         or $TFJOB_RUNTIME, e.g. the GPU bundle's bin/tfjob-runtime wrapper,
#         a relative path taken from the project root)
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

eps() { "$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["examples_per_second"])' "$1"; }
acc() { "$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["eval_accuracy"])' "$1"; }

bench_model() {  # name job hidden batch epochs cpu_epochs
  local name=$1 job=$2 hidden=$3 batch=$4 ep=$5 cpu_ep=$6
  local gpu=() torch=() cpu=()
  for ((r = 1; r <= rounds; r++)); do
    "$runtime" fit --config "$job" --data-dir "$data" --device gpu --epochs "$ep" \
      --summary-json "$tmp/gpu.json" > /dev/null
    gpu+=("$(eps "$tmp/gpu.json")")
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
}

bench_model mlp examples/mnist/mlp.json 128 64 "$epochs" "$epochs"
bench_model wide "$tmp/wide.json" 4096,4096 512 $((epochs * 2)) 1
