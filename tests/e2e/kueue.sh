# The kueue stage of tests/e2e/e2e.sh (sourced there; uses its kc, helm,
# wait_for, edited, namespace_with_volumes, wait_job, log_has and $work):
# the operator as Kueue's external integration for TFJob (docs/kueue.md) on
# the real node. Kueue's CRDs (../shared/kueue/crds) are installed and the
# chart upgraded with kueue.mode=external; a ResourceFlavor whose node label
# is the node's, a ClusterQueue with CPU for one such job and a LocalQueue;
# the test Kueue (tests/support/kueue_admitter.h, build/bin/tfjob-test-kueue)
# plays Kueue's scheduler from the host. The MNIST PS job, labelled with the
# queue and its containers requesting CPU, is submitted before the admitter
# runs: suspended, no pod, one Workload with Kueue's pod sets owned by the
# job. Admitted: every pod carries the flavor's node label. Evicted after
# its first checkpoint: the pods stop (the chief exits 143), the job is
# suspended and the Workload's eviction handled (quota released, Requeued).
# Re-admitted at once: the new chief restores the checkpoint, the job
# Succeeds with every step, and the Workload is Finished.

kueue_crds=$(cd ../shared/kueue/crds 2> /dev/null && pwd)
test_kueue=$PWD/build/bin/tfjob-test-kueue

kueue_workload() {  # NS JOB: the name of the job's Workload ("" when none)
  kc -n "$1" get workloads.kueue.x-k8s.io -l "training.kubeflow.org/job-name=$2" \
    -o jsonpath='{.items[0].metadata.name}' 2> /dev/null
}
workload_condition() {  # NS WORKLOAD TYPE: that condition's status
  kc -n "$1" get workloads.kueue.x-k8s.io "$2" -o jsonpath="{.status.conditions[?(@.type==\"$3\")].status}"
}

run_kueue_external() {
  local ns=kueue-queued job=mnist-mlp-ps epochs=40 manifest=$work/kueue.json steps wl admitter old log
  [[ -n $kueue_crds ]] || { echo "../shared/kueue/crds is missing"; return 1; }
  [[ -x $test_kueue ]] || { echo "$test_kueue is not built"; return 1; }
  kc create --validate=false -f "$kueue_crds" > /dev/null || return 1
  "$helm" --kubeconfig "$cp_dir/admin.kubeconfig" upgrade tfjob-operator charts/tfjob-operator \
    --namespace tfjob-system --reuse-values --set kueue.mode=external --wait --timeout 180s > "$work/helm-kueue.log" 2>&1 \
    || { cat "$work/helm-kueue.log"; return 1; }
  echo "helm upgrade --set kueue.mode=external: the operator runs with $(kc -n tfjob-system get deploy tfjob-operator \
    -o jsonpath='{.spec.template.spec.containers[0].args}')"
  namespace_with_volumes "$ns" || return 1
  local node
  node=$(kc get nodes -o jsonpath='{.items[0].metadata.labels.kubernetes\.io/hostname}')
  [[ -n $node ]] || { echo "the node has no kubernetes.io/hostname label"; return 1; }
  kc apply -f - << EOF || return 1
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: e2e-node}
spec:
  nodeLabels: {kubernetes.io/hostname: $node}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: e2e-cluster-queue}
spec:
  namespaceSelector: {}
  resourceGroups:
    - coveredResources: [cpu]
      flavors:
        - name: e2e-node
          resources:
            - {name: cpu, nominalQuota: "1"}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: user-queue, namespace: $ns}
spec: {clusterQueue: e2e-cluster-queue}
EOF
  # The example as a user queues it: the queue label, a CPU request per
  # container (Kueue assigns a flavor per requested resource), more epochs.
  kc create --dry-run=client -o json -f examples/mnist/tfjob-ps.yaml > "$work/kueue-src.json" || return 1
  steps=$(python3 - "$work/kueue-src.json" "$manifest" "$epochs" examples/mnist/mlp.json << 'PY'
import json, math, sys
job = json.load(open(sys.argv[1]))
job["metadata"].pop("namespace", None)  # kubectl's dry run names "default"
job["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = "user-queue"
for spec in job["spec"]["tfReplicaSpecs"].values():
    for c in spec["template"]["spec"]["containers"]:
        c.setdefault("resources", {})["requests"] = {"cpu": "100m"}
        if c["command"][:2] == ["tfjob-runtime", "fit"]:
            c["command"] += ["--epochs", sys.argv[3]]
json.dump(job, open(sys.argv[2], "w"))
cfg = json.load(open(sys.argv[4]))
t = cfg["data"]["train"]
print(math.ceil((t["end"] - t["begin"]) / cfg["batch_size"]) * int(sys.argv[3]))
PY
  ) || return 1
  kc -n "$ns" apply -f "$manifest" || return 1
  # Queued: suspended by the operator, a Workload, no pod.
  has_workload() { [[ -n $(kueue_workload "$ns" "$job") ]]; }
  wait_for 60 has_workload || { echo "no Workload for the queued job in 60 s"; return 1; }
  wl=$(kueue_workload "$ns" "$job")
  suspended() { [[ $(kc -n "$ns" get tfjob "$job" -o jsonpath='{.spec.runPolicy.suspend}') == true ]]; }
  wait_for 30 suspended || { echo "the queued job was not suspended"; return 1; }
  [[ -z $(kc -n "$ns" get pods -l "training.kubeflow.org/job-name=$job" -o name) ]] \
    || { echo "the queued job has pods before admission"; return 1; }
  echo "queued: suspended, no pod, Workload $wl:"
  kc -n "$ns" get workloads.kueue.x-k8s.io "$wl" -o json > "$work/kueue-workload.json"
  python3 - "$work/kueue-workload.json" << 'PY' || return 1
import json, sys
w = json.load(open(sys.argv[1]))
sets = [(p["name"], p["count"]) for p in w["spec"]["podSets"]]
owner = w["metadata"]["ownerReferences"][0]
print(f"  podSets {sets}, queueName {w['spec']['queueName']}, owner {owner['kind']}/{owner['name']}")
if sets != [("chief", 1), ("ps", 2), ("worker", 2), ("evaluator", 1)] or owner["kind"] != "TFJob":
    sys.exit("  not Kueue's pod sets and owner")
PY
  # Kueue's scheduler: admits it.
  "$test_kueue" --kubeconfig "$cp_dir/admin.kubeconfig" > "$work/test-kueue.log" 2>&1 &
  admitter=$!
  wait_job_pods() { [[ $(kc -n "$ns" get pods -l "training.kubeflow.org/job-name=$job" -o name | wc -l) == 6 ]]; }
  if ! wait_for 120 wait_job_pods; then
    kill "$admitter"; cat "$work/test-kueue.log"; echo "no 6 pods in 120 s after the admitter started"; return 1
  fi
  echo "admitted ($(workload_condition "$ns" "$wl" Admitted)): the pods' node selectors:"
  kc -n "$ns" get pods -l "training.kubeflow.org/job-name=$job" \
    -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeSelector}{"\n"}{end}' | tee "$work/kueue-selectors.txt"
  [[ $(grep -c "\"kubernetes.io/hostname\":\"$node\"" "$work/kueue-selectors.txt") == 6 ]] \
    || { kill "$admitter"; echo "not every pod has the flavor's node label"; return 1; }
  # Evicted after the first checkpoint.
  if ! wait_for 300 log_has "$ns" "$job-chief-0" '^fit: checkpoint .*\(step [1-9][0-9]*'; then
    kill "$admitter"; echo "the chief wrote no checkpoint after step 0 in 300 s"; return 1
  fi
  old=$(uid_of "$ns" "$job-chief-0")
  kc_exec -n "$ns" logs -f "$job-chief-0" > "$work/kueue-chief-log" 2>&1 &
  local follower=$!
  echo "after the chief's first checkpoint: tfjob-test-kueue evict $ns/$wl"
  "$test_kueue" --kubeconfig "$cp_dir/admin.kubeconfig" evict "$ns/$wl" || { kill "$admitter" "$follower"; return 1; }
  local t_evict=$SECONDS
  follower_done() { ! kill -0 "$follower"; }
  wait_for 60 follower_done || echo "kubectl logs -f did not end in 60 s"
  kill "$follower" 2> /dev/null || true
  echo "the evicted chief's last lines:"
  tail -n 2 "$work/kueue-chief-log"
  # 143 either way: after a checkpoint written on the signal ("exiting 143
  # (retryable)"), or, when the parameter servers stopped first and no
  # checkpoint could be read from them, at the end of its shutdown grace
  # ("exiting now (exit code 143)"; seen under CI's load): the job then
  # resumes from the checkpoint before.
  grep -qE 'exiting 143|exit code 143\)' "$work/kueue-chief-log" \
    || { kill "$admitter"; echo "expected the chief to exit 143"; return 1; }
  requeued() { [[ $(workload_condition "$ns" "$wl" Requeued) == True || $(workload_condition "$ns" "$wl" Admitted) == True ]]; }
  wait_for 60 requeued || { kill "$admitter"; echo "the Workload's eviction was not handled in 60 s"; return 1; }
  recreated() { recreated_running "$ns" "$job-chief-0" "$old"; }
  wait_for 180 recreated || { kill "$admitter"; echo "no new chief Running in 180 s after the eviction"; return 1; }
  echo "re-admitted: a new chief Running $((SECONDS - t_evict)) s after the eviction"
  kc -n "$ns" get events --field-selector "involvedObject.name=$job" -o custom-columns=REASON:.reason,MESSAGE:.message \
    | grep -iE 'suspend|resum|workload|start|stop' | head -n 12
  wait_job "$ns" "$job" 0 1200 > "$work/$ns-wait.out" 2>&1 || { kill "$admitter"; cat "$work/$ns-wait.out"; return 1; }
  grep -A3 '^Succeeded' "$work/$ns-wait.out"
  log=$(kc -n "$ns" logs "$job-chief-0") || { kill "$admitter"; return 1; }
  grep -E '^fit: restored checkpoint .* at step [1-9]' <<< "$log" \
    || { kill "$admitter"; echo "the new chief did not restore a checkpoint"; head -n 10 <<< "$log"; return 1; }
  grep -E "^fit: checkpoint .*\\(step $steps, final" <<< "$log" \
    || { kill "$admitter"; echo "no final checkpoint at step $steps"; tail -n 10 <<< "$log"; return 1; }
  grep -A1 '^Evaluation$' <<< "$log"
  finished() { [[ $(workload_condition "$ns" "$wl" Finished) == True ]]; }
  wait_for 60 finished || { kill "$admitter"; echo "the Workload is not Finished"; return 1; }
  echo "Workload $wl: Finished $(kc -n "$ns" get workloads.kueue.x-k8s.io "$wl" \
    -o jsonpath='{.status.conditions[?(@.type=="Finished")].reason}')"
  kill "$admitter"
  wait "$admitter" 2> /dev/null || true
}
