#!/usr/bin/env bash
# Single-process training throughput: the MNIST CNN of examples/mnist/cnn.json
# (Conv2D 32 3x3 relu, MaxPooling2D, Flatten, Dense 64 relu, Dense 10; batch
# 32, Adam) in tfjob-runtime vs the same model, batch, data and thread count
# in PyTorch, measured in the same run, alternating, median of --rounds.
#
# usage: bench/cnn_vs_torch.sh [--threads N] [--rounds R] [--epochs E]
#        (from the project root, after the build; data from ../shared/data/mnist
#         or $MNIST_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."

threads=1 rounds=3 epochs=4
while (($#)); do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
data=${MNIST_DIR:-../shared/data/mnist}
runtime=build/bin/tfjob-runtime
[[ -x $runtime ]] || { echo "build first: $runtime is missing" >&2; exit 2; }
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "python3-torch is missing (scripts/setup.sh installs it)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ours=() theirs=()
for ((r = 1; r <= rounds; r++)); do
  "$runtime" fit --config examples/mnist/cnn.json --data-dir "$data" --threads "$threads" \
    --epochs "$epochs" --summary-json "$tmp/ours.json" > /dev/null
  ours+=("$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["examples_per_second"])' "$tmp/ours.json")")
  /usr/bin/python3 bench/torch_cnn.py --data-dir "$data" --threads "$threads" --epochs "$epochs" > "$tmp/torch.json"
  theirs+=("$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["examples_per_second"])' "$tmp/torch.json")")
  echo "round $r: tfjob ${ours[-1]} examples/s, pytorch ${theirs[-1]} examples/s"
done

/usr/bin/python3 - "$threads" "$epochs" "$tmp/ours.json" "$tmp/torch.json" "${#ours[@]}" "${ours[@]}" "${theirs[@]}" <<'PY'
import json, statistics, sys
threads, epochs, ours_json, torch_json, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
vals = [float(v) for v in sys.argv[6:]]
ours, theirs = statistics.median(vals[:n]), statistics.median(vals[n:])
peer = json.load(open(torch_json))
mine = json.load(open(ours_json))
print(f"MNIST CNN conv32x3x3-pool2-dense64-dense10, batch 32, {epochs} epochs of 8000 examples, threads {threads}, median of {n}")
print(f"  tfjob-runtime fit : {ours:10.0f} examples/s  (eval_accuracy {mine['eval_accuracy']:.4f})")
print(f"  {peer['peer']:<17} : {theirs:10.0f} examples/s  (eval_accuracy {peer['eval_accuracy']:.4f})")
print(f"  ratio tfjob/pytorch: {ours / theirs:.2f}")
PY
