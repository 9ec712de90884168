#!/usr/bin/env bash
# Runs the images that scripts/images.sh built (CI runs it right after):
#   - the chart's default image and the examples' images are these images;
#   - in every image, every shared library of every binary is found, and the
#     image runs as its numeric non-root user;
#   - runtime-cpu: --version; the README's counter job with `tfjob run` from
#     the image's examples, Succeeded; the MNIST MLP `fit` with
#     ../shared/data/mnist mounted read-only, to fit_command_test's bar
#     (0.925), its summary written by uid 65532;
#   - runtime-gpu, on a machine without a GPU: --device auto trains on the
#     CPU and says why; --device gpu is one line on stderr, exit 2;
#   - operator: the container (host network) against a real API server
#     (../shared/envtest) creates a TFJob's pods, serves /metrics and
#     /readyz, and exits 0 on SIGTERM.
# Each check prints PASS or FAIL with what it saw; exits 1 if any failed.
# Every container and the control plane it starts are removed on exit.
#
# usage: tests/images/smoke.sh    (environment: CONTAINERS_CONF, TFJOB_ENVTEST)
set -euo pipefail
cd "$(dirname "$0")/../.."
me=smoke.sh
# shellcheck source=../../scripts/podman/env.sh
source scripts/podman/env.sh

if [[ $# -gt 0 ]]; then
  echo "$me: takes no arguments (usage: tests/images/smoke.sh)" >&2
  exit 2
fi
require_podman
tag=$(project_version)
operator=tfjob/operator:$tag
cpu=tfjob/runtime-cpu:$tag
gpu=tfjob/runtime-gpu:$tag
user=65532
mnist=$(cd ../shared/data/mnist 2>/dev/null && pwd) || {
  echo "$me: ../shared/data/mnist is missing (the MNIST files the fit checks train on)" >&2
  exit 1
}
kit=${TFJOB_ENVTEST:-$(cd .. && pwd)/shared/envtest}
kubectl=.tools/bin/kubectl
helm=.tools/bin/helm

work=$(mktemp -d "${TMPDIR:-/tmp}/tfjob-smoke.XXXXXX")
containers=()
control_plane=
cleanup() {
  local c
  for c in "${containers[@]}"; do pm rm -f "$c" > /dev/null 2>&1 || true; done
  [[ -n $control_plane ]] && bash "$kit/stop-control-plane.sh" "$control_plane" > /dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM  # so that cleanup runs then too

failed=()
# check NAME FUNCTION [ARGS...]: runs a check in this shell (so that what it
# starts is known to cleanup) with errexit off: each check returns non-zero
# itself on failure. What it printed is indented under its verdict.
check() {
  local name=$1 status=0
  shift
  "$@" > "$work/check.out" 2>&1 || status=$?
  if ((status == 0)); then
    echo "PASS  $name"
  else
    echo "FAIL  $name"
    failed+=("$name")
  fi
  sed 's/^/      /' "$work/check.out"
}
fail() { echo "$*"; return 1; }

# ---- the images ----------------------------------------------------------------
images_exist() {
  local ref missing=0
  for ref in "$operator" "$cpu" "$gpu"; do
    if pm image exists "$ref"; then
      echo "$ref: $(pm image inspect --format '{{.Size}}' "$ref" | awk '{ printf "%.1f MiB", $1 / 1048576 }')"
    else
      echo "$ref: not built (bash scripts/images.sh builds it)"
      missing=1
    fi
  done
  return "$missing"
}

# The chart's default operator image, as `helm template` renders it, and every
# image the example manifests name are images built here.
chart_and_examples_name_these_images() {
  [[ -x $helm ]] || fail "$helm is missing (bash scripts/setup.sh installs it)" || return 1
  local rendered images ref ok=0
  rendered=$("$helm" template smoke charts/tfjob-operator) || fail "helm template failed" || return 1
  images=$(sed -n 's/^ *image: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' <<< "$rendered" | sort -u)
  [[ $images == "$operator" ]] || fail "the chart's default image is '$images', not $operator" || return 1
  echo "chart default: $images"
  images=$(grep -rhoE '^ *image: *[^ ]+' examples --include='*.yaml' | awk '{ print $2 }' | tr -d '"' | sort -u)
  [[ -n $images ]] || fail "no image: in examples/*.yaml" || return 1
  while read -r ref; do
    if [[ $ref == "$cpu" || $ref == "$gpu" ]]; then
      echo "examples: $ref"
    else
      echo "examples: $ref is not an image scripts/images.sh builds"
      ok=1
    fi
  done <<< "$images"
  return "$ok"
}

# ldd of each binary inside the image: no "not found".
libraries_resolve() {
  local ref=$1 out b status=0
  shift
  for b in "$@"; do
    out=$(pm run --rm --network none --entrypoint ldd "$ref" "/usr/local/bin/$b" 2>&1) || {
      echo "$b: ldd failed: $out"
      status=1
      continue
    }
    if grep -q 'not found' <<< "$out"; then
      echo "$b:"
      grep 'not found' <<< "$out"
      status=1
    else
      echo "$b: $(grep -c '=>' <<< "$out") libraries, all found"
    fi
  done
  return "$status"
}

# tfjob-runtime opens cuBLAS and NCCL when a task first uses a GPU
# (common/shared_library.h), so ldd does not list them: each soname the
# binary names must be in the image's loader cache, with its own libraries.
opened_libraries_resolve() {
  local ref=$1 out
  out=$(pm run --rm --network none --entrypoint sh "$ref" -c '
    for so in $(grep -aoE "lib(cublas|nccl)\.so\.[0-9]+" /usr/local/bin/tfjob-runtime | sort -u); do
      path=$(ldconfig -p | sed -n "s|^[[:space:]]*$so .*=> ||p" | head -n 1)
      [ -n "$path" ] || { echo "$so: not in the loader cache"; exit 1; }
      if ldd "$path" | grep -q "not found"; then echo "$so: $(ldd "$path" | grep "not found")"; exit 1; fi
      echo "$so: $path, its libraries all found"
    done' 2>&1) || {
    echo "$out"
    return 1
  }
  echo "$out"
  [[ $out == *libcublas* && $out == *libnccl* ]] || fail "tfjob-runtime names no cuBLAS or NCCL to open" || return 1
}

runs_as_non_root() {
  local ref=$1 config ids
  config=$(pm image inspect --format '{{.Config.User}}' "$ref")
  [[ $config == "$user:$user" ]] || fail "USER is '$config', not $user:$user" || return 1
  ids=$(pm run --rm --network none --entrypoint sh "$ref" -c 'echo "$(id -u):$(id -g)"') || return 1
  echo "USER $config; inside: uid:gid $ids"
  [[ $ids == "$user:$user" ]]
}

# ---- runtime-cpu ---------------------------------------------------------------
cpu_version() {
  local out
  out=$(pm run --rm --network none "$cpu" --version) || return 1
  echo "$out"
  [[ $out == "tfjob-runtime $tag" ]]
}

# The README's example, from the image's own examples, on loopback only.
cpu_counter_job() {
  local out status=0
  out=$(pm run --rm --network none "$cpu" tfjob run /opt/tfjob/examples/counter/tfjob.yaml 2>&1) || status=$?
  grep -E 'counter: value|\[tfjob\] counter ' <<< "$out" || true
  ((status == 0)) || fail "exit status $status; the end of its output:" || { tail -n 15 <<< "$out"; return 1; }
  grep -q 'counter: value 15' <<< "$out" || fail "the chief did not print 'counter: value 15'" || return 1
  [[ $(tail -n 1 <<< "$out") == "[tfjob] counter Succeeded"* ]] || fail "the last line is not '[tfjob] counter Succeeded...'"
}

# fit with the data mounted read-only and the summary written to a folder
# only uid 65532 may write (so the training process ran as that user).
# Prints the summary's path.
fit_in() {
  local ref=$1 name=$2 out_dir=$work/$2
  shift 2
  mkdir -p "$out_dir"
  chown "$user:$user" "$out_dir"
  chmod 0700 "$out_dir"
  pm run --rm --network none -v "$mnist:/data/mnist:ro" -v "$out_dir:/out" "$ref" \
    fit --config /opt/tfjob/examples/mnist/mlp.json --data-dir /data/mnist --summary-json /out/summary.json "$@"
}
summary_field() { python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))[sys.argv[2]]))' "$1" "$2"; }

cpu_mnist_mlp() {
  local out summary=$work/cpu-mlp/summary.json owner accuracy steps kernels
  out=$(fit_in "$cpu" cpu-mlp 2>&1) || { tail -n 15 <<< "$out"; return 1; }
  grep -A1 -E '^(Epoch 5/5|Evaluation)$' <<< "$out"
  [[ -f $summary ]] || fail "no summary at /out/summary.json" || return 1
  owner=$(stat -c %u:%g "$summary")
  accuracy=$(summary_field "$summary" eval_accuracy)
  steps=$(summary_field "$summary" steps)
  kernels=$(summary_field "$summary" cpu_matrix_products)
  echo "summary written by uid:gid $owner: eval_accuracy $accuracy, steps $steps, CPU kernels $kernels"
  [[ $owner == "$user:$user" ]] || fail "the summary is not owned by $user:$user" || return 1
  [[ $steps == 625 ]] || fail "expected 5 epochs of 125 steps" || return 1
  # The image carries libdnnl, which the runtime opens on first use.
  [[ $kernels == '"oneDNN '* ]] || fail "the CPU kernels are $kernels, not oneDNN's" || return 1
  python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= 0.925 else 1)' "$accuracy" \
    || fail "eval_accuracy $accuracy is under the bar 0.925"
}

# ---- runtime-gpu without a GPU -------------------------------------------------
gpu_auto_trains_on_cpu() {
  local out summary=$work/gpu-auto/summary.json devices accuracy
  out=$(fit_in "$gpu" gpu-auto --device auto 2>&1) || { tail -n 15 <<< "$out"; return 1; }
  grep -E '^fit: ' <<< "$out" || true
  grep -q '^fit: --device auto: training on the CPU: no CUDA device is visible' <<< "$out" \
    || fail "fit did not say why it trains on the CPU" || return 1
  devices=$(summary_field "$summary" devices)
  accuracy=$(summary_field "$summary" eval_accuracy)
  echo "summary: devices $devices, eval_accuracy $accuracy"
  [[ $devices == '["cpu"]' ]] || fail "expected devices [\"cpu\"]" || return 1
  python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= 0.925 else 1)' "$accuracy" \
    || fail "eval_accuracy $accuracy is under the bar 0.925"
}

gpu_device_gpu_is_one_line_exit_2() {
  local status=0 lines
  pm run --rm --network none -v "$mnist:/data/mnist:ro" "$gpu" \
    fit --config /opt/tfjob/examples/mnist/mlp.json --data-dir /data/mnist --device gpu \
    > "$work/gpu.out" 2> "$work/gpu.err" || status=$?
  cat "$work/gpu.err"
  lines=$(wc -l < "$work/gpu.err")
  echo "exit status $status; stderr $lines line(s); stdout $(wc -c < "$work/gpu.out") bytes"
  ((status == 2)) || fail "expected exit status 2" || return 1
  ((lines == 1)) && [[ ! -s $work/gpu.out ]] || fail "expected one line on stderr and nothing on stdout" || return 1
  grep -q '^tfjob-runtime: error: flag --device gpu: no CUDA device is visible' "$work/gpu.err" \
    || fail "expected 'tfjob-runtime: error: flag --device gpu: no CUDA device is visible ...'"
}

# ---- operator against a real API server ----------------------------------------
kc() { "$kubectl" --kubeconfig "$control_plane/admin.kubeconfig" "$@"; }
# wait_for SECONDS COMMAND...: until COMMAND succeeds, every 0.2 s.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" > /dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

operator_against_envtest() {
  [[ -x $kit/start-control-plane.sh ]] || fail "no envtest kit at $kit" || return 1
  control_plane=$work/control-plane
  bash tests/support/control-plane-up.sh "$kit" "$control_plane" > "$work/control-plane.log" 2>&1 \
    || { tail -n 5 "$work/control-plane.log"; fail "the control plane did not start"; return 1; }
  # The official kubectl (scripts/setup.sh), else the kit's.
  [[ -x $kubectl ]] || kubectl=$control_plane/bin/kubectl
  echo "control plane: $(kc config view -o jsonpath='{.clusters[0].cluster.server}')"
  kc apply --server-side -f crds/kubeflow.org_tfjobs.yaml > /dev/null || fail "kubectl apply of the CRD failed" || return 1
  # Polled: `kubectl wait --for condition=established` fails at once while
  # the CRD has no status yet.
  established() {
    [[ $(kc get crd tfjobs.kubeflow.org -o jsonpath='{.status.conditions[?(@.type=="Established")].status}') == True ]]
  }
  wait_for 60 established || fail "the TFJob CRD was not established in 60 s" || return 1
  # The image's user reads the kubeconfig: a copy it may read.
  install -m 0444 "$control_plane/admin.kubeconfig" "$work/kubeconfig"

  # Port 0: the operator binds free ports and prints them first
  # ("tfjob-operator: metrics on :P, health probes on :Q").
  local name=tfjob-smoke-operator-$$ ports metrics_port health_port status=0
  containers+=("$name")  # removed on exit
  pm run -d --name "$name" --network host -v "$work/kubeconfig:/etc/tfjob/kubeconfig:ro" "$operator" \
    --kubeconfig /etc/tfjob/kubeconfig --metrics-bind-address 127.0.0.1:0 \
    --health-probe-bind-address 127.0.0.1:0 > /dev/null || fail "podman run of the operator failed" || return 1
  ports_printed() {
    ports=$(pm logs "$name" 2>&1 | sed -n 's/^tfjob-operator: metrics on :\([0-9]*\), health probes on :\([0-9]*\)$/\1 \2/p')
    [[ -n $ports ]]
  }
  if wait_for 30 ports_printed; then
    read -r metrics_port health_port <<< "$ports"
    operator_checks "$name" "$metrics_port" "$health_port" || status=$?
  else
    echo "the operator did not print its ports in 30 s"
    status=1
  fi
  if ((status != 0)); then
    echo "the operator's log:"
    pm logs "$name" 2>&1 | tail -n 20
  fi
  return "$status"
}

operator_checks() {
  local name=$1 metrics_port=$2 health_port=$3 ready pods metrics exit_code
  ready_ok() { [[ $(curl -s "http://127.0.0.1:$health_port/readyz") == ok ]]; }
  wait_for 60 ready_ok || fail "/readyz did not answer ok within 60 s" || return 1
  ready=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$health_port/readyz")
  echo "/readyz: ok (HTTP $ready); the operator says: $(pm logs "$name" 2>&1 | head -n 1)"

  # A namespace of its own, once its default ServiceAccount exists (pods are
  # refused before), and the README's counter job in it.
  kc create namespace smoke > /dev/null || return 1
  wait_for 60 kc -n smoke get serviceaccount default || fail "no default ServiceAccount in namespace smoke" || return 1
  kc -n smoke apply -f examples/counter/tfjob.yaml > /dev/null || fail "kubectl apply of the counter TFJob failed" || return 1
  five_pods() {
    [[ $(kc -n smoke get pods -l training.kubeflow.org/job-name=counter -o name | wc -l) == 5 ]]
  }
  wait_for 60 five_pods || { kc -n smoke get pods; fail "the operator did not create the job's 5 pods in 60 s"; return 1; }
  pods=$(kc -n smoke get pods -l training.kubeflow.org/job-name=counter -o name | sort | tr '\n' ' ')
  echo "pods: $pods"
  [[ $pods == "pod/counter-chief-0 pod/counter-ps-0 pod/counter-worker-0 pod/counter-worker-1 pod/counter-worker-2 " ]] \
    || fail "expected counter-chief-0, counter-ps-0 and counter-worker-0..2" || return 1

  metrics=$(curl -s "http://127.0.0.1:$metrics_port/metrics") || fail "GET /metrics failed" || return 1
  grep '^training_operator_jobs_created_total{' <<< "$metrics" || true
  grep -q '^training_operator_jobs_created_total{framework="tensorflow",job_namespace="smoke"} 1$' <<< "$metrics" \
    || fail "/metrics does not count the job as created" || return 1

  pm stop --time 30 "$name" > /dev/null || fail "podman stop failed" || return 1
  exit_code=$(pm inspect --format '{{.State.ExitCode}}' "$name")
  echo "SIGTERM (podman stop): exit code $exit_code"
  [[ $exit_code == 0 ]]
}

check "the three images are built" images_exist
check "the chart's default image and the examples' images are these" chart_and_examples_name_these_images
check "operator: every library resolves" libraries_resolve "$operator" tfjob-operator
check "operator: runs as $user" runs_as_non_root "$operator"
check "runtime-cpu: every library resolves" libraries_resolve "$cpu" tfjob-runtime tfjob custom_training_loop
check "runtime-cpu: runs as $user" runs_as_non_root "$cpu"
check "runtime-cpu: --version" cpu_version
check "runtime-cpu: tfjob run /opt/tfjob/examples/counter/tfjob.yaml Succeeded" cpu_counter_job
check "runtime-cpu: MNIST MLP fit, data read-only, accuracy >= 0.925, as uid $user" cpu_mnist_mlp
check "runtime-gpu: every library resolves" libraries_resolve "$gpu" tfjob-runtime tfjob custom_training_loop
check "runtime-gpu: cuBLAS and NCCL, opened on first use, are there" opened_libraries_resolve "$gpu"
check "runtime-gpu: runs as $user" runs_as_non_root "$gpu"
check "runtime-gpu: --device auto without a GPU trains on the CPU and says why" gpu_auto_trains_on_cpu
check "runtime-gpu: --device gpu without a GPU is one line, exit 2" gpu_device_gpu_is_one_line_exit_2
check "operator: against a real API server: pods, /metrics, /readyz, exit 0 on SIGTERM" operator_against_envtest

if ((${#failed[@]})); then
  echo "$me: ${#failed[@]} check(s) failed: ${failed[*]}"
  exit 1
fi
echo "$me: all checks passed"
