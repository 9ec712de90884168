// The controller over an in-memory client (fake_client.h): a job gets its
// pods, services and Secret once; a reconcile with nothing changed writes
// nothing; a job deleted behind the cache gets nothing created; Kubeflow's
// job counters count each job once per transition; creates go out in
// slow-start batches.
#include "operator/controller/controller.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include <prometheus/registry.h>

#include "operator/controller/slow_start.h"
#include "operator/controller/tests/fake_client.h"

namespace tfjob::op::controller {
namespace {

using nlohmann::json;
using testing::FakeClient;

json Job() {
  return json::parse(R"({
    "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
    "metadata": {"name": "mnist", "namespace": "team", "uid": "job-uid-1"},
    "spec": {"tfReplicaSpecs": {
      "Chief": {"replicas": 1, "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tfjob/runtime-cpu"}]}}},
      "Worker": {"replicas": 2, "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tfjob/runtime-cpu"}]}}}
    }}
  })");
}

// Waits (up to 20 s) for `done`; false if it never held.
bool WaitFor(const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

// training_operator_jobs_<what>_total{job_namespace="team"}; -1 if absent.
double JobCounter(prometheus::Registry& registry, const std::string& what) {
  for (const auto& family : registry.Collect()) {
    if (family.name != "training_operator_jobs_" + what + "_total") continue;
    for (const auto& m : family.metric) {
      for (const auto& l : m.label) {
        if (l.name == "job_namespace" && l.value == "team") return m.counter.value;
      }
    }
  }
  return -1;
}

// A job of `workers` workers with restartPolicy `policy`, named `name`.
json WorkerJob(const std::string& name, int workers, const std::string& policy) {
  json job = Job();
  job["metadata"]["name"] = name;
  job["metadata"]["uid"] = "uid-" + name;
  job["spec"]["tfReplicaSpecs"].erase("Chief");
  job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = workers;
  job["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = policy;
  return job;
}

int Writes(const FakeClient& c) {
  int n = 0;
  for (const char* verb : {"POST", "PUT", "PUT status", "PATCH", "PATCH status", "DELETE"}) {
    for (const char* plural : {"pods", "services", "secrets", "tfjobs"}) n += c.Count(std::string(verb) + " " + plural);
  }
  return n;
}

class ControllerTest : public ::testing::Test {
 protected:
  ControllerOptions Options() {
    ControllerOptions o;
    o.ns = "team";
    return o;
  }
  FakeClient client_;
  prometheus::Registry registry_;
};

TEST_F(ControllerTest, AJobGetsItsObjectsOnceAndAQuietReconcileWritesNothing) {
  client_.Put(kube::kTFJobs, Job());
  Controller c(client_, Options(), registry_);
  c.Start();
  ASSERT_TRUE(WaitFor([&] {
    return client_.Objects(kube::kPods, "team").size() == 3 && client_.Objects(kube::kServices, "team").size() == 3;
  }));
  // Settled: every event handed to the caches, nothing queued, and no
  // write for half a second.
  int writes = -1;
  ASSERT_TRUE(WaitFor([&] {
    const int now = Writes(client_);
    if (now != writes || c.QueueDepth() > 0 || !client_.AllDelivered()) {
      writes = now;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      return false;
    }
    return true;
  }));

  std::set<std::string> names;
  for (const auto& p : client_.Objects(kube::kPods, "team")) {
    names.insert(p["metadata"]["name"].get<std::string>());
    EXPECT_EQ(p["metadata"]["ownerReferences"][0]["uid"], "job-uid-1");
    bool tf_config = false;
    for (const auto& e : p["spec"]["containers"][0]["env"]) tf_config |= e["name"] == "TF_CONFIG";
    EXPECT_TRUE(tf_config) << p.dump();
  }
  EXPECT_EQ(names, (std::set<std::string>{"mnist-chief-0", "mnist-worker-0", "mnist-worker-1"}));
  EXPECT_EQ(client_.Objects(kube::kSecrets, "team").size(), 1u);
  const json job = client_.Objects(kube::kTFJobs, "team").at(0);
  ASSERT_TRUE(job["status"]["conditions"].is_array());
  EXPECT_EQ(job["status"]["conditions"][0]["type"], "Created");

  // What a resync would do: reconcile again with nothing changed.
  const int before = Writes(client_);
  EXPECT_TRUE(c.Reconcile("team/mnist").ok());
  EXPECT_EQ(Writes(client_), before);
  c.Stop();
}

TEST_F(ControllerTest, AJobDeletedBehindTheCacheGetsNothingCreated) {
  client_.Put(kube::kTFJobs, Job());
  // The job goes just before the controller's first status write, and its
  // DELETED event never reaches the cache.
  std::atomic<bool> removed{false};
  client_.SetHook([&](const std::string& verb, const kube::Resource& r, const std::string&) {
    if (verb == "PUT status" && r.plural == "tfjobs" && !removed.exchange(true)) {
      client_.Remove(kube::kTFJobs, "team", "mnist", /*silent=*/true);
    }
  });
  Controller c(client_, Options(), registry_);
  c.Start();
  ASSERT_TRUE(WaitFor([&] { return client_.Count("PUT status tfjobs") >= 1 && c.QueueDepth() == 0; }));
  c.Stop();
  // The cache still holds the job: a reconcile plans its pods again, and
  // the status write that comes first finds the job gone.
  EXPECT_TRUE(c.Reconcile("team/mnist").ok());
  EXPECT_GE(client_.Count("PUT status tfjobs"), 2);
  EXPECT_EQ(client_.Count("POST pods"), 0);
  EXPECT_EQ(client_.Count("POST services"), 0);
  EXPECT_EQ(client_.Count("POST secrets"), 0);
  EXPECT_TRUE(client_.Objects(kube::kPods, "team").empty());
}

// The pod's kubelet says its tensorflow container exited with `code`.
void PodExits(FakeClient& client, const std::string& pod, int code) {
  const json status = {{"status",
                        {{"phase", "Failed"},
                         {"containerStatuses", json::array({{{"name", "tensorflow"},
                                                             {"state", {{"terminated", {{"exitCode", code}}}}}}})}}}};
  ASSERT_TRUE(client.MergePatch(kube::kPods, "team", pod, status, /*status=*/true).ok()) << pod;
}

// Kubeflow's job counters, counted as docs/kubeflow-compatibility.md says
// this operator counts them (v1.9.0 differs): created once per job (not
// again on a later reconcile or start), restarted once per move into
// Restarting (v1.9.0 usually twice), failed once per job however many
// replica types failed (v1.9.0 once per failed type), deleted for every
// deleted job (v1.9.0 only for TTL deletions).
TEST_F(ControllerTest, KubeflowsJobCountersCountEachJobOncePerTransition) {
  client_.Put(kube::kTFJobs, WorkerJob("retried", 2, "ExitCode"));
  json failing = WorkerJob("failing", 1, "Never");
  failing["spec"]["tfReplicaSpecs"]["PS"] = failing["spec"]["tfReplicaSpecs"]["Worker"];
  client_.Put(kube::kTFJobs, failing);
  json backoff = WorkerJob("backoff", 1, "ExitCode");
  backoff["spec"]["runPolicy"] = {{"backoffLimit", 0}};
  client_.Put(kube::kTFJobs, backoff);
  Controller c(client_, Options(), registry_);
  c.Start();
  auto pod_exists = [&](const std::string& name) {
    for (const auto& p : client_.Objects(kube::kPods, "team")) {
      if (p["metadata"]["name"] == name) return true;
    }
    return false;
  };
  ASSERT_TRUE(WaitFor([&] { return client_.Objects(kube::kPods, "team").size() == 5; }));
  EXPECT_TRUE(WaitFor([&] { return JobCounter(registry_, "created") == 3; }));

  // A retryable exit (137) under ExitCode: the pod is deleted and made
  // again, the job goes Restarting once.
  PodExits(client_, "retried-worker-1", 137);
  ASSERT_TRUE(WaitFor([&] { return JobCounter(registry_, "restarted") == 1; }));
  // Both replica types of the other job fail (restartPolicy Never).
  PodExits(client_, "failing-worker-0", 1);
  PodExits(client_, "failing-ps-0", 1);
  ASSERT_TRUE(WaitFor([&] { return JobCounter(registry_, "failed") == 1; }));
  // A retryable exit with backoffLimit 0: the job moves into Restarting
  // (counted), and past the limit it fails (counted as failed).
  PodExits(client_, "backoff-worker-0", 137);
  ASSERT_TRUE(WaitFor([&] { return JobCounter(registry_, "failed") == 2; }));
  ASSERT_TRUE(WaitFor([&] { return pod_exists("retried-worker-1") && c.QueueDepth() == 0 && client_.AllDelivered(); }));
  // Settled, then reconciled again: nothing is counted twice.
  for (const char* key : {"team/retried", "team/failing", "team/backoff"}) EXPECT_TRUE(c.Reconcile(key).ok()) << key;
  ASSERT_TRUE(WaitFor([&] { return c.QueueDepth() == 0 && client_.AllDelivered(); }));
  EXPECT_EQ(JobCounter(registry_, "created"), 3);
  EXPECT_EQ(JobCounter(registry_, "restarted"), 2);  // retried and backoff, once each
  EXPECT_EQ(JobCounter(registry_, "failed"), 2);
  EXPECT_EQ(JobCounter(registry_, "successful"), 0);
  EXPECT_EQ(JobCounter(registry_, "deleted"), 0);
  c.Stop();

  // Another operator start (or a new leader) over the same jobs: nothing
  // counted again (v1.9.0 counts every existing job as created).
  prometheus::Registry again;
  Controller c2(client_, Options(), again);
  c2.Start();
  // (Ready: its caches have listed, so a job removed below is one they
  // hold and see deleted, not one a slow first list never finds.)
  ASSERT_TRUE(WaitFor([&] { return c2.Ready() && c2.QueueDepth() == 0 && client_.AllDelivered(); }));
  for (const char* key : {"team/retried", "team/failing", "team/backoff"}) EXPECT_TRUE(c2.Reconcile(key).ok()) << key;
  // (-1: the series is not there yet, 0: there and zero.)
  for (const char* what : {"created", "restarted", "failed", "successful"})
    EXPECT_LE(JobCounter(again, what), 0) << what;

  // Deleted by a user (no TTL): each counts.
  for (const char* name : {"retried", "failing", "backoff"}) client_.Remove(kube::kTFJobs, "team", name, false);
  EXPECT_TRUE(WaitFor([&] { return JobCounter(again, "deleted") == 3; }));
  c2.Stop();
  EXPECT_EQ(JobCounter(again, "deleted"), 3);
}

// Kubernetes' slowStartBatch: batches of 1, 2, 4, 8, 16, 16, ..., each
// only after the one before succeeded whole. A failure in the third batch
// (indices 3..6) stops after that batch: 7 calls, where one at a time would
// stop after 6 and all at once would make 40.
TEST(SlowStartTest, BatchesDoubleAndStopAfterTheFirstBatchWithAFailure) {
  std::mutex mu;
  std::set<size_t> called;
  auto work = [&](size_t fail_at) {
    return [&, fail_at](size_t i) {
      std::lock_guard g(mu);
      called.insert(i);
      return i != fail_at;
    };
  };
  SlowStartBatch(40, work(5));
  EXPECT_EQ(called, (std::set<size_t>{0, 1, 2, 3, 4, 5, 6}));
  called.clear();
  SlowStartBatch(40, work(0));
  EXPECT_EQ(called, (std::set<size_t>{0}));
  called.clear();
  SlowStartBatch(40, work(16));  // in the batch 15..30 (16 at most)
  EXPECT_EQ(called.size(), 31u);
  called.clear();
  SlowStartBatch(40, work(1000));
  EXPECT_EQ(called.size(), 40u);
  // A batch's calls run at once: two that each wait for the other finish.
  std::atomic<int> arrived{0};
  std::atomic<bool> both{true};
  SlowStartBatch(3, [&](size_t i) {
    if (i == 0) return true;
    arrived++;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (arrived < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    if (arrived < 2) both = false;
    return true;
  });
  EXPECT_TRUE(both) << "indices 1 and 2 did not run concurrently";
}

}  // namespace
}  // namespace tfjob::op::controller
