// What the caches keep: a pod as the API server returns it comes out with
// only the fields the planner reads, and the planner's view of it is the
// same as of the whole pod.
#include "operator/controller/cache.h"

#include <gtest/gtest.h>

#include "operator/controller/planner.h"

namespace tfjob::op::controller {
namespace {

using json = nlohmann::json;

// A pod of a job's worker as the API server stores it: spec, TF_CONFIG,
// managedFields, node placement, a terminated container.
json FullPod() {
  return json::parse(R"({
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {
      "name": "job-worker-0", "namespace": "team", "uid": "u-1", "resourceVersion": "42",
      "creationTimestamp": "2026-11-26T20:00:00Z", "generateName": "",
      "labels": {"training.kubeflow.org/job-name": "job", "training.kubeflow.org/replica-type": "worker",
                 "training.kubeflow.org/replica-index": "0", "training.kubeflow.org/operator-name": "tfjob-controller"},
      "annotations": {"note": "a long annotation the planner never reads"},
      "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "job", "uid": "j-1",
                           "controller": true, "blockOwnerDeletion": true}],
      "managedFields": [{"manager": "tfjob-operator", "operation": "Update", "fieldsV1": {"f:spec": {}}}]
    },
    "spec": {
      "nodeName": "node-1", "restartPolicy": "Never", "schedulerName": "default-scheduler",
      "volumes": [{"name": "kube-api-access", "projected": {"sources": []}}],
      "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}],
      "containers": [
        {"name": "tensorflow", "image": "tfjob/runtime-cpu:0.1.0", "command": ["tfjob-runtime", "counter"],
         "env": [{"name": "TF_CONFIG", "value": "{\"cluster\":{\"worker\":[\"job-worker-0.team.svc:2222\"]}}"},
                 {"name": "TFJOB_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": "job-task-auth", "key": "token"}}}],
         "ports": [{"name": "tfjob-port", "containerPort": 2222}],
         "resources": {"limits": {"cpu": "1"}}},
        {"name": "sidecar", "image": "busybox", "env": [{"name": "X", "value": "y"}]}
      ]
    },
    "status": {
      "phase": "Failed", "podIP": "10.0.0.7", "hostIP": "192.168.1.2", "qosClass": "Burstable",
      "startTime": "2026-11-26T20:00:01Z",
      "conditions": [{"type": "Ready", "status": "False", "reason": "PodFailed"}],
      "containerStatuses": [{"name": "tensorflow", "ready": false, "restartCount": 2, "image": "tfjob/runtime-cpu:0.1.0",
                             "imageID": "sha256:abc", "containerID": "containerd://1",
                             "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]
    }
  })");
}

TEST(CacheTest, ACachedPodKeepsOnlyWhatThePlannerReads) {
  const json full = FullPod();
  const json cached = CachedPod(full);
  json want = json::parse(R"({
    "metadata": {"name": "job-worker-0", "namespace": "team", "uid": "u-1", "resourceVersion": "42",
                 "creationTimestamp": "2026-11-26T20:00:00Z",
                 "ownerReferences": [{"uid": "j-1", "controller": true}]},
    "spec": {"containers": [{"name": "tensorflow", "env": [{"name": "TFJOB_AUTH_TOKEN"}]}], "nodeName": "node-1"},
    "status": {"phase": "Failed", "conditions": [{"type": "Ready", "status": "False", "reason": "PodFailed"}],
               "containerStatuses": [{"name": "tensorflow", "restartCount": 2,
                                      "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}
  })");
  want["metadata"]["labels"] = full["metadata"]["labels"];
  EXPECT_EQ(cached, want) << cached.dump(2);
  EXPECT_LT(cached.dump().size(), full.dump().size() / 2);

  // The planner sees the same pod.
  const PodView a = ViewPod(full), b = ViewPod(cached);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.uid, b.uid);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.phase, b.phase);
  EXPECT_EQ(a.exit_code, b.exit_code);
  EXPECT_EQ(a.terminated_code, b.terminated_code);
  EXPECT_EQ(a.restart_count, b.restart_count);
  EXPECT_EQ(a.abnormal_reason, b.abnormal_reason);
  EXPECT_EQ(a.abnormal_message, b.abnormal_message);
  EXPECT_EQ(a.deleting, b.deleting);
  EXPECT_EQ(a.controller_uid, b.controller_uid);
  EXPECT_EQ(a.task_token, b.task_token);
  EXPECT_EQ(a.created, b.created);
  EXPECT_EQ(a.node_name, b.node_name);
  EXPECT_TRUE(b.task_token);
  EXPECT_EQ(b.exit_code, 137);
}

void ExpectSameView(const json& full, const std::string& what) {
  const PodView a = ViewPod(full), b = ViewPod(CachedPod(full));
  EXPECT_EQ(a.phase, b.phase) << what;
  EXPECT_EQ(a.exit_code, b.exit_code) << what;
  EXPECT_EQ(a.terminated_code, b.terminated_code) << what;
  EXPECT_EQ(a.restart_count, b.restart_count) << what;
  EXPECT_EQ(a.abnormal_reason, b.abnormal_reason) << what;
  EXPECT_EQ(a.abnormal_message, b.abnormal_message) << what;
  EXPECT_EQ(a.controller_uid, b.controller_uid) << what;
  EXPECT_EQ(a.task_token, b.task_token) << what;
  EXPECT_EQ(a.created, b.created) << what;
  EXPECT_EQ(a.pending_reason, b.pending_reason) << what;
  EXPECT_EQ(a.pending_message, b.pending_message) << what;
}

// Each branch of ViewPod's reading sees the same through the cache: a
// waiting container, a restarted one (lastState), init containers, no
// container statuses (the newest condition), and owner references where
// the controller is not first.
TEST(CacheTest, EveryStateThePlannerReadsSurvivesTheCache) {
  json pod = FullPod();
  pod["status"]["containerStatuses"][0]["state"] =
      json::parse(R"({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s restarting"}})");
  pod["status"]["containerStatuses"][0]["lastState"] = json::parse(
      R"({"terminated": {"exitCode": 3, "reason": "Error", "startedAt": "t0", "finishedAt": "t1", "containerID": "c"}})");
  ExpectSameView(pod, "waiting, lastState terminated");
  EXPECT_EQ(ViewPod(CachedPod(pod)).exit_code, 3);
  EXPECT_EQ(ViewPod(CachedPod(pod)).abnormal_reason, "CrashLoopBackOff");

  pod["status"]["containerStatuses"][0]["state"] = json::parse(R"({"running": {"startedAt": "t2"}})");
  ExpectSameView(pod, "running after a restart");
  EXPECT_EQ(CachedPod(pod)["status"]["containerStatuses"][0]["state"], json::parse(R"({"running": {}})"));

  pod["status"].erase("containerStatuses");
  pod["status"]["initContainerStatuses"] = json::parse(
      R"([{"name": "init", "restartCount": 1, "image": "x", "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": "no"}}}])");
  ExpectSameView(pod, "an init container failed");
  EXPECT_EQ(ViewPod(CachedPod(pod)).abnormal_reason, "Error");

  pod["status"].erase("initContainerStatuses");
  pod["status"]["conditions"] = json::parse(R"([
      {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes", "lastTransitionTime": "2026-11-26T20:00:05Z"},
      {"type": "Ready", "status": "False", "reason": "Old", "message": "older", "lastTransitionTime": "2026-11-26T20:00:01Z"},
      {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-11-26T20:00:05Z"}])");
  ExpectSameView(pod, "no container statuses: the newest condition");
  EXPECT_EQ(ViewPod(CachedPod(pod)).abnormal_reason, "Unschedulable");
  EXPECT_EQ(CachedPod(pod)["status"]["conditions"].size(), 1u);
  // The scheduler's no is kept when another condition is newer: why a
  // Pending pod waits.
  pod["status"]["conditions"][0]["lastTransitionTime"] = "2026-11-26T20:00:00Z";
  ExpectSameView(pod, "the scheduler's no, older than another condition");
  EXPECT_EQ(ViewPod(CachedPod(pod)).pending_reason, "Unschedulable");
  EXPECT_EQ(CachedPod(pod)["status"]["conditions"].size(), 2u);

  pod["metadata"]["ownerReferences"] = json::parse(
      R"([{"kind": "Other", "uid": "o-1"}, {"kind": "TFJob", "name": "job", "uid": "j-2", "controller": true}])");
  ExpectSameView(pod, "the controller reference second");
  EXPECT_EQ(ViewPod(CachedPod(pod)).controller_uid, "j-2");
  pod["metadata"]["ownerReferences"] = json::parse(R"([{"kind": "Other", "uid": "o-1"}])");
  ExpectSameView(pod, "no controller");
  EXPECT_FALSE(CachedPod(pod)["metadata"].contains("ownerReferences"));

  pod["spec"]["containers"][0]["env"].erase(1);
  ExpectSameView(pod, "no task token");
  EXPECT_FALSE(ViewPod(CachedPod(pod)).task_token);
}

TEST(CacheTest, ACachedServiceKeepsItsMetadataAndACachedJobLosesManagedFields) {
  json service{{"metadata",
                {{"name", "job-worker-0"},
                 {"namespace", "team"},
                 {"uid", "s-1"},
                 {"resourceVersion", "7"},
                 {"labels", {{"training.kubeflow.org/job-name", "job"}}},
                 {"managedFields", json::array({json::object()})}}},
               {"spec", {{"clusterIP", "None"}, {"ports", json::array({{{"port", 2222}}})}}}};
  const json cs = CachedService(service);
  EXPECT_FALSE(cs.contains("spec"));
  EXPECT_FALSE(cs["metadata"].contains("managedFields"));
  EXPECT_EQ(ViewService(cs).name, ViewService(service).name);
  EXPECT_EQ(ViewService(cs).labels, ViewService(service).labels);
  EXPECT_EQ(ViewService(cs).controller_uid, ViewService(service).controller_uid);

  json job{{"metadata",
            {{"name", "job"},
             {"namespace", "team"},
             {"resourceVersion", "9"},
             {"annotations",
              {{"kubectl.kubernetes.io/last-applied-configuration", std::string(4000, 'x')},
               {"tfjob-operator.kubeflow.org/exit-code-restarts", "{\"Worker\":1}"}}},
             {"managedFields", json::array({json::object()})}}},
           {"spec", {{"tfReplicaSpecs", json::object()}}},
           {"status", {{"conditions", json::array()}}}};
  const json cj = CachedJob(job);
  EXPECT_FALSE(cj["metadata"].contains("managedFields"));
  EXPECT_EQ(cj["metadata"]["annotations"].size(), 1u);
  EXPECT_EQ(cj["metadata"]["annotations"]["tfjob-operator.kubeflow.org/exit-code-restarts"], "{\"Worker\":1}");
  EXPECT_EQ(cj["spec"], job["spec"]);
  EXPECT_EQ(cj["status"], job["status"]);
  EXPECT_EQ(cj["metadata"]["resourceVersion"], "9");
  // Anything at all: no throw.
  EXPECT_NO_THROW(CachedPod(json("not an object")));
  EXPECT_NO_THROW(CachedJob(json::array()));
}

}  // namespace
}  // namespace tfjob::op::controller
