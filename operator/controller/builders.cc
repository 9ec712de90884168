// The objects a job owns: its pods (with TF_CONFIG), headless services,
// task-auth Secret and NetworkPolicy.
#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <utility>

#include "common/pki.h"
#include "operator/api/defaults.h"
#include "operator/api/names.h"
#include "operator/controller/builders.h"
#include "operator/controller/pod_group.h"
#include "operator/controller/views.h"

namespace tfjob::op::controller::internal {

using api::ReplicaSpec;
using api::TFJob;

std::optional<int> IndexOf(const std::map<std::string, std::string>& labels) {
  auto it = labels.find(std::string(api::kReplicaIndexLabel));
  if (it == labels.end() || it->second.empty() || it->second.size() > 6) return std::nullopt;
  for (char c : it->second) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  return std::stoi(it->second);
}

std::string LabelOf(const std::map<std::string, std::string>& labels, std::string_view key) {
  auto it = labels.find(std::string(key));
  return it == labels.end() ? "" : it->second;
}

nlohmann::json OwnerRef(const TFJob& job) {
  return {{"apiVersion", std::string(api::kApiVersion)},
          {"kind", std::string(api::kKind)},
          {"name", job.metadata.name},
          {"uid", job.metadata.uid},
          {"controller", true},
          {"blockOwnerDeletion", true}};
}

nlohmann::json LabelsJson(const std::map<std::string, std::string>& labels) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : labels) j[k] = v;
  return j;
}

namespace {

// Sets env `var` (replacing one of the same name) in the tensorflow container.
void SetEnv(nlohmann::json& pod_spec, const nlohmann::json& var) {
  auto& containers = pod_spec["containers"];
  for (auto& c : containers) {
    if (!c.is_object() || c.value("name", "") != api::kDefaultContainerName) continue;
    nlohmann::json env = c.value("env", nlohmann::json::array());
    if (!env.is_array()) env = nlohmann::json::array();
    nlohmann::json kept = nlohmann::json::array();
    for (const auto& e : env) {
      if (!(e.is_object() && e.value("name", "") == var.value("name", ""))) kept.push_back(e);
    }
    kept.push_back(var);
    c["env"] = kept;
  }
}

// Adds `item` to the array obj[list], replacing entries with the same name
// or, when `same_key` is given, the same value of that key (two mounts at
// one path would make the pod invalid).
void SetNamed(nlohmann::json& obj, const char* list, const nlohmann::json& item, const char* same_key = nullptr) {
  nlohmann::json items = obj.value(list, nlohmann::json::array());
  if (!items.is_array()) items = nlohmann::json::array();
  nlohmann::json kept = nlohmann::json::array();
  for (const auto& e : items) {
    // Compared as JSON values: the template's may be of any type.
    auto same = [&](const char* key) { return e.contains(key) && e[key] == item[key]; };
    const bool replaced = e.is_object() && (same("name") || (same_key && same(same_key)));
    if (!replaced) kept.push_back(e);
  }
  kept.push_back(item);
  obj[list] = kept;
}

// The job's TLS material from its Secret: a read-only volume on the
// tensorflow container and TFJOB_TLS_DIR naming it. Mode 0444, not 0400:
// Secret files belong to root unless the pod sets fsGroup, and the runtime
// image runs as a non-root user (65532), which could not read a 0400 key;
// the volume is visible only to the containers that mount it.
void AddTlsVolume(const TFJob& job, nlohmann::json& pod_spec) {
  nlohmann::json items = nlohmann::json::array();
  for (const char* key : {pki::kCaFile, pki::kCertFile, pki::kKeyFile}) items.push_back({{"key", key}, {"path", key}});
  SetNamed(
      pod_spec, "volumes",
      {{"name", std::string(api::kTlsVolumeName)},
       {"secret", {{"secretName", api::AuthSecretName(job.metadata.name)}, {"items", items}, {"defaultMode", 0444}}}});
  for (auto& c : pod_spec["containers"]) {
    if (!c.is_object() || c.value("name", "") != api::kDefaultContainerName) continue;
    SetNamed(c, "volumeMounts",
             {{"name", std::string(api::kTlsVolumeName)},
              {"mountPath", std::string(api::kTlsMountPath)},
              {"readOnly", true}},
             "mountPath");
  }
  SetEnv(pod_spec, {{"name", pki::kTlsDirEnv}, {"value", std::string(api::kTlsMountPath)}});
}

}  // namespace

nlohmann::json BuildAuthSecret(const TFJob& job) {
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"type", "Opaque"},
          {"metadata",
           {{"name", api::AuthSecretName(job.metadata.name)},
            {"namespace", job.metadata.namespace_},
            {"labels", {{std::string(api::kJobNameLabel), job.metadata.name}}},
            {"ownerReferences", nlohmann::json::array({OwnerRef(job)})}}}};
}

// The job's pods accept anything from each other; from elsewhere only their
// declared ports other than tfjob-port (e.g. metrics for Prometheus).
nlohmann::json BuildNetworkPolicy(const TFJob& job) {
  nlohmann::json same_job{{"podSelector", {{"matchLabels", {{std::string(api::kJobNameLabel), job.metadata.name}}}}}};
  std::set<std::pair<std::string, int64_t>> open;  // (protocol, port)
  for (const auto& spec : job.spec.replica_specs) {
    const nlohmann::json& t = spec.template_json;
    if (!t.is_object() || !t.contains("spec") || !t["spec"].is_object()) continue;
    for (const auto& c : t["spec"].value("containers", nlohmann::json::array())) {
      if (!c.is_object()) continue;
      for (const auto& p : c.value("ports", nlohmann::json::array())) {
        if (!p.is_object() || !p.contains("containerPort") || !p["containerPort"].is_number_integer()) continue;
        if (p.value("name", "") == api::kDefaultPortName) continue;
        open.insert({p.value("protocol", "TCP"), p["containerPort"].get<int64_t>()});
      }
    }
  }
  nlohmann::json ingress = nlohmann::json::array({{{"from", nlohmann::json::array({same_job})}}});
  if (!open.empty()) {
    nlohmann::json ports = nlohmann::json::array();
    for (const auto& [proto, port] : open) ports.push_back({{"protocol", proto}, {"port", port}});
    ingress.push_back({{"ports", ports}});
  }
  return {{"apiVersion", "networking.k8s.io/v1"},
          {"kind", "NetworkPolicy"},
          {"metadata",
           {{"name", api::NetworkPolicyName(job.metadata.name)},
            {"namespace", job.metadata.namespace_},
            {"labels", {{std::string(api::kJobNameLabel), job.metadata.name}}},
            {"ownerReferences", nlohmann::json::array({OwnerRef(job)})}}},
          {"spec",
           {{"podSelector", {{"matchLabels", {{std::string(api::kJobNameLabel), job.metadata.name}}}}},
            {"policyTypes", nlohmann::json::array({"Ingress"})},
            {"ingress", ingress}}}};
}

StatusOr<nlohmann::json> BuildPod(const TFJob& job, const ReplicaSpec& spec, int index, const PlannerOptions& opt,
                                  Time now) {
  const std::string type = api::TypeLabel(spec);
  nlohmann::json tmpl = spec.template_json.is_object() ? spec.template_json : nlohmann::json::object();
  nlohmann::json meta = tmpl.value("metadata", nlohmann::json::object());
  if (!meta.is_object()) meta = nlohmann::json::object();
  nlohmann::json labels = meta.value("labels", nlohmann::json::object());
  if (!labels.is_object()) labels = nlohmann::json::object();
  for (const auto& [k, v] : api::Labels(job.metadata.name, type, index, api::IsMasterRole(job, spec, index)))
    labels[k] = v;
  meta["labels"] = labels;
  meta["name"] = api::PodName(job.metadata.name, type, index);
  meta["namespace"] = job.metadata.namespace_;
  meta["ownerReferences"] = nlohmann::json::array({OwnerRef(job)});
  meta.erase("generateName");
  meta.erase("resourceVersion");
  meta.erase("uid");
  nlohmann::json pod_spec = tmpl.value("spec", nlohmann::json::object());
  if (!pod_spec.is_object()) pod_spec = nlohmann::json::object();
  // ExitCode is the operator's policy: the kubelet must not restart in place.
  const auto policy = api::ParseRestartPolicy(spec.restart_policy.empty() ? "Never" : spec.restart_policy);
  pod_spec["restartPolicy"] =
      !policy || *policy == api::RestartPolicy::kExitCode ? "Never" : std::string(api::ToString(*policy));
  if (api::NeedsTfConfig(job)) {
    api::TfConfigOptions tco;
    tco.cluster_domain = opt.cluster_domain;
    tco.address = opt.address;
    ASSIGN_OR_RETURN(std::string tf_config, api::TfConfig(job, job.metadata.namespace_, *spec.type, index, tco));
    SetEnv(pod_spec, {{"name", std::string(api::kTfConfigEnv)}, {"value", tf_config}});
    // Orders its chief's generation by pod (docs/fault-tolerance.md): never
    // before 1 ms, which the runtime would refuse.
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
    SetEnv(pod_spec, {{"name", std::string(api::kPodCreatedEnv)}, {"value", std::to_string(std::max<int64_t>(ms, 1))}});
  }
  // A job of one replica has no peers to authenticate.
  if (opt.task_auth && api::NeedsTfConfig(job)) {
    SetEnv(pod_spec,
           {{"name", std::string(api::kAuthTokenEnv)},
            {"valueFrom",
             {{"secretKeyRef",
               {{"name", api::AuthSecretName(job.metadata.name)}, {"key", std::string(api::kAuthSecretKey)}}}}}});
    if (opt.task_tls) AddTlsVolume(job, pod_spec);
  }
  // Kubeflow's DecoratePodTemplateSpec: the gang scheduler unless the
  // template names another, and what ties the pod to its PodGroup.
  if (!opt.gang_scheduler.empty()) {
    if (Str(pod_spec, "schedulerName").empty()) pod_spec["schedulerName"] = opt.gang_scheduler;
    if (IsVolcano(opt)) {
      nlohmann::json annotations = meta.value("annotations", nlohmann::json::object());
      if (!annotations.is_object()) annotations = nlohmann::json::object();
      annotations["scheduling.k8s.io/group-name"] = job.metadata.name;
      annotations["volcano.sh/task-spec"] = type;
      meta["annotations"] = annotations;
    } else {
      meta["labels"]["scheduling.x-k8s.io/pod-group"] = job.metadata.name;
    }
  }
  return nlohmann::json{{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", meta}, {"spec", pod_spec}};
}

// Kubeflow's CreateNewService: labels and selector are the job's labels
// (operator-name, job-name) plus replica-type and replica-index, never
// job-role; every port of the tensorflow container is exposed by name (a Go
// map there: the last port of a name wins; sorted here, so the object is
// the same on every pass), with no targetPort (the API server defaults it
// to the port).
nlohmann::json BuildService(const TFJob& job, const ReplicaSpec& spec, int index) {
  const std::string type = api::TypeLabel(spec);
  auto labels = api::JobLabels(job.metadata.name);
  labels[std::string(api::kReplicaTypeLabel)] = type;
  labels[std::string(api::kReplicaIndexLabel)] = std::to_string(index);
  std::map<std::string, int64_t> by_name;
  const nlohmann::json& tmpl = spec.template_json;
  const nlohmann::json& containers = Field(Field(tmpl, "spec"), "containers");
  if (containers.is_array()) {
    for (const auto& c : containers) {
      if (Str(c, "name") != api::kDefaultContainerName) continue;
      const nlohmann::json& ports = Field(c, "ports");
      if (!ports.is_array()) break;
      for (const auto& p : ports) {
        const auto& number = Field(p, "containerPort");
        if (number.is_number_integer()) by_name[Str(p, "name")] = number.get<int64_t>();
      }
      break;
    }
  }
  if (by_name.empty()) by_name[std::string(api::kDefaultPortName)] = api::TfPort(spec);
  nlohmann::json ports = nlohmann::json::array();
  for (const auto& [port_name, number] : by_name) ports.push_back({{"name", port_name}, {"port", number}});
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata",
           {{"name", api::ServiceName(job.metadata.name, type, index)},
            {"namespace", job.metadata.namespace_},
            {"labels", LabelsJson(labels)},
            {"ownerReferences", nlohmann::json::array({OwnerRef(job)})}}},
          {"spec", {{"clusterIP", "None"}, {"selector", LabelsJson(labels)}, {"ports", ports}}}};
}

}  // namespace tfjob::op::controller::internal
