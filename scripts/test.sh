#!/usr/bin/env bash
# The second command on a fresh clone: installs the Debian packages
# (scripts/setup.sh), builds everything (incrementally) and runs every test.
# Tests that need MNIST read it from ../shared/data/mnist; GPU tests skip
# when there is no device.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
[[ -f build/build.ninja ]] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build
cd build
ctest --output-on-failure --timeout 600 -j "$(nproc)"
