// TFJOB_CLUSTER_RESOLVER=kubernetes against the real API server (one
// control plane per executable, services/cluster/tests/envtest_fixture.h):
// the resolver reads this pod's labels and its TFJob, finds the other pods
// by Kubeflow's labels and builds the cluster from their IPs in numeric
// replica order; then a whole counter job runs with every task resolving
// its cluster that way instead of from TF_CONFIG. The test plays the kubelet
// through the pods' status subresource; a FaultProxy is in front only where
// a test reads what the resolver requested, and permission denied comes
// from the server's own RBAC, for a ServiceAccount allowed the pods only.
#include <algorithm>
#include <cctype>
#include <regex>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>
#include <tuple>

#include "common/files.h"
#include "operator/api/codec.h"
#include "operator/api/defaults.h"
#include "operator/api/validation.h"
#include "services/base/ports.h"
#include "services/cluster/resolver.h"
#include "services/cluster/tests/envtest_fixture.h"
#include "tests/support/process.h"
#include "tests/support/subprocess.h"

namespace tfjob::runtime {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using namespace std::chrono_literals;
namespace t = ::tfjob::testing;

// What the operator creates for replica `type` `index` of TFJob `job`, as a
// kubelet would leave it: Running at `ip`, its tfjob-port `port`.
json Pod(const std::string& job, const std::string& type, int index, const std::string& ip, int port) {
  json container{{"name", "tensorflow"},
                 {"image", "tfjob/runtime-cpu:0.1.0"},
                 {"ports", json::array({{{"name", "tfjob-port"}, {"containerPort", port}}})}};
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", job + "-" + type + "-" + std::to_string(index)},
            {"namespace", "default"},
            {"labels",
             {{"training.kubeflow.org/job-name", job},
              {"training.kubeflow.org/replica-type", type},
              {"training.kubeflow.org/replica-index", std::to_string(index)},
              {"training.kubeflow.org/operator-name", "tfjob-controller"}}}}},
          {"spec", {{"containers", json::array({container})}}},
          {"status", {{"phase", "Running"}, {"podIP", ip}}}};
}

json TfJob(const std::string& name, int ps, int workers, bool evaluator) {
  json container{{"name", "tensorflow"}, {"image", "tfjob/runtime-cpu:0.1.0"}};
  json replica{{"template", {{"spec", {{"containers", json::array({container})}}}}}};
  json specs{{"Chief", replica}};
  if (ps > 0) specs["PS"] = replica, specs["PS"]["replicas"] = ps;
  specs["Worker"] = replica;
  specs["Worker"]["replicas"] = workers;
  if (evaluator) specs["Evaluator"] = replica;
  return {{"apiVersion", "kubeflow.org/v1"},
          {"kind", "TFJob"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec", {{"tfReplicaSpecs", specs}}}};
}

class KubernetesResolverTest : public cluster::testing::EnvtestTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(SetUpNamespace("r"));
    ASSERT_NO_FATAL_FAILURE(InstallTfJobCrd());
    dir_ = t::MakeTempDir("k8s-resolver");
    kubeconfig_ = cp_->admin_kubeconfig();
  }
  // From here on the resolver talks to the server through a FaultProxy, whose
  // log (proxy_->Requests()) then holds its requests.
  void ThroughProxy() {
    ASSERT_NO_FATAL_FAILURE(StartProxy());
    kubeconfig_ = dir_ + "/proxy.kubeconfig";
    ASSERT_TRUE(proxy_->WriteKubeconfig(kubeconfig_, ns_).ok());
  }
  std::map<std::string, std::string> EnvFor(const std::string& pod, const std::string& kubeconfig = "") {
    return {{"TFJOB_CLUSTER_RESOLVER", "kubernetes"},
            {"KUBECONFIG", kubeconfig.empty() ? kubeconfig_ : kubeconfig},
            {"POD_NAME", pod},
            {"POD_NAMESPACE", ns_},
            {"TFJOB_KUBERNETES_WAIT_SECONDS", "20"}};
  }
  // Pods as the kubelet leaves them (status through the status
  // subresource); TFJobs as they are.
  void Put(const json& obj, const std::string& resource = "pods") {
    if (resource == "pods") {
      ASSERT_NO_FATAL_FAILURE(PutPod(obj));
    } else {
      ASSERT_EQ(resource, "tfjobs");
      ASSERT_NO_FATAL_FAILURE(Create(kube::kTFJobs, obj));
    }
  }
  // A kubeconfig for ServiceAccount `sa` of the test's namespace, allowed
  // get and list on pods and nothing else (a Role and RoleBinding), with a
  // token from the TokenRequest API; once the server lets it read pods.
  std::string PodsOnlyKubeconfig(const std::string& sa);

  std::string dir_, kubeconfig_;
};

std::string KubernetesResolverTest::PodsOnlyKubeconfig(const std::string& sa) {
  Create(kServiceAccounts, {{"metadata", {{"name", sa}}}});
  Create(kRoles,
         {{"metadata", {{"name", sa}}},
          {"rules", json::array({{{"apiGroups", {""}}, {"resources", {"pods"}}, {"verbs", {"get", "list"}}}})}});
  Create(kRoleBindings, {{"metadata", {{"name", sa}}},
                         {"roleRef", {{"apiGroup", "rbac.authorization.k8s.io"}, {"kind", "Role"}, {"name", sa}}},
                         {"subjects", json::array({{{"kind", "ServiceAccount"}, {"name", sa}, {"namespace", ns_}}})}});
  auto token = cp_->Kubectl({"create", "token", sa, "-n", ns_});
  EXPECT_EQ(token.exit_code, 0) << token.err;
  std::string tok = token.out;
  while (!tok.empty() && std::isspace(static_cast<unsigned char>(tok.back()))) tok.pop_back();
  const std::string path = dir_ + "/" + sa + ".kubeconfig";
  t::WriteText(path, "apiVersion: v1\nkind: Config\nclusters:\n- name: envtest\n  cluster:\n    server: " +
                         cp_->server() + "\n    certificate-authority: " + cp_->dir() +
                         "/pki/ca.crt\nusers:\n- name: " + sa + "\n  user:\n    token: " + tok +
                         "\ncontexts:\n- name: envtest\n  context:\n    cluster: envtest\n    user: " + sa +
                         "\n    namespace: " + ns_ + "\ncurrent-context: envtest\n");
  // The authenticator and the authorizer learn of the ServiceAccount and
  // the binding from their caches: wait until a pod list is allowed.
  auto config = kube::LoadKubeconfig(path);
  EXPECT_TRUE(config.ok()) << config.status().message();
  if (!config.ok()) return path;
  auto client = kube::RestClient::Create(*config);
  EXPECT_TRUE(client.ok()) << client.status().message();
  if (!client.ok()) return path;
  EXPECT_TRUE(t::WaitUntil([&] { return (*client)->List(kube::kPods, ns_, {}).ok(); }, t::kWaitPatience,
                           std::chrono::milliseconds(20)))
      << "ServiceAccount " << sa << " never allowed to list pods";
  return path;
}

TEST_F(KubernetesResolverTest, ClusterFromPodIpsInNumericReplicaOrderAndTaskFromOwnLabels) {
  ASSERT_NO_FATAL_FAILURE(ThroughProxy());
  Put(TfJob("mnist", 1, 11, true), "tfjobs");
  Put(Pod("mnist", "chief", 0, "10.1.0.1", 2222));
  Put(Pod("mnist", "ps", 0, "10.1.1.1", 2222));
  // Created out of order; by name worker-10 would sort before worker-2.
  for (int i = 10; i >= 0; --i) Put(Pod("mnist", "worker", i, "10.1.2." + std::to_string(i + 1), 2222));
  Put(Pod("mnist", "evaluator", 0, "10.1.3.1", 2222));
  Put(Pod("other", "worker", 0, "10.9.9.9", 2222));

  auto r = cluster::ResolveCluster(cluster::FixedEnv(EnvFor("mnist-worker-2")));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.task, (cluster::TaskId{"worker", 2}));
  EXPECT_EQ(r->config.environment, "cloud");
  const cluster::ClusterSpec& c = r->config.cluster;
  EXPECT_EQ(c.JobNames(), (std::vector<std::string>{"chief", "ps", "worker"}));  // no evaluator, as Kubeflow's
  EXPECT_EQ(*c.Address("chief", 0), "10.1.0.1:2222");
  EXPECT_EQ(*c.Address("ps", 0), "10.1.1.1:2222");
  EXPECT_EQ(c.NumTasks("worker"), 11);
  EXPECT_EQ(*c.Address("worker", 2), "10.1.2.3:2222");
  EXPECT_EQ(*c.Address("worker", 10), "10.1.2.11:2222");

  // The evaluator knows its task, outside the training cluster.
  auto e = cluster::ResolveCluster(cluster::FixedEnv(EnvFor("mnist-evaluator-0")));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->config.task, (cluster::TaskId{"evaluator", 0}));
  EXPECT_FALSE(e->config.cluster.HasJob("evaluator"));

  // The pods were found by Kubeflow's labels, one selector per replica type.
  bool selected = false;
  for (const auto& req : proxy_->Requests()) {
    selected |=
        req.path == "/api/v1/namespaces/" + ns_ + "/pods" &&
        req.query.find("training.kubeflow.org%2Fjob-name%3Dmnist%2Ctraining.kubeflow.org%2Freplica-type%3Dworker") !=
            std::string::npos;
  }
  EXPECT_TRUE(selected);
}

TEST_F(KubernetesResolverTest, WaitsForPodsNotCreatedOrRunningYet) {
  Put(TfJob("late", 0, 2, false), "tfjobs");
  Put(Pod("late", "chief", 0, "10.2.0.1", 2222));
  json pending = Pod("late", "worker", 0, "", 2222);
  pending["status"] = {{"phase", "Pending"}};
  Put(pending);
  auto env = EnvFor("late-chief-0");
  env["TFJOB_KUBERNETES_WAIT_SECONDS"] = "1";
  auto r = cluster::ResolveCluster(cluster::FixedEnv(env));
  EXPECT_EQ(r.status().code(), Code::kDeadlineExceeded);
  EXPECT_THAT(r.status().message(), HasSubstr("late-worker-0"));
  EXPECT_THAT(r.status().message(), HasSubstr("worker 1 (no pod yet)"));
  // Once the kubelet starts them, the same resolver finds them.
  Put(Pod("late", "worker", 0, "10.2.1.1", 2222));
  Put(Pod("late", "worker", 1, "10.2.1.2", 2222));
  r = cluster::ResolveCluster(cluster::FixedEnv(EnvFor("late-chief-0")));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r->config.cluster.Address("worker", 1), "10.2.1.2:2222");
}

TEST_F(KubernetesResolverTest, AnExplicitLayoutNeedsNoTfJob) {
  ASSERT_NO_FATAL_FAILURE(ThroughProxy());
  Put(Pod("bare", "worker", 0, "10.3.0.1", 2222));
  Put(Pod("bare", "worker", 1, "10.3.0.2", 2222));
  auto env = EnvFor("bare-worker-1");
  env["TFJOB_KUBERNETES_JOBS"] = "worker:2";
  auto r = cluster::ResolveCluster(cluster::FixedEnv(env));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->config.task, (cluster::TaskId{"worker", 1}));
  EXPECT_EQ(r->config.cluster.NumTasks("worker"), 2);
  for (const auto& req : proxy_->Requests()) EXPECT_EQ(req.path.find("tfjobs"), std::string::npos) << req.path;
}

TEST_F(KubernetesResolverTest, BadInputAndMissingPermissionsAreClearErrors) {
  // Outside a pod, with no kubeconfig: no credentials to use.
  auto none = cluster::ResolveCluster(cluster::FixedEnv({{"TFJOB_CLUSTER_RESOLVER", "kubernetes"}, {"POD_NAME", "x"}}));
  EXPECT_EQ(none.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(none.status().message(), HasSubstr("kubernetes resolver: not running in a cluster"));
  // A pod the operator did not create.
  json plain = Pod("x", "worker", 0, "10.4.0.1", 2222);
  plain["metadata"]["name"] = "plain";
  plain["metadata"].erase("labels");
  Put(plain);
  auto unlabelled = cluster::ResolveCluster(cluster::FixedEnv(EnvFor("plain")));
  EXPECT_EQ(unlabelled.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(unlabelled.status().message(),
              HasSubstr("pod " + ns_ + "/plain has no label training.kubeflow.org/job-name"));
  // A pod that does not exist: bad input, never NOT_FOUND (which would make
  // the task train alone).
  auto ghost = cluster::ResolveCluster(cluster::FixedEnv(EnvFor("ghost")));
  EXPECT_EQ(ghost.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(ghost.status().message(), HasSubstr("kubernetes resolver: getting pod " + ns_ + "/ghost: "));
  // RBAC that does not allow reading the TFJob (the server's own: a service
  // account allowed the pods only): the error says what is needed.
  Put(Pod("rbac", "worker", 0, "10.5.0.1", 2222));
  const std::string pods_only = PodsOnlyKubeconfig("pods-only");
  auto forbidden = cluster::ResolveCluster(cluster::FixedEnv(EnvFor("rbac-worker-0", pods_only)));
  EXPECT_EQ(forbidden.status().code(), Code::kPermissionDenied);
  EXPECT_THAT(forbidden.status().message(), HasSubstr("getting TFJob " + ns_ + "/rbac"));
  EXPECT_THAT(forbidden.status().message(), HasSubstr("needs get and list on pods and get on tfjobs"));
  // A layout without this pod's task.
  auto env = EnvFor("rbac-worker-0");
  env["TFJOB_KUBERNETES_JOBS"] = "chief:1";
  EXPECT_THAT(cluster::ResolveCluster(cluster::FixedEnv(env)).status().message(),
              HasSubstr("TFJOB_KUBERNETES_JOBS: \"chief:1\" has no worker"));
  env["TFJOB_KUBERNETES_JOBS"] = "chief:1,worker:1";
  env["TFJOB_KUBERNETES_WAIT_SECONDS"] = "soon";
  EXPECT_THAT(cluster::ResolveCluster(cluster::FixedEnv(env)).status().message(),
              HasSubstr("TFJOB_KUBERNETES_WAIT_SECONDS: \"soon\" is not a positive integer"));
}

// examples/kubernetes/tfjob-resolver.yaml: its Role grants exactly what the
// resolver asks the API server for (every request allowed, every rule
// used), bound to the service account every replica runs as, and every
// replica selects the resolver and names its pod through the downward API.
TEST_F(KubernetesResolverTest, TheExampleRbacGrantsExactlyWhatTheResolverUses) {
  ASSERT_NO_FATAL_FAILURE(ThroughProxy());
  auto text = ReadFile(t::SourceDir() + "/examples/kubernetes/tfjob-resolver.yaml");
  ASSERT_TRUE(text.ok()) << text.status();
  auto docs = op::api::YamlDocumentsToJson(*text, "tfjob-resolver.yaml");
  ASSERT_TRUE(docs.ok()) << docs.status();
  std::map<std::string, json> by_kind;
  for (const auto& d : *docs) by_kind[d.value("kind", "")] = d;
  ASSERT_EQ(by_kind.size(), 4u);
  const std::string sa = by_kind["ServiceAccount"]["metadata"]["name"];
  const json& binding = by_kind["RoleBinding"];
  EXPECT_EQ(binding["roleRef"]["kind"], "Role");
  EXPECT_EQ(binding["roleRef"]["name"], by_kind["Role"]["metadata"]["name"]);
  EXPECT_EQ(binding["subjects"], json::array({{{"kind", "ServiceAccount"}, {"name", sa}}}));

  // The TFJob is valid, and every replica is set up for the resolver.
  auto job = op::api::Decode(by_kind["TFJob"]);
  ASSERT_TRUE(job.ok()) << job.status();
  op::api::SetDefaults(*job);
  EXPECT_TRUE(op::api::Validate(*job).empty()) << op::api::ToMessage(op::api::Validate(*job));
  std::map<std::string, int64_t> replicas;
  for (auto it = by_kind["TFJob"]["spec"]["tfReplicaSpecs"].begin();
       it != by_kind["TFJob"]["spec"]["tfReplicaSpecs"].end(); ++it) {
    SCOPED_TRACE(it.key());
    const json& pod = (*it)["template"]["spec"];
    EXPECT_EQ(pod["serviceAccountName"], sa);
    std::map<std::string, json> env;
    for (const auto& e : pod["containers"][0]["env"]) env[e["name"]] = e;
    EXPECT_EQ(env["TFJOB_CLUSTER_RESOLVER"]["value"], "kubernetes");
    EXPECT_EQ(env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name");
    EXPECT_EQ(env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.namespace");
    std::string type = it.key();
    std::transform(type.begin(), type.end(), type.begin(), [](unsigned char c) { return std::tolower(c); });
    replicas[type] = it->value("replicas", 1);
  }

  // Resolve every pod of that job, recording what the resolver requests.
  const std::string name = by_kind["TFJob"]["metadata"]["name"];
  Put(by_kind["TFJob"], "tfjobs");
  int ip = 1;
  for (const auto& [type, n] : replicas) {
    for (int i = 0; i < n; ++i) Put(Pod(name, type, i, "10.6.0." + std::to_string(ip++), 2222));
  }
  proxy_->ClearRequests();
  for (const auto& [type, n] : replicas) {
    for (int i = 0; i < n; ++i) {
      auto r = cluster::ResolveCluster(cluster::FixedEnv(EnvFor(name + "-" + type + "-" + std::to_string(i))));
      ASSERT_TRUE(r.ok()) << r.status();
    }
  }
  using Permission = std::tuple<std::string, std::string, std::string>;  // verb, API group, resource
  std::set<Permission> used;
  const std::regex path(R"(/(?:api/v1|apis/([^/]+)/[^/]+)/namespaces/)" + ns_ + R"(/([^/]+)(/[^/]+)?)");
  for (const auto& req : proxy_->Requests()) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(req.path, m, path)) << req.path;
    ASSERT_EQ(req.method, "GET") << req.path;
    used.insert({m[3].matched ? "get" : "list", m[1].str(), m[2].str()});
  }
  std::set<Permission> granted;
  for (const auto& rule : by_kind["Role"]["rules"]) {
    for (const auto& g : rule["apiGroups"]) {
      for (const auto& r : rule["resources"]) {
        for (const auto& v : rule["verbs"]) {
          granted.insert({v.get<std::string>(), g.get<std::string>(), r.get<std::string>()});
        }
      }
    }
  }
  EXPECT_EQ(used, granted);
  EXPECT_EQ(used, (std::set<Permission>{{"get", "", "pods"}, {"list", "", "pods"}, {"get", "kubeflow.org", "tfjobs"}}));
}

// The whole job: chief, PS and worker processes, each resolving its role and
// peers from the API (no TF_CONFIG anywhere). The pods' "IPs" are 127.0.0.1
// and their tfjob-ports are sockets this test binds and hands to the PS and
// the worker (TFJOB_LISTEN_FD), so the ports are theirs from the start.
TEST_F(KubernetesResolverTest, ACounterJobRunsWithEveryTaskResolvingFromTheApi) {
  auto ps_socket = base::ListeningSocket::Listen("127.0.0.1", 0);
  auto worker_socket = base::ListeningSocket::Listen("127.0.0.1", 0);
  auto chief_socket = base::ListeningSocket::Listen("127.0.0.1", 0);
  ASSERT_TRUE(ps_socket.ok() && worker_socket.ok() && chief_socket.ok());
  Put(TfJob("count", 1, 1, false), "tfjobs");
  Put(Pod("count", "chief", 0, "127.0.0.1", chief_socket->port()));
  Put(Pod("count", "ps", 0, "127.0.0.1", ps_socket->port()));
  Put(Pod("count", "worker", 0, "127.0.0.1", worker_socket->port()));
  const std::string runtime = t::BinDir() + "/tfjob-runtime";
  auto env = [&](const std::string& pod, bool socket) {
    auto e = EnvFor(pod);
    e["TFJOB_AUTH_TOKEN"] = "0123456789abcdef0123456789abcdef";
    e["TFJOB_CONNECT_TIMEOUT_SECONDS"] = "30";
    if (socket) e["TFJOB_LISTEN_FD"] = "3";
    return e;
  };
  t::Process ps({runtime, "counter"}, env("count-ps-0", true), ps_socket->fd());
  t::Process worker({runtime, "counter"}, env("count-worker-0", true), worker_socket->fd());
  auto chief = t::Run({runtime, "counter", "--increments", "1,2,3,4"}, env("count-chief-0", false));
  EXPECT_EQ(chief.exit_code, 0) << chief.out << chief.err << ps.output() << worker.output();
  EXPECT_THAT(chief.out, HasSubstr("counter: value 10 after 4 closures"));
  // The chief shut them down when it finished.
  EXPECT_EQ(ps.Stop(0), 0) << ps.output();
  EXPECT_THAT(ps.output(), HasSubstr("ps 0: serving on 127.0.0.1:" + std::to_string(ps_socket->port())));
  EXPECT_THAT(worker.output(), HasSubstr("worker 0: shut down"));
}

}  // namespace
}  // namespace tfjob::runtime
