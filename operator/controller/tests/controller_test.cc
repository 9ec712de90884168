// The controller over an in-memory client (fake_client.h): a job gets its
// pods, services and Secret once; a reconcile with nothing changed writes
// nothing; a job deleted behind the cache gets nothing created.
#include "operator/controller/controller.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <set>
#include <thread>

#include <prometheus/registry.h>

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

}  // namespace
}  // namespace tfjob::op::controller
