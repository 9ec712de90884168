#include "operator/api/defaults.h"

#include <string>

namespace tfjob::op::api {
namespace {

using json = nlohmann::json;

void SetDefaultPort(json& pod_template) {
  if (!pod_template.is_object()) return;
  auto spec = pod_template.find("spec");
  if (spec == pod_template.end() || !spec->is_object()) return;
  auto containers = spec->find("containers");
  if (containers == spec->end() || !containers->is_array()) return;
  for (json& c : *containers) {
    if (!c.is_object()) continue;
    auto name = c.find("name");
    if (name == c.end() || !name->is_string() || *name != kDefaultContainerName) continue;
    // Only the first container with the name, as Kubeflow does.
    json& ports = c["ports"];
    if (ports.is_null()) ports = json::array();
    if (!ports.is_array()) return;
    for (const json& p : ports) {
      if (!p.is_object()) continue;
      auto port_name = p.find("name");
      if (port_name != p.end() && port_name->is_string() && *port_name == kDefaultPortName) return;
    }
    ports.push_back({{"name", kDefaultPortName}, {"containerPort", kDefaultPort}});
    return;
  }
}

}  // namespace

std::string CanonicalKey(const ReplicaSpec& spec) {
  if (!spec.type) return spec.key;
  if (spec.master_alias) return "Master";
  return std::string(CanonicalName(*spec.type));
}

void SetDefaults(TFJob& job) {
  RunPolicy& rp = job.spec.run_policy;
  // Kubeflow defaults only an unset policy; "" written out stays "" (and
  // cleans like All: planner_status.cc CleanPolicy).
  if (!rp.clean_pod_policy) rp.clean_pod_policy = std::string(kCleanPodPolicyNone);
  if (!job.spec.success_policy) job.spec.success_policy = std::string(kSuccessPolicyDefault);

  std::vector<ReplicaSpec>& specs = job.spec.replica_specs;
  for (ReplicaSpec& s : specs) {
    const std::string canonical = CanonicalKey(s);
    if (s.key == canonical) continue;
    bool taken = false;
    for (const ReplicaSpec& other : specs) taken = taken || (&other != &s && other.key == canonical);
    if (!taken) s.key = canonical;
  }
  for (ReplicaSpec& s : specs) {
    if (!s.replicas) s.replicas = 1;
    if (s.restart_policy.empty()) s.restart_policy = std::string(kRestartPolicyNever);
    SetDefaultPort(s.template_json);
  }
}

}  // namespace tfjob::op::api
