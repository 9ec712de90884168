#include "operator/controller/cache.h"

#include <array>

#include "operator/api/names.h"

namespace tfjob::op::controller {
namespace {

// Of a pod's or service's metadata: what ViewPod / ViewService and the
// informer's index read. Of the owner references only the controller's uid
// (ControllerUid): apiVersion, kind and name repeat the job on every pod and
// service.
nlohmann::json SlimMetadata(const nlohmann::json& m) {
  nlohmann::json meta = nlohmann::json::object();
  if (!m.is_object()) return meta;
  for (const char* k :
       {"name", "namespace", "uid", "resourceVersion", "labels", "creationTimestamp", "deletionTimestamp"}) {
    const auto it = m.find(k);
    if (it != m.end()) meta[k] = *it;
  }
  const auto refs = m.find("ownerReferences");
  if (refs != m.end() && refs->is_array()) {
    for (const auto& r : *refs) {
      if (r.is_object() && r.value("controller", false) && r.contains("uid") && r["uid"].is_string()) {
        meta["ownerReferences"] = nlohmann::json::array({{{"uid", r["uid"]}, {"controller", true}}});
        break;
      }
    }
  }
  return meta;
}

// Of a container status' state (or lastState): which state it is, and of a
// terminated one the exit code, reason and message, of a waiting one the
// reason and message (what RecordAbnormalPods reports). Timestamps, the
// container ID and signal go.
nlohmann::json SlimState(const nlohmann::json& state) {
  struct Kept {
    const char* which;
    std::array<const char*, 3> fields;  // nullptr-padded
  };
  static constexpr std::array<Kept, 3> kKept{{{"terminated", {"exitCode", "reason", "message"}},
                                              {"waiting", {"reason", "message", nullptr}},
                                              {"running", {nullptr, nullptr, nullptr}}}};
  nlohmann::json out = nlohmann::json::object();
  if (!state.is_object()) return out;
  for (const Kept& k : kKept) {
    const auto it = state.find(k.which);
    if (it == state.end()) continue;
    nlohmann::json kept = nlohmann::json::object();
    for (const char* f : k.fields) {
      if (f == nullptr || !it->is_object()) continue;
      const auto v = it->find(f);
      if (v != it->end()) kept[f] = *v;
    }
    out[k.which] = std::move(kept);
  }
  return out;
}

nlohmann::json SlimContainerStatuses(const nlohmann::json& list) {
  nlohmann::json out = nlohmann::json::array();
  if (!list.is_array()) return out;
  for (const auto& cs : list) {
    nlohmann::json kept = nlohmann::json::object();
    if (cs.is_object()) {
      for (const char* f : {"name", "restartCount"}) {
        const auto v = cs.find(f);
        if (v != cs.end()) kept[f] = *v;
      }
      for (const char* f : {"state", "lastState"}) {
        const auto v = cs.find(f);
        if (v != cs.end()) kept[f] = SlimState(*v);
      }
    }
    out.push_back(std::move(kept));
  }
  return out;
}

// What ViewPod reads, and nothing else: pod specs (with their TF_CONFIG),
// images, IPs, timestamps and managedFields would otherwise be most of the
// operator's memory (docs/operations.md).
nlohmann::json SlimPod(const nlohmann::json& obj) {
  nlohmann::json out = nlohmann::json::object();
  if (!obj.is_object()) return out;
  const auto m = obj.find("metadata");
  if (m != obj.end()) out["metadata"] = SlimMetadata(*m);
  // Of the spec, whether the tensorflow container has the task token
  // (ViewPod's task_token): that variable's name, no other.
  const auto spec = obj.find("spec");
  if (spec != obj.end() && spec->is_object()) {
    if (spec->contains("nodeName")) out["spec"]["nodeName"] = (*spec)["nodeName"];
    const auto containers = spec->find("containers");
    if (containers != spec->end() && containers->is_array()) {
      for (const auto& c : *containers) {
        const auto name = c.is_object() ? c.find("name") : c.end();
        const auto env = c.is_object() ? c.find("env") : c.end();
        if (name == c.end() || *name != api::kDefaultContainerName || env == c.end() || !env->is_array()) continue;
        nlohmann::json names = nlohmann::json::array();
        for (const auto& e : *env) {
          if (e.is_object() && e.value("name", "") == api::kAuthTokenEnv) names.push_back({{"name", e["name"]}});
        }
        out["spec"]["containers"] = nlohmann::json::array({{{"name", *name}, {"env", names}}});
      }
    }
  }
  const auto status = obj.find("status");
  if (status == obj.end() || !status->is_object()) return out;
  nlohmann::json st = nlohmann::json::object();
  if (status->contains("phase")) st["phase"] = (*status)["phase"];
  for (const char* k : {"containerStatuses", "initContainerStatuses"}) {
    if (status->contains(k)) st[k] = SlimContainerStatuses((*status)[k]);
  }
  // Of the conditions, the one ViewPod would report (the first with the
  // latest lastTransitionTime) and the scheduler's when it says no (why a
  // Pending pod waits), in their order.
  const auto conds = status->find("conditions");
  if (conds != status->end() && conds->is_array() && !conds->empty()) {
    const nlohmann::json* newest = nullptr;
    auto time = [](const nlohmann::json& c) {
      const auto t = c.is_object() ? c.find("lastTransitionTime") : c.end();
      return t != c.end() && t->is_string() ? t->get<std::string>() : std::string();
    };
    for (const auto& c : *conds) {
      if (!newest || time(c) > time(*newest)) newest = &c;
    }
    st["conditions"] = nlohmann::json::array();
    for (const auto& c : *conds) {
      const bool unscheduled =
          c.is_object() && c.value("type", "") == "PodScheduled" && c.value("status", "") == "False";
      if (&c != newest && !unscheduled) continue;
      nlohmann::json kept = nlohmann::json::object();
      if (c.is_object()) {
        for (const char* f : {"type", "status", "reason", "message", "lastTransitionTime"}) {
          const auto v = c.find(f);
          if (v != c.end()) kept[f] = *v;
        }
      }
      st["conditions"].push_back(std::move(kept));
    }
  }
  out["status"] = std::move(st);
  return out;
}

}  // namespace

nlohmann::json CachedPod(nlohmann::json pod) { return SlimPod(pod); }
nlohmann::json CachedService(nlohmann::json service) {
  nlohmann::json out = nlohmann::json::object();
  if (service.is_object() && service.contains("metadata")) out["metadata"] = SlimMetadata(service["metadata"]);
  return out;
}

nlohmann::json CachedNode(nlohmann::json node) {
  nlohmann::json out = nlohmann::json::object();
  if (!node.is_object()) return out;
  const auto m = node.find("metadata");
  if (m != node.end() && m->is_object()) {
    for (const char* k : {"name", "resourceVersion"}) {
      const auto it = m->find(k);
      if (it != m->end()) out["metadata"][k] = *it;
    }
  }
  const auto st = node.find("status");
  if (st == node.end() || !st->is_object() || !st->contains("conditions") || !(*st)["conditions"].is_array()) {
    return out;
  }
  for (const auto& c : (*st)["conditions"]) {
    if (!c.is_object() || c.value("type", "") != "Ready") continue;
    nlohmann::json kept = nlohmann::json::object();
    for (const char* f : {"type", "status", "lastTransitionTime"}) {
      const auto v = c.find(f);
      if (v != c.end()) kept[f] = *v;
    }
    out["status"]["conditions"] = nlohmann::json::array({std::move(kept)});
  }
  return out;
}

// A TFJob without what no one here reads and what is often most of it:
// managedFields and kubectl's last-applied-configuration (the whole job
// again). The status writes go to the status subresource, which ignores
// metadata, so nothing is lost by not keeping them.
nlohmann::json CachedJob(nlohmann::json obj) {
  if (!obj.is_object()) return obj;
  const auto m = obj.find("metadata");
  if (m == obj.end() || !m->is_object()) return obj;
  m->erase("managedFields");
  const auto a = m->find("annotations");
  if (a != m->end() && a->is_object()) {
    a->erase("kubectl.kubernetes.io/last-applied-configuration");
    if (a->empty()) m->erase(a);
  }
  return obj;
}

}  // namespace tfjob::op::controller
