#include "services/runtime/cluster_resolver.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <string_view>
#include <utility>

namespace tfjob::runtime {
namespace {

constexpr const char* kResolverVar = "TFJOB_CLUSTER_RESOLVER";
constexpr const char* kJobsVar = "TFJOB_SLURM_JOBS";
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

StatusOr<std::map<std::string, int64_t>> ParseJobs(const std::string& text) {
  auto bad = [&](const std::string& reason) {
    return InvalidArgument(std::string(kJobsVar) + ": " + Quoted(text) + " " + reason + "; " + kJobsExample);
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
  ASSIGN_OR_RETURN(std::optional<int64_t> port_base, CountVar(env, "TFJOB_SLURM_PORT_BASE"));
  if (port_base) {
    if (*port_base < 1 || *port_base > 65535) {
      return InvalidArgument("TFJOB_SLURM_PORT_BASE: " + std::to_string(*port_base) + " is not a port from 1 to 65535");
    }
    o.port_base = *port_base;
  }
  ASSIGN_OR_RETURN(o.gpus_per_task, CountVar(env, "TFJOB_SLURM_GPUS_PER_TASK"));
  ASSIGN_OR_RETURN(o.gpus_per_node, CountVar(env, "TFJOB_SLURM_GPUS_PER_NODE"));
  ASSIGN_OR_RETURN(o.tasks_per_node, CountVar(env, "TFJOB_SLURM_TASKS_PER_NODE"));
  return o;
}

StatusOr<ResolvedCluster> ResolveCluster(const cluster::Env& env) {
  const std::string resolver = env(kResolverVar).value_or("");
  if (resolver.empty() || resolver == "tf_config") {
    ASSIGN_OR_RETURN(cluster::ClusterConfig config, cluster::FromEnv(env));
    return ResolvedCluster{std::move(config), std::nullopt};
  }
  if (resolver != "slurm") {
    return InvalidArgument(std::string(kResolverVar) + ": " + Quoted(resolver) + " is not tf_config or slurm");
  }
  ASSIGN_OR_RETURN(cluster::SlurmOptions options, SlurmOptionsFromEnv(env));
  StatusOr<cluster::SlurmResolution> r = cluster::ResolveSlurm(options, env);
  // A missing SLURM_* variable is bad input here, not "no cluster": the user
  // asked for Slurm, so running alone would hide the mistake.
  if (!r.ok()) return InvalidArgument(r.status().message());
  return ResolvedCluster{std::move(r->config), std::move(r->cuda_visible_devices)};
}

}  // namespace tfjob::runtime
