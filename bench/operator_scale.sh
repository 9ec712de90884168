#!/usr/bin/env bash
# The operator at scale (docs/operations.md): N TFJobs of 1 chief + 1 PS + 3
# workers (5 pods, 5 services each) for N = 100, 500 and 2,000 on a real API
# server (../shared/envtest: etcd, kube-apiserver, kube-controller-manager on
# this machine): created, every pod Running, every chief Succeeded, every
# job deleted.
# Prints a table (latencies, API requests per job by verb, operator RSS and
# CPU, duplicates, missed transitions) and a one-line verdict.
#
# usage: bench/operator_scale.sh [--jobs 100,500,2000] [--workers N] [--qps Q] [--burst B]
#        (from the project root, after the build; flags not given keep the
#         operator's defaults. Each row prints as its run ends. About 20
#         minutes on two cores, most of it N = 2,000.)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
# Not in the default build: built here when missing.
if [[ ! -x $build/bin/bench_operator_scale && -f $build/build.ninja ]]; then
  cmake --build "$build" --target bench_operator_scale >&2 || exit 2
fi
[[ -x $build/bin/bench_operator_scale ]] || { echo "build first: $build/bin/bench_operator_scale is missing" >&2; exit 2; }
# The official kubectl (scripts/setup.sh) installs the CRD.
export PATH="$PWD/.tools/bin:$PATH"
exec "$build/bin/bench_operator_scale" --operator "$build/bin/tfjob-operator" "$@"
