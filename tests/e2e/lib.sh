# Shared by the real-node end-to-end tests (e2e.sh, multinode.sh): stage
# verdicts, waiting, namespaces with the MNIST and checkpoint volumes, a
# TFJob's run to its end, the MNIST accuracy checks. Sourced, not run.
# The caller sets me (its name), sources scripts/podman/env.sh, calls
# e2e_prerequisites, then sets work (its work folder), cp_dir (the control
# plane) and user (the pods' uid, 65532).
# shellcheck shell=bash
# e2e_prerequisites ARGC: what the real-node tests need, or one line saying
# what is missing and exit (2 for arguments, 1 otherwise): no arguments,
# root, podman, the envtest kit with its node, the MNIST files, kubectl and
# helm from scripts/setup.sh, curl and jq. Sets tag, kit, mnist, kubectl and helm.
e2e_prerequisites() {
  if (($1 > 0)); then
    echo "$me: takes no arguments (usage: tests/e2e/$me)" >&2
    exit 2
  fi
  ((EUID == 0)) || { echo "$me: must run as root (a node's kubelet and containerd need it)" >&2; exit 1; }
  require_podman
  tag=$(project_version)
  kit=${TFJOB_ENVTEST:-$(cd .. && pwd)/shared/envtest}
  [[ -x $kit/start-control-plane.sh && -x $kit/node/start-node.sh ]] || {
    echo "$me: no envtest kit with a node at $kit (set TFJOB_ENVTEST)" >&2
    exit 1
  }
  mnist=$(cd ../shared/data/mnist 2>/dev/null && pwd) || {
    echo "$me: ../shared/data/mnist is missing (the MNIST files the jobs train on)" >&2
    exit 1
  }
  kubectl=$PWD/.tools/bin/kubectl
  helm=$PWD/.tools/bin/helm
  local tool
  for tool in "$kubectl" "$helm"; do
    [[ -x $tool ]] || { echo "$me: $tool is missing (bash scripts/setup.sh installs it)" >&2; exit 1; }
  done
  for tool in curl jq; do
    command -v "$tool" > /dev/null || { echo "$me: $tool is missing (bash scripts/setup.sh installs it)" >&2; exit 1; }
  done
}
process_tree() {  # PID: it and its descendants, taken before any is killed
  local child
  echo "$1"
  for child in $(pgrep -P "$1"); do process_tree "$child"; done
}

start=$SECONDS
failed=()
stage() { echo "== $1 ($((SECONDS - start)) s)"; }
pass() { echo "PASS  $*"; }
fail() { echo "FAIL  $*"; failed+=("$1"); }
# fatal NAME: a stage the rest depends on failed.
fatal() {
  fail "$@"
  echo "$me: stopping: the stages after this one need it"
  exit 1
}
kc() { "$kubectl" --kubeconfig "$cp_dir/admin.kubeconfig" "$@"; }
# kc_exec ARGS... &: kc as a background job whose $! is kubectl itself, so
# that killing it ends the watch (a function run with & is a subshell).
kc_exec() { exec "$kubectl" --kubeconfig "$cp_dir/admin.kubeconfig" "$@"; }
# api PATH: the API server's answer to GET PATH, as the admin of
# cp_dir/admin.kubeconfig; prints nothing and fails on an HTTP error. For the
# reads that the waiting loops repeat every second: a kubectl call costs
# about 0.12 s of CPU (a Go program's start, the config, discovery), and in
# the two-node run its 1,505 calls took 184 of the run's 439 CPU-seconds.
# curl with the admin's certificate then took 28 ms of CPU a call (its start
# and a TLS handshake, another in the API server), 30 of the run's 241
# process CPU-seconds in 1,098 calls (process accounting, 2026-12-06). So
# the reads go through one `kubectl proxy` on a loopback port (api_start,
# which keeps its connections to the API server) as plain HTTP/1.0 from
# bash itself (/dev/tcp): a read starts only the `timeout cat` that takes
# the answer.
# Writes, watches, logs followed and whatever is printed for people stay
# with kubectl.
api() {
  local fd response
  [[ -n ${api_port:-} ]] || { echo "$me: api: no kubectl proxy (api_start)" >&2; return 1; }
  exec {fd}<> "/dev/tcp/127.0.0.1/$api_port" || return 1
  # Answers to HTTP/1.0 come whole, not chunked, and end with the connection.
  if printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$1" >&"$fd"; then
    response=$(timeout 20 cat <&"$fd") || response=
  fi
  exec {fd}>&-
  [[ $response == HTTP/1.[01]" 200 "* ]] || return 1
  printf '%s\n' "${response#*$'\r\n\r\n'}"
}
# api_start: the `kubectl proxy` that api() reads through, on a free
# loopback port, as a job of the calling shell; api_stop ends it. Says why
# when it does not start.
api_start() {
  local i
  kc_exec proxy --address=127.0.0.1 --port=0 > "$work/api-proxy.log" 2>&1 &
  api_proxy_pid=$!
  for ((i = 0; i < 300; i++)); do
    api_port=$(sed -n 's/^Starting to serve on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$work/api-proxy.log")
    [[ -n $api_port ]] && return 0
    kill -0 "$api_proxy_pid" 2> /dev/null || break
    sleep 0.1
  done
  echo "kubectl proxy did not start: $(tail -n 3 "$work/api-proxy.log")"
  api_stop
  return 1
}
api_stop() {
  [[ -n ${api_proxy_pid:-} ]] || return 0
  kill "$api_proxy_pid" 2> /dev/null || true
  wait "$api_proxy_pid" 2> /dev/null || true
  api_proxy_pid= api_port=
}
pods_api() { echo "/api/v1/namespaces/$1/pods"; }  # NS: the path of its pods
# wait_for SECONDS COMMAND...: until COMMAND succeeds, every second.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" > /dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 1
  done
}
indent() { sed 's/^/      /'; }

# ---- the MNIST jobs ------------------------------------------------------------
# namespace NS: a namespace whose default ServiceAccount exists (pods are
# refused before it does).
namespace() {
  kc create namespace "$1" > /dev/null || return 1
  wait_for 60 kc -n "$1" get serviceaccount default || { echo "no default ServiceAccount in $1"; return 1; }
}
# hostpath_volume NS PV CLAIM PATH MODE: the PersistentVolume NS-PV on the
# node's PATH with access MODE, and the claim CLAIM in NS bound to it, as
# YAML (the names docs/quickstart.md uses).
hostpath_volume() {
  cat << EOF
apiVersion: v1
kind: PersistentVolume
metadata: {name: $1-$2}
spec:
  capacity: {storage: 1Gi}
  accessModes: [$5]
  storageClassName: ""
  hostPath: {path: "$4", type: Directory}
  claimRef: {namespace: $1, name: $3}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: $3, namespace: $1}
spec:
  accessModes: [$5]
  storageClassName: ""
  volumeName: $1-$2
  resources: {requests: {storage: 1Gi}}
EOF
}
# NAMESPACE: the examples' PVCs (mnist, mnist-checkpoints) bound to hostPath
# volumes made for it: the MNIST folder read-only, a checkpoint folder of
# its own that only the pods' user may write.
namespace_with_volumes() {
  local ns=$1 checkpoints=$work/$1-checkpoints
  install -d -m 0700 -o "$user" -g "$user" "$checkpoints" || return 1
  namespace "$ns" || return 1
  { hostpath_volume "$ns" mnist mnist "$mnist" ReadOnlyMany
    echo ---
    hostpath_volume "$ns" checkpoints mnist-checkpoints "$checkpoints" ReadWriteMany
  } | kc apply -f - > /dev/null || return 1
  bound() {
    [[ $(kc -n "$ns" get pvc -o jsonpath='{range .items[*]}{.status.phase} {end}') == "Bound Bound " ]]
  }
  wait_for 60 bound || { kc -n "$ns" get pvc; echo "the PVCs were not Bound in 60 s"; return 1; }
}

# job_ended NS JOB: Succeeded or Failed, whichever condition the job has
# True, else nothing (one read where a loop would make two).
job_ended() {
  api "/apis/kubeflow.org/v1/namespaces/$1/tfjobs/$2" \
    | jq -r '[.status.conditions[]? | select((.type == "Succeeded" or .type == "Failed") and .status == "True") | .type] | join(" ")'
}
job_condition() {  # NS JOB TYPE: the status of the job's TYPE condition
  api "/apis/kubeflow.org/v1/namespaces/$1/tfjobs/$2" \
    | jq -r --arg type "$3" '[.status.conditions[]? | select(.type == $type) | .status] | join(" ")'
}
running_pods() {  # NS JOB: how many of the job's pods are Running
  api "$(pods_api "$1")?labelSelector=training.kubeflow.org%2Fjob-name%3D$2" \
    | jq '[.items[] | select(.status.phase == "Running")] | length'
}
# wait_job NS JOB PODS SECONDS: the job Succeeded, and each of its PODS pods
# was seen Running: `kubectl get pods -o wide -w` runs all along (kept in
# NS-pods-watch.txt), and the first poll that finds all of them Running at
# once keeps its `kubectl get pods -o wide` (NS-pods-wide.txt; a short job
# can finish some pods before a poll sees them all); PODS 0: only the job's end. Says why not.
wait_job() {
  local ns=$1 job=$2 pods=$3 deadline=$((SECONDS + $4)) all_running=0 t0=$SECONDS watcher job_watcher status=1 seen ended
  kc_exec -n "$ns" get pods -o wide -w > "$work/$ns-pods-watch.txt" 2>&1 &
  watcher=$!
  kc_exec -n "$ns" get tfjob "$job" -w > "$work/$ns-tfjob-watch.txt" 2>&1 &
  job_watcher=$!
  while ((SECONDS < deadline)); do
    if ((pods > 0 && !all_running)) && [[ $(running_pods "$ns" "$job") == "$pods" ]]; then
      all_running=1
      echo "all $pods pods Running at once after $((SECONDS - t0)) s:"
      kc -n "$ns" get pods -o wide | tee "$work/$ns-pods-wide.txt"
    fi
    ended=$(job_ended "$ns" "$job")
    if [[ $ended == Succeeded ]]; then
      echo "Succeeded after $((SECONDS - t0)) s:"
      kc -n "$ns" get tfjob "$job"
      status=0
      break
    fi
    if [[ $ended == Failed ]]; then
      echo "Failed after $((SECONDS - t0)) s: $(kc -n "$ns" get tfjob "$job" -o jsonpath='{.status.conditions[-1].message}')"
      break
    fi
    sleep 1
  done
  kill "$watcher" "$job_watcher" 2> /dev/null || true
  wait "$watcher" "$job_watcher" 2> /dev/null || true
  echo "kubectl get tfjob -w:"
  cat "$work/$ns-tfjob-watch.txt"
  if ((status != 0)) && [[ $(job_condition "$ns" "$job" Failed) != True ]]; then
    echo "not Succeeded in $4 s:"
    kc -n "$ns" get tfjob,pods -o wide
  fi
  ((status == 0)) || return 1
  ((pods > 0)) || return 0
  seen=$(awk -v job="$job-" 'index($1, job) == 1 && $3 == "Running" { print $1 }' "$work/$ns-pods-watch.txt" | sort -u)
  if ((!all_running)); then
    echo "(no poll saw all $pods Running at once; the watch saw each pod's phases:)"
    cat "$work/$ns-pods-watch.txt"
  fi
  [[ $(wc -l <<< "$seen") == "$pods" && -n $seen ]] \
    || { echo "only these pods were seen Running: $(tr '\n' ' ' <<< "$seen")"; return 1; }
  echo "each of the $pods pods was seen Running: $(tr '\n' ' ' <<< "$seen")"
}
# The accuracy of "Evaluation\n<n>/<n> - <t> - loss: L - accuracy: A" in a log.
evaluation_accuracy() {
  awk '/^Evaluation$/ { getline; if (match($0, /accuracy: [0-9.]+/)) a = substr($0, RSTART + 10, RLENGTH - 10) } END { print a }'
}
at_least() { python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)' "$1" "$2"; }
job_debug() {  # NS: what a failed job stage shows
  kc -n "$1" get tfjob,pods -o wide 2>&1
  local pod
  for pod in $(kc -n "$1" get pods -o name 2>/dev/null); do
    echo "--- $pod (last 15 lines)"
    kc -n "$1" logs "$pod" --tail 15 2>&1 || true
  done
  echo "--- the operator (last 15 lines)"
  kc -n tfjob-system logs deploy/tfjob-operator --tail 15 2>&1 || true
}

# evaluator_ends_on_final NS POD ACCURACY: the side-car evaluator (kept by
# cleanPodPolicy None) finishes, and its last evaluation is of the final
# checkpoint: the trained variables on the same evaluation data, so
# ACCURACY, the trainer's own.
evaluator_ends_on_final() {
  local ns=$1 pod=$2 accuracy=$3 log final
  finished() { [[ $(kc -n "$ns" get pod "$pod" -o jsonpath='{.status.phase}') == Succeeded ]]; }
  wait_for 300 finished || { echo "$pod did not finish in 300 s"; return 1; }
  log=$(kc -n "$ns" logs "$pod") || return 1
  final=$(grep -A1 -E '^evaluator: checkpoint step [0-9]+ \(final\)$' <<< "$log") \
    || { echo "no final checkpoint in $pod's log:"; tail -n 10 <<< "$log"; return 1; }
  echo "$pod's last lines:"
  echo "$final"
  [[ $(tail -n 1 <<< "$log") == *"accuracy: $accuracy" ]] \
    || { echo "$pod's final accuracy is not the trainer's $accuracy"; return 1; }
}

# train_mnist NS JOB MANIFEST PODS POD WHO BAR: applies an MNIST example in
# a namespace with its volumes, waits for its PODS pods to run and the job to
# succeed, and checks POD's evaluation (WHO in messages) against BAR and the
# evaluator's last result against it.
train_mnist() {
  local ns=$1 job=$2 manifest=$3 pods=$4 pod=$5 who=$6 bar=$7 log accuracy
  namespace_with_volumes "$ns" || return 1
  kc -n "$ns" apply -f "$manifest" || return 1
  wait_job "$ns" "$job" "$pods" 1200 || return 1
  log=$(kc -n "$ns" logs "$job-$pod") || return 1
  grep -A1 '^Evaluation$' <<< "$log"
  accuracy=$(evaluation_accuracy <<< "$log")
  [[ -n $accuracy ]] || { echo "no 'Evaluation' result in $who's log"; return 1; }
  at_least "$accuracy" "$bar" || { echo "$who's accuracy $accuracy is under the bar $bar"; return 1; }
  echo "$who's accuracy: $accuracy (bar $bar)"
  evaluator_ends_on_final "$ns" "$job-evaluator-0" "$accuracy"
}

# edited FILE NAME FROM TO [FROM TO...]: FILE with each FROM (a fixed string)
# replaced by TO, in $work/NAME.yaml; fails if a FROM is not there.
edited() {
  python3 - "$@" << 'PY'
import sys
src, name, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
text = open(src).read()
for old, new in zip(pairs[::2], pairs[1::2]):
    if old not in text:
        sys.exit(f"{src}: no '{old}' to replace")
    text = text.replace(old, new)
open(name, "w").write(text)
PY
}
uid_of() { api "$(pods_api "$1")/$2" | jq -r '.metadata.uid // empty'; }
# NS POD REGEX: the pod's log has a line REGEX matches (read whole first: grep
# -q ending the pipe early would fail api's printf under pipefail).
log_has() {
  local log
  log=$(api "$(pods_api "$1")/$2/log") && grep -qE "$3" <<< "$log"
}
# A pod NAME Running that is not the one with uid OLD.
recreated_running() {
  local got
  got=$(api "$(pods_api "$1")/$2" | jq -r '"\(.metadata.uid) \(.status.phase)"')
  [[ $got == *" Running" && ${got%% *} != "$3" ]]
}

# job_stage NAME FUNCTION NS: runs a job stage, its output indented under
# its verdict, the job's pods and logs after a failure.
job_stage() {
  local name=$1 fn=$2 ns=$3 status=0 t0=$SECONDS
  stage "$name"
  "$fn" > "$work/$name.out" 2>&1 || status=$?
  if ((status == 0)); then
    pass "$name ($((SECONDS - t0)) s)"
    indent < "$work/$name.out"
  else
    indent < "$work/$name.out"
    job_debug "$ns" | indent || true  # what it shows must not end the run
    fail "$name ($((SECONDS - t0)) s)"
  fi
}
