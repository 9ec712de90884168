#include "operator/controller/cache.h"

#include "operator/api/names.h"

namespace tfjob::op::controller {
namespace {

// What ViewPod / ViewService read, and nothing else: pod specs (with their
// TF_CONFIG) and managedFields would otherwise dominate the operator's memory.
nlohmann::json Slim(nlohmann::json obj, bool keep_status) {
  nlohmann::json out = nlohmann::json::object();
  if (!obj.is_object()) return out;
  const auto& m = obj["metadata"];
  if (m.is_object()) {
    nlohmann::json meta = nlohmann::json::object();
    for (const char* k : {"name", "namespace", "uid", "resourceVersion", "labels", "ownerReferences", "deletionTimestamp"}) {
      if (m.contains(k)) meta[k] = m[k];
    }
    out["metadata"] = std::move(meta);
  }
  // Of a pod's spec, the names of the tensorflow container's variables
  // (ViewPod's task_token).
  const auto spec = obj.find("spec");
  const nlohmann::json* containers = nullptr;
  if (spec != obj.end() && spec->is_object()) {
    const auto it = spec->find("containers");
    if (it != spec->end()) containers = &*it;
  }
  if (containers && containers->is_array()) {
    for (const auto& c : *containers) {
      const auto name = c.is_object() ? c.find("name") : c.end();
      const auto env = c.is_object() ? c.find("env") : c.end();
      if (name == c.end() || *name != api::kDefaultContainerName || env == c.end() || !env->is_array()) continue;
      nlohmann::json names = nlohmann::json::array();
      for (const auto& e : *env) {
        if (e.is_object() && e.contains("name")) names.push_back({{"name", e["name"]}});
      }
      out["spec"]["containers"] = nlohmann::json::array({{{"name", *name}, {"env", names}}});
    }
  }
  if (keep_status && obj.contains("status") && obj["status"].is_object()) {
    nlohmann::json st = nlohmann::json::object();
    if (obj["status"].contains("phase")) st["phase"] = obj["status"]["phase"];
    // Of each container status and condition, the fields ViewPod reads (an
    // image, its ID and the container ID are most of a status otherwise).
    auto keep = [](const nlohmann::json& list, std::initializer_list<const char*> fields) {
      nlohmann::json out = nlohmann::json::array();
      if (!list.is_array()) return out;
      for (const auto& item : list) {
        nlohmann::json kept = nlohmann::json::object();
        if (item.is_object()) {
          for (const char* f : fields) {
            if (item.contains(f)) kept[f] = item[f];
          }
        }
        out.push_back(std::move(kept));
      }
      return out;
    };
    for (const char* k : {"containerStatuses", "initContainerStatuses"}) {
      if (obj["status"].contains(k)) st[k] = keep(obj["status"][k], {"name", "restartCount", "state", "lastState"});
    }
    if (obj["status"].contains("conditions")) {
      st["conditions"] = keep(obj["status"]["conditions"], {"type", "status", "reason", "message", "lastTransitionTime"});
    }
    out["status"] = std::move(st);
  }
  return out;
}

}  // namespace

nlohmann::json CachedPod(nlohmann::json pod) { return Slim(std::move(pod), true); }
nlohmann::json CachedService(nlohmann::json service) { return Slim(std::move(service), false); }

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
