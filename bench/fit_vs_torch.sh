#!/usr/bin/env bash
# Single-process training throughput of one MNIST model in tfjob-runtime vs
# the same model, batch, data and thread count in PyTorch, measured in the
# same run, alternating, median of --rounds. MODEL is
#   mlp  the MLP of examples/mnist/mlp.json (784-128-10, batch 64, Adam),
#        against bench/torch_mlp.py (5 epochs by default);
#   cnn  the CNN of examples/mnist/cnn.json (Conv2D 32 3x3 relu,
#        MaxPooling2D, Flatten, Dense 64 relu, Dense 10; batch 32, Adam),
#        against bench/torch_cnn.py (4 epochs by default).
# bench/mlp_vs_torch.sh and bench/cnn_vs_torch.sh run it for each.
#
# usage: bench/fit_vs_torch.sh mlp|cnn [--threads N] [--rounds R] [--epochs E]
#        (from the project root, after the build; data from ../shared/data/mnist
#         or $MNIST_DIR)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
model=${1:-}
case "$model" in
  mlp) epochs=5 title="MNIST MLP 784-128-10, batch 64" ;;
  cnn) epochs=4 title="MNIST CNN conv32x3x3-pool2-dense64-dense10, batch 32" ;;
  *) echo "usage: bench/fit_vs_torch.sh mlp|cnn [--threads N] [--rounds R] [--epochs E]" >&2; exit 2 ;;
esac
shift
threads=1 rounds=3
bench_options "threads rounds epochs" "$@"
need_built "$runtime"
need_torch
bench_tmp

ours=() theirs=()
for ((r = 1; r <= rounds; r++)); do
  "$runtime" fit --config "examples/mnist/$model.json" --data-dir "$data" --threads "$threads" \
    --epochs "$epochs" --summary-json "$tmp/ours.json" > /dev/null
  ours+=("$(eps "$tmp/ours.json")")
  /usr/bin/python3 "bench/torch_$model.py" --data-dir "$data" --threads "$threads" --epochs "$epochs" > "$tmp/torch.json"
  theirs+=("$(eps "$tmp/torch.json")")
  echo "round $r: tfjob ${ours[-1]} examples/s, pytorch ${theirs[-1]} examples/s"
done

report_vs_torch "$title, $epochs epochs of 8000 examples"
