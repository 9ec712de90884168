// The Helm chart under the official Helm (scripts/setup.sh puts helm v3.17
// in .tools/bin): `helm lint --strict` with default values and with every
// toggle on and off, and `helm template` of the same:
//   - every document parses as YAML with apiVersion, kind, metadata.name (and
//     a namespace for namespaced kinds); optional objects appear exactly when
//     their toggle is on; inconsistent values fail with the chart's message;
//   - the Deployment's args are flags tfjob-operator accepts, the probes and
//     ports point at the addresses the args bind, the security context is the
//     restrictive one;
//   - the chart's CRD is byte-identical to crds/kubeflow.org_tfjobs.yaml and
//     the dashboard ConfigMap carries charts/.../dashboards/tfjob-dashboard.json;
//   - RBAC grants exactly what the operator uses: the operator runs with the
//     rendered args against the API-server double through a job lifecycle
//     (leader election, pods, services, status, events, clean-up, TTL), and
//     the (verb, group, resource, namespace) of every request it made is
//     compared with the rendered ClusterRole/Role rules both ways.
// chart_install_test installs the chart into a real API server, and checks
// NOTES.txt (which only an install renders).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/files.h"
#include "operator/api/codec.h"
#include "tests/support/apiserver/apiserver_double.h"
#include "tests/support/envtest.h"
#include "tests/support/process.h"
#include "tests/support/subprocess.h"

namespace tfjob::charts {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
namespace t = ::tfjob::testing;
using ::testing::HasSubstr;

const char* const kReleaseNamespace = "tfjob-system";

std::string ChartDir() { return t::SourceDir() + "/charts/tfjob-operator"; }

struct Doc {
  std::string source;  // "# Source:" template
  json obj;
};

struct Rendered {
  std::vector<Doc> docs;
  std::vector<const Doc*> Kind(const std::string& kind) const {
    std::vector<const Doc*> out;
    for (const auto& d : docs) {
      if (d.obj.value("kind", "") == kind) out.push_back(&d);
    }
    return out;
  }
  const json& One(const std::string& kind) const {
    auto k = Kind(kind);
    if (k.size() != 1) throw std::runtime_error("expected one " + kind + ", got " + std::to_string(k.size()));
    return k[0]->obj;
  }
};

// The official helm, or "" (the fixtures below fail the test then).
const std::string& Helm() {
  static const std::string path = t::ToolPath("helm");
  return path;
}

// helm with its cache, config and data in a directory of this process, so
// that neither the user's repositories nor plugins change what it does.
t::RunResult RunHelm(const std::vector<std::string>& args) {
  static const std::string home = t::MakeTempDir("helm-home");
  std::vector<std::string> argv{Helm()};
  argv.insert(argv.end(), args.begin(), args.end());
  return t::Run(argv, {{"HELM_CACHE_HOME", home + "/cache"},
                       {"HELM_CONFIG_HOME", home + "/config"},
                       {"HELM_DATA_HOME", home + "/data"}});
}

std::vector<std::string> SetFlags(const std::vector<std::string>& sets) {
  std::vector<std::string> out;
  for (const auto& s : sets) {
    out.push_back("--set");
    out.push_back(s);
  }
  return out;
}

t::RunResult RunRender(const std::vector<std::string>& sets, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{"template", "tfjob", ChartDir(), "--namespace", kReleaseNamespace};
  for (const auto& s : SetFlags(sets)) args.push_back(s);
  args.insert(args.end(), extra.begin(), extra.end());
  return RunHelm(args);
}

// Every test here needs helm: without it, one line says how to get it.
class HelmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Helm().empty()) {
      GTEST_FAIL() << "helm not found in " << t::SourceDir()
                   << "/.tools/bin: run `bash scripts/setup.sh` (it installs Helm v3.17)";
    }
  }
};
class Chart : public HelmTest {};
class ChartDeployment : public HelmTest {};

// Renders and parses every document; failures are test failures.
Rendered Render(const std::vector<std::string>& sets, const std::vector<std::string>& extra = {}) {
  Rendered out;
  t::RunResult r = RunRender(sets, extra);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return out;
  // helm template writes "---\n# Source: <chart>/<file>\n<document>" per document.
  std::istringstream in(r.out);
  std::string line, source, body;
  auto flush = [&] {
    if (source.empty()) return;
    auto docs = op::api::YamlDocumentsToJson(body, source);
    EXPECT_TRUE(docs.ok()) << docs.status() << "\n" << body;
    if (docs.ok()) {
      EXPECT_EQ(docs->size(), 1u) << source;
      for (auto& d : *docs) out.docs.push_back({source, d});
    }
    body.clear();
  };
  while (std::getline(in, line)) {
    if (line == "---") {
      flush();
      source.clear();
      continue;
    }
    if (source.empty() && line.rfind("# Source: ", 0) == 0) {
      source = line.substr(10);
      continue;
    }
    body += line + "\n";
  }
  flush();
  return out;
}

const std::set<std::string> kClusterScoped = {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                                              "Namespace"};

void ExpectWellFormed(const Rendered& r) {
  ASSERT_FALSE(r.docs.empty());
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& d : r.docs) {
    const json& o = d.obj;
    ASSERT_TRUE(o.is_object()) << d.source;
    EXPECT_TRUE(o.contains("apiVersion") && o["apiVersion"].is_string() && !o["apiVersion"].get<std::string>().empty())
        << d.source;
    EXPECT_TRUE(o.contains("kind") && o["kind"].is_string()) << d.source;
    ASSERT_TRUE(o.contains("metadata") && o["metadata"].is_object()) << d.source;
    const std::string name = o["metadata"].value("name", "");
    EXPECT_FALSE(name.empty()) << d.source << ": metadata.name";
    EXPECT_LE(name.size(), 63u) << d.source;
    EXPECT_TRUE(std::regex_match(name, std::regex("[a-z0-9]([-a-z0-9.]*[a-z0-9])?"))) << d.source << ": " << name;
    const std::string kind = o.value("kind", "");
    if (!kClusterScoped.count(kind)) {
      EXPECT_FALSE(o["metadata"].value("namespace", "").empty())
          << d.source << ": namespaced " << kind << " without namespace";
    }
    EXPECT_TRUE(seen.insert({kind, o["metadata"].value("namespace", "") + "/" + name}).second)
        << d.source << ": duplicate " << kind << " " << name;
  }
}

// ---- Rendering --------------------------------------------------------------

const std::vector<std::string> kAllOn = {"serviceMonitor.enabled=true",
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
                                         "gangScheduler.name=volcano",
                                         "leaderElection.renewDeadlineSeconds=8",
                                         "leaderElection.retryPeriodSeconds=1.5"};
const std::vector<std::string> kAllOff = {"serviceMonitor.enabled=false",  "grafanaDashboard.enabled=false",
                                          "metrics.service.enabled=false", "leaderElection.enabled=false",
                                          "taskAuth.enabled=false",        "taskAuth.tls=false",
                                          "networkPolicy.enabled=false"};

std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::set<std::string> Kinds(const Rendered& r) {
  std::set<std::string> out;
  for (const auto& d : r.docs) out.insert(d.obj.value("kind", ""));
  return out;
}

// The operator container's args (defined below).
std::vector<std::string> Args(const json& dep);

TEST_F(Chart, DefaultsRenderTheOperatorWithAClusterRole) {
  Rendered r = Render({});
  ExpectWellFormed(r);
  EXPECT_EQ(Kinds(r), (std::set<std::string>{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
                                             "RoleBinding", "Service", "Deployment"}));
  const json& dep = r.One("Deployment");
  EXPECT_EQ(dep["metadata"]["name"], "tfjob-tfjob-operator");
  EXPECT_EQ(dep["metadata"]["namespace"], kReleaseNamespace);
  EXPECT_EQ(dep["spec"]["template"]["spec"]["containers"][0]["image"], "tfjob/operator:0.1.0");
  EXPECT_EQ(dep["spec"]["replicas"], 1);
}

TEST_F(Chart, EveryToggleOnRendersEveryOptionalObject) {
  for (const std::string ns : {"", "team-a"}) {
    SCOPED_TRACE("watchNamespace=" + ns);
    Rendered r = Render(With(kAllOn, {"watchNamespace=" + ns}));
    ExpectWellFormed(r);
    std::set<std::string> want{"ServiceAccount", "Role",           "RoleBinding", "Service",
                               "Deployment",     "ServiceMonitor", "ConfigMap"};
    if (ns.empty()) want.insert({"ClusterRole", "ClusterRoleBinding"});
    EXPECT_EQ(Kinds(r), want);
    const json& dep = r.One("Deployment");
    EXPECT_EQ(dep["spec"]["replicas"], 2);
    EXPECT_EQ(dep["spec"]["template"]["spec"]["nodeSelector"]["pool"], "cpu");
    const json& sm = r.One("ServiceMonitor");
    EXPECT_EQ(sm["apiVersion"], "monitoring.coreos.com/v1");
    EXPECT_EQ(sm["metadata"]["labels"]["release"], "prometheus");
    // The ServiceMonitor selects the metrics Service and names its port.
    const json& svc = r.One("Service");
    for (const auto& [k, v] : sm["spec"]["selector"]["matchLabels"].items()) {
      EXPECT_EQ(svc["metadata"]["labels"][k], v) << k;
    }
    EXPECT_EQ(sm["spec"]["endpoints"][0]["port"], svc["spec"]["ports"][0]["name"]);
    EXPECT_EQ(sm["spec"]["endpoints"][0]["path"], "/metrics");
    // The dashboard ConfigMap: the sidecar's label and the chart's JSON.
    const json& cm = r.One("ConfigMap");
    EXPECT_EQ(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    EXPECT_EQ(cm["metadata"]["labels"]["team"], "ml");
    auto file = ReadFile(ChartDir() + "/dashboards/tfjob-dashboard.json");
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_TRUE(cm["data"].contains("tfjob-dashboard.json"));
    EXPECT_EQ(json::parse(cm["data"]["tfjob-dashboard.json"].get<std::string>()), json::parse(*file));
  }
}

TEST_F(Chart, EveryToggleOffLeavesOnlyTheCore) {
  for (const std::string ns : {"", "team-a"}) {
    SCOPED_TRACE("watchNamespace=" + ns);
    Rendered r = Render(With(kAllOff, {"watchNamespace=" + ns}));
    ExpectWellFormed(r);
    std::set<std::string> want{"ServiceAccount", "Deployment", ns.empty() ? "ClusterRole" : "Role",
                               ns.empty() ? "ClusterRoleBinding" : "RoleBinding"};
    EXPECT_EQ(Kinds(r), want);
    // Without leader election, task auth or network policies there is no
    // Lease, Secret or NetworkPolicy permission anywhere.
    for (const auto* kind : {"ClusterRole", "Role"}) {
      for (const auto* d : r.Kind(kind)) {
        EXPECT_THAT(d->obj["rules"].dump(), ::testing::Not(HasSubstr("leases"))) << d->source;
        EXPECT_THAT(d->obj["rules"].dump(), ::testing::Not(HasSubstr("secrets"))) << d->source;
        EXPECT_THAT(d->obj["rules"].dump(), ::testing::Not(HasSubstr("networkpolicies"))) << d->source;
        EXPECT_THAT(d->obj["rules"].dump(), ::testing::Not(HasSubstr("podgroups"))) << d->source;
      }
    }
    EXPECT_THAT(Args(r.One("Deployment")), ::testing::Contains("--task-auth=false"));
    EXPECT_THAT(Args(r.One("Deployment")), ::testing::Not(::testing::Contains(HasSubstr("--task-tls"))));
  }
}

// The rules of the operator's own ClusterRole or Role (`kind`).
json OperatorRules(const Rendered& r, const std::string& kind) {
  for (const auto* d : r.Kind(kind)) {
    if (d->obj["metadata"]["name"] == "tfjob-tfjob-operator") return d->obj["rules"];
  }
  return json();
}

// taskAuth.tls adds the flag and get/update on secrets (an existing Secret
// without the TLS keys is read and completed); nothing else changes.
TEST_F(Chart, TaskAuthTlsAddsTheFlagAndGetUpdateOnSecrets) {
  for (const std::string ns : {"", "team-a"}) {
    SCOPED_TRACE("watchNamespace=" + ns);
    const std::string kind = ns.empty() ? "ClusterRole" : "Role";
    auto rules = [&](const Rendered& r) { return OperatorRules(r, kind); };
    const Rendered off = Render({"watchNamespace=" + ns});
    const Rendered on = Render({"watchNamespace=" + ns, "taskAuth.tls=true"});
    json expected = rules(off);
    ASSERT_TRUE(expected.is_array());
    bool found = false;
    for (auto& rule : expected) {
      if (rule["resources"] == json::array({"secrets"})) {
        EXPECT_EQ(rule["verbs"], json::array({"create"}));
        rule["verbs"] = json::array({"create", "get", "update"});
        found = true;
      }
    }
    EXPECT_TRUE(found);
    EXPECT_EQ(rules(on), expected);
    EXPECT_THAT(Args(on.One("Deployment")), ::testing::Contains("--task-tls=true"));
    EXPECT_THAT(Args(off.One("Deployment")), ::testing::Not(::testing::Contains(HasSubstr("--task-tls"))));
    EXPECT_EQ(Kinds(on), Kinds(off));
  }
}

// Gang scheduling adds one rule, on the scheduler's podgroups, and the flag;
// nothing else in the RBAC changes.
TEST_F(Chart, GangSchedulingAddsExactlyThePodGroupRule) {
  for (const std::string ns : {"", "team-a"}) {
    SCOPED_TRACE("watchNamespace=" + ns);
    const std::string kind = ns.empty() ? "ClusterRole" : "Role";
    auto rules = [&](const Rendered& r) { return OperatorRules(r, kind); };
    const Rendered off = Render({"watchNamespace=" + ns});
    for (const auto& [name, group] :
         std::vector<std::pair<std::string, std::string>>{{"volcano", "scheduling.volcano.sh"},
                                                          {"scheduler-plugins", "scheduling.x-k8s.io"},
                                                          {"coscheduler", "scheduling.x-k8s.io"}}) {
      SCOPED_TRACE(name);
      const Rendered on = Render({"watchNamespace=" + ns, "gangScheduler.name=" + name});
      json expected = rules(off);
      ASSERT_TRUE(expected.is_array());
      expected.push_back({{"apiGroups", {group}},
                          {"resources", {"podgroups"}},
                          {"verbs", {"list", "watch", "create", "update", "delete"}}});
      EXPECT_EQ(rules(on), expected);
      EXPECT_THAT(Args(on.One("Deployment")), ::testing::Contains("--gang-scheduler-name=" + name));
      EXPECT_THAT(Args(off.One("Deployment")), ::testing::Not(::testing::Contains(::testing::HasSubstr("gang"))));
      EXPECT_EQ(Kinds(on), Kinds(off));
    }
  }
}

TEST_F(Chart, InconsistentValuesFailWithAMessage) {
  auto r = RunRender({"serviceMonitor.enabled=true", "metrics.service.enabled=false"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("needs metrics.service.enabled"));
  r = RunRender({"replicaCount=3", "leaderElection.enabled=false"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("needs leaderElection.enabled"));
  r = RunRender({"serviceAccount.create=false"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("serviceAccount.name is required"));
  r = RunRender({"taskAuth.enabled=false", "taskAuth.tls=true"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("taskAuth.tls needs taskAuth.enabled"));
}

// --strict turns lint's warnings into failures; INFO (no icon) stays
// allowed. Lint renders the templates too, so each value set is linted.
TEST_F(Chart, LintIsClean) {
  for (const auto& sets : {std::vector<std::string>{}, With(kAllOn, {"watchNamespace=team-a"}), kAllOff}) {
    SCOPED_TRACE(::testing::PrintToString(sets));
    std::vector<std::string> args{"lint", "--strict", ChartDir(), "--namespace", kReleaseNamespace};
    for (const auto& s : SetFlags(sets)) args.push_back(s);
    auto r = RunHelm(args);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("1 chart(s) linted, 0 chart(s) failed")) << r.out << r.err;
    EXPECT_THAT(r.out + r.err, ::testing::Not(HasSubstr("[WARNING]"))) << r.out << r.err;
    EXPECT_THAT(r.out + r.err, ::testing::Not(HasSubstr("[ERROR]"))) << r.out << r.err;
  }
}

TEST_F(Chart, CrdIsTheRepositoryCopy) {
  auto chart = ReadFile(ChartDir() + "/crds/kubeflow.org_tfjobs.yaml");
  auto repo = ReadFile(t::SourceDir() + "/crds/kubeflow.org_tfjobs.yaml");
  ASSERT_TRUE(chart.ok()) << chart.status();
  ASSERT_TRUE(repo.ok()) << repo.status();
  EXPECT_TRUE(*chart == *repo) << "charts/tfjob-operator/crds/kubeflow.org_tfjobs.yaml differs from "
                                  "crds/kubeflow.org_tfjobs.yaml: cp crds/kubeflow.org_tfjobs.yaml "
                                  "charts/tfjob-operator/crds/";
  // --include-crds emits it as Helm installs it, before the templates.
  Rendered r = Render({}, {"--include-crds"});
  ASSERT_FALSE(r.docs.empty());
  EXPECT_EQ(r.docs[0].obj["kind"], "CustomResourceDefinition");
  EXPECT_EQ(r.docs[0].obj["metadata"]["name"], "tfjobs.kubeflow.org");
}

// ---- The Deployment against the operator binary -------------------------------

std::vector<std::string> Args(const json& dep) {
  std::vector<std::string> out;
  for (const auto& a : dep["spec"]["template"]["spec"]["containers"][0]["args"]) out.push_back(a.get<std::string>());
  return out;
}

std::string FlagValue(const std::vector<std::string>& args, const std::string& flag) {
  for (const auto& a : args) {
    if (a.rfind(flag + "=", 0) == 0) return a.substr(flag.size() + 1);
  }
  return "";
}

// The flags tfjob-operator declares, from the usage it prints on a bad flag.
std::set<std::string> OperatorFlags() {
  auto r = t::Run({t::BinDir() + "/tfjob-operator", "--no-such-flag"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  std::set<std::string> out;
  std::regex flag(R"(^\s+--([a-z0-9-]+))");
  std::istringstream in(r.out + r.err);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, flag)) out.insert(m[1]);
  }
  EXPECT_TRUE(out.count("namespace")) << r.out << r.err;
  return out;
}

TEST_F(ChartDeployment, ArgsAreOperatorFlagsAndProbesUseTheHealthPort) {
  const std::set<std::string> flags = OperatorFlags();
  for (const auto& sets : {std::vector<std::string>{}, With(kAllOn, {"watchNamespace=team-a"}), kAllOff,
                           std::vector<std::string>{"healthProbe.port=9440", "metrics.port=9090"}}) {
    Rendered r = Render(sets);
    const json& dep = r.One("Deployment");
    const json& c = dep["spec"]["template"]["spec"]["containers"][0];
    const auto args = Args(dep);
    for (const auto& a : args) {
      ASSERT_EQ(a.rfind("--", 0), 0u) << a;
      const std::string name = a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2);
      EXPECT_TRUE(flags.count(name)) << "Deployment arg " << a << " is not a tfjob-operator flag";
    }
    // Probes hit /healthz and /readyz on the port --health-probe-bind-address binds.
    const std::string health = FlagValue(args, "--health-probe-bind-address");
    const std::string metrics = FlagValue(args, "--metrics-bind-address");
    ASSERT_EQ(health.rfind(':', 0), 0u) << health;
    std::map<std::string, int> ports;
    for (const auto& p : c["ports"]) ports[p["name"]] = p["containerPort"];
    EXPECT_EQ(std::to_string(ports["health"]), health.substr(1));
    EXPECT_EQ(std::to_string(ports["metrics"]), metrics.substr(1));
    EXPECT_EQ(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    EXPECT_EQ(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    EXPECT_EQ(c["livenessProbe"]["httpGet"]["port"], "health");
    EXPECT_EQ(c["readinessProbe"]["httpGet"]["port"], "health");
    for (const auto& svc : r.Kind("Service")) {
      EXPECT_EQ(svc->obj["spec"]["ports"][0]["targetPort"], "metrics");
    }
    // The restrictive security context.
    const json& sc = c["securityContext"];
    EXPECT_EQ(sc["runAsNonRoot"], true);
    EXPECT_EQ(sc["readOnlyRootFilesystem"], true);
    EXPECT_EQ(sc["allowPrivilegeEscalation"], false);
    EXPECT_EQ(sc["capabilities"]["drop"], json::array({"ALL"}));
    EXPECT_FALSE(sc["capabilities"].contains("add"));
    EXPECT_EQ(sc["seccompProfile"]["type"], "RuntimeDefault");
    const json& psc = dep["spec"]["template"]["spec"]["securityContext"];
    EXPECT_EQ(psc["runAsNonRoot"], true);
    EXPECT_NE(psc.value("runAsUser", 0), 0);
    // The pod runs as the rendered ServiceAccount.
    EXPECT_EQ(dep["spec"]["template"]["spec"]["serviceAccountName"], r.One("ServiceAccount")["metadata"]["name"]);
  }
}

// ---- RBAC against what the operator does ------------------------------------

// (verb, apiGroup, resource[/subresource], namespace; "" = cluster-wide)
using Permission = std::tuple<std::string, std::string, std::string, std::string>;

std::string Str(const Permission& p) {
  return std::get<0>(p) + " " + (std::get<1>(p).empty() ? "core" : std::get<1>(p)) + "/" + std::get<2>(p) +
         (std::get<3>(p).empty() ? " (all namespaces)" : " in " + std::get<3>(p));
}

std::vector<std::string> Segments(const std::string& path) {
  std::vector<std::string> out;
  std::istringstream in(path);
  for (std::string s; std::getline(in, s, '/');) {
    if (!s.empty()) out.push_back(s);
  }
  return out;
}

// Kubernetes' request-info rules (k8s.io/apiserver/pkg/endpoints/request).
// Returns false for non-resource URLs (discovery, /version).
bool ToPermission(const t::ApiServerDouble::RequestRecord& r, Permission* out) {
  std::vector<std::string> s = Segments(r.path);
  std::string group;
  size_t i;
  if (s.size() >= 2 && s[0] == "api") {
    i = 2;
  } else if (s.size() >= 3 && s[0] == "apis") {
    group = s[1];
    i = 3;
  } else {
    return false;
  }
  if (i >= s.size()) return false;  // discovery of a group/version
  bool watch = r.watch;
  if (s[i] == "watch") {  // legacy /watch/ prefix
    watch = true;
    ++i;
  }
  std::string ns;
  if (s[i] == "namespaces" && i + 2 < s.size()) {
    ns = s[i + 1];
    i += 2;
  }
  if (i >= s.size()) return false;
  std::string resource = s[i];
  std::string name = i + 1 < s.size() ? s[i + 1] : "";
  if (i + 2 < s.size()) resource += "/" + s[i + 2];
  std::string verb;
  if (r.method == "GET" || r.method == "HEAD") {
    verb = watch ? "watch" : name.empty() ? "list" : "get";
  } else if (r.method == "POST") {
    verb = "create";
  } else if (r.method == "PUT") {
    verb = "update";
  } else if (r.method == "PATCH") {
    verb = "patch";
  } else if (r.method == "DELETE") {
    verb = name.empty() ? "deletecollection" : "delete";
  } else {
    verb = r.method;
  }
  *out = {verb, group, resource, ns};
  return true;
}

// Paths every authenticated user may GET (system:discovery,
// system:public-info-viewer): not the chart's to grant.
bool PublicNonResource(const std::string& path) {
  static const std::regex re(R"(^/(api|apis|version|healthz|livez|readyz|openapi)(/.*)?$)");
  return std::regex_match(path, re);
}

struct Grant {
  std::set<std::string> verbs, groups, resources;
  std::string ns;  // "" = every namespace (ClusterRole via ClusterRoleBinding)
  std::string source;
};

// The rules bound to the operator's ServiceAccount.
std::vector<Grant> Grants(const Rendered& r) {
  const json& sa = r.One("ServiceAccount");
  const std::string sa_name = sa["metadata"]["name"], sa_ns = sa["metadata"]["namespace"];
  std::vector<Grant> out;
  auto bound = [&](const json& binding, const std::string& kind, const std::string& name) {
    if (binding["roleRef"]["kind"] != kind || binding["roleRef"]["name"] != name) return false;
    EXPECT_EQ(binding["roleRef"]["apiGroup"], "rbac.authorization.k8s.io");
    for (const auto& s : binding["subjects"]) {
      if (s["kind"] == "ServiceAccount" && s["name"] == sa_name && s["namespace"] == sa_ns) return true;
    }
    return false;
  };
  auto add = [&](const Doc& role, const std::string& ns) {
    for (const auto& rule : role.obj["rules"]) {
      Grant g;
      g.ns = ns;
      g.source = role.source + " " + role.obj["kind"].get<std::string>() + "/" +
                 role.obj["metadata"]["name"].get<std::string>();
      for (const auto& v : rule["verbs"]) g.verbs.insert(v.get<std::string>());
      for (const auto& v : rule["apiGroups"]) g.groups.insert(v.get<std::string>());
      for (const auto& v : rule["resources"]) g.resources.insert(v.get<std::string>());
      EXPECT_FALSE(g.verbs.count("*") || g.groups.count("*") || g.resources.count("*")) << g.source << ": wildcard";
      EXPECT_FALSE(rule.contains("nonResourceURLs")) << g.source;
      out.push_back(g);
    }
  };
  for (const auto* role : r.Kind("ClusterRole")) {
    int n = 0;
    for (const auto* b : r.Kind("ClusterRoleBinding")) n += bound(b->obj, "ClusterRole", role->obj["metadata"]["name"]);
    EXPECT_EQ(n, 1) << role->source << ": ClusterRole not bound to the ServiceAccount exactly once";
    add(*role, "");
  }
  for (const auto* role : r.Kind("Role")) {
    int n = 0;
    for (const auto* b : r.Kind("RoleBinding")) {
      if (b->obj["metadata"]["namespace"] == role->obj["metadata"]["namespace"]) {
        n += bound(b->obj, "Role", role->obj["metadata"]["name"]);
      }
    }
    EXPECT_EQ(n, 1) << role->source << ": Role not bound to the ServiceAccount exactly once";
    add(*role, role->obj["metadata"]["namespace"]);
  }
  return out;
}

bool Allows(const Grant& g, const Permission& p) {
  const auto& [verb, group, resource, ns] = p;
  return g.verbs.count(verb) && g.groups.count(group) && g.resources.count(resource) && (g.ns.empty() || g.ns == ns);
}

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

class ChartRbac : public HelmTest, public ::testing::WithParamInterface<RbacCase> {};

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
  const std::string watch_ns = GetParam().watch_ns;
  const std::string gang = GetParam().gang;
  const bool tls = GetParam().tls;
  const std::string job_ns = watch_ns.empty() ? "team-b" : watch_ns;
  Rendered r =
      Render({"watchNamespace=" + watch_ns, "leaderElection.enabled=true", "leaderElection.leaseDurationSeconds=2",
              "gangScheduler.name=" + gang, std::string("taskAuth.tls=") + (tls ? "true" : "false")});
  ASSERT_FALSE(r.docs.empty());
  const std::vector<Grant> grants = Grants(r);
  ASSERT_FALSE(grants.empty());

  t::ApiServerDouble::Options server_options;
  server_options.register_podgroup_crds = true;
  auto server = t::ApiServerDouble::Start(server_options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto& api = **server;
  const std::string dir = t::MakeTempDir("chart-rbac-" + (watch_ns.empty() ? std::string("cluster") : watch_ns) +
                                         (gang.empty() ? "" : "-" + gang) + (tls ? "-tls" : ""));
  const std::string podgroups = gang.empty()        ? ""
                                : gang == "volcano" ? "podgroups.scheduling.volcano.sh"
                                                    : "podgroups.scheduling.x-k8s.io";
  ASSERT_TRUE(api.WriteKubeconfig(dir + "/kubeconfig").ok());
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
  // A job the operator cannot decode (the double has no schema validation):
  // it merge-patches a Failed condition into the status. The job already has
  // a status: on a status-less one the operator's invalid-job path currently
  // throws (controller.cc reads status.conditions from a null status).
  {
    json bad = Job("bad", job_ns, "None", -1);
    bad["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "two";
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
  auto eventually = [&](const std::function<bool()>& pred) { return api.WaitFor(pred, 30s); };
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
      obj["status"]["containerStatuses"] = json::array(
          {{{"name", "tensorflow"}, {"restartCount", 0}, {"state", {{"terminated", {{"exitCode", exit_code}}}}}}});
      if (api.UpdateStatus("pods", job_ns, obj).ok()) return;
    }
    FAIL() << "could not update pod " << pod;
  };

  ASSERT_TRUE(eventually([&] { return api.Get("leases", kReleaseNamespace, "tfjob-operator-leader").ok(); }))
      << op->output();
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
      EXPECT_TRUE((*secret)["stringData"].contains("tls.key")) << job;
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
      api.Get("leases", kReleaseNamespace, "tfjob-operator-leader").value()["spec"].value("renewTime", "");
  ASSERT_TRUE(eventually([&] {
    auto l = api.Get("leases", kReleaseNamespace, "tfjob-operator-leader");
    return l.ok() && (*l)["spec"].value("renewTime", "") != renew0;
  }));
  EXPECT_EQ(op->Stop(SIGTERM), 0) << op->output();

  std::set<Permission> used;
  std::set<std::string> other;
  for (const auto& req : api.Requests()) {
    Permission p;
    if (ToPermission(req, &p)) {
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
