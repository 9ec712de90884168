#!/usr/bin/env bash
# Sanitizer builds that run the tests (compilers and flags: sanitizer_build.sh):
#
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer (-fno-sanitize-recover:
#         UB fails the test) over the unit tests, in build-asan, which
#         scripts/fuzz.sh shares;
#   tsan  ThreadSanitizer over the coordinator, parameter-server, collective
#         and informer tests, in build-tsan.
#
#   bash scripts/sanitize.sh [asan|tsan|all]     (default all)
#   bash scripts/sanitize.sh --build-only [asan|tsan|all]
#                          builds those tests without running them (.ci/run
#                          builds them in the background, at idle priority,
#                          while the main build and its tests leave a core
#                          free)
#
# Only the test executables listed below (and what they link) are built, to
# keep CI's time down; ctest then runs every test of those executables
# (-E _NOT_BUILT skips the placeholders gtest_discover_tests leaves for
# executables that were not built; -LE 'slurm|generated' the real-Slurm
# suites, none of which is built here, and the checks that committed goldens
# are what their Python and node generators write, which run none of the
# project's C++).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/sanitizer_build.sh

BUILD_ONLY=0
if [[ ${1:-} == --build-only ]]; then
  BUILD_ONLY=1
  shift
fi
WHAT=${1:-all}
case "$WHAT" in asan | tsan | all) ;; *)
  echo "usage: $0 [--build-only] [asan|tsan|all]" >&2
  exit 2
  ;;
esac

# Unit tests: every test executable that tests code in its own process.
# Left out, because they exec the project's real binaries (tfjob,
# tfjob-runtime, tfjob-operator) to test them end to end, and building and
# running those sanitized would cost more CI time than the rest together:
# runtime_test, gpu_fit_test, runtime_slurm_test, runtime_resolver_envtest_test,
# runtime_slurm_cluster_test, runtime_slurm_two_nodes_test, local_run_test,
# chaos_test, operator_e2e_test, operator_e2e_faults_test,
# operator_e2e_lax_crd_test, operator_envtest_*, prometheus_test, chart_test,
# chart_rbac_test, chart_install_test, dockerfile_test, custom_loop_test.
# gpu_test needs CUDA, which these builds leave out.
# cluster_envtest_test, kube_envtest_test and operator_leader_test (the
# Kubernetes resolver; the informer, event sink and credentials; leader
# election's Leases; against the real API server, behind the fault proxy
# where a test needs faults) start one control plane each: library code with
# threads of its own, which the sanitizers must see. http_server_test is the
# fault proxy's HTTP server alone.
ASAN_TESTS=(
  common_test base_test cluster_test cluster_envtest_test tensor_test data_test model_test tfjs_golden_test
  checkpoint_test operator_api_test kube_test kube_envtest_test operator_planner_test operator_controller_test
  rpc_server_test rpc_renewing_stub_test operator_leader_test tls_test http_server_test
)
TSAN_TESTS=(coordinator_test ps_test collective_test nccl_test kube_test kube_envtest_test operator_controller_test
  rpc_server_test operator_leader_test tls_test http_server_test)

run_tests() {
  local dir=$1
  shift
  cmake --build "$dir" --target "$@"
  ((BUILD_ONLY)) && return 0
  # A test run whole (tfjob_add_test WHOLE or ENVTEST, label whole or
  # envtest) is named after its executable and has no _NOT_BUILT
  # placeholder: skipped here by name when this build did not make it.
  local skip='_NOT_BUILT$' t
  for t in $(cd "$dir" && ctest -N -L 'whole|envtest' | sed -n 's/^ *Test *#[0-9]*: *//p'); do
    [[ -x $dir/tests/$t ]] || skip+="|^$t\$"
  done
  (cd "$dir" && ctest --output-on-failure --timeout 900 -j "$(nproc)" -E "$skip" -LE 'slurm|generated')
}

if [[ $WHAT == asan || $WHAT == all ]]; then
  configure_asan
  echo "sanitize: ASan + UBSan: ${ASAN_TESTS[*]}"
  # detect_leaks=0: LeakSanitizer needs ptrace, which containers often
  # refuse; ASan itself (overflows, use after free) does not.
  ASAN_OPTIONS=detect_leaks=0:strict_string_checks=1:detect_stack_use_after_return=1 \
    UBSAN_OPTIONS=print_stacktrace=1 run_tests build-asan "${ASAN_TESTS[@]}"
fi

if [[ $WHAT == tsan || $WHAT == all ]]; then
  configure_tsan
  echo "sanitize: TSan: ${TSAN_TESTS[*]}"
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp" \
    run_tests build-tsan "${TSAN_TESTS[@]}"
fi
