// The planner's view of observed objects (planner.h: ViewPod, ViewService,
// ViewPodGroup, ViewWorkload) and the JSON readers its files share.
#include <string>

#include "common/time.h"
#include "operator/api/names.h"
#include "operator/controller/planner.h"
#include "operator/controller/views.h"

namespace tfjob::op::controller {
namespace internal {

std::map<std::string, std::string> StringMap(const nlohmann::json& j) {
  std::map<std::string, std::string> out;
  if (!j.is_object()) return out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it->is_string()) out[it.key()] = it->get<std::string>();
  }
  return out;
}

std::string ControllerUid(const nlohmann::json& meta) {
  const auto refs = meta.find("ownerReferences");
  if (refs == meta.end() || !refs->is_array()) return "";
  for (const auto& r : *refs) {
    if (r.is_object() && r.value("controller", false) && r.contains("uid") && r["uid"].is_string()) {
      return r["uid"].get<std::string>();
    }
  }
  return "";
}

const nlohmann::json& Field(const nlohmann::json& j, const char* key) {
  static const nlohmann::json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

std::string Str(const nlohmann::json& j, const char* key) {
  const auto& v = Field(j, key);
  return v.is_string() ? v.get<std::string>() : "";
}

}  // namespace internal

using internal::ControllerUid;
using internal::Field;
using internal::Str;
using internal::StringMap;

namespace {

// What a pod's and a service's views read of their metadata alike.
template <typename View>
void ReadMetadata(const nlohmann::json& meta, View& v) {
  v.name = Str(meta, "name");
  v.uid = Str(meta, "uid");
  v.labels = StringMap(Field(meta, "labels"));
  v.deleting = !Str(meta, "deletionTimestamp").empty();
  v.controller_uid = ControllerUid(meta);
}

}  // namespace

PodView ViewPod(const nlohmann::json& pod) {
  PodView v;
  ReadMetadata(Field(pod, "metadata"), v);
  const auto& containers_spec = Field(Field(pod, "spec"), "containers");
  if (containers_spec.is_array()) {
    for (const auto& c : containers_spec) {
      if (Str(c, "name") != api::kDefaultContainerName || !Field(c, "env").is_array()) continue;
      for (const auto& e : Field(c, "env")) v.task_token = v.task_token || Str(e, "name") == api::kAuthTokenEnv;
    }
  }
  v.created = ParseRfc3339(Str(Field(pod, "metadata"), "creationTimestamp"));
  v.node_name = Str(Field(pod, "spec"), "nodeName");
  const auto& status = Field(pod, "status");
  v.phase = Str(status, "phase");
  // Why it waits: the scheduler first, else the tensorflow container.
  const auto& pod_conditions = Field(status, "conditions");
  if (pod_conditions.is_array()) {
    for (const auto& c : pod_conditions) {
      if (Str(c, "type") == "PodScheduled" && Str(c, "status") == "False") {
        v.pending_reason = Str(c, "reason");
        v.pending_message = Str(c, "message");
      }
    }
  }
  const auto& statuses = Field(status, "containerStatuses");
  if (statuses.is_array()) {
    for (const auto& cs : statuses) {
      const auto& rc = Field(cs, "restartCount");
      if (rc.is_number_integer()) v.restart_count += rc.get<int32_t>();
      if (Str(cs, "name") != api::kDefaultContainerName) continue;
      const auto& waiting = Field(Field(cs, "state"), "waiting");
      if (v.pending_reason.empty() && !Str(waiting, "reason").empty()) {
        v.pending_reason = Str(waiting, "reason");
        v.pending_message = Str(waiting, "message");
      }
      const auto& now_code = Field(Field(Field(cs, "state"), "terminated"), "exitCode");
      if (now_code.is_number_integer()) v.terminated_code = now_code.get<int>();
      for (const char* which : {"state", "lastState"}) {
        const auto& code = Field(Field(Field(cs, which), "terminated"), "exitCode");
        if (code.is_number_integer()) {
          v.exit_code = code.get<int>();
          break;
        }
      }
    }
  }
  // Kubeflow's RecordAbnormalPods, in its order: the containers' states
  // (any container), else the init containers', else the newest condition.
  auto containers = [&](const nlohmann::json& list) {
    if (!list.is_array() || list.empty()) return false;
    for (const auto& cs : list) {
      const auto& term = Field(Field(cs, "state"), "terminated");
      const auto& code = Field(term, "exitCode");
      if (code.is_number_integer() && code.get<int64_t>() != 0) {
        v.abnormal_reason = Str(term, "reason");
        v.abnormal_message = "Error pod " + v.name + " container " + Str(cs, "name") +
                             " exitCode: " + std::to_string(code.get<int64_t>()) +
                             " terminated message: " + Str(term, "message");
        return true;
      }
      const auto& waiting = Field(Field(cs, "state"), "waiting");
      if (!Str(waiting, "message").empty()) {
        v.abnormal_reason = Str(waiting, "reason");
        v.abnormal_message =
            "Error pod " + v.name + " container " + Str(cs, "name") + " waiting message: " + Str(waiting, "message");
        return true;
      }
    }
    return true;  // looked at: the init containers are not
  };
  if (!containers(statuses) && !containers(Field(status, "initContainerStatuses"))) {
    const auto& conds = Field(status, "conditions");
    if (conds.is_array() && !conds.empty()) {
      const nlohmann::json* newest = nullptr;
      for (const auto& c : conds) {
        if (!newest || Str(c, "lastTransitionTime") > Str(*newest, "lastTransitionTime")) newest = &c;
      }
      if (Str(*newest, "status") != "True") {
        v.abnormal_reason = Str(*newest, "reason");
        v.abnormal_message = "Error pod " + v.name + " condition message: " + Str(*newest, "message");
      }
    }
  }
  return v;
}

NodeView ViewNode(const nlohmann::json& node) {
  NodeView v;
  v.name = Str(Field(node, "metadata"), "name");
  const auto& conds = Field(Field(node, "status"), "conditions");
  if (!conds.is_array()) return v;
  for (const auto& c : conds) {
    if (Str(c, "type") != "Ready") continue;
    v.ready = Str(c, "status");
    v.ready_since = ParseRfc3339(Str(c, "lastTransitionTime"));
  }
  return v;
}

ServiceView ViewService(const nlohmann::json& svc) {
  ServiceView v;
  ReadMetadata(Field(svc, "metadata"), v);
  return v;
}

PodGroupView ViewPodGroup(const nlohmann::json& pg) {
  PodGroupView v;
  const auto& meta = Field(pg, "metadata");
  v.controller_uid = ControllerUid(meta);
  v.deleting = !Str(meta, "deletionTimestamp").empty();
  v.phase = Str(Field(pg, "status"), "phase");
  v.object = pg.is_object() ? pg : nlohmann::json::object();
  return v;
}

WorkloadView ViewWorkload(const nlohmann::json& wl) {
  WorkloadView v;
  const auto& meta = Field(wl, "metadata");
  v.name = Str(meta, "name");
  v.controller_uid = ControllerUid(meta);
  v.deleting = !Str(meta, "deletionTimestamp").empty();
  v.object = wl.is_object() ? wl : nlohmann::json::object();
  return v;
}

}  // namespace tfjob::op::controller
