#!/usr/bin/env bash
# Single-process training throughput of the MNIST CNN against PyTorch:
# bench/fit_vs_torch.sh cnn, which says what it measures.
#
# usage: bench/cnn_vs_torch.sh [--threads N] [--rounds R] [--epochs E]
exec bash "$(dirname "$0")/fit_vs_torch.sh" cnn "$@"
