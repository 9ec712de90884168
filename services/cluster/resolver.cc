#include "services/cluster/resolver.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <string_view>
#include <utility>

#include "contract/env.h"
#include "contract/labels.h"
#include "services/cluster/kubernetes.h"
#include "kube/config.h"
#include "kube/rest_client.h"

namespace tfjob::cluster {
namespace {

constexpr const char* kResolverVar = contract::kClusterResolverEnv;
constexpr const char* kJobsVar = contract::kSlurmJobsEnv;
constexpr const char* kJobsExample = "e.g. \"chief:1,ps:1,worker:2\"";

// Appends rather than concatenating: GCC 12 reports a false -Wrestrict on
// "\"" + std::string(...).
std::string Quoted(std::string_view s) {
  std::string q;
  q.reserve(s.size() + 2);
  q += '"';
  q.append(s);
  q += '"';
  return q;
}

// Decimal digits only (no sign, no spaces), at most 9 so the value fits.
std::optional<int64_t> ParseCount(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  if (!std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  int64_t v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

// An optional non-negative integer variable; unset or "" leaves it unset.
StatusOr<std::optional<int64_t>> CountVar(const cluster::Env& env, const std::string& name) {
  std::optional<std::string> v = env(name);
  if (!v || v->empty()) return std::optional<int64_t>();
  std::optional<int64_t> n = ParseCount(*v);
  if (!n) return InvalidArgument(name + ": " + Quoted(*v) + " is not a non-negative integer");
  return n;
}

// `var` names the variable in errors.
StatusOr<std::map<std::string, int64_t>> ParseJobs(const std::string& text, const std::string& var = kJobsVar) {
  auto bad = [&](const std::string& reason) {
    return InvalidArgument(var + ": " + Quoted(text) + " " + reason + "; " + kJobsExample);
  };
  std::map<std::string, int64_t> jobs;
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const size_t colon = item.find(':');
    if (colon == std::string_view::npos) return bad("has entry " + Quoted(item) + ", expected JOB:COUNT");
    const std::string name(item.substr(0, colon));
    const std::optional<int64_t> count = ParseCount(item.substr(colon + 1));
    if (!count || *count < 1) return bad("gives job " + Quoted(name) + " a count that is not a positive integer");
    if (!cluster::IsKnownTaskType(name)) {
      return bad("names job " + Quoted(name) + ", which is not chief, master, ps, worker or evaluator");
    }
    if (!jobs.emplace(name, *count).second) return bad("lists job " + Quoted(name) + " twice");
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  // Two layouts make sense. With parameter servers: without a coordinator
  // nobody runs the program and the servers wait forever; without workers it
  // has nothing to schedule on. Without parameter servers the workers (and a
  // chief, if any) train together (multi-worker mirrored).
  if (!jobs.contains(cluster::kWorker)) return bad("has no worker");
  if (jobs.contains(cluster::kPs) && !jobs.contains(cluster::kChief) && !jobs.contains(cluster::kMaster)) {
    return bad("has ps but no chief to coordinate them (leave out ps for workers that train together)");
  }
  return jobs;
}

}  // namespace

StatusOr<cluster::SlurmOptions> SlurmOptionsFromEnv(const cluster::Env& env) {
  cluster::SlurmOptions o;
  std::optional<std::string> jobs = env(kJobsVar);
  if (!jobs || jobs->empty()) {
    return InvalidArgument(std::string(kJobsVar) + " is not set; with " + kResolverVar +
                           "=slurm it lays out the Slurm tasks, " + kJobsExample);
  }
  ASSIGN_OR_RETURN(o.jobs, ParseJobs(*jobs));
  ASSIGN_OR_RETURN(std::optional<int64_t> port_base, CountVar(env, contract::kSlurmPortBaseEnv));
  if (port_base) {
    if (*port_base < 1 || *port_base > 65535) {
      return InvalidArgument(std::string(contract::kSlurmPortBaseEnv) + ": " + std::to_string(*port_base) +
                             " is not a port from 1 to 65535");
    }
    o.port_base = *port_base;
  }
  ASSIGN_OR_RETURN(o.gpus_per_task, CountVar(env, contract::kSlurmGpusPerTaskEnv));
  ASSIGN_OR_RETURN(o.gpus_per_node, CountVar(env, contract::kSlurmGpusPerNodeEnv));
  ASSIGN_OR_RETURN(o.tasks_per_node, CountVar(env, contract::kSlurmTasksPerNodeEnv));
  return o;
}

namespace {

StatusOr<KubernetesSettings> ReadKubernetesSettings(const cluster::Env& env) {
  const std::string what = "kubernetes resolver";
  KubernetesSettings k;
  // Credentials: a kubeconfig when one is named (outside a pod, tests),
  // else the pod's service account.
  const std::string kubeconfig = env("KUBECONFIG").value_or("");
  auto config = kubeconfig.empty() ? kube::InClusterConfig(env) : kube::LoadKubeconfig(kubeconfig);
  if (!config.ok()) {
    // The resolver was asked for: not finding a cluster is bad input, not
    // "no cluster, run alone".
    return InvalidArgument(what + ": " + config.status().message());
  }
  k.api = std::move(config).value();
  k.pod_name = env("POD_NAME").value_or("");
  if (k.pod_name.empty()) k.pod_name = env("HOSTNAME").value_or("");
  if (k.pod_name.empty()) return InvalidArgument(what + ": neither POD_NAME nor HOSTNAME names this pod");
  k.ns = env("POD_NAMESPACE").value_or("");
  if (k.ns.empty()) k.ns = k.api.default_namespace;
  if (auto v = env(contract::kKubernetesWaitEnv); v && !v->empty()) {
    std::optional<int64_t> secs = ParseCount(*v);
    if (!secs || *secs < 1) {
      return InvalidArgument(std::string(contract::kKubernetesWaitEnv) + ": " + Quoted(*v) +
                             " is not a positive integer");
    }
    k.wait = std::chrono::seconds(*secs);
  }
  if (auto v = env(contract::kKubernetesJobsEnv); v && !v->empty()) {
    ASSIGN_OR_RETURN(k.jobs, ParseJobs(*v, contract::kKubernetesJobsEnv));
  }
  return k;
}

StatusOr<ResolvedCluster> ResolveKubernetes(const KubernetesSettings& k) {
  const std::string what = "kubernetes resolver";
  const std::string& ns = k.ns;
  const std::string& pod_name = k.pod_name;
  std::optional<std::map<std::string, int64_t>> jobs = k.jobs;
  kube::RestOptions ro;
  ro.qps = 5;  // one task among many asking the same API server
  ro.burst = 10;
  ASSIGN_OR_RETURN(std::unique_ptr<kube::RestClient> client, kube::RestClient::Create(k.api, ro));
  const std::string rbac =
      " (the job's service account needs get and list on pods and get on tfjobs; "
      "see docs/kubernetes-resolver.md)";
  auto api_error = [&](const Status& s, const std::string& request) {
    std::string m = what + ": " + request + ": " + s.message();
    if (s.code() == Code::kPermissionDenied || s.code() == Code::kUnauthenticated) m += rbac;
    // NOT_FOUND would read as "no cluster: run alone"; a pod or TFJob that
    // is not there is a wrong POD_NAME or job label.
    return Status(s.code() == Code::kNotFound ? Code::kInvalidArgument : s.code(), m);
  };

  // This pod: its labels say which job and task it is.
  auto self = client->Get(kube::kPods, ns, pod_name);
  if (!self.ok()) return api_error(self.status(), "getting pod " + ns + "/" + pod_name);
  const nlohmann::json labels =
      self->value("metadata", nlohmann::json::object()).value("labels", nlohmann::json::object());
  auto label = [&](std::string_view name) -> StatusOr<std::string> {
    const std::string key(name);
    if (!labels.contains(key) || !labels[key].is_string() || labels[key].get<std::string>().empty()) {
      return InvalidArgument(what + ": pod " + ns + "/" + pod_name + " has no label " + key +
                             " (a pod the TFJob operator created has it)");
    }
    return labels[key].get<std::string>();
  };
  ASSIGN_OR_RETURN(const std::string job_name, label(contract::kJobNameLabel));
  ASSIGN_OR_RETURN(const std::string type, label(contract::kReplicaTypeLabel));
  ASSIGN_OR_RETURN(const std::string index_text, label(contract::kReplicaIndexLabel));
  const std::optional<int64_t> index = ParseCount(index_text);
  if (!index) {
    return InvalidArgument(what + ": pod " + ns + "/" + pod_name + ": label " +
                           std::string(contract::kReplicaIndexLabel) + " " + Quoted(index_text) +
                           " is not a non-negative integer");
  }
  if (!cluster::IsKnownTaskType(type)) {
    return InvalidArgument(what + ": pod " + ns + "/" + pod_name + ": replica type " + Quoted(type) +
                           " is not chief, master, ps, worker or evaluator");
  }
  if (!jobs) {
    auto tfjob = client->Get(kube::kTFJobs, ns, job_name);
    if (!tfjob.ok()) return api_error(tfjob.status(), "getting TFJob " + ns + "/" + job_name);
    auto counts = cluster::kubernetes::TfJobTaskCounts(*tfjob);
    if (!counts.ok()) return InvalidArgument(what + ": " + counts.status().message());
    jobs = std::move(counts).value();
  }
  jobs->erase(cluster::kEvaluator);  // never part of the training cluster
  if (type != cluster::kEvaluator && (!jobs->contains(type) || *index >= jobs->at(type))) {
    return InvalidArgument(what + ": pod " + ns + "/" + pod_name + " is " + type + ":" + std::to_string(*index) +
                           ", which the job's layout does not have");
  }
  cluster::kubernetes::ResolverOptions o;
  o.ns = ns;
  std::vector<std::string> types;
  for (const auto& [t, n] : *jobs) types.push_back(t);
  o.job_selectors = cluster::kubernetes::TfJobSelectors(job_name, types);
  o.expected_tasks = *jobs;
  o.wait_timeout = k.wait;
  auto spec = cluster::kubernetes::ResolveCluster(*client, o);
  if (!spec.ok()) {
    if (spec.status().code() == Code::kPermissionDenied || spec.status().code() == Code::kUnauthenticated) {
      return Status(spec.status().code(), spec.status().message() + rbac);
    }
    return spec.status();
  }
  RETURN_IF_ERROR(cluster::ValidateRoleCounts(*spec).WithContext(what));
  cluster::ClusterConfig cfg{std::move(spec).value(), cluster::TaskId{type, *index}, "cloud", ""};
  return ResolvedCluster{std::move(cfg), std::nullopt};
}

}  // namespace

StatusOr<ResolverConfig> ReadResolverConfig(const cluster::Env& env) {
  ResolverConfig c;
  const std::string resolver = env(contract::kClusterResolverEnv).value_or("");
  if (resolver.empty() || resolver == "tf_config") {
    StatusOr<cluster::ClusterConfig> config = cluster::FromEnv(env);
    if (config.status().code() == Code::kNotFound) return c;
    if (!config.ok()) return config.status();
    c.resolved = ResolvedCluster{std::move(config).value(), std::nullopt};
    return c;
  }
  if (resolver == "kubernetes") {
    ASSIGN_OR_RETURN(c.kubernetes, ReadKubernetesSettings(env));
    return c;
  }
  if (resolver != "slurm") {
    return InvalidArgument(std::string(contract::kClusterResolverEnv) + ": " + Quoted(resolver) +
                           " is not tf_config, slurm or kubernetes");
  }
  ASSIGN_OR_RETURN(cluster::SlurmOptions options, SlurmOptionsFromEnv(env));
  StatusOr<cluster::SlurmResolution> r = cluster::ResolveSlurm(options, env);
  // A missing SLURM_* variable is bad input here, not "no cluster": the user
  // asked for Slurm, so running alone would hide the mistake.
  if (!r.ok()) return InvalidArgument(r.status().message());
  c.resolved = ResolvedCluster{std::move(r->config), std::move(r->cuda_visible_devices)};
  return c;
}

StatusOr<ResolvedCluster> ResolveCluster(const ResolverConfig& config) {
  if (config.resolved) return *config.resolved;
  if (config.kubernetes) return ResolveKubernetes(*config.kubernetes);
  return NotFound("TF_CONFIG is not set");
}

StatusOr<ResolvedCluster> ResolveCluster(const cluster::Env& env) {
  ASSIGN_OR_RETURN(ResolverConfig config, ReadResolverConfig(env));
  return ResolveCluster(config);
}

}  // namespace tfjob::cluster
