// The chart's RBAC against what the operator does, on a real API server
// (tests/support/envtest.h, one control plane for this executable) with the
// fault proxy in front of it (tests/support/fault_proxy.h) for its request
// log only: the operator runs with the rendered Deployment's args through a
// job lifecycle (leader election, pods, services, status, events, clean-up,
// TTL), talking to the proxy, and the (verb, group, resource, namespace) of
// every request it made is compared with the rendered ClusterRole/Role rules
// both ways. The test's own writes (and the kubelet's part: pod status
// through the status subresource) go straight to the server as
// cluster-admin. chart_install_test has the API server's RBAC judge the
// chart's rules instead; this test also says which rules nothing uses.
// Each case works in namespaces of its own (the release's and the jobs'),
// deleted when it ends; an all-namespaces case waits until the earlier
// cases' are gone, so that its operator meets no other case's jobs.
#include <signal.h>

#include <cctype>
#include <chrono>
#include <functional>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "charts/tests/chart_rbac.h"
#include "charts/tests/chart_render.h"
#include "kube/config.h"
#include "kube/rest_client.h"
#include "tests/support/envtest.h"
#include "tests/support/fault_proxy.h"
#include "tests/support/process.h"
#include "tests/support/subprocess.h"
#include "tests/support/wait.h"

namespace tfjob::charts {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
namespace t = ::tfjob::testing;

json Job(const std::string& name, const std::string& ns, const std::string& clean, int ttl) {
  json container{{"name", "tensorflow"}, {"image", "tfjob/runtime-cpu:0.1.0"}};
  json job{{"apiVersion", "kubeflow.org/v1"},
           {"kind", "TFJob"},
           {"metadata", {{"name", name}, {"namespace", ns}}},
           {"spec",
            {{"runPolicy", {{"cleanPodPolicy", clean}}},
             {"tfReplicaSpecs",
              {{"Worker",
                {{"replicas", 2},
                 {"restartPolicy", "OnFailure"},
                 {"template", {{"spec", {{"containers", json::array({container})}}}}}}}}}}}};
  if (ttl >= 0) job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = ttl;
  return job;
}

struct RbacCase {
  std::string watch_ns;  // "" = all namespaces
  std::string gang;      // gangScheduler.name; "" = off
  bool tls = false;      // taskAuth.tls
};

void PrintTo(const RbacCase& c, std::ostream* os) {
  *os << "watchNamespace=\"" << c.watch_ns << "\" gangScheduler.name=\"" << c.gang << "\" taskAuth.tls=" << c.tls;
}

// The gang schedulers' PodGroup CRDs (Volcano's and scheduler-plugins'),
// schema-less, with a status subresource: the operator only needs the kinds
// served.
std::string PodGroupCrd(const std::string& group, const std::string& version) {
  return "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: podgroups." + group +
         "\nspec:\n  group: " + group +
         "\n  names: {kind: PodGroup, listKind: PodGroupList, plural: podgroups, singular: podgroup}\n"
         "  scope: Namespaced\n  versions:\n    - name: " +
         version +
         "\n      served: true\n      storage: true\n      subresources: {status: {}}\n"
         "      schema:\n        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}\n";
}

// The TFJob CRD (the repository's, which the chart carries) and the two
// PodGroup CRDs, once per process; "" or what failed.
std::string InstallCrds(const t::ControlPlane& cp) {
  static const std::string error = [&]() -> std::string {
    // Server-side: the TFJob CRD's schema is larger than client-side apply's
    // last-applied annotation allows.
    auto r = cp.Kubectl({"apply", "--server-side", "-f", t::SourceDir() + "/crds/kubeflow.org_tfjobs.yaml"});
    if (r.exit_code != 0) return "kubectl apply of the TFJob CRD failed: " + r.err;
    for (const auto& [group, version] : std::vector<std::pair<std::string, std::string>>{
             {"scheduling.volcano.sh", "v1beta1"}, {"scheduling.x-k8s.io", "v1alpha1"}}) {
      r = cp.Apply(PodGroupCrd(group, version), /*server_side=*/true);
      if (r.exit_code != 0) return "kubectl apply of the " + group + " PodGroup CRD failed: " + r.err;
    }
    for (const std::string name :
         {"tfjobs.kubeflow.org", "podgroups.scheduling.volcano.sh", "podgroups.scheduling.x-k8s.io"}) {
      // Polled: `kubectl wait` fails outright when it looks before the CRD
      // has any status conditions.
      const bool established = t::WaitUntil(
          [&] {
            return cp.Kubectl({"get", "crd", name, "-o",
                               R"(jsonpath={.status.conditions[?(@.type=="Established")].status})"})
                       .out == "True";
          },
          60s, 100ms);
      if (!established) return name + " was not established in 60 s";
    }
    return "";
  }();
  return error;
}

// The test's own hands on the server: cluster-admin, straight to it (not
// through the proxy, so its requests are not the operator's), by the
// resource names the test uses ("pods", "podgroups.scheduling.volcano.sh").
class Admin {
 public:
  explicit Admin(std::unique_ptr<kube::RestClient> client) : owned_(std::move(client)), c_(*owned_) {}

  StatusOr<json> Get(const std::string& resource, const std::string& ns, const std::string& name) {
    return c_.Get(Res(resource), ns, name);
  }
  StatusOr<std::vector<json>> List(const std::string& resource, const std::string& ns,
                                   const std::string& label_selector = "") {
    kube::ListOptions o;
    o.label_selector = label_selector;
    auto list = c_.List(Res(resource), ns, o);
    if (!list.ok()) return list.status();
    std::vector<json> out;
    for (const auto& item : (*list).value("items", json::array())) out.push_back(item);
    return out;
  }
  StatusOr<json> Create(const std::string& resource, const std::string& ns, const json& obj) {
    return c_.Create(Res(resource), ns, obj);
  }
  StatusOr<json> UpdateStatus(const std::string& resource, const std::string& ns, const json& obj) {
    return c_.UpdateStatus(Res(resource), ns, obj);
  }
  StatusOr<json> MergePatch(const std::string& resource, const std::string& ns, const std::string& name,
                            const json& patch) {
    return c_.MergePatch(Res(resource), ns, name, patch);
  }
  Status Delete(const std::string& resource, const std::string& ns, const std::string& name) {
    return c_.Delete(Res(resource), ns, name);
  }

 private:
  static kube::Resource Res(const std::string& name) {
    if (name == "tfjobs") return kube::kTFJobs;
    if (name == "leases") return kube::kLeases;
    if (name == "namespaces") return {"", "v1", "namespaces"};
    if (name == "podgroups.scheduling.volcano.sh") return {"scheduling.volcano.sh", "v1beta1", "podgroups"};
    if (name == "podgroups.scheduling.x-k8s.io") return {"scheduling.x-k8s.io", "v1alpha1", "podgroups"};
    return {"", "v1", name};  // pods, services, events, secrets
  }
  std::unique_ptr<kube::RestClient> owned_;
  kube::Client& c_;
};

class ChartRbac : public HelmTest, public ::testing::WithParamInterface<RbacCase> {
 protected:
  void SetUp() override {
    HelmTest::SetUp();
    if (HasFatalFailure()) return;
    std::string why;
    cp_ = t::ControlPlane::Shared(&why);
    ASSERT_NE(cp_, nullptr) << why;
    why = InstallCrds(*cp_);
    ASSERT_EQ(why, "");
    auto proxy = t::FaultProxy::Start(*cp_);
    ASSERT_TRUE(proxy.ok()) << proxy.status().message();
    proxy_ = std::move(proxy).value();
    auto config = kube::LoadKubeconfig(cp_->admin_kubeconfig());
    ASSERT_TRUE(config.ok()) << config.status().message();
    auto client = kube::RestClient::Create(*config);
    ASSERT_TRUE(client.ok()) << client.status().message();
    admin_ = std::make_unique<Admin>(std::move(client).value());
    // Namespaces of this case's own, named after it: the release's (the
    // Lease) and the jobs' (the watched one, in a one-namespace case).
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::string label;
    for (char ch : name.substr(name.rfind('/') + 1)) {
      if (std::isalnum(static_cast<unsigned char>(ch))) label += static_cast<char>(std::tolower(ch));
    }
    release_ns_ = "rel-" + label.substr(0, 50);
    job_ns_ = "job-" + label.substr(0, 50);
    for (const auto& ns : {release_ns_, job_ns_}) {
      auto r = cp_->Kubectl({"create", "namespace", ns});
      ASSERT_EQ(r.exit_code, 0) << r.err;
      namespaces_.push_back(ns);
    }
    // The ServiceAccount admission plugin refuses pods until "default" exists.
    ASSERT_TRUE(t::WaitUntil([&] { return admin_->Get("serviceaccounts", job_ns_, "default").ok(); }, 60s, 20ms))
        << "no default ServiceAccount in " << job_ns_;
    // An operator of all namespaces must not meet an earlier case's jobs:
    // their namespaces go first, with everything in them.
    if (GetParam().watch_ns.empty()) {
      for (const auto& ns : Deleted()) {
        ASSERT_TRUE(t::WaitUntil([&] { return admin_->Get("namespaces", "", ns).status().code() == Code::kNotFound; },
                                 120s, 100ms))
            << "namespace " << ns << " of an earlier case is still there";
      }
      Deleted().clear();
    }
  }

  void TearDown() override {
    for (const auto& ns : namespaces_) {
      EXPECT_EQ(cp_->Kubectl({"delete", "namespace", ns, "--wait=false"}).exit_code, 0) << ns;
      Deleted().push_back(ns);
    }
  }

  // Namespaces deleted by earlier cases of this process.
  static std::vector<std::string>& Deleted() {
    static std::vector<std::string> deleted;
    return deleted;
  }

  static bool Eventually(const std::function<bool()>& pred) { return t::WaitUntil(pred, 30s, 20ms); }

  t::ControlPlane* cp_ = nullptr;
  std::unique_ptr<t::FaultProxy> proxy_;  // the operator's way in: its request log
  std::unique_ptr<Admin> admin_;
  std::string release_ns_, job_ns_;
  std::vector<std::string> namespaces_;
};

// One run of the operator, started with the rendered Deployment's args,
// through a job lifecycle that exercises everything it does: leader election
// (acquire, renew, release on SIGTERM), informers (list + watch of TFJobs,
// pods, services), pods and services created and deleted (a restart after a
// failure, counted on the job by a patch; cleanPodPolicy All), labelled
// orphans adopted, a create that finds a stranger's pod, TFJob status
// written (and patched for a job it cannot decode), events recorded, and a
// finished job deleted by its TTL.
// With taskAuth.tls, one job's Secret exists already without the TLS keys
// (made before the option was on), so it is read and completed.
TEST_P(ChartRbac, GrantsExactlyWhatTheOperatorUses) {
  // The case's watched namespace ("team-a") is this test's job namespace.
  const std::string watch_ns = GetParam().watch_ns.empty() ? "" : job_ns_;
  const std::string gang = GetParam().gang;
  const bool tls = GetParam().tls;
  const std::string job_ns = job_ns_;
  Rendered r =
      Render({"watchNamespace=" + watch_ns, "leaderElection.enabled=true", "leaderElection.leaseDurationSeconds=2",
              "gangScheduler.name=" + gang, std::string("taskAuth.tls=") + (tls ? "true" : "false")},
             {}, release_ns_);
  ASSERT_FALSE(r.docs.empty());
  const std::vector<Grant> grants = Grants(r);
  ASSERT_FALSE(grants.empty());

  Admin& api = *admin_;
  const std::string dir = t::MakeTempDir("chart-rbac-" + (watch_ns.empty() ? std::string("cluster") : watch_ns) +
                                         (gang.empty() ? "" : "-" + gang) + (tls ? "-tls" : ""));
  const std::string podgroups = gang.empty()        ? ""
                                : gang == "volcano" ? "podgroups.scheduling.volcano.sh"
                                                    : "podgroups.scheduling.x-k8s.io";
  ASSERT_TRUE(proxy_->WriteKubeconfig(dir + "/kubeconfig").ok());
  // The rendered args, with the two listen addresses moved to local ports
  // the operator binds itself (the pod's :8080/:8081 may be taken on this
  // machine).
  std::vector<std::string> argv{t::BinDir() + "/tfjob-operator", "--kubeconfig", dir + "/kubeconfig"};
  for (const auto& a : Args(r.One("Deployment"))) {
    if (a.rfind("--metrics-bind-address=", 0) == 0) {
      argv.push_back("--metrics-bind-address=127.0.0.1:0");
    } else if (a.rfind("--health-probe-bind-address=", 0) == 0) {
      argv.push_back("--health-probe-bind-address=127.0.0.1:0");
    } else {
      argv.push_back(a);
    }
  }
  // A job the operator cannot decode (the CRD's schema lets an integer past
  // int32 through; the operator's replicas are int32): it merge-patches a
  // Failed condition into the status. The job already has a status, as
  // before the operator read a null status safely.
  {
    json bad = Job("bad", job_ns, "None", -1);
    bad["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 4294967296LL;
    auto created = api.Create("tfjobs", job_ns, bad);
    ASSERT_TRUE(created.ok()) << created.status();
    json with_status = *created;
    with_status["status"] = {{"conditions", json::array()}};
    ASSERT_TRUE(api.UpdateStatus("tfjobs", job_ns, with_status).ok());
  }
  if (tls) {
    ASSERT_TRUE(api.Create("secrets", job_ns,
                           {{"apiVersion", "v1"},
                            {"kind", "Secret"},
                            {"metadata", {{"name", "clean-tfjob-auth"}, {"namespace", job_ns}}},
                            {"stringData", {{"token", std::string(64, 'a')}}}})
                    .ok());
  }
  // Left behind by `kubectl delete tfjob --cascade=orphan`: a pod and a
  // service with job "ttl"'s labels and no owner, which the operator adopts
  // (patch); and a pod and a service named like job "clean"'s but not its,
  // which the operator's creates run into, look at (get) and report. The
  // orphan pod is one this operator made (it carries the task token), so
  // the job keeps its token and Secret.
  const json orphan_labels{{"training.kubeflow.org/job-name", "ttl"},
                           {"training.kubeflow.org/operator-name", "tfjob-controller"},
                           {"training.kubeflow.org/replica-type", "worker"},
                           {"training.kubeflow.org/replica-index", "1"}};
  const json token_env =
      json::array({{{"name", "TFJOB_AUTH_TOKEN"},
                    {"valueFrom", {{"secretKeyRef", {{"name", "ttl-tfjob-auth"}, {"key", "token"}}}}}}});
  ASSERT_TRUE(
      api.Create(
             "pods", job_ns,
             {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "ttl-worker-1"}, {"namespace", job_ns}, {"labels", orphan_labels}}},
              {"spec", {{"containers", json::array({{{"name", "tensorflow"}, {"image", "x"}, {"env", token_env}}})}}}})
          .ok());
  ASSERT_TRUE(api.Create("services", job_ns,
                         {{"apiVersion", "v1"},
                          {"kind", "Service"},
                          {"metadata", {{"name", "ttl-worker-1"}, {"namespace", job_ns}, {"labels", orphan_labels}}},
                          {"spec", {{"clusterIP", "None"}, {"selector", orphan_labels}}}})
                  .ok());
  ASSERT_TRUE(api.Create("pods", job_ns,
                         {{"apiVersion", "v1"},
                          {"kind", "Pod"},
                          {"metadata", {{"name", "clean-worker-0"}, {"namespace", job_ns}}},
                          {"spec", {{"containers", json::array({{{"name", "tensorflow"}, {"image", "x"}}})}}}})
                  .ok());
  ASSERT_TRUE(api.Create("services", job_ns,
                         {{"apiVersion", "v1"},
                          {"kind", "Service"},
                          {"metadata", {{"name", "clean-worker-0"}, {"namespace", job_ns}}},
                          {"spec", {{"clusterIP", "None"}}}})
                  .ok());
  auto op = std::make_unique<t::Process>(argv);
  auto eventually = [&](const std::function<bool()>& pred) { return Eventually(pred); };
  auto pods = [&](const std::string& job) {
    return api.List("pods", job_ns, "training.kubeflow.org/job-name=" + job).value();
  };
  auto condition = [&](const std::string& job, const std::string& type) {
    auto j = api.Get("tfjobs", job_ns, job);
    if (!j.ok()) return false;
    for (const auto& c : (*j)["status"].value("conditions", json::array())) {
      if (c.value("type", "") == type && c.value("status", "") == "True") return true;
    }
    return false;
  };
  auto set_phase = [&](const std::string& pod, const std::string& phase, int exit_code) {
    for (int attempt = 0; attempt < 10; ++attempt) {
      auto p = api.Get("pods", job_ns, pod);
      ASSERT_TRUE(p.ok()) << p.status();
      json obj = *p;
      obj["status"]["phase"] = phase;
      obj["status"]["containerStatuses"] = json::array({{{"name", "tensorflow"},
                                                         {"image", "x"},
                                                         {"imageID", ""},
                                                         {"ready", false},
                                                         {"restartCount", 0},
                                                         {"state", {{"terminated", {{"exitCode", exit_code}}}}}}});
      if (api.UpdateStatus("pods", job_ns, obj).ok()) return;
    }
    FAIL() << "could not update pod " << pod;
  };

  ASSERT_TRUE(eventually([&] { return api.Get("leases", release_ns_, "tfjob-operator-leader").ok(); })) << op->output();
  ASSERT_TRUE(api.Create("tfjobs", job_ns, Job("clean", job_ns, "All", -1)).ok());
  ASSERT_TRUE(api.Create("tfjobs", job_ns, Job("ttl", job_ns, "None", 1)).ok());
  if (!podgroups.empty()) {
    // The PodGroups come first; Volcano's gate the pods until it admits them.
    for (const std::string job : {"clean", "ttl"}) {
      ASSERT_TRUE(eventually([&] { return api.Get(podgroups, job_ns, job).ok(); })) << op->output();
      json pg = api.Get(podgroups, job_ns, job).value();
      pg["status"] = {{"phase", "Inqueue"}};
      ASSERT_TRUE(api.UpdateStatus(podgroups, job_ns, pg).ok());
    }
    // An edited PodGroup is put back (update).
    ASSERT_TRUE(api.MergePatch(podgroups, job_ns, "clean", {{"spec", {{"minMember", 1}}}}).ok());
    ASSERT_TRUE(eventually([&] { return api.Get(podgroups, job_ns, "clean").value()["spec"]["minMember"] == 2; }))
        << op->output();
  }
  // The foreign pod blocks clean-worker-0, with an event saying so; once it
  // is gone, the index is filled.
  ASSERT_TRUE(eventually([&] {
    const auto events = api.List("events", job_ns);  // kept: the loop reads into it
    for (const auto& e : events.value()) {
      if (e.value("reason", "") == "FailedCreatePod") return true;
    }
    return false;
  })) << op->output();
  ASSERT_TRUE(api.Delete("pods", job_ns, "clean-worker-0").ok());
  ASSERT_TRUE(api.Delete("services", job_ns, "clean-worker-0").ok());
  ASSERT_TRUE(eventually([&] {
    auto adopted = api.Get("pods", job_ns, "ttl-worker-1");
    return pods("clean").size() == 2 && pods("ttl").size() == 2 && adopted.ok() &&
           (*adopted)["metadata"].contains("ownerReferences");
  })) << op->output();
  if (tls) {
    for (const std::string job : {"clean", "ttl"}) {
      auto secret = api.Get("secrets", job_ns, job + "-tfjob-auth");
      ASSERT_TRUE(secret.ok()) << secret.status();
      // stringData is write-only: the server keeps it in data.
      EXPECT_TRUE((*secret)["data"].contains("tls.key")) << job;
    }
  }
  ASSERT_TRUE(eventually([&] { return condition("bad", "Failed"); })) << op->output();
  // A retryable failure: the pod is deleted and created again.
  const std::string uid = api.Get("pods", job_ns, "clean-worker-1").value()["metadata"]["uid"];
  set_phase("clean-worker-1", "Failed", 137);
  ASSERT_TRUE(eventually([&] {
    auto p = api.Get("pods", job_ns, "clean-worker-1");
    return p.ok() && (*p)["metadata"]["uid"] != uid;
  })) << op->output();
  for (const std::string job : {"clean", "ttl"}) {
    for (const auto& p : pods(job)) set_phase(p["metadata"]["name"], "Running", 0);
  }
  ASSERT_TRUE(eventually([&] { return condition("clean", "Running") && condition("ttl", "Running"); })) << op->output();
  set_phase("clean-worker-0", "Succeeded", 0);
  set_phase("ttl-worker-0", "Succeeded", 0);
  // cleanPodPolicy All: pods and services go; TTL 1 s: the job goes.
  ASSERT_TRUE(eventually([&] {
    return condition("clean", "Succeeded") && pods("clean").empty() &&
           api.List("services", job_ns, "training.kubeflow.org/job-name=clean")->empty();
  })) << op->output();
  ASSERT_TRUE(eventually([&] { return !api.Get("tfjobs", job_ns, "ttl").ok(); })) << op->output();
  if (!podgroups.empty()) {
    // A finished job's PodGroup is deleted by the operator (delete).
    ASSERT_TRUE(eventually([&] { return !api.Get(podgroups, job_ns, "clean").ok(); })) << op->output();
  }
  ASSERT_TRUE(eventually([&] { return !api.List("events", job_ns).value().empty(); })) << op->output();
  // Renewals happen every lease*2/15 s; wait for one past the acquisition.
  const std::string renew0 =
      api.Get("leases", release_ns_, "tfjob-operator-leader").value()["spec"].value("renewTime", "");
  ASSERT_TRUE(eventually([&] {
    auto l = api.Get("leases", release_ns_, "tfjob-operator-leader");
    return l.ok() && (*l)["spec"].value("renewTime", "") != renew0;
  }));
  EXPECT_EQ(op->Stop(SIGTERM), 0) << op->output();

  std::set<Permission> used;
  std::set<std::string> other;
  for (const auto& req : proxy_->Requests()) {
    Permission p;
    if (ToPermission({req.method, req.path, req.watch}, &p)) {
      used.insert(p);
    } else if (!PublicNonResource(req.path)) {
      other.insert(req.method + " " + req.path);
    }
  }
  EXPECT_TRUE(other.empty()) << "non-resource requests the chart cannot grant: " << ::testing::PrintToString(other);

  // Every request is allowed by a bound rule.
  for (const auto& p : used) {
    bool allowed = false;
    for (const auto& g : grants) allowed |= Allows(g, p);
    EXPECT_TRUE(allowed) << "the operator did " << Str(p) << " but the chart does not grant it";
  }
  // Every granted (verb, group, resource) is used within the rule's scope.
  for (const auto& g : grants) {
    for (const auto& verb : g.verbs) {
      for (const auto& group : g.groups) {
        for (const auto& resource : g.resources) {
          bool exercised = false;
          for (const auto& p : used) {
            exercised |= std::get<0>(p) == verb && std::get<1>(p) == group && std::get<2>(p) == resource &&
                         (g.ns.empty() || std::get<3>(p) == g.ns);
          }
          EXPECT_TRUE(exercised) << g.source << " grants " << verb << " on " << (group.empty() ? "core" : group) << "/"
                                 << resource << (g.ns.empty() ? "" : " in " + g.ns)
                                 << " but the operator never used it";
        }
      }
    }
  }
  std::string all;
  for (const auto& p : used) all += "  " + Str(p) + "\n";
  RecordProperty("used", all);
  if (HasFailure()) std::cerr << "permissions used:\n" << all;
}

INSTANTIATE_TEST_SUITE_P(WatchNamespace, ChartRbac,
                         ::testing::Values(RbacCase{"", ""}, RbacCase{"team-a", ""}, RbacCase{"", "volcano"},
                                           RbacCase{"team-a", "scheduler-plugins"}, RbacCase{"team-a", "", true}),
                         [](const auto& info) {
                           std::string name = info.param.watch_ns.empty() ? "AllNamespaces" : "OneNamespace";
                           if (info.param.gang == "volcano") name += "Volcano";
                           if (info.param.gang == "scheduler-plugins") name += "SchedulerPlugins";
                           if (info.param.tls) name += "TaskTls";
                           return name;
                         });

}  // namespace
}  // namespace tfjob::charts
