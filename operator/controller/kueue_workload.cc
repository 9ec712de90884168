// Kueue's job framework for a TFJob, as Kueue v0.19.2 runs it
// (pkg/controller/jobframework/reconciler.go, ReconcileGenericJob), in the
// planner's terms: kueue_workload.h.
#include "operator/controller/kueue_workload.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <vector>

#include "operator/api/defaults.h"
#include "operator/api/names.h"
#include "operator/controller/builders.h"
#include "operator/controller/conditions.h"
#include "operator/controller/planner_pass.h"
#include "operator/controller/views.h"

namespace tfjob::op::controller {

namespace {

// GenerateWorkloadNamePrefix's limit: 253 less the hash and its dash.
constexpr size_t kMaxPrefix = 253 - 1 - 5;

std::string Sha1Hex(const std::string& in) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(in.data(), in.size(), md, &n, EVP_sha1(), nullptr) != 1) return "00000";
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

}  // namespace

std::string WorkloadName(const api::TFJob& job) {
  std::string prefix = "tfjob-" + job.metadata.name;
  if (prefix.size() > kMaxPrefix) prefix.resize(kMaxPrefix);
  const std::string hash = Sha1Hex("TFJob\nkubeflow.org\n" + job.metadata.name + "\n" + job.metadata.uid);
  return prefix + "-" + hash.substr(0, 5);
}

namespace internal {
namespace {

using json = nlohmann::json;

// Kueue's condition and reason names (apis/kueue/v1beta1/workload_types.go).
constexpr const char* kQuotaReserved = "QuotaReserved";
constexpr const char* kAdmitted = "Admitted";
constexpr const char* kEvicted = "Evicted";
constexpr const char* kRequeued = "Requeued";
constexpr const char* kPodsReady = "PodsReady";
constexpr const char* kFinished = "Finished";

const json* FindWlCondition(const json& conditions, std::string_view type) {
  if (!conditions.is_array()) return nullptr;
  for (const auto& c : conditions) {
    if (Str(c, "type") == type) return &c;
  }
  return nullptr;
}

bool WlTrue(const json& conditions, std::string_view type) {
  const json* c = FindWlCondition(conditions, type);
  return c && Str(*c, "status") == "True";
}

// apimeta.SetStatusCondition: the condition replaced in place; its
// lastTransitionTime kept unless the status changed. True when anything
// changed.
bool SetWlCondition(Pass& p, std::string_view type, bool status, const std::string& reason,
                    const std::string& message) {
  json& conds = p.wl_conditions;
  if (!conds.is_array()) conds = json::array();
  const std::string s = status ? "True" : "False";
  const auto generation = Field(Field(p.kueue.workload->object, "metadata"), "generation");
  for (auto& c : conds) {
    if (Str(c, "type") != type) continue;
    if (Str(c, "status") == s && Str(c, "reason") == reason && Str(c, "message") == message) return false;
    if (Str(c, "status") != s) c["lastTransitionTime"] = p.now;
    c["status"] = s;
    c["reason"] = reason;
    c["message"] = message;
    if (generation.is_number_integer()) c["observedGeneration"] = generation;
    p.wl_dirty = true;
    return true;
  }
  json c{{"type", std::string(type)},
         {"status", s},
         {"reason", reason},
         {"message", message},
         {"lastTransitionTime", p.now}};
  if (generation.is_number_integer()) c["observedGeneration"] = generation;
  conds.push_back(std::move(c));
  p.wl_dirty = true;
  return true;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// KubeflowJob.OrderedReplicaTypes: Chief, Master, PS, Worker, Evaluator,
// those the job has.
std::vector<const api::ReplicaSpec*> KueueOrder(const api::TFJob& job) {
  std::vector<const api::ReplicaSpec*> out;
  for (const char* key : {"Chief", "Master", "PS", "Worker", "Evaluator"}) {
    for (const auto& spec : job.spec.replica_specs) {
      if (spec.type && api::CanonicalKey(spec) == key) out.push_back(&spec);
    }
  }
  return out;
}

// KubeflowJob.PriorityClass: schedulingPolicy.priorityClass, else the first
// template's priorityClassName in Kueue's order.
std::string PriorityClass(const api::TFJob& job) {
  const std::string policy = Str(job.spec.run_policy.scheduling_policy, "priorityClass");
  if (!policy.empty()) return policy;
  for (const auto* spec : KueueOrder(job)) {
    const std::string name = Str(Field(spec->template_json, "spec"), "priorityClassName");
    if (!name.empty()) return name;
  }
  return "";
}

json PodSets(const api::TFJob& job) {
  json sets = json::array();
  for (const auto* spec : KueueOrder(job)) {
    json tmpl = spec->template_json.is_object() ? spec->template_json : json::object();
    if (!tmpl.contains("spec")) tmpl["spec"] = {{"containers", json::array()}};
    sets.push_back({{"name", Lower(api::CanonicalKey(*spec))},
                    {"count", api::ReplicasOrDefault(*spec)},
                    {"template", std::move(tmpl)}});
  }
  return sets;
}

// What of a container Kueue's comparePodTemplate sees that matters here,
// leaving out what the API server fills in (a port's protocol, ...).
json ContainersKey(const json& containers) {
  json out = json::array();
  if (!containers.is_array()) return out;
  for (const auto& c : containers) {
    out.push_back({Field(c, "name"), Field(c, "image"), Field(c, "command"), Field(c, "args"),
                   Field(Field(c, "resources"), "requests"), Field(Field(c, "resources"), "limits")});
  }
  return out;
}

// equality.ComparePodSetSlices (pkg/util/equality/podset.go): names,
// counts, tolerations and (init) containers.
bool SamePodSets(const json& a, const json& b) {
  if (!a.is_array() || !b.is_array() || a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const json& sa = Field(a[i], "template");
    const json& sb = Field(b[i], "template");
    auto tolerations = [](const json& t) {
      const json& v = Field(Field(t, "spec"), "tolerations");
      return v.is_null() ? json::array() : v;
    };
    if (Str(a[i], "name") != Str(b[i], "name") || Field(a[i], "count") != Field(b[i], "count") ||
        tolerations(sa) != tolerations(sb) ||
        ContainersKey(Field(Field(sa, "spec"), "containers")) !=
            ContainersKey(Field(Field(sb, "spec"), "containers")) ||
        ContainersKey(Field(Field(sa, "spec"), "initContainers")) !=
            ContainersKey(Field(Field(sb, "spec"), "initContainers"))) {
      return false;
    }
  }
  return true;
}

void SetSuspend(Pass& p, bool suspend) {
  p.b.plan.actions.push_back(
      {Action::Kind::kPatchJobSpec, p.name, {{"spec", {{"runPolicy", {{"suspend", suspend}}}}}}});
}

// stopJob: the job suspended (its pods then go, as a suspended job's do),
// with Kueue's Stopped event.
void StopJob(Pass& p, const std::string& message) {
  p.kueue_hold = true;
  if (p.job.spec.run_policy.suspend.value_or(false)) return;
  SetSuspend(p, true);
  p.b.Event("Normal", "Stopped", message);
}

std::string WorkloadKey(const Pass& p) { return p.job.metadata.namespace_ + "/" + p.kueue.workload->name; }

// getPodSetsInfoFromStatus: per pod set, the assigned flavors' node labels
// and tolerations (podset.FromAssignment), the podset label, and the
// admission checks' podSetUpdates (podset.FromUpdate). False when a flavor
// is not (yet) in the cache.
bool Placement(Pass& p, std::map<std::string, json>& out, std::string* missing) {
  const json& status = Field(p.kueue.workload->object, "status");
  for (const auto& a : Field(Field(status, "admission"), "podSetAssignments")) {
    const std::string name = Str(a, "name");
    json info{{"metadata", {{"labels", {{std::string(kKueuePodSetLabel), name}}}}},
              {"spec", {{"nodeSelector", json::object()}, {"tolerations", json::array()}}}};
    std::vector<std::string> seen;
    const json& flavors = Field(a, "flavors");
    if (flavors.is_object()) {
      for (auto it = flavors.begin(); it != flavors.end(); ++it) {
        if (!it->is_string()) continue;
        const std::string flavor = it->get<std::string>();
        if (std::find(seen.begin(), seen.end(), flavor) != seen.end()) continue;
        seen.push_back(flavor);
        auto f = p.kueue.flavors.find(flavor);
        if (f == p.kueue.flavors.end()) {
          *missing = flavor;
          return false;
        }
        const json& labels = Field(f->second, "nodeLabels");
        if (labels.is_object()) info["spec"]["nodeSelector"].update(labels);
        const json& tolerations = Field(f->second, "tolerations");
        if (tolerations.is_array()) {
          for (const auto& t : tolerations) info["spec"]["tolerations"].push_back(t);
        }
      }
    }
    for (const auto& check : Field(status, "admissionChecks")) {
      for (const auto& u : Field(check, "podSetUpdates")) {
        if (Str(u, "name") != name) continue;
        json update{{"metadata", {{"labels", Field(u, "labels")}, {"annotations", Field(u, "annotations")}}},
                    {"spec", {{"nodeSelector", Field(u, "nodeSelector")}, {"tolerations", Field(u, "tolerations")}}}};
        json pod_like = info;
        ApplyPlacement(pod_like, update);
        info = std::move(pod_like);
        break;
      }
    }
    out[name] = std::move(info);
  }
  return true;
}

// The Workload is gone or not made yet (handleJobWithNoWorkload): the job
// is suspended on first sight (the operator is the only one making its
// pods, so no pod exists before admission even if that write failed) and,
// once none of its pods is left, the Workload is created.
void NoWorkload(Pass& p) {
  p.kueue_hold = true;
  if (!p.job.spec.run_policy.suspend.value_or(false)) SetSuspend(p, true);
  if (!p.pods.empty()) return;
  // The executor says CreatedWorkload once it is made.
  p.b.plan.actions.push_back({Action::Kind::kCreateWorkload, WorkloadName(p.job), BuildWorkload(p.job)});
}

// "handle eviction": stop the job, and once it has no pod left, clear the
// Workload's admission as Kueue's reconciler does (SetRequeuedCondition,
// UnsetQuotaReservationWithCondition with the Pending reason: the
// UnadmittedWorkloadsObservability gate is off by default in v0.19, and
// SyncAdmittedCondition's Admitted=False).
void Evicted(Pass& p, const json& evicted) {
  const std::string reason = Str(evicted, "reason"), message = Str(evicted, "message");
  StopJob(p, message);
  const json& status = Field(p.kueue.workload->object, "status");
  if (!WlTrue(p.wl_conditions, kQuotaReserved) || !p.pods.empty()) return;
  const bool requeue = reason == "Preempted" || reason == "NodeFailures";
  SetWlCondition(p, kRequeued, requeue, reason, message);
  SetWlCondition(p, kQuotaReserved, false, "Pending", message);
  bool checks_ready = true;
  for (const auto& c : Field(status, "admissionChecks")) checks_ready &= Str(c, "state") == "Ready";
  if (checks_ready) {
    SetWlCondition(p, kAdmitted, false, "NoReservation", "The workload has no reservation");
  } else {
    SetWlCondition(p, kAdmitted, false, "NoReservationUnsatisfiedChecks",
                   "The workload has no reservation and not all checks ready");
  }
  p.wl_clear_admission = true;
}

}  // namespace

bool KueueManaged(const Pass& p) {
  if (p.options.kueue != kKueueExternal) return false;
  auto it = p.job.metadata.labels.find(std::string(kKueueQueueLabel));
  return it != p.job.metadata.labels.end() && !it->second.empty();
}

json BuildWorkload(const api::TFJob& job) {
  json labels{{std::string(kKueueJobUidLabel), job.metadata.uid}, {std::string(api::kJobNameLabel), job.metadata.name}};
  json annotations = json::object();
  for (const auto& [k, v] : job.metadata.annotations) {
    if (k.rfind(kKueueProvReqAnnotationPrefix, 0) == 0) annotations[k] = v;
  }
  json meta{{"name", WorkloadName(job)},
            {"namespace", job.metadata.namespace_},
            {"labels", labels},
            {"ownerReferences", json::array({OwnerRef(job)})}};
  if (!annotations.empty()) meta["annotations"] = annotations;
  json spec{{"queueName", job.metadata.labels.count(std::string(kKueueQueueLabel))
                              ? job.metadata.labels.at(std::string(kKueueQueueLabel))
                              : ""},
            {"podSets", PodSets(job)}};
  // ExtractPriority: a PriorityClass's name here, its value filled in by the
  // executor (a lookup the planner cannot make); no class: Kueue's default 0.
  const std::string priority_class = PriorityClass(job);
  if (!priority_class.empty()) {
    spec["priorityClassName"] = priority_class;
    spec["priorityClassSource"] = "scheduling.k8s.io/priorityclass";
  } else {
    spec["priority"] = 0;
  }
  return {{"apiVersion", std::string(kKueueGroup) + "/" + std::string(kKueueWorkloadVersion)},
          {"kind", "Workload"},
          {"metadata", meta},
          {"spec", spec}};
}

void ApplyPlacement(json& pod, const json& placement) {
  for (const auto& [section, key] :
       {std::pair{"metadata", "labels"}, std::pair{"metadata", "annotations"}, std::pair{"spec", "nodeSelector"}}) {
    const json& from = Field(Field(placement, section), key);
    if (!from.is_object() || from.empty()) continue;
    json& into = pod[section][key];
    if (!into.is_object()) into = json::object();
    into.update(from);
  }
  const json& tolerations = Field(Field(placement, "spec"), "tolerations");
  if (!tolerations.is_array() || tolerations.empty()) return;
  json& into = pod["spec"]["tolerations"];
  if (!into.is_array()) into = json::array();
  for (const auto& t : tolerations) {
    if (std::find(into.begin(), into.end(), t) == into.end()) into.push_back(t);
  }
}

void PlanKueue(Pass& p) {
  if (!p.kueue.workload) return NoWorkload(p);
  const WorkloadView& wl = *p.kueue.workload;
  p.wl_conditions = Field(Field(wl.object, "status"), "conditions");
  if (!p.wl_conditions.is_array()) p.wl_conditions = json::array();
  if (WlTrue(p.wl_conditions, kFinished)) {
    p.kueue_hold = true;  // Kueue's finished Workload admits nothing more
    return;
  }
  if (wl.deleting) return StopJob(p, "Workload is deleted");
  // ensureOneWorkload: a Workload that no longer matches the job is deleted
  // (unless it holds quota) and made again.
  if (!WlTrue(p.wl_conditions, kQuotaReserved) &&
      !SamePodSets(PodSets(p.job), Field(Field(wl.object, "spec"), "podSets"))) {
    p.kueue_hold = true;
    if (!p.job.spec.run_policy.suspend.value_or(false)) SetSuspend(p, true);
    p.b.plan.actions.push_back({Action::Kind::kDeleteWorkload, wl.name, nullptr});  // DeletedWorkload: the executor's
    return;
  }
  if (const json* ev = FindWlCondition(p.wl_conditions, kEvicted); ev && Str(*ev, "status") == "True") {
    return Evicted(p, *ev);
  }
  // Deactivated (spec.active false): Kueue's workload controller evicts it;
  // its pods stop now.
  if (Field(Field(wl.object, "spec"), "active") == json(false)) return StopJob(p, "The workload is deactivated");
  const bool admitted = WlTrue(p.wl_conditions, kAdmitted);
  const bool suspended = p.job.spec.run_policy.suspend.value_or(false);
  if (!admitted) {
    if (!suspended) StopJob(p, "Not admitted by cluster queue");
    p.kueue_hold = true;
    return;
  }
  std::string missing;
  std::map<std::string, json> placement;
  if (!Placement(p, placement, &missing)) {
    // podset.FromAssignment's lookup failed: retried, nothing started.
    p.kueue_hold = true;
    p.b.Event("Warning", "FlavorNotFound",
              "ResourceFlavor " + missing + " of Workload " + WorkloadKey(p) + " is not found; the job waits for it");
    p.b.plan.requeue_after = std::chrono::seconds(5);
    return;
  }
  if (suspended) {
    // startJob: resumed; the pods come with the next pass, placed.
    SetSuspend(p, false);
    p.b.Event("Normal", "Started",
              "Admitted by clusterQueue " + Str(Field(Field(wl.object, "status"), "admission"), "clusterQueue"));
    return;
  }
  p.kueue_placement = std::move(placement);
}

void FinishKueue(Pass& p) {
  Plan& plan = p.b.plan;
  if (!p.kueue.workload || p.kueue.workload->deleting) return;
  const WorkloadView& wl = *p.kueue.workload;
  if (p.wl_conditions.is_null()) p.wl_conditions = Field(Field(wl.object, "status"), "conditions");
  if (!p.wl_conditions.is_array()) p.wl_conditions = json::array();
  if (std::any_of(plan.actions.begin(), plan.actions.end(),
                  [](const Action& a) { return a.kind == Action::Kind::kDeleteWorkload; })) {
    return;
  }
  const bool finished_before = WlTrue(p.wl_conditions, kFinished);
  const api::JobCondition* done = nullptr;
  for (const auto& c : plan.status.conditions) {
    if ((c.type == api::kConditionSucceeded || c.type == api::kConditionFailed) && c.status == api::kConditionTrue) {
      done = &c;
      break;
    }
  }
  if (done && !finished_before) {
    // workloadfinish.Finish with the job's message.
    SetWlCondition(p, kFinished, true, done->type == api::kConditionSucceeded ? "Succeeded" : "Failed", done->message);
    p.b.Event("Normal", "FinishedWorkload", "Workload '" + WorkloadKey(p) + "' is declared finished");
  } else if (!done && !finished_before && !p.wl_clear_admission) {
    // generatePodsReadyCondition, from the job's Running condition.
    const json* ready = FindWlCondition(p.wl_conditions, kPodsReady);
    const std::string not_ready = "Not all pods are ready or succeeded";
    const std::string recovering = "At least one pod has failed, waiting for recovery";
    if (!WlTrue(p.wl_conditions, kAdmitted)) {
      SetWlCondition(p, kPodsReady, false, "WaitForStart", not_ready);
    } else if (IsTrue(plan.status, api::kConditionRunning)) {
      const std::string was = ready ? Str(*ready, "reason") : "";
      SetWlCondition(p, kPodsReady, true, was == "WaitForRecovery" || was == "Recovered" ? "Recovered" : "Started",
                     "All pods reached readiness and the workload is running");
    } else if (ready && (Str(*ready, "status") == "True" || Str(*ready, "reason") == "WaitForRecovery")) {
      SetWlCondition(p, kPodsReady, false, "WaitForRecovery", recovering);
    } else {
      SetWlCondition(p, kPodsReady, false, "WaitForStart", not_ready);
    }
  }
  if (!p.wl_dirty) return;
  // One merge patch of the status subresource, on the observed
  // resourceVersion: a write of Kueue's in between makes it a 409, and the
  // requeue plans again from the newer Workload.
  json status{{"conditions", p.wl_conditions}};
  if (p.wl_clear_admission) status["admission"] = nullptr;
  const json rv = Field(Field(wl.object, "metadata"), "resourceVersion");
  json patch{{"status", status}};
  if (rv.is_string()) patch["metadata"] = {{"resourceVersion", rv}};
  plan.actions.push_back({Action::Kind::kPatchWorkloadStatus, wl.name, std::move(patch)});
}

}  // namespace internal
}  // namespace tfjob::op::controller
