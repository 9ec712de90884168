// The chart installed by the official Helm into a real API server
// (tests/support/envtest.h: etcd, kube-apiserver with RBAC, the controller
// manager; no kubelet or scheduler, so the chart's Deployment never runs a
// pod). The operator binary runs here in its place, with the installed
// Deployment's args and under the chart's ServiceAccount (a token from the
// TokenRequest API), so the API server's RBAC judges every request it makes
// by the chart's rules, where chart_rbac_test compares the rules with the
// requests the operator made (and finds the rules nothing uses). A distributed example from examples/
// gets its pods and services and goes Created, Running (pods marked Running
// through the status subresource, as a kubelet would) and Succeeded, and the
// operator is never refused. helm uninstall then removes the release and
// keeps the CRD, as Helm 3 does. NOTES.txt is checked here too: `helm
// template` does not render it.
//
// ctest runs each TEST in its own process (gtest_discover_tests), so each
// gets a fresh control plane; run together, they share one, one release at
// a time.
#include <signal.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/envtest.h"
#include "tests/support/process.h"
#include "tests/support/subprocess.h"

namespace tfjob::charts {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
namespace t = ::tfjob::testing;
using ::testing::HasSubstr;
using ::testing::Not;

const char* const kRelease = "tfjob";
const char* const kReleaseNamespace = "tfjob-system";
// The chart's full name for release "tfjob": Deployment, ServiceAccount, roles.
const char* const kFullname = "tfjob-tfjob-operator";
const char* const kExample = "examples/counter/tfjob.yaml";
const char* const kJob = "counter";  // its metadata.name

std::string ChartDir() { return t::SourceDir() + "/charts/tfjob-operator"; }

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : " ") + s;
  return out;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool Eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 60s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(100ms);
  }
  return pred();
}

struct InstallCase {
  std::vector<std::string> sets;  // helm --set
  std::string watch_ns;           // the chart's watchNamespace ("" = all)
  std::string job_ns;             // where the example goes
  bool service_monitor_crd = false;
  bool tls = false, network_policy = false;
  std::vector<std::string> notes;  // what NOTES.txt must say
};

class ChartInstall : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* tool : {"helm", "kubectl"}) {
      if (t::ToolPath(tool).empty()) {
        GTEST_FAIL() << tool << " not found in " << t::SourceDir()
                     << "/.tools/bin: run `bash scripts/setup.sh` (it installs Helm v3.17 and kubectl v1.31)";
      }
    }
    helm_ = t::ToolPath("helm");
    std::string why;
    cp_ = t::ControlPlane::Shared(&why);
    ASSERT_NE(cp_, nullptr) << why;
    dir_ = t::MakeTempDir("chart-install");
  }

  // After a failure half-way, so that the next test in this process (when
  // not run by ctest, one process per test) starts without the release.
  void TearDown() override {
    if (op_) op_->Stop(SIGTERM);
    if (cp_ && !helm_.empty()) Helm({"uninstall", kRelease, "--namespace", kReleaseNamespace, "--ignore-not-found"});
  }

  // Fails the test on a non-zero exit unless `may_fail`.
  t::RunResult Kubectl(const std::vector<std::string>& args, bool may_fail = false) {
    t::RunResult r = cp_->Kubectl(args);
    if (!may_fail) {
      EXPECT_EQ(r.exit_code, 0) << "kubectl " << Join(args) << ": " << r.err;
    }
    return r;
  }

  json GetJson(const std::vector<std::string>& args) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"-o", "json"});
    t::RunResult r = cp_->Kubectl(a);
    if (r.exit_code != 0) return json();
    json j = json::parse(r.out, nullptr, false);
    return j.is_discarded() ? json() : j;
  }

  bool Exists(const std::string& ns, const std::string& what) {
    std::vector<std::string> args{"get", what};
    if (!ns.empty()) args.insert(args.end(), {"-n", ns});
    return cp_->Kubectl(args).exit_code == 0;
  }

  // helm as cluster-admin, with HOME (kube discovery cache) and Helm's own
  // directories private to the test: no cache from another control plane
  // that had this port, none of the user's repositories or plugins.
  t::RunResult Helm(const std::vector<std::string>& args) {
    std::vector<std::string> argv{helm_, "--kubeconfig", cp_->admin_kubeconfig()};
    argv.insert(argv.end(), args.begin(), args.end());
    return t::Run(argv, {{"HOME", dir_},
                         {"HELM_CACHE_HOME", dir_ + "/helm/cache"},
                         {"HELM_CONFIG_HOME", dir_ + "/helm/config"},
                         {"HELM_DATA_HOME", dir_ + "/helm/data"}});
  }

  void CreateNamespace(const std::string& ns) {
    if (Exists("", "namespace/" + ns)) return;
    Kubectl({"create", "namespace", ns});
    // The ServiceAccount admission plugin refuses pods until "default" exists.
    ASSERT_TRUE(Eventually([&] { return Exists(ns, "serviceaccount/default"); }))
        << "no default ServiceAccount in " << ns;
  }

  // A kubeconfig for the chart's ServiceAccount: the control plane's server
  // and CA (from the admin kubeconfig), and a token the API server issues for
  // that ServiceAccount, as the kubelet would mount in the chart's pod.
  std::string ServiceAccountKubeconfig(const std::string& sa) {
    t::RunResult token = Kubectl({"create", "token", sa, "-n", kReleaseNamespace, "--duration=1h"});
    t::RunResult ca = Kubectl(
        {"config", "view", "--raw", "--minify", "-o", "jsonpath={.clusters[0].cluster.certificate-authority-data}"});
    EXPECT_FALSE(ca.out.empty()) << "no certificate-authority-data in " << cp_->admin_kubeconfig();
    std::string tok = token.out;
    while (!tok.empty() && (tok.back() == '\n' || tok.back() == '\r')) tok.pop_back();
    EXPECT_FALSE(tok.empty());
    const std::string path = dir_ + "/" + sa + ".kubeconfig";
    std::ofstream(path) << "apiVersion: v1\nkind: Config\n"
                        << "clusters:\n- name: envtest\n  cluster:\n    server: " << cp_->server()
                        << "\n    certificate-authority-data: " << ca.out << "\n"
                        << "users:\n- name: " << sa << "\n  user:\n    token: " << tok << "\n"
                        << "contexts:\n- name: " << sa << "\n  context:\n    cluster: envtest\n    user: " << sa
                        << "\n    namespace: " << kReleaseNamespace << "\n"
                        << "current-context: " << sa << "\n";
    return path;
  }

  // What the ServiceAccount may do in `ns`, for failure messages: the
  // operator retries refused informer lists and Lease updates without
  // logging them, so a missing rule shows as a timeout.
  std::string CanI(const std::string& ns) {
    auto r = cp_->Kubectl({"auth", "can-i", "--list", "-n", ns,
                           std::string("--as=system:serviceaccount:") + kReleaseNamespace + ":" + kFullname});
    return "\nthe chart's ServiceAccount may, in " + ns + ":\n" + r.out + r.err;
  }

  std::vector<json> List(const std::string& ns, const std::string& resource) {
    json j = GetJson({"get", resource, "-n", ns, "-l", std::string("training.kubeflow.org/job-name=") + kJob});
    std::vector<json> out;
    if (j.contains("items")) {
      for (const auto& i : j["items"]) out.push_back(i);
    }
    return out;
  }

  bool HasCondition(const std::string& ns, const std::string& type) {
    json j = GetJson({"get", "tfjob", kJob, "-n", ns});
    if (!j.contains("status")) return false;
    for (const auto& c : j["status"].value("conditions", json::array())) {
      if (c.value("type", "") == type && c.value("status", "") == "True") return true;
    }
    return false;
  }

  // The kubelet's part: the pod's phase and its tensorflow container's state.
  void SetPhase(const std::string& ns, const std::string& pod, const std::string& phase) {
    json state = phase == "Running" ? json{{"running", json::object()}}
                                    : json{{"terminated", {{"exitCode", 0}, {"reason", "Completed"}}}};
    json status{{"phase", phase},
                {"containerStatuses", json::array({{{"name", "tensorflow"},
                                                    {"image", "tfjob/runtime-cpu:0.1.0"},
                                                    {"imageID", ""},
                                                    {"ready", phase == "Running"},
                                                    {"restartCount", 0},
                                                    {"state", state}}})}};
    Kubectl(
        {"patch", "pod", pod, "-n", ns, "--subresource=status", "--type=merge", "-p", json{{"status", status}}.dump()});
  }

  void Run(const InstallCase& c);

  std::string helm_;
  t::ControlPlane* cp_ = nullptr;
  std::string dir_;
  std::unique_ptr<t::Process> op_;
};

void ChartInstall::Run(const InstallCase& c) {
  if (!c.watch_ns.empty()) {
    ASSERT_NO_FATAL_FAILURE(CreateNamespace(c.watch_ns));  // the Role goes there
  }
  ASSERT_NO_FATAL_FAILURE(CreateNamespace(c.job_ns));
  if (c.service_monitor_crd) {
    // The Prometheus Operator's CRD without its schema: the chart's
    // ServiceMonitor only needs the kind to be served.
    const std::string crd = dir_ + "/servicemonitor-crd.yaml";
    std::ofstream(crd) << R"(apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
)";
    Kubectl({"apply", "-f", crd});
    Kubectl({"wait", "--for=condition=Established", "--timeout=60s", "crd/servicemonitors.monitoring.coreos.com"});
  }

  // ---- helm install ----
  std::vector<std::string> install{"install",     kRelease,          ChartDir(),
                                   "--namespace", kReleaseNamespace, "--create-namespace"};
  for (const auto& s : c.sets) install.insert(install.end(), {"--set", s});
  t::RunResult r = Helm(install);
  ASSERT_EQ(r.exit_code, 0) << "helm " << Join(install) << "\n" << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("STATUS: deployed")) << r.out;
  for (const auto& n : c.notes) EXPECT_THAT(r.out, HasSubstr(n)) << "NOTES.txt\n" << r.out;
  r = Helm({"list", "--namespace", kReleaseNamespace, "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json releases = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(releases.is_array() && releases.size() == 1) << r.out;
  EXPECT_EQ(releases[0]["name"], kRelease);
  EXPECT_EQ(releases[0]["status"], "deployed");
  // Helm installed the chart's crds/ before the templates.
  Kubectl({"wait", "--for=condition=Established", "--timeout=60s", "crd/tfjobs.kubeflow.org"});
  if (c.service_monitor_crd) {
    EXPECT_TRUE(Exists(kReleaseNamespace, std::string("servicemonitor/") + kFullname));
  }

  const json dep = GetJson({"get", "deployment", kFullname, "-n", kReleaseNamespace});
  ASSERT_TRUE(dep.is_object()) << "no Deployment " << kFullname;
  const json& pod_spec = dep["spec"]["template"]["spec"];
  const std::string sa = pod_spec.value("serviceAccountName", "");
  ASSERT_EQ(sa, kFullname);

  // ---- the operator, as the chart's pod would run it ----
  const std::string kubeconfig = ServiceAccountKubeconfig(sa);
  ASSERT_FALSE(HasFailure());
  // The identity is really confined: outside the chart's rules it is refused
  // (so an operator that is never refused below is within them).
  r = t::Run({t::ToolPath("kubectl"), "--kubeconfig", kubeconfig, "--cache-dir", dir_ + "/kube-cache", "get", "secrets",
              "-n", "kube-system"});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.err, HasSubstr("forbidden")) << r.err;
  // The Deployment's args, with the two listen addresses moved to ports the
  // operator picks (the pod's :8080/:8081 may be taken on this machine); no
  // --kubeconfig in the pod (in-cluster), one here.
  std::vector<std::string> argv{t::BinDir() + "/tfjob-operator", "--kubeconfig", kubeconfig};
  for (const auto& a : pod_spec["containers"][0]["args"]) {
    const std::string arg = a.get<std::string>();
    if (arg.rfind("--metrics-bind-address=", 0) == 0) {
      argv.push_back("--metrics-bind-address=127.0.0.1:0");
    } else if (arg.rfind("--health-probe-bind-address=", 0) == 0) {
      argv.push_back("--health-probe-bind-address=127.0.0.1:0");
    } else {
      argv.push_back(arg);
    }
  }
  op_ = std::make_unique<t::Process>(argv);
  ASSERT_TRUE(op_->WaitForLine("tfjob-operator: metrics on :")) << op_->output();
  // Leadership: the Lease in the release namespace, under the leader-election Role.
  ASSERT_TRUE(Eventually([&] {
    json lease = GetJson({"get", "lease", "tfjob-operator-leader", "-n", kReleaseNamespace});
    return lease.is_object() && !lease["spec"].value("holderIdentity", "").empty();
  })) << op_->output()
      << CanI(kReleaseNamespace);
  ASSERT_TRUE(op_->WaitForLine("tfjob-operator: watching ")) << op_->output();

  // ---- a distributed example job ----
  Kubectl({"apply", "-n", c.job_ns, "-f", t::SourceDir() + "/" + kExample});
  const json job = GetJson({"get", "tfjob", kJob, "-n", c.job_ns});
  size_t replicas = 0;
  std::string chief;
  for (const auto& [type, spec] : job["spec"]["tfReplicaSpecs"].items()) {
    replicas += spec.value("replicas", 1);
    if (type == "Chief") chief = std::string(kJob) + "-chief-0";
  }
  ASSERT_GE(replicas, 2u) << kExample << " is not a distributed job";
  ASSERT_FALSE(chief.empty()) << kExample << " has no Chief";
  ASSERT_TRUE(Eventually([&] {
    return List(c.job_ns, "pods").size() == replicas && List(c.job_ns, "services").size() == replicas;
  })) << op_->output()
      << CanI(c.job_ns);
  ASSERT_TRUE(Eventually([&] { return HasCondition(c.job_ns, "Created"); })) << op_->output() << CanI(c.job_ns);
  if (c.tls) {
    json secret = GetJson({"get", "secret", std::string(kJob) + "-tfjob-auth", "-n", c.job_ns});
    ASSERT_TRUE(secret.is_object()) << op_->output() << CanI(c.job_ns);
    EXPECT_TRUE(secret["data"].contains("tls.key")) << secret["data"].dump();
  } else {
    EXPECT_TRUE(Exists(c.job_ns, std::string("secret/") + kJob + "-tfjob-auth")) << op_->output();
  }
  if (c.network_policy) {
    EXPECT_TRUE(Eventually([&] { return Exists(c.job_ns, std::string("networkpolicy/") + kJob + "-tfjob"); }))
        << op_->output() << CanI(c.job_ns);
  }

  for (const auto& p : List(c.job_ns, "pods")) SetPhase(c.job_ns, p["metadata"]["name"], "Running");
  ASSERT_TRUE(Eventually([&] { return HasCondition(c.job_ns, "Running"); })) << op_->output();
  // The chief's success is the job's; cleanPodPolicy Running then deletes the
  // PS and worker pods, still Running.
  SetPhase(c.job_ns, chief, "Succeeded");
  ASSERT_TRUE(Eventually([&] { return HasCondition(c.job_ns, "Succeeded"); })) << op_->output();
  ASSERT_TRUE(Eventually([&] {
    auto pods = List(c.job_ns, "pods");
    return pods.size() == 1 && pods[0]["metadata"]["name"] == chief;
  })) << op_->output()
      << CanI(c.job_ns);
  // Events are recorded without a word in the output when refused: look.
  ASSERT_TRUE(Eventually([&] {
    json events = GetJson({"get", "events", "-n", c.job_ns, "--field-selector",
                           std::string("involvedObject.kind=TFJob,involvedObject.name=") + kJob});
    return events.contains("items") && !events["items"].empty();
  })) << op_->output()
      << CanI(c.job_ns);

  EXPECT_EQ(op_->Stop(SIGTERM), 0) << op_->output();
  const std::string out = op_->output();
  op_.reset();
  // "HTTP 403" as the client reports a refusal (kube/rest_client.cc): a bare
  // "403" also matches a port number such as :40337.
  EXPECT_THAT(out, Not(HasSubstr("HTTP 403"))) << out;
  EXPECT_THAT(Lower(out), Not(HasSubstr("forbidden"))) << out;
  // The Lease is handed back on shutdown (an update the Role must allow).
  json lease = GetJson({"get", "lease", "tfjob-operator-leader", "-n", kReleaseNamespace});
  EXPECT_EQ(lease["spec"].value("holderIdentity", ""), "") << lease.dump();

  // ---- helm uninstall ----
  r = Helm({"uninstall", kRelease, "--namespace", kReleaseNamespace, "--wait", "--timeout", "120s"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = Helm({"list", "--all", "--namespace", kReleaseNamespace, "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out, nullptr, false), json::array()) << r.out;
  const std::string role = c.watch_ns.empty() ? "clusterrole" : "role";
  for (const auto& [ns, what] : std::vector<std::pair<std::string, std::string>>{
           {kReleaseNamespace, std::string("deployment/") + kFullname},
           {kReleaseNamespace, std::string("serviceaccount/") + kFullname},
           {kReleaseNamespace, std::string("role/") + kFullname + "-leader-election"},
           {c.watch_ns, role + "/" + kFullname},
           {c.watch_ns, role + "binding/" + kFullname}}) {
    EXPECT_FALSE(Exists(ns, what)) << what << " in " << ns << " survived helm uninstall";
  }
  // Helm 3 never deletes a chart's CRDs, so TFJobs survive an uninstall.
  EXPECT_TRUE(Exists("", "crd/tfjobs.kubeflow.org"));
  EXPECT_TRUE(Exists(c.job_ns, std::string("tfjob/") + kJob));
}

// The defaults: a ClusterRole, TFJobs in every namespace.
TEST_F(ChartInstall, DefaultsRunTheExampleInAnyNamespace) {
  InstallCase c;
  c.job_ns = "ml";
  c.notes = {"all namespaces", std::string("deployment/") + kFullname, "/metrics"};
  Run(c);
}

// Every toggle the API server can take on (gang scheduling needs a
// scheduler's PodGroup CRD and admission, which chart_rbac_test plays
// with schema-less PodGroup CRDs), one watched namespace: a Role there.
TEST_F(ChartInstall, EveryToggleOnOneNamespace) {
  InstallCase c;
  c.watch_ns = c.job_ns = "team-a";
  c.sets = {"watchNamespace=team-a",
            "serviceMonitor.enabled=true",
            "grafanaDashboard.enabled=true",
            "metrics.service.enabled=true",
            "leaderElection.enabled=true",
            "replicaCount=2",
            "serviceAccount.annotations.team=ml",
            "operator.clusterDomain=cluster.local",
            "nodeSelector.pool=cpu",
            "podAnnotations.note=x",
            "serviceMonitor.labels.release=prometheus",
            "grafanaDashboard.labels.team=ml",
            "taskAuth.enabled=true",
            "taskAuth.tls=true",
            "networkPolicy.enabled=true",
            "leaderElection.renewDeadlineSeconds=8",
            "leaderElection.retryPeriodSeconds=1.5"};
  c.service_monitor_crd = c.tls = c.network_policy = true;
  c.notes = {"namespace team-a", std::string("deployment/") + kFullname, "grafana_dashboard",
             "A ServiceMonitor scrapes it"};
  Run(c);
}

}  // namespace
}  // namespace tfjob::charts
