#!/usr/bin/env bash
# TFJobs across several real nodes, a drained node and a node that dies
# (issue 49), on two nodes of this machine (tests/support/multinode.sh: each
# node its own kubelet, containerd, network namespace and pod subnet):
#   cluster      the envtest control plane and nodes tfmn-n1, tfmn-n2;
#   images       the operator and CPU runtime images loaded into both;
#   helm         the chart with its defaults, the operator on tfmn-n1 (the
#                node that never fails here; a cluster keeps its operators
#                on nodes it does not drain);
#   ps-across-nodes   the MNIST PS job, its workers kept off the PS's node by
#                pod anti-affinity: PS and workers on different nodes, trained
#                to the bar;
#   mwms-across-nodes multi-worker mirrored, 2 workers spread one per node by
#                a topology spread constraint, trained to the bar;
#   drain        the MNIST PS job, its chief and workers on tfmn-n2, with
#                backoffLimit 0: `kubectl drain tfmn-n2` mid-training; the
#                evicted pods carry DisruptionTarget, the chief checkpoints
#                and exits 143, replacements run on tfmn-n1, restore the
#                checkpoint, and the job Succeeds with every step (an
#                eviction is not a failure);
#   node-loss    the counter job, its chief and a worker on tfmn-n2; every
#                process of tfmn-n2 killed at once (power loss): NotReady,
#                after the operator's grace (the chart's default,
#                nodeFailure.graceSeconds) its pods are force-deleted and
#                created on tfmn-n1; tfmn-n2 boots again while they start;
#                Succeeded with the exact value;
#   partition    the same job, tfmn-n2 cut off (its link down) instead:
#                its pods replaced on tfmn-n1 after the grace, the link back
#                while the old chief still runs there (its last lines
#                printed): Succeeded with the exact value;
#   node-loss-without-grace  the same power loss with nodeFailure.graceSeconds=0
#                (training-operator's behaviour): the job hangs, its pods
#                bound to the dead node, for longer than node-loss took to
#                resume; when tfmn-n2 boots again the job ends exact;
#   teardown     the nodes and control plane stopped, and nothing left:
#                network namespaces, links, iptables chains, its processes.
# Each job stage prints the pods' nodes (kubectl get pods -o wide) and the
# failure stages their timelines (seconds from the event).
#
# usage: tests/e2e/multinode.sh
# environment: TFJOB_ENVTEST (the kit, default ../shared/envtest),
#   E2E_KEEP=1 (keep the work folder), CONTAINERS_CONF.
# Needs what tests/e2e/e2e.sh needs (root, scripts/setup.sh's packages and
# tools, the images of scripts/images.sh, ../shared/data/mnist).
set -euo pipefail
cd "$(dirname "$0")/../.."
me=multinode.sh
# shellcheck source=../../scripts/podman/env.sh
source scripts/podman/env.sh

# shellcheck source=tests/e2e/lib.sh
source tests/e2e/lib.sh
e2e_prerequisites "$#"
export TFJOB_ENVTEST=$kit
user=65532
ps_bar=0.85   # as e2e.sh's (tests/e2e/e2e.sh says why)
mwms_bar=0.92
n1=tfmn-n1 n2=tfmn-n2

work=$(mktemp -d "${TMPDIR:-/tmp}/tfjob-multinode.XXXXXX")
chmod 0755 "$work"  # the pods' user reaches the checkpoint folders in it
cp_dir=$work/cp
cluster_started=0
mn() { bash tests/support/multinode.sh "$1" "$cp_dir" "${@:2}"; }
teardown() {
  api_stop
  mn down > "$work/down.log" 2>&1 || echo "$me: multinode.sh down failed: $(tail -n 1 "$work/down.log")" >&2
  bash "$kit/stop-control-plane.sh" "$cp_dir" > "$work/stop-control-plane.log" 2>&1 \
    || echo "$me: stop-control-plane.sh failed: $(tail -n 1 "$work/stop-control-plane.log")" >&2
  cluster_started=0
}
cleanup() {
  local status=$?
  local pid
  for pid in $(jobs -p); do kill $(process_tree "$pid") 2> /dev/null || true; done
  ((cluster_started)) && teardown
  if [[ ${E2E_KEEP:-} == 1 ]]; then
    echo "$me: kept $work"
  else
    rm -rf "$work"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM  # so that cleanup runs then too


# What the host had before, to show that teardown leaves nothing.
host_state() {
  set +o pipefail  # a pgrep that finds nothing is not a failure here
  ip netns list 2> /dev/null | awk '{print "netns " $1}'
  ip -o link show 2> /dev/null | awk -F': ' '{print "link " $2}' | sed 's/@.*//'
  iptables -w -S 2> /dev/null | awk '$1=="-N" {print "iptables filter " $2}'
  iptables -w -t nat -S 2> /dev/null | awk '$1=="-N" {print "iptables nat " $2}'
  # Only this run's processes: each names a path in $work on its command
  # line (etcd's --data-dir, the kubelet's --config, ...). CI runs the
  # sanitizer tests beside this script, and their own API servers and etcds
  # come and go meanwhile. A node's other processes (shims, containers) live
  # in its PID namespace and end with its init.
  local pid
  for pid in $(pgrep -f 'kubelet|containerd|node-dns|kube-scheduler|kube-controller-manager|kube-apiserver|etcd'); do
    [[ $(tr '\0' ' ' < "/proc/$pid/cmdline" 2> /dev/null) == *"$work/"* ]] || continue
    # Not a zombie: a stopped process waits a moment for init to reap it.
    [[ $(awk '{print $3}' "/proc/$pid/stat" 2> /dev/null) == Z ]] || echo "process $(cat "/proc/$pid/comm" 2> /dev/null)"
  done
  ip route show 2> /dev/null | awk '{print "route " $1}'
  set -o pipefail
}
host_state | sort > "$work/host-before"

# ---- cluster -----------------------------------------------------------------
stage cluster
cluster_started=1
ENVTEST_APISERVER_EXTRA_ARGS=--kubelet-preferred-address-types=InternalIP,Hostname \
  bash tests/support/control-plane-up.sh "$kit" "$cp_dir" > "$work/control-plane.log" 2>&1 \
  || { tail -n 5 "$work/control-plane.log" | indent; fatal cluster "the control plane did not start"; }
api_start || fatal cluster "no kubectl proxy for the waiting loops' reads"
mn up 2 > "$work/nodes.log" 2>&1 || { indent < "$work/nodes.log"; fatal cluster "the nodes did not start"; }
pass cluster "$(tail -n 1 "$work/nodes.log")"
kc get nodes -o wide | indent || true

# ---- images ------------------------------------------------------------------
stage images
for image in operator runtime-cpu; do
  pm image exists "tfjob/$image:$tag" || fatal images "tfjob/$image:$tag is not built (bash scripts/images.sh builds it)"
  pm tag "tfjob/$image:$tag" "docker.io/tfjob/$image:$tag"
  mn load "docker.io/tfjob/$image:$tag" > "$work/load-$image.log" 2>&1 \
    || { indent < "$work/load-$image.log"; fatal images "loading docker.io/tfjob/$image:$tag failed"; }
done
for node in 1 2; do
  loaded=$(ctr -a "$cp_dir/multinode/n$node/containerd.sock" -n k8s.io images ls -q | grep '^docker.io/tfjob/' | sort | tr '\n' ' ')
  [[ $loaded == "docker.io/tfjob/operator:$tag docker.io/tfjob/runtime-cpu:$tag " ]] \
    || fatal images "tfmn-n$node's containerd has '$loaded'"
done
pass images "loaded into $n1 and $n2: $loaded"

# ---- helm --------------------------------------------------------------------
stage helm
if ! "$helm" --kubeconfig "$cp_dir/admin.kubeconfig" install tfjob-operator charts/tfjob-operator \
  --namespace tfjob-system --create-namespace --set-json "nodeSelector={\"kubernetes.io/hostname\":\"$n1\"}" \
  --wait --timeout 180s > "$work/helm.log" 2>&1; then
  indent < "$work/helm.log"
  kc -n tfjob-system get pods -o wide 2>&1 | indent || true
  kc -n tfjob-system logs deploy/tfjob-operator --tail 20 2>&1 | indent || true
  fatal helm "helm install did not end with the operator Ready in 180 s"
fi
grace=$(kc -n tfjob-system get deploy tfjob-operator -o jsonpath='{.spec.template.spec.containers[0].args}' \
  | grep -oE 'node-unreachable-grace-seconds=[0-9]+' | cut -d= -f2)
pass helm "the chart's defaults (--node-unreachable-grace-seconds=${grace:-?}), the operator on $n1"
kc -n tfjob-system get pods -o wide | indent || true

# tfjob_json SRC OUT CODE: the manifest SRC as JSON in OUT after the Python
# CODE changed `job` (helpers: pod(type) is a replica type's pod spec,
# command(type) its container's command; avoid, together, spread and prefer
# add the placement a user would write). Prints the placement it added.
tfjob_json() {
  kc create --dry-run=client -o json -f "$1" > "$2.src" || return 1
  python3 - "$2.src" "$2" "$3" << 'PY'
import json, sys
job = json.load(open(sys.argv[1]))
specs, name = job["spec"]["tfReplicaSpecs"], job["metadata"]["name"]
job["metadata"].pop("namespace", None)  # kubectl filled in its default
def pod(rt): return specs[rt]["template"]["spec"]
def command(rt): return pod(rt)["containers"][0]["command"]
def selector(*types):
    return {"matchLabels": {"training.kubeflow.org/job-name": name},
            "matchExpressions": [{"key": "training.kubeflow.org/replica-type", "operator": "In", "values": list(types)}]}
def term(*types): return {"labelSelector": selector(*types), "topologyKey": "kubernetes.io/hostname"}
def avoid(rt, *types):  # never on a node with pods of these types
    pod(rt).setdefault("affinity", {})["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term(*types)]}
def together(rt, *types):  # rather on a node with pods of these types
    pod(rt).setdefault("affinity", {})["podAffinity"] = {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term(*types)}]}
def spread(rt, hard=True):  # one more than another node at most
    pod(rt)["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway", "labelSelector": selector(rt.lower())}]
def prefer(rt, node):
    pod(rt).setdefault("affinity", {})["nodeAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}}]}
exec(sys.argv[3])
for rt in specs:
    placed = {k: pod(rt)[k] for k in ("affinity", "topologySpreadConstraints") if k in pod(rt)}
    if placed:
        print("%s: %s" % (rt, json.dumps(placed, separators=(",", ":"))))
json.dump(job, open(sys.argv[2], "w"), indent=1)
PY
}
# pods_on NS NODE: the names of the namespace's pods bound to NODE.
pods_on() {
  api "$(pods_api "$1")" | jq -r '.items[] | "\(.metadata.name) \(.spec.nodeName // "")"' \
    | awk -v node="$2" '$2 == node { print $1 }' | sort | tr '\n' ' '
}
# nodes_of NS TYPE: the nodes the job's TYPE pods are on, sorted, unique.
nodes_of() {
  api "$(pods_api "$1")?labelSelector=training.kubeflow.org%2Freplica-type%3D$2" | jq -r '.items[] | .spec.nodeName // ""' \
    | sort -u | tr '\n' ' '
}
subnets_of() {  # NS: the /24 subnets of the namespace's pod IPs
  kc -n "$1" get pods -o jsonpath='{range .items[*]}{.status.podIP}{"\n"}{end}' | awk -F. 'NF == 4 { print $1 "." $2 "." $3 ".0/24" }' \
    | sort -u | tr '\n' ' '
}
steps_for() {  # EPOCHS: the MNIST MLP's steps in that many epochs
  python3 -c '
import json, math, sys
j = json.load(open(sys.argv[1])); t = j["data"]["train"]
print(math.ceil((t["end"] - t["begin"]) / j["batch_size"]) * int(sys.argv[2]))' examples/mnist/mlp.json "$1"
}
since() { echo "$((SECONDS - $1))"; }

run_ps_across_nodes() {
  local ns=ps-nodes manifest=$work/ps-nodes.json ps workers
  tfjob_json examples/mnist/tfjob-ps.yaml "$manifest" '
avoid("Worker", "ps"); together("Worker", "worker"); together("PS", "ps")' || return 1
  train_mnist "$ns" mnist-mlp-ps "$manifest" 6 chief-0 "the chief" "$ps_bar" || return 1
  kc -n "$ns" get pods -o wide
  ps=$(nodes_of "$ns" ps) workers=$(nodes_of "$ns" worker)
  echo "PS on: $ps; workers on: $workers; pod subnets: $(subnets_of "$ns")"
  [[ $ps =~ ^tfmn-n[0-9]\ $ && $workers =~ ^tfmn-n[0-9]\ $ && $ps != "$workers" ]] \
    || { echo "expected the PS and the workers each on one node, not the same"; return 1; }
  [[ $(subnets_of "$ns" | wc -w) == 2 ]] || { echo "expected pod IPs in two subnets"; return 1; }
}

run_mwms_across_nodes() {
  local ns=mwms-nodes manifest=$work/mwms-nodes.json workers
  tfjob_json examples/mnist/tfjob-mwms-cluster.yaml "$manifest" '
specs["Worker"]["replicas"] = 2; spread("Worker")' || return 1
  train_mnist "$ns" mnist-mlp-mwms "$manifest" 3 worker-0 "worker 0" "$mwms_bar" || return 1
  kc -n "$ns" get pods -o wide
  workers=$(nodes_of "$ns" worker)
  echo "workers on: $workers; pod subnets: $(subnets_of "$ns")"
  [[ $workers == "$n1 $n2 " ]] || { echo "expected one worker on each node"; return 1; }
}

run_drain() {
  local ns=drain job=mnist-mlp-ps epochs=40 steps manifest=$work/drain.json old t0 follower watcher
  local exited=- replaced=- workers=- resumed=- done_at log on2 old_w0 ended
  steps=$(steps_for "$epochs")
  tfjob_json examples/mnist/tfjob-ps.yaml "$manifest" "
job['spec']['runPolicy']['backoffLimit'] = 0
for rt in specs: command(rt)[4:4] = ['--epochs', '$epochs']
prefer('Chief', '$n2'); prefer('Worker', '$n2'); prefer('PS', '$n1'); prefer('Evaluator', '$n1')" || return 1
  namespace_with_volumes "$ns" || return 1
  kc -n "$ns" apply -f "$manifest" || return 1
  wait_for 300 log_has "$ns" "$job-chief-0" '^fit: checkpoint .*\(step [1-9][0-9]*' \
    || { echo "the chief wrote no checkpoint after step 0 in 300 s"; return 1; }
  kc -n "$ns" get pods -o wide
  on2=$(pods_on "$ns" "$n2")
  [[ $on2 == *"$job-chief-0"* && $on2 == *"$job-worker-"* ]] || { echo "expected the chief and workers on $n2, not: $on2"; return 1; }
  old=$(uid_of "$ns" "$job-chief-0") old_w0=$(uid_of "$ns" "$job-worker-0")
  kc_exec -n "$ns" logs -f "$job-chief-0" > "$work/drain-chief.log" 2>&1 &
  follower=$!
  kc_exec -n "$ns" get pods -w -o jsonpath='{.metadata.name} {.status.conditions[?(@.type=="DisruptionTarget")].reason}{"\n"}' \
    > "$work/drain-disruption.txt" 2>&1 &
  watcher=$!
  echo "on $n2: $on2; after the chief's first checkpoint: kubectl drain $n2"
  t0=$SECONDS
  kc drain "$n2" --ignore-daemonsets --delete-emptydir-data --timeout=180s > "$work/drain.out" 2>&1 \
    || { cat "$work/drain.out"; kill "$follower" "$watcher"; return 1; }
  echo "kubectl drain returned after $(since "$t0") s:"
  tr '\r' '\n' < "$work/drain.out" | grep -a -E '^(evicting pod drain/|pod/|node/)' | sort -u
  while ((SECONDS - t0 < 900)); do
    [[ $exited == - ]] && ! kill -0 "$follower" 2> /dev/null && exited=$(since "$t0")
    [[ $replaced == - ]] && recreated_running "$ns" "$job-chief-0" "$old" && replaced=$(since "$t0")
    [[ $workers == - ]] && recreated_running "$ns" "$job-worker-0" "$old_w0" && workers=$(since "$t0")
    [[ $replaced != - && $resumed == - ]] && log_has "$ns" "$job-chief-0" '^fit: restored checkpoint' && resumed=$(since "$t0")
    ended=$(job_ended "$ns" "$job")
    [[ $ended == Succeeded ]] && break
    [[ $ended == Failed ]] && { echo "the job Failed: $(kc -n "$ns" get tfjob "$job" -o jsonpath='{.status.conditions[-1].message}')"; break; }
    sleep 1
  done
  done_at=$(since "$t0")
  kill "$follower" "$watcher" 2> /dev/null || true
  wait "$follower" "$watcher" 2> /dev/null || true
  kc uncordon "$n2" > /dev/null || true
  echo "the drained chief's last lines:"
  tail -n 2 "$work/drain-chief.log"
  echo "DisruptionTarget on the evicted pods: $(awk '$2 != "" { print $1 "=" $2 }' "$work/drain-disruption.txt" | sort -u | tr '\n' ' ')"
  echo "drain timeline (s from kubectl drain): chief exited $exited, replacement chief Running $replaced, worker 0 $workers, checkpoint restored (training resumed) $resumed, job done $done_at"
  kc -n "$ns" get pods -o wide
  [[ $(job_condition "$ns" "$job" Succeeded) == True ]] || { echo "the job did not Succeed"; return 1; }
  grep -qE "^$job-chief-0 [A-Za-z]" "$work/drain-disruption.txt" \
    || { echo "the evicted chief did not carry the DisruptionTarget condition"; return 1; }
  grep -qE 'exiting 143|exit code 143\)' "$work/drain-chief.log" || { echo "the drained chief did not exit 143"; return 1; }
  [[ $(nodes_of "$ns" chief) == "$n1 " ]] || { echo "the new chief is not on $n1"; return 1; }
  log=$(kc -n "$ns" logs "$job-chief-0") || return 1
  grep -E '^fit: restored checkpoint .* at step [1-9]' <<< "$log" || { echo "the new chief did not restore a checkpoint"; return 1; }
  grep -E "^fit: checkpoint .*\\(step $steps, final" <<< "$log" \
    || { echo "no final checkpoint at step $steps in the new chief's log"; tail -n 5 <<< "$log"; return 1; }
  grep -A1 '^Evaluation$' <<< "$log"
  echo "backoffLimit 0 and Succeeded: the evictions were not failures"
}

# The counter job, slowed down, its chief and some workers on tfmn-n2, the PS
# on tfmn-n1; prints what node_loss_* need. COUNTER_NS NAME.
counter_on_two_nodes() {
  local ns=$1 manifest=$work/$1.json
  namespace "$ns" || return 1
  tfjob_json examples/counter/tfjob.yaml "$manifest" "
command('Chief')[:] = ['tfjob-runtime', 'counter', '--increments', '1,2,3,4,5', '--rounds', '10', '--closure-seconds', '1']
prefer('Chief', '$n2'); prefer('PS', '$n1'); spread('Worker')" || return 1
  kc -n "$ns" apply -f "$manifest" || return 1
  wait_for 120 log_has "$ns" counter-chief-0 '^counter: round 2/' || { echo "the chief did not reach round 2 in 120 s"; return 1; }
  kc -n "$ns" get pods -o wide
  if [[ $(kc -n "$ns" get pod counter-chief-0 -o jsonpath='{.status.containerStatuses[0].restartCount}') != 0 ]]; then
    echo "the chief restarted before round 2; its first run's last lines:"
    kc -n "$ns" logs --previous counter-chief-0 | tail -n 5
  fi
  [[ $(nodes_of "$ns" chief) == "$n2 " && $(nodes_of "$ns" ps) == "$n1 " ]] \
    || { echo "expected the chief on $n2 and the PS on $n1"; return 1; }
}
counter_exact() {  # NS: the chief's value is 10 rounds of 1+2+3+4+5
  local line
  line=$(kc -n "$1" logs counter-chief-0 | grep '^counter: value ') || { echo "no 'counter: value' in the chief's log"; return 1; }
  echo "$line"
  [[ $line == "counter: value 150 after "* ]] || { echo "expected the value 150"; return 1; }
}
node_ready_status() {
  api "/api/v1/nodes/$1" | jq -r '[.status.conditions[]? | select(.type == "Ready") | .status] | join(" ")'
}
new_chief_round() {  # NS OLD_UID: a chief other than OLD_UID has logged a round
  [[ $(uid_of "$1" counter-chief-0) != "$2" ]] && log_has "$1" counter-chief-0 '^counter: round '
}

# NS OLD_UID: the chief with uid OLD_UID is gone and no pod of NS is bound
# to tfmn-n2 (the operator's force deletion).
pods_gone_from_n2() { [[ $(uid_of "$1" counter-chief-0) != "$2" && -z $(pods_on "$1" "$n2") ]]; }
counter_ended() {  # NS: the counter job Succeeded or Failed
  [[ -n $(job_ended "$1" counter) ]]
}

node_loss_resumed=
run_node_loss() {
  local ns=node-loss old t0 notready=- deleted=- booted=- running=- resumed=- done_at
  counter_on_two_nodes "$ns" || return 1
  old=$(uid_of "$ns" counter-chief-0)
  echo "on $n2: $(pods_on "$ns" "$n2"); at round 2: every process of $n2 killed"
  t0=$SECONDS
  mn kill 2 || return 1
  while ((SECONDS - t0 < 600)); do
    [[ $notready == - && $(node_ready_status "$n2") != True ]] && notready=$(since "$t0")
    if [[ $deleted == - ]] && pods_gone_from_n2 "$ns" "$old"; then
      deleted=$(since "$t0")
      # The node comes back while the replacements start.
      mn start 2 > "$work/node-loss-start.log" 2>&1 && booted=$(since "$t0") || cat "$work/node-loss-start.log"
    fi
    [[ $running == - ]] && recreated_running "$ns" counter-chief-0 "$old" && running=$(since "$t0")
    [[ $resumed == - ]] && new_chief_round "$ns" "$old" && resumed=$(since "$t0")
    counter_ended "$ns" && break
    sleep 1
  done
  done_at=$(since "$t0")
  echo "events:"
  kc -n "$ns" get events --field-selector reason=NodeUnreachable -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message --no-headers | sort -u
  echo "node-loss timeline (s from the power loss): $n2 NotReady $notready, its pods force-deleted $deleted, $n2 booted again $booted, new chief Running $running, counting resumed $resumed, job done $done_at"
  node_loss_resumed=$resumed
  kc -n "$ns" get pods -o wide
  [[ $(job_condition "$ns" counter Succeeded) == True ]] || { echo "the job did not Succeed"; return 1; }
  counter_exact "$ns"
}

# The counter job again, its chief and a worker on tfmn-n2; tfmn-n2 cut off
# from the host and the other node (its link down: its processes run on,
# unreachable). After the grace the operator replaces its pods on tfmn-n1;
# the link comes back while the replacements run, so the old chief, still
# running there until its kubelet hears its pod is gone, can reach the PS
# again: anything it sends carries the old generation and is refused
# (fencing), and the value is exact.
run_partition() {
  local ns=partition old old_dir t0 notready=- deleted=- healed=- resumed=- done_at
  counter_on_two_nodes "$ns" || return 1
  old=$(uid_of "$ns" counter-chief-0)
  old_dir=$cp_dir/multinode/n2/fs_var_log/pods/${ns}_counter-chief-0_$old
  echo "on $n2: $(pods_on "$ns" "$n2"); at round 2: $n2 cut off (its link down)"
  t0=$SECONDS
  mn partition 2 || return 1
  while ((SECONDS - t0 < 600)); do
    [[ $notready == - && $(node_ready_status "$n2") != True ]] && notready=$(since "$t0")
    if [[ $deleted == - ]] && pods_gone_from_n2 "$ns" "$old"; then
      deleted=$(since "$t0")
      mn heal 2 || return 1
      healed=$(since "$t0")
    fi
    # The old chief's own log, kept while its kubelet still has it.
    [[ -d $old_dir ]] && cat "$old_dir"/*/*.log > "$work/partition-old-chief.log" 2> /dev/null
    [[ $resumed == - ]] && new_chief_round "$ns" "$old" && resumed=$(since "$t0")
    counter_ended "$ns" && break
    sleep 1
  done
  done_at=$(since "$t0")
  [[ $healed != - ]] || mn heal 2 > /dev/null 2>&1 || true
  echo "partition timeline (s from the cut): $n2 NotReady $notready, its pods force-deleted $deleted, link back $healed, counting resumed $resumed, job done $done_at"
  echo "the cut-off chief's last lines (its container log on $n2):"
  tail -n 4 "$work/partition-old-chief.log" 2> /dev/null | sed 's/^[^ ]* [^ ]* [^ ]* //' || echo "(none kept)"
  kc -n "$ns" get pods -o wide
  [[ $(job_condition "$ns" counter Succeeded) == True ]] || { echo "the job did not Succeed"; return 1; }
  counter_exact "$ns"
}

run_node_loss_without_grace() {
  local ns=node-loss-off old t0 wait_s bound phase
  "$helm" --kubeconfig "$cp_dir/admin.kubeconfig" upgrade tfjob-operator charts/tfjob-operator --namespace tfjob-system \
    --reuse-values --set nodeFailure.graceSeconds=0 --wait --timeout 180s > "$work/helm-off.log" 2>&1 \
    || { cat "$work/helm-off.log"; return 1; }
  echo "helm upgrade --set nodeFailure.graceSeconds=0: $(kc -n tfjob-system get deploy tfjob-operator -o jsonpath='{.spec.template.spec.containers[0].args}' | grep -oE 'node-unreachable-grace-seconds=[0-9]+')"
  counter_on_two_nodes "$ns" || return 1
  old=$(uid_of "$ns" counter-chief-0)
  # Longer than the job took to resume with the grace, and past the 40 s
  # the node controller takes to mark the node NotReady.
  wait_s=$(( ${node_loss_resumed:-120} + 60 ))
  echo "at round 2: every process of $n2 killed; watching for $wait_s s"
  t0=$SECONDS
  mn kill 2 || return 1
  while ((SECONDS - t0 < wait_s)); do
    [[ $(job_condition "$ns" counter Succeeded) == True ]] && { echo "the job Succeeded without the grace action"; return 1; }
    new_chief_round "$ns" "$old" && { echo "a new chief runs without the grace action"; return 1; }
    sleep 2
  done
  bound=$(pods_on "$ns" "$n2")
  phase=$(kc -n "$ns" get pod counter-chief-0 -o jsonpath='{.status.phase} ready={.status.conditions[?(@.type=="Ready")].status} deleting={.metadata.deletionTimestamp}')
  echo "after $(since "$t0") s: $n2 Ready=$(node_ready_status "$n2"); still bound to it: $bound; the chief $phase; the job:"
  kc -n "$ns" get tfjob counter
  kc -n "$ns" get pods -o wide
  [[ $bound == *counter-chief-0* ]] || { echo "expected the chief still bound to $n2"; return 1; }
  echo "hung, as training-operator v1.9.0 does: no pod replaced, no step made"
  t0=$SECONDS
  mn start 2 || return 1
  wait_for 300 eval '[[ $(job_condition "$ns" counter Succeeded) == True ]]' \
    || { echo "the job did not Succeed in 300 s after $n2 came back"; return 1; }
  echo "$n2 back: the job Succeeded $(since "$t0") s later"
  counter_exact "$ns"
}

# Each stage's namespace goes when it ends (its PS pods serve on otherwise,
# and a drain would evict them too).
# MULTINODE_STAGES="drain partition" runs only those (the cluster, images
# and chart always).
for run in ps-across-nodes:run_ps_across_nodes:ps-nodes mwms-across-nodes:run_mwms_across_nodes:mwms-nodes \
  drain:run_drain:drain node-loss:run_node_loss:node-loss partition:run_partition:partition \
  node-loss-without-grace:run_node_loss_without_grace:node-loss-off; do
  IFS=: read -r name fn ns <<< "$run"
  [[ -z ${MULTINODE_STAGES:-} || " $MULTINODE_STAGES " == *" $name "* ]] || continue
  job_stage "$name" "$fn" "$ns"
  kc delete namespace "$ns" --wait=false > /dev/null 2>&1 || true
done

stage teardown
teardown
host_state | sort > "$work/host-after"
left=$(comm -13 "$work/host-before" "$work/host-after" | grep -v '^route default' || true)
if [[ -z $left ]]; then
  pass teardown "nodes and control plane stopped; no namespace, link, iptables chain, route or process left"
else
  fail teardown "left behind:"
  indent <<< "$left"
fi

stage "done"
if ((${#failed[@]})); then
  echo "$me: ${#failed[@]} stage(s) failed: ${failed[*]} ($((SECONDS - start)) s)"
  exit 1
fi
echo "$me: all stages passed ($((SECONDS - start)) s)"
