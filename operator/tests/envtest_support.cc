#include "operator/tests/envtest_support.h"

#include <cstdio>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include "kube/config.h"
#include "kube/rest_client.h"
#include "tests/support/subprocess.h"

namespace tfjob::op::envtest {
namespace {

namespace t = ::tfjob::testing;

const kube::Resource kNamespaces{"", "v1", "namespaces"};

// The CRD, once per process (and per control plane: it survives restarts).
bool InstallTfJobCrd(t::ControlPlane* cp, const std::string& path, std::string* why) {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [&] {
    // Server-side: the CRD's schema is larger than client-side apply's
    // last-applied annotation allows.
    auto r = cp->Kubectl({"apply", "--server-side", "-f", path});
    if (r.exit_code != 0) {
      error = "kubectl apply of the CRD failed: " + r.err;
      return;
    }
    // Polled: `kubectl wait` fails outright when it looks before the CRD has
    // any status conditions.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::string established;
    while (established != "True" && std::chrono::steady_clock::now() < deadline) {
      r = cp->Kubectl({"get", "crd", "tfjobs.kubeflow.org", "-o",
                       R"(jsonpath={.status.conditions[?(@.type=="Established")].status})"});
      established = r.out;
      if (established != "True") std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (established != "True") error = "the TFJob CRD was not established in 60 s: " + r.err;
  });
  *why = error;
  return error.empty();
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Reads (Get, List, and every Eventually poll built on them) go to the API
// server from this process: a `kubectl get` costs about 150 ms of CPU, and
// with tests polling every 100 ms the waiting suites were CPU-bound on two
// cores. kubectl's names ("tfjob", "pods", "podgroups.scheduling.volcano.sh")
// are resolved as kubectl resolves them, from discovery (`kubectl
// api-resources`, re-read when a name is unknown, as a CRD may have been
// installed since). A name discovery does not know, or a control plane this
// cannot reach, falls back to kubectl. Of the writes, the namespaces and the
// pods' status (the suites playing the kubelet) go through the client too;
// applies stay with kubectl (its client-side apply is what users run).
// Thread-safety: one mutex; tests call it from their own thread.
class Reader {
 public:
  struct Kind {
    kube::Resource resource;
    bool namespaced = true;
    std::string kind, api_version;
  };

  // Never destroyed: at exit cpprestsdk's thread pool, a static made after
  // this one, is gone before this would be, and the client's destructor
  // would wait on it.
  static Reader& Instance() {
    static Reader* reader = new Reader;
    return *reader;
  }

  // The client for `cp`'s current server (a restart may move it).
  kube::Client* Client(t::ControlPlane* cp) {
    std::lock_guard<std::mutex> lock(mu_);
    if (client_ && server_ == cp->server()) return client_.get();
    client_.reset();
    auto config = kube::LoadKubeconfig(cp->admin_kubeconfig());
    if (!config.ok()) return nullptr;
    kube::RestOptions options;
    options.qps = 10000;
    options.burst = 10000;
    options.timeout = std::chrono::seconds(10);
    auto client = kube::RestClient::Create(*config, options);
    if (!client.ok()) return nullptr;
    client_ = std::move(*client);
    server_ = cp->server();
    return client_.get();
  }

  std::optional<Kind> Resolve(t::ControlPlane* cp, const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    auto kind = Lookup(Lower(name));
    // A name still unknown (its CRD not installed yet) is polled through
    // kubectl; discovery is re-read at most once a second for it.
    const auto now = std::chrono::steady_clock::now();
    if (!kind && now - discovered_ >= std::chrono::seconds(1)) {
      discovered_ = now;
      Discover(cp);
      kind = Lookup(Lower(name));
    }
    return kind;
  }

 private:
  std::optional<Kind> Lookup(const std::string& name) const {
    auto it = names_.find(name);
    if (it != names_.end()) return it->second;
    // kubectl's "plural.version.group": the group's kind at that version.
    static const std::regex versioned(R"(([a-z0-9-]+)\.(v[0-9]+(?:(?:alpha|beta)[0-9]+)?)\.(.+))");
    std::smatch m;
    if (!std::regex_match(name, m, versioned)) return std::nullopt;
    it = names_.find(m[1].str() + "." + m[3].str());
    if (it == names_.end()) return std::nullopt;
    Kind k = it->second;
    k.resource.version = m[2].str();
    k.api_version = k.resource.group + "/" + k.resource.version;
    return k;
  }

  // `kubectl api-resources`' table: NAME SHORTNAMES APIVERSION NAMESPACED
  // KIND, columns found from the header (empty SHORTNAMES cells). The first
  // row for a name wins, as kubectl prefers the core group ("events").
  void Discover(t::ControlPlane* cp) {
    const t::RunResult r = cp->Kubectl({"api-resources"});
    std::istringstream in(r.out);
    std::string header;
    if (!std::getline(in, header)) return;
    const std::vector<std::string> columns{"NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"};
    std::vector<size_t> at;
    for (const auto& c : columns) {
      const size_t pos = header.find(c);
      if (pos == std::string::npos) return;
      at.push_back(pos);
    }
    auto cell = [&](const std::string& line, size_t i) {
      if (at[i] >= line.size()) return std::string();
      std::string v = line.substr(at[i], i + 1 < at.size() ? at[i + 1] - at[i] : std::string::npos);
      const size_t b = v.find_first_not_of(' '), e = v.find_last_not_of(' ');
      return b == std::string::npos ? std::string() : v.substr(b, e - b + 1);
    };
    std::string line;
    while (std::getline(in, line)) {
      Kind k;
      const std::string plural = cell(line, 0), api_version = cell(line, 2);
      k.kind = cell(line, 4);
      if (plural.empty() || api_version.empty() || k.kind.empty()) continue;
      k.api_version = api_version;
      k.namespaced = cell(line, 3) == "true";
      const size_t slash = api_version.find('/');
      const std::string group = slash == std::string::npos ? "" : api_version.substr(0, slash);
      k.resource = {group, slash == std::string::npos ? api_version : api_version.substr(slash + 1), plural};
      std::vector<std::string> keys{plural, Lower(k.kind)};
      std::istringstream shorts(cell(line, 1));
      for (std::string s; std::getline(shorts, s, ',');) keys.push_back(s);
      const size_t unqualified = keys.size();
      for (size_t i = 0; i < unqualified && !group.empty(); ++i) keys.push_back(keys[i] + "." + group);
      for (const auto& key : keys) names_.emplace(Lower(key), k);
    }
  }

  std::mutex mu_;
  std::string server_;
  std::unique_ptr<kube::RestClient> client_;
  std::map<std::string, Kind> names_;
  std::chrono::steady_clock::time_point discovered_{};
};

}  // namespace

void RealApiServerTest::SetUp() {
  std::string why;
  cp_ = t::ControlPlane::Shared(&why);
  ASSERT_NE(cp_, nullptr) << why;
  ASSERT_TRUE(InstallTfJobCrd(cp_, CrdPath(), &why)) << why;
  // A namespace per test: names are a DNS label.
  std::string name = Lower(::testing::UnitTest::GetInstance()->current_test_info()->name());
  name = std::regex_replace(name, std::regex("[^a-z0-9]"), "");
  ns_ = "t-" + name.substr(0, 50);
  dir_ = t::MakeTempDir("envtest-" + ns_);
  // Through the API (kubectl as the fallback, like the writes below): a
  // kubectl process costs about 0.2 s of CPU, and every test makes one.
  kube::Client* client = Reader::Instance().Client(cp_);
  if (client) {
    auto made =
        client->Create(kNamespaces, "", {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns_}}}});
    ASSERT_TRUE(made.ok()) << "namespace " << ns_ << ": " << made.status().ToString();
  } else {
    Kubectl({"create", "namespace", ns_});
  }
  // The ServiceAccount admission plugin refuses pods until "default" exists.
  ASSERT_TRUE(Eventually([&] { return TryGet("serviceaccount", "default").has_value(); }))
      << "no default ServiceAccount in " << ns_;
}

std::string RealApiServerTest::CrdPath() { return t::SourceDir() + "/crds/kubeflow.org_tfjobs.yaml"; }

void RealApiServerTest::TearDown() {
  StopOperator();
  if (!cp_ || ns_.empty()) return;
  kube::Client* client = Reader::Instance().Client(cp_);
  if (!client || !client->Delete(kNamespaces, "", ns_).ok()) cp_->Kubectl({"delete", "namespace", ns_, "--wait=false"});
}

std::unique_ptr<t::Process> RealApiServerTest::OperatorProcess(const std::vector<std::string>& extra,
                                                               const std::string& kubeconfig) {
  std::vector<std::string> argv{t::BinDir() + "/tfjob-operator",
                                "--kubeconfig",
                                kubeconfig.empty() ? cp_->admin_kubeconfig() : kubeconfig,
                                "--namespace",
                                ns_,
                                "--metrics-bind-address",
                                "127.0.0.1:0",
                                "--health-probe-bind-address",
                                "127.0.0.1:0"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<t::Process>(argv, op_env_);
}

void RealApiServerTest::StartOperator(const std::vector<std::string>& extra, const std::string& kubeconfig) {
  op_ = OperatorProcess(extra, kubeconfig);
  const auto ports = op_->WaitForLine("tfjob-operator: metrics on :");
  ASSERT_TRUE(ports) << op_->output();
  ASSERT_EQ(std::sscanf(ports->c_str(), "%d, health probes on :%d", &metrics_port_, &health_port_), 2) << *ports;
}

void RealApiServerTest::StopOperator() {
  if (!op_) return;
  const int rc = op_->Stop(SIGTERM);
  EXPECT_EQ(rc, 0) << op_->output();  // a clean shutdown on SIGTERM
  op_.reset();
}

t::RunResult RealApiServerTest::Kubectl(const std::vector<std::string>& args, bool may_fail) {
  t::RunResult r = cp_->Kubectl(args);
  if (!may_fail && r.exit_code != 0) {
    std::string cmd = "kubectl";
    for (const auto& a : args) cmd += " " + a;
    ADD_FAILURE() << cmd << " exited " << r.exit_code << ": " << r.err;
  }
  return r;
}

t::RunResult RealApiServerTest::Apply(const std::string& manifest, bool may_fail) {
  static int n = 0;
  const std::string path = dir_ + "/manifest-" + std::to_string(n++) + ".yaml";
  std::ofstream(path) << manifest;
  return Kubectl({"apply", "-n", ns_, "-f", path}, may_fail);
}

std::optional<json> RealApiServerTest::TryGet(const std::string& resource, const std::string& name) {
  auto kind = Reader::Instance().Resolve(cp_, resource);
  kube::Client* client = kind ? Reader::Instance().Client(cp_) : nullptr;
  if (client) {
    auto got = client->Get(kind->resource, kind->namespaced ? ns_ : "", name);
    if (!got.ok()) return std::nullopt;
    return *got;
  }
  t::RunResult r = cp_->Kubectl({"get", "-n", ns_, resource, name, "-o", "json"});
  if (r.exit_code != 0) return std::nullopt;
  json j = json::parse(r.out, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

json RealApiServerTest::Get(const std::string& resource, const std::string& name, bool may_fail) {
  auto j = TryGet(resource, name);
  if (!may_fail) {
    EXPECT_TRUE(j.has_value()) << resource << "/" << name;
  }
  return j.value_or(json());
}

std::vector<json> RealApiServerTest::List(const std::string& resource, const std::string& selector) {
  auto kind = Reader::Instance().Resolve(cp_, resource);
  kube::Client* client = kind ? Reader::Instance().Client(cp_) : nullptr;
  if (client) {
    kube::ListOptions options;
    options.label_selector = selector;
    auto got = client->List(kind->resource, kind->namespaced ? ns_ : "", options);
    std::vector<json> out;
    if (!got.ok()) return out;
    // The API's list items carry no kind; kubectl's output does.
    for (auto& item : got->value("items", json::array())) {
      item["apiVersion"] = kind->api_version;
      item["kind"] = kind->kind;
      out.push_back(item);
    }
    return out;
  }
  std::vector<std::string> args{"get", "-n", ns_, resource, "-o", "json"};
  if (!selector.empty()) {
    args.push_back("-l");
    args.push_back(selector);
  }
  t::RunResult r = cp_->Kubectl(args);
  json j = json::parse(r.out, nullptr, false);
  std::vector<json> out;
  if (!j.is_discarded() && j.contains("items")) {
    for (auto& i : j["items"]) out.push_back(i);
  }
  return out;
}

std::vector<json> RealApiServerTest::Pods(const std::string& job) {
  return List("pods", "training.kubeflow.org/job-name=" + job);
}

std::vector<json> RealApiServerTest::Services(const std::string& job) {
  return List("services", "training.kubeflow.org/job-name=" + job);
}

std::vector<json> RealApiServerTest::Events(const std::string& object_name) {
  std::vector<json> out;
  for (auto& e : List("events")) {
    if (e["involvedObject"].value("name", "") == object_name) out.push_back(e);
  }
  return out;
}

bool RealApiServerTest::HasCondition(const std::string& job, const std::string& type) {
  auto j = TryGet("tfjob", job);
  if (!j || !j->contains("status")) return false;
  for (const auto& c : (*j)["status"].value("conditions", json::array())) {
    if (c.value("type", "") == type && c.value("status", "") == "True") return true;
  }
  return false;
}

std::string RealApiServerTest::Uid(const std::string& resource, const std::string& name) {
  auto o = TryGet(resource, name);
  return o ? (*o)["metadata"].value("uid", "") : "";
}

void RealApiServerTest::AllRunning(const std::string& job) {
  for (const auto& p : Pods(job)) SetPhase(p["metadata"]["name"], "Running");
}

void RealApiServerTest::InstallCrd(const json& crd) {
  const auto r = cp_->Apply(crd.dump(), /*server_side=*/true);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string name = crd["metadata"]["name"];
  ASSERT_TRUE(Eventually([&] {
    return Kubectl({"get", "crd", name, "-o", R"(jsonpath={.status.conditions[?(@.type=="Established")].status})"},
                   /*may_fail=*/true)
               .out == "True";
  })) << name;
}

void RealApiServerTest::SetPodStatus(const std::string& pod, const json& status) {
  // What `kubectl patch --subresource=status --type=merge` sends, from this
  // process: the suites play the kubelet with hundreds of these.
  if (kube::Client* client = Reader::Instance().Client(cp_)) {
    auto patched = client->MergePatch(kube::kPods, ns_, pod, json{{"status", status}}, /*status=*/true);
    EXPECT_TRUE(patched.ok()) << "status of pod " << pod << ": " << patched.status().ToString();
    return;
  }
  Kubectl(
      {"patch", "-n", ns_, "pod", pod, "--subresource=status", "--type=merge", "-p", json{{"status", status}}.dump()});
}

void RealApiServerTest::SetPhase(const std::string& pod, const std::string& phase, std::optional<int> exit_code) {
  json status{{"phase", phase}};
  if (exit_code) {
    status["containerStatuses"] =
        json::array({{{"name", "tensorflow"},
                      {"image", "tfjob/runtime-cpu:0.1.0"},
                      {"imageID", ""},
                      {"ready", false},
                      {"restartCount", 0},
                      {"state", {{"terminated", {{"exitCode", *exit_code}, {"reason", "Error"}}}}}}});
  } else if (phase == "Running") {
    status["containerStatuses"] = json::array({{{"name", "tensorflow"},
                                                {"image", "tfjob/runtime-cpu:0.1.0"},
                                                {"imageID", ""},
                                                {"ready", true},
                                                {"restartCount", 0},
                                                {"state", {{"running", json::object()}}}}});
  }
  SetPodStatus(pod, status);
}

bool RealApiServerTest::Eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return pred();
}

std::string RealApiServerTest::Metrics() {
  return t::Run({"curl", "-s", "http://127.0.0.1:" + std::to_string(metrics_port_) + "/metrics"}).out;
}

std::string RealApiServerTest::JobYaml(const std::string& name, const std::string& replica_specs,
                                       const std::string& extra_spec) {
  return "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata:\n  name: " + name + "\nspec:\n" + extra_spec +
         "  tfReplicaSpecs:\n" + replica_specs;
}

std::string RealApiServerTest::Replica(const std::string& type, int n, const std::string& policy,
                                       const std::string& container_extra) {
  return "    " + type + ":\n      replicas: " + std::to_string(n) + "\n      restartPolicy: " + policy +
         "\n      template:\n        spec:\n          containers:\n            - name: tensorflow\n"
         "              image: tfjob/runtime-cpu:0.1.0\n" +
         container_extra;
}

std::string Env(const json& pod, const std::string& name) {
  for (const auto& c : pod["spec"]["containers"]) {
    if (c.value("name", "") != "tensorflow") continue;
    for (const auto& e : c.value("env", json::array())) {
      if (e.value("name", "") == name) return e.value("value", "");
    }
  }
  return "";
}

namespace {

json PodGroupCrd(const std::string& group, const std::string& version, bool volcano_columns) {
  json columns = volcano_columns
                     ? json::array({{{"name", "Status"}, {"type", "string"}, {"jsonPath", ".status.phase"}},
                                    {{"name", "MinMember"}, {"type", "integer"}, {"jsonPath", ".spec.minMember"}},
                                    {{"name", "Queue"}, {"type", "string"}, {"jsonPath", ".spec.queue"}},
                                    {{"name", "Age"}, {"type", "date"}, {"jsonPath", ".metadata.creationTimestamp"}}})
                     : json::array({{{"name", "Phase"}, {"type", "string"}, {"jsonPath", ".status.phase"}},
                                    {{"name", "MinMember"}, {"type", "integer"}, {"jsonPath", ".spec.minMember"}},
                                    {{"name", "Age"}, {"type", "date"}, {"jsonPath", ".metadata.creationTimestamp"}}});
  const json version_entry = {
      {"name", version},
      {"served", true},
      {"storage", true},
      {"subresources", {{"status", json::object()}}},
      {"additionalPrinterColumns", columns},
      {"schema", {{"openAPIV3Schema", {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}}}}}};
  return {{"apiVersion", "apiextensions.k8s.io/v1"},
          {"kind", "CustomResourceDefinition"},
          {"metadata", {{"name", "podgroups." + group}}},
          {"spec",
           {{"group", group},
            {"names",
             {{"kind", "PodGroup"}, {"listKind", "PodGroupList"}, {"plural", "podgroups"}, {"singular", "podgroup"}}},
            {"scope", "Namespaced"},
            {"versions", json::array({version_entry})}}}};
}

}  // namespace

json VolcanoPodGroupCrd() { return PodGroupCrd("scheduling.volcano.sh", "v1beta1", true); }
json SchedulerPluginsPodGroupCrd() { return PodGroupCrd("scheduling.x-k8s.io", "v1alpha1", false); }

}  // namespace tfjob::op::envtest
