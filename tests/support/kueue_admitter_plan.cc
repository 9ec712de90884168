#include "tests/support/kueue_admitter_plan.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

namespace tfjob::testing::kueue {
namespace {

using Resources = std::map<std::string, int64_t>;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

const json& Field(const json& j, const char* key) {
  static const json null;
  if (!j.is_object()) return null;
  auto it = j.find(key);
  return it == j.end() ? null : *it;
}
std::string Str(const json& j) { return j.is_string() ? j.get<std::string>() : ""; }
int64_t Int(const json& j, int64_t otherwise) { return j.is_number_integer() ? j.get<int64_t>() : otherwise; }
std::string Key(const json& obj) {
  const json& meta = Field(obj, "metadata");
  return Str(Field(meta, "namespace")) + "/" + Str(Field(meta, "name"));
}

// Kubernetes' PodRequests of one container: its requests, and a limit for
// a resource it requests nothing of (the API server's defaulting for pods,
// Kueue's UseLimitsAsMissingRequestsInPod for templates).
Status ContainerRequests(const json& c, Resources& out) {
  for (const char* part : {"limits", "requests"}) {
    const json& list = Field(Field(c, "resources"), part);
    if (list.is_null()) continue;
    if (!list.is_object()) return InvalidArgument(std::string("resources.") + part + " is not a map");
    for (auto it = list.begin(); it != list.end(); ++it) {
      ASSIGN_OR_RETURN(int64_t v, QuantityOf(it.key(), it.value()));
      out[it.key()] = v;  // requests, read second, win over limits
    }
  }
  return Status::Ok();
}

void AddTo(Resources& into, const Resources& add) {
  for (const auto& [r, v] : add) into[r] = (into[r] > kMax - v) ? kMax : into[r] + v;
}
void MaxInto(Resources& into, const Resources& other) {
  for (const auto& [r, v] : other) into[r] = std::max(into[r], v);
}

// resourcehelpers.PodRequests (k8s.io/component-helpers): the containers
// summed, restartable (sidecar) init containers added, each other init
// container (with the sidecars started before it) a floor, the overhead on
// top.
StatusOr<Resources> PodRequests(const json& spec) {
  Resources sum, init_floor, sidecars;
  for (const auto& c : Field(spec, "containers")) {
    Resources one;
    RETURN_IF_ERROR(ContainerRequests(c, one));
    AddTo(sum, one);
  }
  for (const auto& c : Field(spec, "initContainers")) {
    Resources one;
    RETURN_IF_ERROR(ContainerRequests(c, one));
    if (Str(Field(c, "restartPolicy")) == "Always") {
      AddTo(sum, one);
      AddTo(sidecars, one);
      one = sidecars;
    } else {
      AddTo(one, sidecars);
    }
    MaxInto(init_floor, one);
  }
  MaxInto(sum, init_floor);
  const json& overhead = Field(spec, "overhead");
  if (overhead.is_object()) {
    Resources extra;
    for (auto it = overhead.begin(); it != overhead.end(); ++it) {
      ASSIGN_OR_RETURN(extra[it.key()], QuantityOf(it.key(), it.value()));
    }
    AddTo(sum, extra);
  }
  return sum;
}

struct PodSet {
  std::string name;
  int64_t count = 1;
  Resources total;  // one pod's requests x count
};

StatusOr<std::vector<PodSet>> PodSets(const json& wl) {
  std::vector<PodSet> out;
  const json& sets = Field(Field(wl, "spec"), "podSets");
  if (!sets.is_array() || sets.empty()) return InvalidArgument("spec.podSets is missing or empty");
  for (const auto& ps : sets) {
    PodSet p{Str(Field(ps, "name")), Int(Field(ps, "count"), 1), {}};
    ASSIGN_OR_RETURN(Resources one, PodRequests(Field(Field(ps, "template"), "spec")));
    for (const auto& [r, v] : one) {
      if (p.count > 0 && v > kMax / p.count) return InvalidArgument("pod set " + p.name + ": " + r + " past int64");
      p.total[r] = v * p.count;
    }
    out.push_back(std::move(p));
  }
  return out;
}

struct Candidate {
  size_t index;  // into the pass's workloads
  int64_t priority;
  SystemTime since;
  std::string key;
  std::vector<PodSet> pod_sets;
};

// A ClusterQueue (v1beta1 spec) as the admitter reads it.
struct Queue {
  struct Group {
    std::vector<std::string> covered;
    std::vector<std::pair<std::string, Resources>> flavors;  // in order: name, nominal quota
  };
  std::string name;
  bool strict = false, stopped = false;
  std::string missing_flavor;  // a flavor that does not exist: the queue is inactive
  std::vector<Group> groups;
  std::map<std::string, Resources> usage;  // flavor -> resource -> reserved
  std::vector<Candidate> pending;

  int GroupOf(const std::string& resource) const {
    for (size_t g = 0; g < groups.size(); ++g) {
      const auto& c = groups[g].covered;
      if (std::find(c.begin(), c.end(), resource) != c.end()) return static_cast<int>(g);
    }
    return -1;
  }
};

StatusOr<Queue> ParseQueue(const json& cq, const std::set<std::string>& flavors) {
  const json& spec = Field(cq, "spec");
  Queue q;
  q.name = Str(Field(Field(cq, "metadata"), "name"));
  q.strict = Str(Field(spec, "queueingStrategy")) == "StrictFIFO";
  const std::string stop = Str(Field(spec, "stopPolicy"));
  q.stopped = !stop.empty() && stop != "None";
  for (const auto& rg : Field(spec, "resourceGroups")) {
    Queue::Group g;
    for (const auto& r : Field(rg, "coveredResources")) g.covered.push_back(Str(r));
    for (const auto& f : Field(rg, "flavors")) {
      const std::string name = Str(Field(f, "name"));
      if (!flavors.count(name) && q.missing_flavor.empty()) q.missing_flavor = name;
      Resources quota;
      for (const auto& r : Field(f, "resources")) {
        const std::string res = Str(Field(r, "name"));
        ASSIGN_OR_RETURN(quota[res], QuantityOf(res, Field(r, "nominalQuota")));
      }
      g.flavors.emplace_back(name, std::move(quota));
    }
    q.groups.push_back(std::move(g));
  }
  return q;
}

// prepareForEviction (pkg/workload/evict/evict.go): the Evicted condition,
// the cluster nomination and unhealthy nodes cleared, the admission checks
// back to Pending, preemption gates closed. The admission stays: the job's
// controller clears it once the job has stopped.
void PrepareForEviction(json& wl, const std::string& reason, const std::string& message, SystemTime now) {
  json& status = wl["status"];
  const int64_t gen = Int(Field(Field(wl, "metadata"), "generation"), 0);
  SetCondition(status["conditions"], "Evicted", "True", reason, message, gen, now);
  status.erase("clusterName");
  status.erase("nominatedClusterNames");
  status.erase("unhealthyNodes");
  if (status.contains("admissionChecks") && status["admissionChecks"].is_array()) {
    for (auto& check : status["admissionChecks"]) {
      const std::string state = Str(Field(check, "state"));
      if (state == "Pending" || !check.is_object()) continue;
      json reset{{"name", Field(check, "name")},
                 {"state", "Pending"},
                 {"message", "Reset to Pending after eviction. Previously: " + state},
                 {"lastTransitionTime", FormatRfc3339(now)}};
      if (check.contains("requeueAfterSeconds")) reset["requeueAfterSeconds"] = check["requeueAfterSeconds"];
      if (state == "Retry") reset["retryCount"] = Int(Field(check, "retryCount"), 0) + 1;
      check = reset;
    }
  }
  if (ConditionIs(wl, "BlockedOnPreemptionGates", "True")) {
    SetCondition(status["conditions"], "BlockedOnPreemptionGates", "False", reason, message, gen, now);
  }
  if (status.contains("preemptionGates") && status["preemptionGates"].is_array()) {
    for (auto& gate : status["preemptionGates"]) {
      if (!gate.is_object()) continue;
      gate["position"] = "Closed";
      gate["lastTransitionTime"] = FormatRfc3339(now);
    }
  }
}

// workload.UnsetQuotaReservationWithCondition, with SyncAdmittedCondition's
// reset of Admitted (v0.19.2's default feature gates).
void UnsetQuotaReservation(json& wl, const std::string& reason, const std::string& message, SystemTime now) {
  const int64_t gen = Int(Field(Field(wl, "metadata"), "generation"), 0);
  json& status = wl["status"];
  SetCondition(status["conditions"], "QuotaReserved", "False", reason, message, gen, now);
  status.erase("admission");
  if (ConditionIs(wl, "Admitted", "True")) {
    SetCondition(status["conditions"], "Admitted", "False", "NoReservation", "The workload has no reservation", gen,
                 now);
  }
}

// workload.SetQuotaReservation, then SyncAdmittedCondition (no admission
// checks: the scheduler's prepareWorkload syncs Admitted at once).
void SetQuotaReservation(json& wl, json admission, SystemTime now) {
  const int64_t gen = Int(Field(Field(wl, "metadata"), "generation"), 0);
  json& status = wl["status"];
  const std::string cq = Str(Field(admission, "clusterQueue"));
  status["admission"] = std::move(admission);
  json& conds = status["conditions"];
  SetCondition(conds, "QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue " + cq, gen, now);
  // resetActiveCondition: an earlier eviction, preemption or gate is over.
  for (const char* type : {"Evicted", "Preempted", "BlockedOnPreemptionGates"}) {
    const json& prev = FindCondition(wl, type);
    if (Str(Field(prev, "status")) != "True") continue;
    const std::string previously = "Previously: " + Str(Field(prev, "message"));
    SetCondition(conds, type, "False", "QuotaReserved", previously, gen, now);
  }
  SetCondition(conds, "Admitted", "True", "Admitted", "The workload is admitted", gen, now);
}

struct Assignment {
  bool fits = false;
  std::string message;  // why not, as flavorassigner's Assignment.Message
  json pod_set_assignments = json::array();
  std::map<std::string, Resources> usage;  // what it reserves, per flavor
};

// findFlavorForPodSets (flavorassigner.go) for one resource group, without
// cohorts: the first flavor in which every requested resource of the group
// fits under its nominal quota, counting what the workload's earlier pod
// sets took there (fitsResourceQuota's assumedUsage).
std::optional<std::string> FindFlavor(const Queue& q, const Queue::Group& g, const Resources& req,
                                      const std::map<std::string, Resources>& assumed,
                                      std::vector<std::string>& reasons) {
  auto at = [](const std::map<std::string, Resources>& m, const std::string& f, const std::string& r) -> int64_t {
    auto fi = m.find(f);
    if (fi == m.end()) return 0;
    auto ri = fi->second.find(r);
    return ri == fi->second.end() ? 0 : ri->second;
  };
  for (const auto& [flavor, quota] : g.flavors) {
    bool fits = true;
    for (const auto& [res, request] : req) {
      if (std::find(g.covered.begin(), g.covered.end(), res) == g.covered.end()) continue;
      const int64_t nominal = quota.count(res) ? quota.at(res) : 0;
      const int64_t available = std::max<int64_t>(0, nominal - at(q.usage, flavor, res));
      const int64_t before = at(assumed, flavor, res), value = before + request;
      if (value > nominal) {
        reasons.push_back("insufficient quota for " + res + " in flavor " + flavor +
                          ", previously considered podsets requests (" + FormatQuantity(res, before) +
                          ") + current podset request (" + FormatQuantity(res, request) + ") > maximum capacity (" +
                          FormatQuantity(res, nominal) + ")");
        fits = false;
      } else if (value > available) {
        reasons.push_back("insufficient unused quota for " + res + " in flavor " + flavor + ", " +
                          FormatQuantity(res, value - available) + " more needed");
        fits = false;
      }
    }
    if (fits) return flavor;
  }
  return std::nullopt;
}

// FlavorAssigner.assignFlavors: pod set by pod set, each resource group
// once; the "pods" resource counts pods when the queue covers it; a
// non-zero request of a resource no group covers cannot be admitted.
Assignment AssignFlavors(const Queue& q, const std::vector<PodSet>& pod_sets) {
  Assignment a;
  for (const auto& ps : pod_sets) {
    Resources req = ps.total;
    if (q.GroupOf("pods") >= 0) req["pods"] = ps.count;
    std::map<std::string, std::string> chosen;
    std::set<int> done;
    std::vector<std::string> reasons;
    for (const auto& [res, value] : req) {
      const int g = q.GroupOf(res);
      if (g < 0) {
        if (value == 0) continue;
        reasons = {"resource " + res + " unavailable in ClusterQueue"};
        break;
      }
      if (!done.insert(g).second) continue;
      reasons.clear();
      auto flavor = FindFlavor(q, q.groups[g], req, a.usage, reasons);
      if (!flavor) break;
      reasons.clear();
      for (const auto& r : q.groups[g].covered) {
        if (req.count(r)) chosen[r] = *flavor;
      }
    }
    if (!reasons.empty()) {
      std::sort(reasons.begin(), reasons.end());  // Status.Message sorts them
      std::string joined;
      for (const auto& r : reasons) joined += (joined.empty() ? "" : ", ") + r;
      a.message = "couldn't assign flavors to pod set " + ps.name + ": " + joined;
      return a;
    }
    json flavors = json::object(), usage = json::object();
    for (const auto& [res, flavor] : chosen) {
      flavors[res] = flavor;
      usage[res] = FormatQuantity(res, req[res]);
      a.usage[flavor][res] += req[res];
    }
    a.pod_set_assignments.push_back(
        {{"name", ps.name}, {"flavors", flavors}, {"resourceUsage", usage}, {"count", ps.count}});
  }
  a.fits = true;
  return a;
}

// The queue order (pkg/workload, Ordering.GetQueueOrderTimestamp): the
// creation time, or the eviction's for a PodsReadyTimeout or AdmissionCheck
// eviction.
SystemTime QueueTime(const json& wl) {
  const json& evicted = FindCondition(wl, "Evicted");
  const std::string reason = Str(Field(evicted, "reason"));
  std::string at = Str(Field(Field(wl, "metadata"), "creationTimestamp"));
  if (Str(Field(evicted, "status")) == "True" && (reason == "PodsReadyTimeout" || reason == "AdmissionCheck")) {
    at = Str(Field(evicted, "lastTransitionTime"));
  }
  return ParseRfc3339(at).value_or(SystemTime{});
}

// What one pass keeps of its objects.
struct Pass {
  std::map<std::string, Queue> queues;
  std::map<std::string, std::string> local_queues;  // "ns/name" -> ClusterQueue
  std::vector<json> workloads;                      // working copies, statuses changed in place
  Plan* plan;
  SystemTime now;
};

// An admitted workload's reservation, as its admission assigned it
// (workload.totalRequestsFromAdmission).
void CountUsage(Pass& p, const json& wl) {
  const json& admission = Field(Field(wl, "status"), "admission");
  auto q = p.queues.find(Str(Field(admission, "clusterQueue")));
  if (q == p.queues.end()) return;
  for (const auto& psa : Field(admission, "podSetAssignments")) {
    const json& flavors = Field(psa, "flavors");
    if (!flavors.is_object()) continue;
    for (auto it = flavors.begin(); it != flavors.end(); ++it) {
      auto v = QuantityOf(it.key(), Field(Field(psa, "resourceUsage"), it.key().c_str()));
      if (!v.ok()) {
        p.plan->skipped.push_back("workload " + Key(wl) + ": admission usage: " + v.status().message());
        continue;
      }
      q->second.usage[Str(it.value())][it.key()] += *v;
    }
  }
}

// The workload controller's part for one workload (workload_controller.go):
// deactivation evicts, reactivation requeues, a missing or stopped queue is
// Inadmissible; what is left pending joins its ClusterQueue's candidates.
void Classify(Pass& p, size_t index) {
  json& wl = p.workloads[index];
  const json& spec = Field(wl, "spec");
  const bool active = Field(spec, "active") != json(false);
  if (ConditionIs(wl, "Finished", "True")) return;
  const bool reserved = ConditionIs(wl, "QuotaReserved", "True");
  if (reserved) CountUsage(p, wl);
  if (!active) {
    if (!ConditionIs(wl, "Evicted", "True")) {
      PrepareForEviction(wl, "Deactivated", "The workload is deactivated", p.now);
    }
    return;
  }
  if (reserved) return;
  const json& requeued = FindCondition(wl, "Requeued");
  if (Str(Field(requeued, "status")) == "False" && Str(Field(requeued, "reason")) == "Deactivated") {
    SetCondition(wl["status"]["conditions"], "Requeued", "True", "Reactivated", "The workload was reactivated",
                 Int(Field(Field(wl, "metadata"), "generation"), 0), p.now);
    return;  // queued again on the next pass, as after Kueue's reconcile
  }
  const auto requeue_at = ParseRfc3339(Str(Field(Field(Field(wl, "status"), "requeueState"), "requeueAt")));
  if (requeue_at && *requeue_at > p.now) return;
  const std::string ns = Str(Field(Field(wl, "metadata"), "namespace"));
  const std::string lq = Str(Field(spec, "queueName"));
  auto l = p.local_queues.find(ns + "/" + lq);
  if (l == p.local_queues.end()) {
    UnsetQuotaReservation(wl, "Inadmissible", "LocalQueue " + lq + " is terminating or missing", p.now);
    return;
  }
  auto q = p.queues.find(l->second);
  if (q == p.queues.end()) {
    UnsetQuotaReservation(wl, "Inadmissible", "ClusterQueue " + l->second + " is terminating or missing", p.now);
    return;
  }
  if (q->second.stopped) {
    UnsetQuotaReservation(wl, "Inadmissible", "ClusterQueue " + l->second + " is stopped", p.now);
    return;
  }
  auto sets = PodSets(wl);
  if (!sets.ok()) {
    p.plan->skipped.push_back("workload " + Key(wl) + ": " + sets.status().message());
    return;
  }
  q->second.pending.push_back(
      {index, Int(Field(spec, "priority"), 0), QueueTime(wl), Key(wl), std::move(sets).value()});
}

// The scheduler's cycles over one ClusterQueue until nothing more fits:
// heads by priority, then queue time; StrictFIFO stops at the first that
// does not fit, BestEffortFIFO tries the ones behind it.
void Schedule(Pass& p, Queue& q) {
  std::sort(q.pending.begin(), q.pending.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(b.priority, a.since, a.key) < std::tie(a.priority, b.since, b.key);
  });
  for (const auto& c : q.pending) {
    json& wl = p.workloads[c.index];
    if (!q.missing_flavor.empty()) {
      UnsetQuotaReservation(wl, "Pending", "ClusterQueue " + q.name + " is inactive", p.now);
      continue;
    }
    Assignment a = AssignFlavors(q, c.pod_sets);
    if (!a.fits) {
      UnsetQuotaReservation(wl, "Pending", a.message, p.now);  // requeueAndUpdate
      if (q.strict) return;
      continue;
    }
    for (const auto& [flavor, used] : a.usage) AddTo(q.usage[flavor], used);
    SetQuotaReservation(wl, {{"clusterQueue", q.name}, {"podSetAssignments", a.pod_set_assignments}}, p.now);
  }
}

std::string Describe(const json& wl) {
  const json& status = Field(wl, "status");
  if (ConditionIs(wl, "QuotaReserved", "True") && !Field(status, "admission").is_null()) {
    return "admitted to ClusterQueue " + Str(Field(Field(status, "admission"), "clusterQueue"));
  }
  const json& evicted = FindCondition(wl, "Evicted");
  if (Str(Field(evicted, "status")) == "True") return "evicted: " + Str(Field(evicted, "reason"));
  return "pending: " + Str(Field(FindCondition(wl, "QuotaReserved"), "message"));
}

}  // namespace

bool SetCondition(json& conditions, const std::string& type, const std::string& status, const std::string& reason,
                  const std::string& message, int64_t generation, SystemTime now) {
  if (!conditions.is_array()) conditions = json::array();
  json wanted{{"type", type}, {"status", status}, {"reason", reason}, {"message", message}};
  if (generation > 0) wanted["observedGeneration"] = generation;
  for (auto& c : conditions) {
    if (Str(Field(c, "type")) != type) continue;
    json next = wanted;
    next["lastTransitionTime"] =
        Str(Field(c, "status")) == status ? Field(c, "lastTransitionTime") : json(FormatRfc3339(now));
    if (next == c) return false;
    c = std::move(next);
    return true;
  }
  wanted["lastTransitionTime"] = FormatRfc3339(now);
  conditions.push_back(std::move(wanted));
  return true;
}

const json& FindCondition(const json& workload, const std::string& type) {
  static const json null;
  for (const auto& c : Field(Field(workload, "status"), "conditions")) {
    if (Str(Field(c, "type")) == type) return c;
  }
  return null;
}

bool ConditionIs(const json& workload, const std::string& type, const std::string& status) {
  return Str(Field(FindCondition(workload, type), "status")) == status;
}

Plan PlanPass(const Observed& observed, SystemTime now) {
  Plan plan;
  Pass p{{}, {}, observed.workloads, &plan, now};
  std::set<std::string> flavors;
  for (const auto& f : observed.flavors) flavors.insert(Str(Field(Field(f, "metadata"), "name")));
  for (const auto& cq : observed.cluster_queues) {
    auto q = ParseQueue(cq, flavors);
    if (!q.ok()) {
      plan.skipped.push_back("ClusterQueue " + Str(Field(Field(cq, "metadata"), "name")) + ": " + q.status().message());
      continue;
    }
    p.queues.emplace(q->name, std::move(q).value());
  }
  for (const auto& lq : observed.local_queues) {
    p.local_queues[Key(lq)] = Str(Field(Field(lq, "spec"), "clusterQueue"));
  }
  for (size_t i = 0; i < p.workloads.size(); ++i) {
    try {
      Classify(p, i);
    } catch (const json::exception& e) {  // a field of an unexpected type
      plan.skipped.push_back("workload " + Key(p.workloads[i]) + ": " + e.what());
      p.workloads[i] = observed.workloads[i];
    }
  }
  for (auto& [name, q] : p.queues) Schedule(p, q);
  for (size_t i = 0; i < p.workloads.size(); ++i) {
    if (Field(p.workloads[i], "status") == Field(observed.workloads[i], "status")) continue;
    plan.writes.push_back({p.workloads[i], Key(p.workloads[i]) + " " + Describe(p.workloads[i])});
  }
  return plan;
}

StatusOr<json> EvictedWorkload(const json& workload, const std::string& reason, SystemTime now) {
  if (!ConditionIs(workload, "QuotaReserved", "True")) {
    return FailedPrecondition("workload " + Key(workload) + " has no quota reserved: nothing to evict");
  }
  if (ConditionIs(workload, "Evicted", "True")) return workload;  // IssuePreemptions: "Preemption ongoing"
  json wl = workload;
  const std::string cq = Str(Field(Field(Field(wl, "status"), "admission"), "clusterQueue"));
  std::string message = reason;
  if (reason == "Preempted") {
    // preemptionMessage with no preemptor: its fields read UNKNOWN, the
    // paths are the ClusterQueue's (no cohort: buildCQPath gives "/cq").
    message =
        "Preempted to accommodate a workload (UID: UNKNOWN, JobUID: UNKNOWN) due to prioritization in the "
        "ClusterQueue; preemptor path: /" +
        cq + "; preemptee path: /" + cq;
    SetCondition(wl["status"]["conditions"], "Preempted", "True", "InClusterQueue", message, 0, now);
  } else if (reason == "Deactivated") {
    message = "The workload is deactivated";
  } else if (reason == "ClusterQueueStopped") {
    message = "The ClusterQueue is stopped";
  } else if (reason == "LocalQueueStopped") {
    message = "The LocalQueue is stopped";
  }
  PrepareForEviction(wl, reason, message, now);
  return wl;
}

}  // namespace tfjob::testing::kueue
