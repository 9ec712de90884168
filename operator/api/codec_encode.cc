// Encode: the typed TFJob overlaid on the document it was decoded from
// (TFJob::raw), writing a field only where it differs from what Decode
// reads there, so that Encode(Decode(x)) == x.
#include "operator/api/codec_encode.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "operator/api/codec_decode.h"
#include "operator/api/codec_read.h"

namespace tfjob::op::api::codec_internal {
namespace {

// ------------------------------------------------------------- Encoding
//
// Every Put* leaves the document alone when Decode would read `value` there
// already, so untouched fields keep their exact spelling (2.0 stays 2.0, an
// explicit null stays null).

void PutString(json& obj, const char* key, const std::string& value) {  // "" means absent
  auto cur = ReadString(Field(obj, key), "");
  if (cur.ok() && cur->value_or("") == value) return;
  if (value.empty()) {
    obj.erase(key);
  } else {
    obj[key] = value;
  }
}

template <typename T, typename Reader>
void PutOptional(json& obj, const char* key, const std::optional<T>& value, Reader read) {
  auto cur = read(Field(obj, key), "");
  if (cur.ok() && *cur == value) return;
  if (value) {
    obj[key] = *value;
  } else {
    obj.erase(key);
  }
}

void PutOptString(json& obj, const char* key, const std::optional<std::string>& v) {
  PutOptional(obj, key, v, ReadString);
}
void PutOptBool(json& obj, const char* key, const std::optional<bool>& v) { PutOptional(obj, key, v, ReadBool); }
void PutOptInt32(json& obj, const char* key, const std::optional<int32_t>& v) { PutOptional(obj, key, v, ReadInt32); }
void PutOptInt64(json& obj, const char* key, const std::optional<int64_t>& v) { PutOptional(obj, key, v, ReadInt64); }

// An int32 that Kubeflow serialises with omitempty: 0 and absent are the same.
void PutCount(json& obj, const char* key, int32_t value) {
  auto cur = ReadInt32(Field(obj, key), "");
  if (cur.ok() && cur->value_or(0) == value) return;
  if (value == 0) {
    obj.erase(key);
  } else {
    obj[key] = value;
  }
}

// A value passed through whole; null means absent.
void PutRaw(json& obj, const char* key, const json& value) {
  const json* cur = Field(obj, key);
  if (cur ? *cur == value : value.is_null()) return;
  if (value.is_null()) {
    obj.erase(key);
  } else {
    obj[key] = value;
  }
}

void PutStringMap(json& obj, const char* key, const std::map<std::string, std::string>& value) {
  auto cur = ReadStringMap(Field(obj, key), "");
  if (cur.ok() && *cur == value) return;
  if (value.empty()) {
    obj.erase(key);
    return;
  }
  json m = json::object();
  for (const auto& [k, v] : value) m[k] = v;
  obj[key] = std::move(m);
}

// Runs `fill` on the object at obj[key] (a fresh one when absent, null or not
// an object) and stores it back unless it stayed empty where there was no
// object before, so an absent section is not turned into {}.
template <typename F>
void WithObject(json& obj, const char* key, F&& fill) {
  auto it = obj.find(key);
  const bool existed = it != obj.end() && it->is_object();
  json child = existed ? std::move(*it) : json::object();
  fill(child);
  if (existed || !child.empty()) obj[key] = std::move(child);
}

void EncodeOwnerReference(json& o, const OwnerReference& r) {
  PutString(o, "apiVersion", r.api_version);
  PutString(o, "kind", r.kind);
  PutString(o, "name", r.name);
  PutString(o, "uid", r.uid);
  PutOptBool(o, "controller", r.controller);
  PutOptBool(o, "blockOwnerDeletion", r.block_owner_deletion);
}

// Rebuilds an array of keyed objects in the typed order, starting each
// element from the old element with the same key so that fields the model
// does not know survive reordering, insertion and removal.
template <typename T, typename KeyOf, typename EncodeOne>
json OverlayKeyedArray(const json* old, const std::vector<T>& items, KeyOf key_of_json, EncodeOne encode) {
  std::vector<bool> used(old && old->is_array() ? old->size() : 0, false);
  json out = json::array();
  for (const T& item : items) {
    json element = json::object();
    if (old && old->is_array()) {
      for (size_t i = 0; i < old->size(); ++i) {
        if (!used[i] && (*old)[i].is_object() && key_of_json((*old)[i], item)) {
          used[i] = true;
          element = (*old)[i];
          break;
        }
      }
    }
    encode(element, item);
    out.push_back(std::move(element));
  }
  return out;
}

void EncodeMeta(json& m, const ObjectMeta& meta) {
  PutString(m, "name", meta.name);
  PutString(m, "namespace", meta.namespace_);
  PutString(m, "uid", meta.uid);
  PutString(m, "resourceVersion", meta.resource_version);
  PutOptInt64(m, "generation", meta.generation);
  PutStringMap(m, "labels", meta.labels);
  PutStringMap(m, "annotations", meta.annotations);
  PutString(m, "creationTimestamp", meta.creation_timestamp);
  PutString(m, "deletionTimestamp", meta.deletion_timestamp);
  const json* old = Field(m, "ownerReferences");
  auto cur = DecodeOwnerReferences(old, "");
  if (cur.ok() && *cur == meta.owner_references) return;
  if (meta.owner_references.empty()) {
    m.erase("ownerReferences");
    return;
  }
  m["ownerReferences"] = OverlayKeyedArray(
      old, meta.owner_references,
      [](const json& j, const OwnerReference& r) {
        const json* uid = Field(j, "uid");
        return uid && uid->is_string() && uid->get_ref<const std::string&>() == r.uid;
      },
      EncodeOwnerReference);
}

void EncodeReplicaSpec(json& o, const ReplicaSpec& r) {
  PutOptInt32(o, "replicas", r.replicas);
  PutString(o, "restartPolicy", r.restart_policy);
  PutRaw(o, "template", r.template_json);
}

void EncodeSpec(json& s, const TFJobSpec& spec) {
  WithObject(s, "runPolicy", [&](json& p) {
    const RunPolicy& rp = spec.run_policy;
    PutOptString(p, "cleanPodPolicy", rp.clean_pod_policy);
    PutOptInt32(p, "ttlSecondsAfterFinished", rp.ttl_seconds_after_finished);
    PutOptInt64(p, "activeDeadlineSeconds", rp.active_deadline_seconds);
    PutOptInt32(p, "backoffLimit", rp.backoff_limit);
    PutRaw(p, "schedulingPolicy", rp.scheduling_policy);
    PutOptBool(p, "suspend", rp.suspend);
    PutOptString(p, "managedBy", rp.managed_by);
  });
  PutOptString(s, "successPolicy", spec.success_policy);
  PutOptBool(s, "enableDynamicWorker", spec.enable_dynamic_worker);

  auto it = s.find("tfReplicaSpecs");
  const bool had_object = it != s.end() && it->is_object();
  if (!spec.has_replica_specs && spec.replica_specs.empty()) {
    if (had_object) s.erase("tfReplicaSpecs");
    return;
  }
  const json old = had_object ? *it : json::object();
  json out = json::object();
  for (const ReplicaSpec& r : spec.replica_specs) {
    // The spec's original document, found by the key it was decoded from
    // (SetDefaults may have renamed "worker" to "Worker").
    auto src = r.source_key ? old.find(*r.source_key) : old.end();
    const bool was_null = src != old.end() && src->is_null();
    json element = src != old.end() && src->is_object() ? *src : json::object();
    EncodeReplicaSpec(element, r);
    out[r.key] = (was_null && element.empty()) ? json() : std::move(element);
  }
  if (!had_object || out != old) s["tfReplicaSpecs"] = std::move(out);
}

void EncodeCondition(json& o, const JobCondition& c) {
  PutString(o, "type", c.type);
  PutString(o, "status", c.status);
  PutString(o, "reason", c.reason);
  PutString(o, "message", c.message);
  PutString(o, "lastUpdateTime", c.last_update_time);
  PutString(o, "lastTransitionTime", c.last_transition_time);
}

void EncodeReplicaStatus(json& o, const ReplicaStatus& r) {
  PutCount(o, "active", r.active);
  PutCount(o, "succeeded", r.succeeded);
  PutCount(o, "failed", r.failed);
  PutCount(o, "restarts", r.restarts);
  PutString(o, "selector", r.selector);
  PutRaw(o, "labelSelector", r.label_selector);
}

void EncodeStatus(json& s, const JobStatus& status) {
  const json* old_conditions = Field(s, "conditions");
  auto cur = DecodeConditions(old_conditions, "");
  if (!cur.ok() || *cur != status.conditions) {
    if (status.conditions.empty()) {
      s.erase("conditions");
    } else {
      s["conditions"] = OverlayKeyedArray(
          old_conditions, status.conditions,
          [](const json& j, const JobCondition& c) {
            const json* type = Field(j, "type");
            return type && type->is_string() && type->get_ref<const std::string&>() == c.type;
          },
          EncodeCondition);
    }
  }

  auto cur_rs = DecodeReplicaStatuses(Field(s, "replicaStatuses"), "");
  if (!cur_rs.ok() || *cur_rs != status.replica_statuses) {
    WithObject(s, "replicaStatuses", [&](json& m) {
      for (auto it = m.begin(); it != m.end();) {
        if (status.replica_statuses.count(it.key())) {
          ++it;
        } else {
          it = m.erase(it);
        }
      }
      for (const auto& [key, r] : status.replica_statuses) {
        json& slot = m[key];
        if (!slot.is_object()) slot = json::object();
        EncodeReplicaStatus(slot, r);
      }
    });
  }
  PutString(s, "startTime", status.start_time);
  PutString(s, "completionTime", status.completion_time);
  PutString(s, "lastReconcileTime", status.last_reconcile_time);
}

}  // namespace

json EncodeImpl(const TFJob& job) {
  json out = job.raw.is_object() ? job.raw : json::object();
  PutString(out, "apiVersion", job.api_version);
  PutString(out, "kind", job.kind);
  WithObject(out, "metadata", [&](json& m) { EncodeMeta(m, job.metadata); });
  WithObject(out, "spec", [&](json& s) { EncodeSpec(s, job.spec); });
  WithObject(out, "status", [&](json& s) { EncodeStatus(s, job.status); });
  return out;
}

}  // namespace tfjob::op::api::codec_internal
