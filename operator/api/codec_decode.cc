// Decode's body: JSON to TFJob, type-checking every field the model has (and
// the parts of the pod template the operator reads). codec.cc holds the public
// entry point and its exception guard; the readers are in codec_read.cc,
// Encode's overlay in codec_encode.cc.
#include "operator/api/codec_decode.h"

#include <cstddef>
#include <optional>
#include <string>
#include <utility>

#include "operator/api/codec_read.h"

namespace tfjob::op::api::codec_internal {

namespace {

StatusOr<OwnerReference> DecodeOwnerReference(const json& v, const std::string& path) {
  if (!v.is_object()) return TypeError(path, "an object");
  OwnerReference r;
  const Fields in(v, path);
  ASSIGN_OR_RETURN(auto api_version, in.Read("apiVersion", ReadString));
  ASSIGN_OR_RETURN(auto kind, in.Read("kind", ReadString));
  ASSIGN_OR_RETURN(auto name, in.Read("name", ReadString));
  ASSIGN_OR_RETURN(auto uid, in.Read("uid", ReadString));
  ASSIGN_OR_RETURN(r.controller, in.Read("controller", ReadBool));
  ASSIGN_OR_RETURN(r.block_owner_deletion, in.Read("blockOwnerDeletion", ReadBool));
  r.api_version = api_version.value_or("");
  r.kind = kind.value_or("");
  r.name = name.value_or("");
  r.uid = uid.value_or("");
  return r;
}

}  // namespace

StatusOr<std::vector<OwnerReference>> DecodeOwnerReferences(const json* v, const std::string& path) {
  std::vector<OwnerReference> out;
  if (!v) return out;
  if (!v->is_array()) return TypeError(path, "an array");
  for (size_t i = 0; i < v->size(); ++i) {
    ASSIGN_OR_RETURN(OwnerReference r, DecodeOwnerReference((*v)[i], IndexPath(path, i)));
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

StatusOr<ObjectMeta> DecodeMeta(const json* v, const std::string& path) {
  ObjectMeta m;
  if (!v) return m;
  if (!v->is_object()) return TypeError(path, "an object");
  const Fields in(*v, path);
  ASSIGN_OR_RETURN(auto name, in.Read("name", ReadString));
  ASSIGN_OR_RETURN(auto ns, in.Read("namespace", ReadString));
  ASSIGN_OR_RETURN(auto uid, in.Read("uid", ReadString));
  ASSIGN_OR_RETURN(auto rv, in.Read("resourceVersion", ReadString));
  ASSIGN_OR_RETURN(m.generation, in.Read("generation", ReadInt64));
  ASSIGN_OR_RETURN(m.labels, in.Read("labels", ReadStringMap));
  ASSIGN_OR_RETURN(m.annotations, in.Read("annotations", ReadStringMap));
  ASSIGN_OR_RETURN(auto created, in.Read("creationTimestamp", ReadString));
  ASSIGN_OR_RETURN(auto deleted, in.Read("deletionTimestamp", ReadString));
  ASSIGN_OR_RETURN(m.owner_references, in.Read("ownerReferences", DecodeOwnerReferences));
  m.name = name.value_or("");
  m.namespace_ = ns.value_or("");
  m.uid = uid.value_or("");
  m.resource_version = rv.value_or("");
  m.creation_timestamp = created.value_or("");
  m.deletion_timestamp = deleted.value_or("");
  return m;
}

// Type-checks the parts of a pod template the operator reads or edits.
Status CheckTemplate(const json& t, const std::string& path) {
  if (!t.is_object()) return TypeError(path, "an object");
  if (const json* meta = Field(t, "metadata")) {
    const std::string mp = ChildPath(path, "metadata");
    RETURN_IF_ERROR(ExpectObjectOrNull(meta, mp));
    RETURN_IF_ERROR(Fields(*meta, mp).Read("labels", ReadStringMap).status());
    RETURN_IF_ERROR(Fields(*meta, mp).Read("annotations", ReadStringMap).status());
  }
  const json* spec = Field(t, "spec");
  if (!spec) return Status::Ok();
  const std::string sp = ChildPath(path, "spec");
  RETURN_IF_ERROR(ExpectObjectOrNull(spec, sp));
  RETURN_IF_ERROR(Fields(*spec, sp).Read("restartPolicy", ReadString).status());
  const json* containers = Field(*spec, "containers");
  const std::string cp = ChildPath(sp, "containers");
  RETURN_IF_ERROR(ExpectArrayOrNull(containers, cp));
  if (!containers) return Status::Ok();
  for (size_t i = 0; i < containers->size(); ++i) {
    const json& c = (*containers)[i];
    const std::string p = IndexPath(cp, i);
    if (!c.is_object()) return TypeError(p, "an object");
    RETURN_IF_ERROR(Fields(c, p).Read("name", ReadString).status());
    RETURN_IF_ERROR(Fields(c, p).Read("image", ReadString).status());
    if (const json* ports = Field(c, "ports")) {
      const std::string pp = ChildPath(p, "ports");
      RETURN_IF_ERROR(ExpectArrayOrNull(ports, pp));
      for (size_t j = 0; j < ports->size(); ++j) {
        const json& port = (*ports)[j];
        const std::string q = IndexPath(pp, j);
        if (!port.is_object()) return TypeError(q, "an object");
        RETURN_IF_ERROR(Fields(port, q).Read("name", ReadString).status());
        RETURN_IF_ERROR(Fields(port, q).Read("containerPort", ReadInt32).status());
      }
    }
    if (const json* env = Field(c, "env")) {
      const std::string ep = ChildPath(p, "env");
      RETURN_IF_ERROR(ExpectArrayOrNull(env, ep));
      for (size_t j = 0; j < env->size(); ++j) {
        const json& e = (*env)[j];
        const std::string q = IndexPath(ep, j);
        if (!e.is_object()) return TypeError(q, "an object");
        RETURN_IF_ERROR(Fields(e, q).Read("name", ReadString).status());
        RETURN_IF_ERROR(Fields(e, q).Read("value", ReadString).status());
      }
    }
  }
  return Status::Ok();
}

// `v` is nullptr for an explicit null spec, which Kubeflow reads as a spec
// with nothing set (and its webhook then rejects for lack of containers).
StatusOr<ReplicaSpec> DecodeReplicaSpec(const std::string& key, const json* v, const std::string& path) {
  ReplicaSpec r;
  r.key = key;
  r.source_key = key;
  r.type = ParseReplicaType(key, &r.master_alias);
  if (!v) return r;
  if (!v->is_object()) return TypeError(path, "an object");
  const Fields in(*v, path);
  ASSIGN_OR_RETURN(r.replicas, in.Read("replicas", ReadInt32));
  ASSIGN_OR_RETURN(auto restart, in.Read("restartPolicy", ReadString));
  r.restart_policy = restart.value_or("");
  if (const json* t = Field(*v, "template")) {
    RETURN_IF_ERROR(CheckTemplate(*t, ChildPath(path, "template")));
    r.template_json = *t;
  }
  return r;
}

StatusOr<RunPolicy> DecodeRunPolicy(const json* v, const std::string& path) {
  RunPolicy p;
  if (!v) return p;
  if (!v->is_object()) return TypeError(path, "an object");
  const Fields in(*v, path);
  ASSIGN_OR_RETURN(p.clean_pod_policy, in.Read("cleanPodPolicy", ReadString));
  ASSIGN_OR_RETURN(p.ttl_seconds_after_finished, in.Read("ttlSecondsAfterFinished", ReadInt32));
  ASSIGN_OR_RETURN(p.active_deadline_seconds, in.Read("activeDeadlineSeconds", ReadInt64));
  ASSIGN_OR_RETURN(p.backoff_limit, in.Read("backoffLimit", ReadInt32));
  ASSIGN_OR_RETURN(p.scheduling_policy, in.Read("schedulingPolicy", ReadObject));
  ASSIGN_OR_RETURN(p.suspend, in.Read("suspend", ReadBool));
  ASSIGN_OR_RETURN(p.managed_by, in.Read("managedBy", ReadString));
  return p;
}

StatusOr<TFJobSpec> DecodeSpec(const json* v, const std::string& path) {
  TFJobSpec s;
  if (!v) return s;
  if (!v->is_object()) return TypeError(path, "an object");
  const Fields in(*v, path);
  ASSIGN_OR_RETURN(s.run_policy, in.Read("runPolicy", DecodeRunPolicy));
  ASSIGN_OR_RETURN(s.success_policy, in.Read("successPolicy", ReadString));
  ASSIGN_OR_RETURN(s.enable_dynamic_worker, in.Read("enableDynamicWorker", ReadBool));
  const std::string rp = ChildPath(path, "tfReplicaSpecs");
  if (const json* specs = Field(*v, "tfReplicaSpecs")) {
    if (!specs->is_object()) return TypeError(rp, "an object");
    s.has_replica_specs = true;
    for (auto it = specs->begin(); it != specs->end(); ++it) {
      const json* value = it->is_null() ? nullptr : &*it;
      ASSIGN_OR_RETURN(ReplicaSpec r, DecodeReplicaSpec(it.key(), value, ChildPath(rp, it.key())));
      s.replica_specs.push_back(std::move(r));
    }
  }
  return s;
}

StatusOr<JobCondition> DecodeCondition(const json& v, const std::string& path) {
  if (!v.is_object()) return TypeError(path, "an object");
  JobCondition c;
  const Fields in(v, path);
  ASSIGN_OR_RETURN(auto type, in.Read("type", ReadString));
  ASSIGN_OR_RETURN(auto status, in.Read("status", ReadString));
  ASSIGN_OR_RETURN(auto reason, in.Read("reason", ReadString));
  ASSIGN_OR_RETURN(auto message, in.Read("message", ReadString));
  ASSIGN_OR_RETURN(auto updated, in.Read("lastUpdateTime", ReadString));
  ASSIGN_OR_RETURN(auto transitioned, in.Read("lastTransitionTime", ReadString));
  c.type = type.value_or("");
  c.status = status.value_or("");
  c.reason = reason.value_or("");
  c.message = message.value_or("");
  c.last_update_time = updated.value_or("");
  c.last_transition_time = transitioned.value_or("");
  return c;
}

}  // namespace

StatusOr<std::vector<JobCondition>> DecodeConditions(const json* v, const std::string& path) {
  std::vector<JobCondition> out;
  if (!v) return out;
  if (!v->is_array()) return TypeError(path, "an array");
  for (size_t i = 0; i < v->size(); ++i) {
    ASSIGN_OR_RETURN(JobCondition c, DecodeCondition((*v)[i], IndexPath(path, i)));
    out.push_back(std::move(c));
  }
  return out;
}

namespace {

StatusOr<ReplicaStatus> DecodeReplicaStatus(const json* v, const std::string& path) {
  ReplicaStatus r;
  if (!v) return r;
  if (!v->is_object()) return TypeError(path, "an object");
  const Fields in(*v, path);
  ASSIGN_OR_RETURN(auto active, in.Read("active", ReadInt32));
  ASSIGN_OR_RETURN(auto succeeded, in.Read("succeeded", ReadInt32));
  ASSIGN_OR_RETURN(auto failed, in.Read("failed", ReadInt32));
  ASSIGN_OR_RETURN(auto restarts, in.Read("restarts", ReadInt32));
  ASSIGN_OR_RETURN(auto selector, in.Read("selector", ReadString));
  ASSIGN_OR_RETURN(r.label_selector, in.Read("labelSelector", ReadObject));
  r.active = active.value_or(0);
  r.succeeded = succeeded.value_or(0);
  r.failed = failed.value_or(0);
  r.restarts = restarts.value_or(0);
  r.selector = selector.value_or("");
  return r;
}

}  // namespace

StatusOr<std::map<std::string, ReplicaStatus>> DecodeReplicaStatuses(const json* v, const std::string& path) {
  std::map<std::string, ReplicaStatus> out;
  if (!v) return out;
  if (!v->is_object()) return TypeError(path, "an object");
  for (auto it = v->begin(); it != v->end(); ++it) {
    const json* value = it->is_null() ? nullptr : &*it;
    ASSIGN_OR_RETURN(ReplicaStatus r, DecodeReplicaStatus(value, ChildPath(path, it.key())));
    out.emplace(it.key(), std::move(r));
  }
  return out;
}

namespace {

StatusOr<JobStatus> DecodeStatus(const json* v, const std::string& path) {
  JobStatus s;
  if (!v) return s;
  if (!v->is_object()) return TypeError(path, "an object");
  const Fields in(*v, path);
  ASSIGN_OR_RETURN(s.conditions, in.Read("conditions", DecodeConditions));
  ASSIGN_OR_RETURN(s.replica_statuses, in.Read("replicaStatuses", DecodeReplicaStatuses));
  ASSIGN_OR_RETURN(auto start, in.Read("startTime", ReadString));
  ASSIGN_OR_RETURN(auto completion, in.Read("completionTime", ReadString));
  ASSIGN_OR_RETURN(auto reconcile, in.Read("lastReconcileTime", ReadString));
  s.start_time = start.value_or("");
  s.completion_time = completion.value_or("");
  s.last_reconcile_time = reconcile.value_or("");
  return s;
}

}  // namespace

StatusOr<TFJob> DecodeImpl(const json& doc) {
  if (!doc.is_object()) return InvalidArgument("expected a TFJob object");
  TFJob job;
  const Fields in(doc, "");  // top-level paths are the bare keys
  ASSIGN_OR_RETURN(auto api_version, in.Read("apiVersion", ReadString));
  ASSIGN_OR_RETURN(auto kind, in.Read("kind", ReadString));
  job.api_version = api_version.value_or("");
  job.kind = kind.value_or("");
  // Absent type meta is allowed (list items, documents built in code); a
  // different kind or version is another resource and must not be read as a
  // TFJob.
  if (!job.kind.empty() && job.kind != kKind) {
    return InvalidArgument("kind: expected " + std::string(kKind) + ", got " + Quote(job.kind));
  }
  if (!job.api_version.empty() && job.api_version != kApiVersion) {
    return InvalidArgument("apiVersion: expected " + std::string(kApiVersion) + ", got " + Quote(job.api_version));
  }
  ASSIGN_OR_RETURN(job.metadata, in.Read("metadata", DecodeMeta));
  ASSIGN_OR_RETURN(job.spec, in.Read("spec", DecodeSpec));
  ASSIGN_OR_RETURN(job.status, in.Read("status", DecodeStatus));
  job.raw = doc;
  return job;
}

}  // namespace tfjob::op::api::codec_internal
