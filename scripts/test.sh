#!/usr/bin/env bash
# The second command on a fresh clone: installs the Debian packages
# (scripts/setup.sh), builds everything (incrementally) and runs every test.
# Tests that need MNIST read it from ../shared/data/mnist; GPU tests skip
# when there is no device.
#   --repeat N  runs every test up to N times, stopping a test at its first
#               failure (ctest --repeat until-fail:N): a hunt for flaky tests.
#               CI does not use it.
set -euo pipefail
cd "$(dirname "$0")/.."
repeat=()
if [[ "${1:-}" == "--repeat" ]]; then
  if [[ ! "${2:-}" =~ ^[1-9][0-9]{0,3}$ ]]; then
    echo "test.sh: --repeat needs a count from 1 to 9999, got '${2:-}'" >&2
    exit 2
  fi
  repeat=(--repeat "until-fail:$2")
  shift 2
fi
if [[ $# -gt 0 ]]; then
  echo "test.sh: unknown argument '$1' (usage: scripts/test.sh [--repeat N])" >&2
  exit 2
fi
bash scripts/setup.sh
[[ -f build/build.ninja ]] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
cd build
status=0
# One more test than there are cores: the multi-process tests wait on
# their processes' start-up and exchanges (two cores, no cost data as on a
# fresh clone: 206 s at -j 2, 171 s at -j 3).
ctest --output-on-failure --timeout 600 -j "$(($(nproc) + 1))" -LE 'envtest|slurm' "${repeat[@]}" || status=$?
# The real-API-server suite (label envtest: one control plane per
# executable), verbose: its log shows each control plane starting and each
# scenario passing. One more executable than there are cores: the suites
# wait on the control plane more than they compute, now that their reads go
# over HTTP from the test process rather than through kubectl (two cores:
# 234 s at -j 2, 168 s at -j 3, 148 s at -j 4 with the CPUs saturated).
echo "== the real-API-server suite (../shared/envtest) =="
ctest -V --timeout 600 -j "$(($(nproc) + 1))" -L envtest "${repeat[@]}" || status=$?
# The real-Slurm suite (label slurm: one Slurm per executable, the sbatch
# examples through sbatch and srun), verbose: its log shows each Slurm
# starting and each job's id and final state. Skipped without Slurm or
# root, unless TFJOB_REQUIRE_SLURM=1 (CI) makes that a failure. One
# executable at a time: each runs MNIST jobs of a chief, a PS and two
# workers (some until a task is killed), so side by side they put eight
# processes on two cores, and asynchronous training's staleness, and so its
# accuracy, follows the load.
echo "== the real-Slurm suite (tests/support/slurm) =="
ctest -V --timeout 600 -j 1 -L slurm "${repeat[@]}" || status=$?
exit "$status"
