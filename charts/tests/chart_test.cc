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
//     the dashboard ConfigMap carries charts/.../dashboards/tfjob-dashboard.json.
// No API server: chart_rbac_test compares the rendered RBAC with the
// requests the operator makes to a real one, and chart_install_test installs
// the chart into one (and checks NOTES.txt, which only an install renders).
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "charts/tests/chart_render.h"
#include "common/files.h"
#include "tests/support/subprocess.h"

namespace tfjob::charts {
namespace {

using json = nlohmann::json;
namespace t = ::tfjob::testing;
using ::testing::HasSubstr;

class Chart : public HelmTest {};
class ChartDeployment : public HelmTest {};

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
                                         "pendingPods.recreate=true",
                                         "leaderElection.renewDeadlineSeconds=8",
                                         "leaderElection.retryPeriodSeconds=1.5"};
const std::vector<std::string> kAllOff = {
    "serviceMonitor.enabled=false", "grafanaDashboard.enabled=false", "metrics.service.enabled=false",
    "leaderElection.enabled=false", "taskAuth.enabled=false",         "taskAuth.tls=false",
    "networkPolicy.enabled=false",  "pendingPods.recreate=false",     "nodeFailure.graceSeconds=0"};

std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::set<std::string> Kinds(const Rendered& r) {
  std::set<std::string> out;
  for (const auto& d : r.docs) out.insert(d.obj.value("kind", ""));
  return out;
}

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
    // Nodes are cluster-scoped: their ClusterRole comes whatever the namespace.
    const std::set<std::string> want{"ServiceAccount", "Role",      "RoleBinding", "Service",           "Deployment",
                                     "ServiceMonitor", "ConfigMap", "ClusterRole", "ClusterRoleBinding"};
    EXPECT_EQ(Kinds(r), want);
    bool nodes = false;
    for (const auto* d : r.Kind("ClusterRole")) {
      if (d->obj["metadata"]["name"] != "tfjob-tfjob-operator-nodes") continue;
      nodes = d->obj["rules"] == json::parse(R"([{"apiGroups":[""],"resources":["nodes"],"verbs":["list","watch"]}])");
    }
    EXPECT_TRUE(nodes);
    EXPECT_THAT(Args(r.One("Deployment")), ::testing::Contains("--node-unreachable-grace-seconds=60"));
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
        EXPECT_THAT(d->obj["rules"].dump(), ::testing::Not(HasSubstr("nodes"))) << d->source;
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

// kueue.mode "external" adds the flag, the rules on workloads and
// workloads/status to the operator's own (Cluster)Role, and a ClusterRole of
// its own for the cluster-scoped ResourceFlavors and PriorityClasses, bound
// to the operator's ServiceAccount whatever watchNamespace says.
TEST_F(Chart, KueueExternalAddsTheWorkloadRulesAndAClusterRole) {
  for (const std::string ns : {"", "team-a"}) {
    SCOPED_TRACE("watchNamespace=" + ns);
    const std::string kind = ns.empty() ? "ClusterRole" : "Role";
    const Rendered off = Render({"watchNamespace=" + ns});
    const Rendered on = Render({"watchNamespace=" + ns, "kueue.mode=external"});
    ExpectWellFormed(on);
    json expected = OperatorRules(off, kind);
    ASSERT_TRUE(expected.is_array());
    expected.push_back({{"apiGroups", {"kueue.x-k8s.io"}},
                        {"resources", {"workloads"}},
                        {"verbs", {"list", "watch", "create", "delete"}}});
    expected.push_back({{"apiGroups", {"kueue.x-k8s.io"}}, {"resources", {"workloads/status"}}, {"verbs", {"patch"}}});
    EXPECT_EQ(OperatorRules(on, kind), expected);
    EXPECT_EQ(OperatorRules(on, "ClusterRole" == kind ? "Role" : "ClusterRole"),
              OperatorRules(off, "ClusterRole" == kind ? "Role" : "ClusterRole"));
    json kueue_rules;
    for (const auto* d : on.Kind("ClusterRole")) {
      if (d->obj["metadata"]["name"] == "tfjob-tfjob-operator-kueue") kueue_rules = d->obj["rules"];
    }
    EXPECT_EQ(kueue_rules, json::parse(R"([
      {"apiGroups":["kueue.x-k8s.io"],"resources":["resourceflavors"],"verbs":["list","watch"]},
      {"apiGroups":["scheduling.k8s.io"],"resources":["priorityclasses"],"verbs":["get"]}])"));
    bool bound = false;
    for (const auto* d : on.Kind("ClusterRoleBinding")) {
      if (d->obj["roleRef"]["name"] != "tfjob-tfjob-operator-kueue") continue;
      bound = d->obj["subjects"][0]["name"] == on.One("ServiceAccount")["metadata"]["name"] &&
              d->obj["subjects"][0]["namespace"] == kReleaseNamespace;
    }
    EXPECT_TRUE(bound);
    EXPECT_THAT(Args(on.One("Deployment")), ::testing::Contains("--kueue=external"));
    EXPECT_THAT(Args(off.One("Deployment")), ::testing::Not(::testing::Contains(HasSubstr("--kueue"))));
    EXPECT_THAT(off.One("Deployment").dump() + OperatorRules(off, kind).dump(),
                ::testing::Not(HasSubstr("kueue.x-k8s.io")));
  }
  auto bad = RunRender({"kueue.mode=builtin"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("kueue.mode: \"builtin\" is not \"external\" or empty"));
}

// pendingPods (docs/operations.md): the timeout always passed (the chart's
// default is the binary's), the re-creation only when asked for.
TEST_F(Chart, PendingPodsValuesAreTheOperatorsFlags) {
  const auto defaults = Args(Render({}).One("Deployment"));
  EXPECT_THAT(defaults, ::testing::Contains("--pending-timeout-seconds=600"));
  EXPECT_THAT(defaults, ::testing::Not(::testing::Contains(HasSubstr("--recreate-pending-pods"))));
  const auto set = Args(Render({"pendingPods.timeoutSeconds=120", "pendingPods.recreate=true"}).One("Deployment"));
  EXPECT_THAT(set, ::testing::Contains("--pending-timeout-seconds=120"));
  EXPECT_THAT(set, ::testing::Contains("--recreate-pending-pods=true"));
  EXPECT_THAT(Args(Render({"pendingPods.timeoutSeconds=0"}).One("Deployment")),
              ::testing::Contains("--pending-timeout-seconds=0"));
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

}  // namespace
}  // namespace tfjob::charts
