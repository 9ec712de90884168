#!/usr/bin/env bash
# Runs every benchmark in bench/ in turn; each prints its own table.
#   mlp_vs_torch.sh      single-process MLP training vs PyTorch
#   cnn_vs_torch.sh      single-process CNN training vs PyTorch
#   keras_vs_torch.sh    the Keras examples (residual CNN, wide-and-deep) vs PyTorch
#   ps_throughput.sh     PS push+pull GB/s vs raw TCP and PyTorch RPC
#   mlp_ps_vs_single.sh  MLP training, 1 PS + 1 worker vs single-process
#   ps_cpu_per_step.sh   where a PS step's CPU goes: context switches, migrations, wake-ups (perf)
#   embedding_ps.sh      embedding model over 2 PS: rows a batch uses vs whole tables
#   closures.sh          no-op closures/s through the coordinator
#   allreduce.sh         all-reduce bus bandwidth, our ring vs gloo and OpenMPI
#   mwms_scaling.sh      multi-worker mirrored and mirrored x2 vs single-process, by phase
#   tls_overhead.sh      the ring and the PS data plane with mutual TLS vs without
#   roofline.sh          the models' GFLOP/s against the machine's measured FMA peak and SGEMM rate, and PyTorch
#   cuda_cost.sh         the GPU build's tfjob-runtime without a GPU vs tfjob-runtime-cpu: start-up, memory, time
#   gpu_train.sh         MLP training on a GPU vs PyTorch on it and vs our CPU ("no GPU" without one)
#
# usage: bench/run_all.sh   (from the project root, after the build)
# BUILD_DIR (default build) selects the build for the scripts in this
# directory that honour it; mlp_vs_torch.sh and cnn_vs_torch.sh always use build/bin.
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
for b in mlp_vs_torch.sh cnn_vs_torch.sh keras_vs_torch.sh ps_throughput.sh mlp_ps_vs_single.sh ps_cpu_per_step.sh embedding_ps.sh closures.sh allreduce.sh mwms_scaling.sh \
         tls_overhead.sh roofline.sh cuda_cost.sh gpu_train.sh; do
  echo "== bench/$b"
  if ! bash "bench/$b"; then
    echo "bench/$b failed" >&2
    status=1
  fi
  echo
done
exit $status
