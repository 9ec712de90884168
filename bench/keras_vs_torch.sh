#!/usr/bin/env bash
# Single-process training throughput of the Keras examples
# (examples/keras) in tfjob-runtime against the same models, batch, data,
# optimizer and thread count in PyTorch (bench/torch_keras.py), measured in
# the same run, alternating, median of --rounds:
#
#   residual_cnn  residual_cnn.json + residual_cnn_job.json on MNIST t10k
#                 0..7999 (batch 64, Adam), --epochs epochs;
#   wide_deep     wide_deep.json + wide_deep_job.json on make_data.py's
#                 100,000 Criteo-like training records (batch 256, Adam,
#                 one Embedding(100000, 8)), --epochs epochs, one process
#                 (the example's manifest uses parameter servers; this
#                 measures the model's arithmetic alone);
#   mnist_lstm    mnist_lstm.json (LSTM(128) over MNIST's 28 rows, Dense 10)
#                 + mnist_lstm_job.json on the residual CNN's split (batch
#                 64, Adam), --epochs epochs.
#
# Both sides count examples/s over the training loop only (data loading and
# evaluation excluded) and print their evaluation accuracy as a sanity check.
#
# usage: bench/keras_vs_torch.sh [--model residual_cnn|wide_deep|mnist_lstm|both|all]
#        [--threads N] [--rounds R] [--epochs E]
#        (from the project root, after the build; MNIST from
#         ../shared/data/mnist or $MNIST_DIR)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
model=both threads=1 rounds=3 epochs=2
bench_options "model threads rounds epochs" "$@"
case "$model" in
  residual_cnn | wide_deep | mnist_lstm) models=("$model") ;;
  both) models=(residual_cnn wide_deep) ;;
  all) models=(residual_cnn wide_deep mnist_lstm) ;;
  *) echo "--model: residual_cnn, wide_deep, mnist_lstm, both or all, not '$model'" >&2; exit 2 ;;
esac
need_built "$runtime"
need_torch
bench_tmp

for m in "${models[@]}"; do
  if [[ $m == wide_deep ]]; then
    dir=$tmp/wide_deep
    /usr/bin/python3 examples/keras/wide_deep/make_data.py --out "$dir" > /dev/null
    title="wide-and-deep (Embedding 100000x8, 26 ids + 13 dense), batch 256, Adam"
  elif [[ $m == mnist_lstm ]]; then
    dir=$data
    title="LSTM(128) over MNIST's 28 rows of 28 pixels, Dense 10, batch 64, Adam"
  else
    dir=$data
    title="residual CNN (6 Conv2D + BN, 2 Add, GAP), batch 64, Adam"
  fi
  ours=() theirs=()
  for ((r = 1; r <= rounds; r++)); do
    "$runtime" fit --config "examples/keras/${m}_job.json" --keras-model "examples/keras/$m.json" \
      --data-dir "$dir" --threads "$threads" --epochs "$epochs" --summary-json "$tmp/ours.json" > /dev/null
    ours+=("$(eps "$tmp/ours.json")")
    /usr/bin/python3 bench/torch_keras.py "$m" --data-dir "$dir" --threads "$threads" --epochs "$epochs" \
      > "$tmp/torch.json"
    theirs+=("$(eps "$tmp/torch.json")")
    echo "$m round $r: tfjob ${ours[-1]} examples/s, pytorch ${theirs[-1]} examples/s"
  done
  report_vs_torch "$title, $epochs epochs"
done
