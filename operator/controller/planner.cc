#include "operator/controller/planner.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>
#include <ctime>
#include <set>

#include "common/pki.h"
#include "common/time.h"
#include "operator/api/defaults.h"
#include "operator/api/names.h"
#include "operator/api/validation.h"

namespace tfjob::op::controller {

using api::JobCondition;
using api::JobStatus;
using api::ReplicaSpec;
using api::ReplicaType;
using api::TFJob;

namespace {

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

}  // namespace

PodView ViewPod(const nlohmann::json& pod) {
  PodView v;
  const auto& meta = Field(pod, "metadata");
  v.name = Str(meta, "name");
  v.uid = Str(meta, "uid");
  v.labels = StringMap(Field(meta, "labels"));
  v.deleting = !Str(meta, "deletionTimestamp").empty();
  v.controller_uid = ControllerUid(meta);
  const auto& containers_spec = Field(Field(pod, "spec"), "containers");
  if (containers_spec.is_array()) {
    for (const auto& c : containers_spec) {
      if (Str(c, "name") != api::kDefaultContainerName || !Field(c, "env").is_array()) continue;
      for (const auto& e : Field(c, "env")) v.task_token = v.task_token || Str(e, "name") == api::kAuthTokenEnv;
    }
  }
  const auto& status = Field(pod, "status");
  v.phase = Str(status, "phase");
  const auto& statuses = Field(status, "containerStatuses");
  if (statuses.is_array()) {
    for (const auto& cs : statuses) {
      const auto& rc = Field(cs, "restartCount");
      if (rc.is_number_integer()) v.restart_count += rc.get<int32_t>();
      if (Str(cs, "name") != api::kDefaultContainerName) continue;
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
        v.abnormal_message = "Error pod " + v.name + " container " + Str(cs, "name") + " exitCode: " +
                             std::to_string(code.get<int64_t>()) + " terminated message: " + Str(term, "message");
        return true;
      }
      const auto& waiting = Field(Field(cs, "state"), "waiting");
      if (!Str(waiting, "message").empty()) {
        v.abnormal_reason = Str(waiting, "reason");
        v.abnormal_message = "Error pod " + v.name + " container " + Str(cs, "name") + " waiting message: " + Str(waiting, "message");
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

ServiceView ViewService(const nlohmann::json& svc) {
  ServiceView v;
  const auto& meta = Field(svc, "metadata");
  v.name = Str(meta, "name");
  v.uid = Str(meta, "uid");
  v.labels = StringMap(Field(meta, "labels"));
  v.deleting = !Str(meta, "deletionTimestamp").empty();
  v.controller_uid = ControllerUid(meta);
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

PodGroupResource PodGroupResourceFor(const std::string& gang_scheduler) {
  if (gang_scheduler.empty()) return {};
  if (gang_scheduler == kGangSchedulerVolcano) return {"scheduling.volcano.sh", "v1beta1", "PodGroup"};
  return {"scheduling.x-k8s.io", "v1alpha1", "PodGroup"};
}

namespace {

// Kubeflow's exit code for a failed pod whose container has no terminated
// state (pkg/controller.v1/common/pod.go: "magic number").
constexpr int kNoExitCode = 0xbeef;

const JobCondition* FindCondition(const JobStatus& s, std::string_view type) {
  for (const auto& c : s.conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

bool IsTrue(const JobStatus& s, std::string_view type) {
  const JobCondition* c = FindCondition(s, type);
  return c && c->status == api::kConditionTrue;
}

// Kubeflow's updateJobConditions: Running and Restarting replace each other,
// a finished job's Running turns False, and an unchanged condition keeps its
// transition time.
void SetCondition(JobStatus& s, std::string_view type, std::string_view status, std::string_view reason,
                  const std::string& message, const std::string& now) {
  const JobCondition* existing = FindCondition(s, type);
  if (existing && existing->status == status && existing->reason == reason && existing->message == message) return;
  JobCondition c{std::string(type), std::string(status), std::string(reason), message, now, now};
  if (existing && existing->status == status) c.last_transition_time = existing->last_transition_time;
  std::vector<JobCondition> kept;
  for (auto old : s.conditions) {
    if (old.type == type) continue;
    if ((type == api::kConditionRestarting && old.type == api::kConditionRunning) ||
        (type == api::kConditionRunning && old.type == api::kConditionRestarting)) {
      continue;
    }
    if ((type == api::kConditionFailed || type == api::kConditionSucceeded) && old.type == api::kConditionRunning &&
        old.status == api::kConditionTrue) {
      old.status = api::kConditionFalse;
      old.last_transition_time = now;
      old.last_update_time = now;
    }
    kept.push_back(std::move(old));
  }
  kept.push_back(std::move(c));
  s.conditions = std::move(kept);
}

bool SameIgnoringReconcileTime(JobStatus a, JobStatus b) {
  a.last_reconcile_time.clear();
  b.last_reconcile_time.clear();
  return a == b;
}

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
  return {{"apiVersion", std::string(api::kApiVersion)}, {"kind", std::string(api::kKind)},
          {"name", job.metadata.name}, {"uid", job.metadata.uid}, {"controller", true},
          {"blockOwnerDeletion", true}};
}

nlohmann::json LabelsJson(const std::map<std::string, std::string>& labels) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : labels) j[k] = v;
  return j;
}

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
  SetNamed(pod_spec, "volumes",
           {{"name", std::string(api::kTlsVolumeName)},
            {"secret", {{"secretName", api::AuthSecretName(job.metadata.name)}, {"items", items}, {"defaultMode", 0444}}}});
  for (auto& c : pod_spec["containers"]) {
    if (!c.is_object() || c.value("name", "") != api::kDefaultContainerName) continue;
    SetNamed(c, "volumeMounts",
             {{"name", std::string(api::kTlsVolumeName)}, {"mountPath", std::string(api::kTlsMountPath)}, {"readOnly", true}},
             "mountPath");
  }
  SetEnv(pod_spec, {{"name", pki::kTlsDirEnv}, {"value", std::string(api::kTlsMountPath)}});
}

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

bool IsVolcano(const PlannerOptions& o) { return o.gang_scheduler == kGangSchedulerVolcano; }

// A Kubernetes resource quantity ("500m", "1.5", "2Gi", "1e3") as an exact
// number of nano-units, and whether it was written with a binary suffix.
struct Quantity {
  __int128 nanos = 0;
  bool binary = false;
};

std::optional<Quantity> ParseQuantity(const nlohmann::json& v) {
  std::string text;
  if (v.is_string()) {
    text = v.get<std::string>();
  } else if (v.is_number_integer()) {
    text = std::to_string(v.get<int64_t>());
  } else {
    return std::nullopt;
  }
  size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  __int128 whole = 0, frac = 0, frac_scale = 1;
  size_t digits = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i, ++digits) {
    if (whole > (__int128{1} << 100)) return std::nullopt;
    whole = whole * 10 + (text[i] - '0');
  }
  if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i, ++digits) {
      if (frac_scale < 1000000000) {
        frac = frac * 10 + (text[i] - '0');
        frac_scale *= 10;
      }
    }
  }
  if (digits == 0) return std::nullopt;
  const std::string suffix = text.substr(i);
  static const std::map<std::string, std::pair<__int128, bool>> kSuffixes = {
      {"", {1, false}}, {"n", {0, false}}, {"u", {0, false}}, {"m", {0, false}}, {"k", {1000, false}},
      {"M", {1000000, false}}, {"G", {1000000000, false}}, {"T", {1000000000000LL, false}},
      {"P", {1000000000000000LL, false}}, {"E", {1000000000000000000LL, false}},
      {"Ki", {1LL << 10, true}}, {"Mi", {1LL << 20, true}}, {"Gi", {1LL << 30, true}}, {"Ti", {1LL << 40, true}},
      {"Pi", {1LL << 50, true}}, {"Ei", {1LL << 60, true}}};
  Quantity q;
  const __int128 base = whole * 1000000000 + frac * (1000000000 / frac_scale);  // nanos of the number itself
  if (suffix == "n" || suffix == "u" || suffix == "m") {
    const __int128 div = suffix == "n" ? 1000000000 : suffix == "u" ? 1000000 : 1000;
    q.nanos = base / div;
  } else if (auto it = kSuffixes.find(suffix); it != kSuffixes.end()) {
    q.nanos = base * it->second.first;
    q.binary = it->second.second;
  } else if (!suffix.empty() && (suffix[0] == 'e' || suffix[0] == 'E')) {
    int exp = 0;
    for (size_t k = 1; k < suffix.size(); ++k) {
      if (!std::isdigit(static_cast<unsigned char>(suffix[k])) || exp > 18) return std::nullopt;
      exp = exp * 10 + (suffix[k] - '0');
    }
    q.nanos = base;
    for (int k = 0; k < exp; ++k) q.nanos *= 10;
  } else {
    return std::nullopt;
  }
  if (negative) q.nanos = -q.nanos;
  return q;
}

std::string Int128(__int128 v) {
  if (v == 0) return "0";
  const bool neg = v < 0;
  if (neg) v = -v;
  std::string s;
  while (v > 0) {
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  }
  return neg ? "-" + s : s;
}

// Go's canonical form of a quantity: a binary one as the largest binary
// suffix that keeps it whole (when it is whole and at least 1Ki), anything
// else with the largest decimal suffix that keeps it whole.
std::string FormatQuantity(const Quantity& q) {
  const __int128 kNano = 1000000000;
  if (q.binary && q.nanos % kNano == 0 && (q.nanos / kNano >= 1024 || q.nanos / kNano <= -1024)) {
    __int128 bytes = q.nanos / kNano;
    static const char* kBinary[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
    int k = 0;
    while (k < 6 && bytes % 1024 == 0) {
      bytes /= 1024;
      ++k;
    }
    return Int128(bytes) + kBinary[k];
  }
  static const std::pair<int, const char*> kDecimal[] = {{18, "E"}, {15, "P"}, {12, "T"}, {9, "G"}, {6, "M"}, {3, "k"},
                                                         {0, ""},   {-3, "m"}, {-6, "u"}, {-9, "n"}};
  if (q.nanos == 0) return "0";
  for (const auto& [exp, suffix] : kDecimal) {
    __int128 unit = 1;
    for (int k = 0; k < exp + 9; ++k) unit *= 10;
    if (q.nanos % unit == 0) return Int128(q.nanos / unit) + suffix;
  }
  return Int128(q.nanos) + "n";
}

// Kubeflow's CalcPGMinResources: the requests of the job's first minMember
// pods (a container without a requests map counts its limits), regular
// containers only, summed per resource. Kubeflow orders the replica types by
// priority class value, which it can never look up (its lister is not
// started), so its order is Go's random map order; this one uses the job's
// replica order. Nothing to sum: nullopt.
std::optional<nlohmann::json> MinResources(const TFJob& job, int64_t min_member) {
  std::map<std::string, Quantity> sum;
  std::vector<std::string> order;
  int64_t pods = 0;
  for (const ReplicaSpec& spec : job.spec.replica_specs) {
    if (!spec.type || !spec.replicas) continue;  // Kubeflow skips a nil replicas
    const nlohmann::json& containers = Field(Field(spec.template_json, "spec"), "containers");
    for (int i = 0; i < *spec.replicas && pods < min_member; ++i, ++pods) {
      if (!containers.is_array()) continue;
      for (const auto& c : containers) {
        const nlohmann::json& resources = Field(c, "resources");
        const nlohmann::json& list = Field(resources, "requests").is_object() ? Field(resources, "requests")
                                                                               : Field(resources, "limits");
        if (!list.is_object()) continue;
        for (auto it = list.begin(); it != list.end(); ++it) {
          auto q = ParseQuantity(*it);
          if (!q) continue;
          auto [entry, fresh] = sum.try_emplace(it.key(), *q);
          if (fresh) {
            order.push_back(it.key());
          } else {
            entry->second.nanos += q->nanos;  // the first quantity's format is kept, as Go's Add does
          }
        }
      }
    }
  }
  if (sum.empty()) return std::nullopt;
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, q] : sum) out[name] = FormatQuantity(q);
  return out;
}

// Kubeflow's ReconcileJobs: minMember is the sum of replicas unless
// schedulingPolicy.minAvailable is set; Volcano's queue defaults to
// "default" and an existing PodGroup's queue is kept; scheduler-plugins
// takes scheduleTimeoutSeconds instead of a queue and a priority class.
// minResources is passed through when given, else computed from the pods'
// requests as Kubeflow does (MinResources). Validation has checked the types.
nlohmann::json DesiredPodGroup(const TFJob& job, const PlannerOptions& opt, const std::optional<PodGroupView>& existing) {
  int64_t min_member = 0;
  for (const ReplicaSpec& s : job.spec.replica_specs) {
    if (s.type) min_member += api::ReplicasOrDefault(s);
  }
  const nlohmann::json& sp = job.spec.run_policy.scheduling_policy;
  auto field = [&](const char* key) -> const nlohmann::json& { return Field(sp, key); };
  if (field("minAvailable").is_number_integer()) min_member = field("minAvailable").get<int64_t>();
  nlohmann::json spec = nlohmann::json::object();
  // Go's omitempty: a zero minMember is left out.
  if (min_member != 0) spec["minMember"] = min_member;
  if (IsVolcano(opt)) {
    std::string queue = "default";
    if (field("queue").is_string() && !field("queue").get<std::string>().empty()) queue = field("queue").get<std::string>();
    if (existing) {
      const std::string kept = Str(Field(existing->object, "spec"), "queue");
      if (!kept.empty()) queue = kept;
    }
    spec["queue"] = queue;
    if (field("priorityClass").is_string() && !field("priorityClass").get<std::string>().empty()) {
      spec["priorityClassName"] = field("priorityClass");
    }
  } else if (field("scheduleTimeoutSeconds").is_number_integer()) {
    spec["scheduleTimeoutSeconds"] = field("scheduleTimeoutSeconds");
  }
  if (field("minResources").is_object() && !field("minResources").empty()) {
    spec["minResources"] = field("minResources");
  } else if (auto computed = MinResources(job, min_member)) {
    spec["minResources"] = *computed;
  }

  const PodGroupResource r = PodGroupResourceFor(opt.gang_scheduler);
  nlohmann::json meta{{"name", job.metadata.name},
                      {"namespace", job.metadata.namespace_},
                      {"labels", LabelsJson(api::JobLabels(job.metadata.name))},
                      {"ownerReferences", nlohmann::json::array({OwnerRef(job)})}};
  // Kubeflow copies the job's annotations onto its PodGroup.
  if (!job.metadata.annotations.empty()) meta["annotations"] = LabelsJson(job.metadata.annotations);
  return {{"apiVersion", r.group + "/" + r.version}, {"kind", r.kind}, {"metadata", meta}, {"spec", spec}};
}

StatusOr<nlohmann::json> BuildPod(const TFJob& job, const ReplicaSpec& spec, int index, const PlannerOptions& opt) {
  const std::string type = api::TypeLabel(spec);
  nlohmann::json tmpl = spec.template_json.is_object() ? spec.template_json : nlohmann::json::object();
  nlohmann::json meta = tmpl.value("metadata", nlohmann::json::object());
  if (!meta.is_object()) meta = nlohmann::json::object();
  nlohmann::json labels = meta.value("labels", nlohmann::json::object());
  if (!labels.is_object()) labels = nlohmann::json::object();
  for (const auto& [k, v] : api::Labels(job.metadata.name, type, index, api::IsMasterRole(job, spec, index))) labels[k] = v;
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
  }
  // A job of one replica has no peers to authenticate.
  if (opt.task_auth && api::NeedsTfConfig(job)) {
    SetEnv(pod_spec, {{"name", std::string(api::kAuthTokenEnv)},
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

struct Builder {
  const TFJob& job;
  const std::vector<PodView>& pods;
  const std::vector<ServiceView>& services;
  Plan plan;
  std::set<std::string> deleted;

  void DeletePod(const PodView& p) {
    if (p.deleting || !deleted.insert("pod/" + p.name).second) return;
    plan.actions.push_back({Action::Kind::kDeletePod, p.name, nullptr});
  }
  void DeleteService(const ServiceView& s) {
    if (s.deleting || !deleted.insert("svc/" + s.name).second) return;
    plan.actions.push_back({Action::Kind::kDeleteService, s.name, nullptr});
  }
  void DeleteServiceNamed(const std::string& name) {
    for (const auto& s : services) {
      if (s.name == name) DeleteService(s);
    }
  }
  // cleanPodPolicy: All removes every pod, Running the running and pending
  // ones; services go with their pods.
  void Cleanup(api::CleanPodPolicy policy) {
    if (policy == api::CleanPodPolicy::kNone) return;
    for (const auto& p : pods) {
      if (policy == api::CleanPodPolicy::kRunning && p.phase != "Running" && p.phase != "Pending") continue;
      DeletePod(p);
      DeleteServiceNamed(p.name);
    }
  }
  void KillActive() {
    for (const auto& p : pods) {
      if (p.phase == "Running" || p.phase == "Pending" || p.phase.empty() || p.phase == "Unknown") {
        DeletePod(p);
        DeleteServiceNamed(p.name);
      }
    }
  }
  void DeleteAll() {
    for (const auto& p : pods) DeletePod(p);
    for (const auto& s : services) DeleteService(s);
  }
  void Event(const char* type, std::string_view reason, std::string message) {
    plan.events.push_back({type, std::string(reason), std::move(message)});
  }
};

// Kubeflow defaults only an unset policy to None; one written as "" is
// none of None and Running, so its clean-up deletes every pod (All).
api::CleanPodPolicy CleanPolicy(const TFJob& job) {
  const std::string& written = job.spec.run_policy.clean_pod_policy.value_or(std::string(api::kCleanPodPolicyNone));
  if (written.empty()) return api::CleanPodPolicy::kAll;
  return api::ParseCleanPodPolicy(written).value_or(api::CleanPodPolicy::kNone);
}

// The restart counts kept on the job (kRestartsAnnotation), by replica key.
std::map<std::string, int32_t> AnnotatedRestarts(const TFJob& job) {
  std::map<std::string, int32_t> out;
  auto it = job.metadata.annotations.find(std::string(api::kRestartsAnnotation));
  if (it == job.metadata.annotations.end()) return out;
  const auto j = nlohmann::json::parse(it->second, nullptr, false);
  if (!j.is_object()) return out;
  for (auto e = j.begin(); e != j.end(); ++e) {
    if (e->is_number_integer() && e->get<int64_t>() >= 0 && e->get<int64_t>() <= INT32_MAX) out[e.key()] = e->get<int32_t>();
  }
  return out;
}

// Requeues (or deletes the job) for ttlSecondsAfterFinished.
void ApplyTtl(Builder& b, const TFJob& job, Time now) {
  const auto& ttl = job.spec.run_policy.ttl_seconds_after_finished;
  if (!ttl) return;
  auto done = ParseRfc3339(b.plan.status.completion_time);
  if (!done) return;
  const Time expire = *done + std::chrono::seconds(*ttl);
  if (now >= expire) {
    b.plan.actions.push_back({Action::Kind::kDeleteJob, job.metadata.name, nullptr});
  } else {
    b.plan.requeue_after = std::chrono::ceil<std::chrono::seconds>(expire - now);
  }
}

}  // namespace

Plan PlanJob(const TFJob& original, const std::vector<PodView>& all_pods, const std::vector<ServiceView>& all_services,
             Time now_tp, const PlannerOptions& given_options, const std::optional<PodGroupView>& observed_pod_group) {
  Plan skipped;
  skipped.status = original.status;
  skipped.skipped = true;
  if (!original.metadata.deletion_timestamp.empty()) return skipped;
  if (original.spec.run_policy.managed_by && !original.spec.run_policy.managed_by->empty() &&
      *original.spec.run_policy.managed_by != api::kManagedByKubeflow) {
    return skipped;
  }

  TFJob job = original;
  api::SetDefaults(job);
  const std::string now = FormatRfc3339(now_tp);
  const std::string& name = job.metadata.name;
  const std::string qualified = job.metadata.namespace_.empty() ? name : job.metadata.namespace_ + "/" + name;

  // Only what this job controls, and the orphans it adopts: objects with
  // its labels (Kubeflow's selector: job-name and operator-name) and no
  // controller, as `kubectl delete tfjob --cascade=orphan` leaves them.
  // Kubeflow v1.9.0 adopts orphan services only (and, without RBAC for the
  // patch, not even those); an orphan pod then blocks its index forever.
  std::vector<Action> adoptions;
  auto orphan_of_this_job = [&](const std::string& controller_uid, const std::map<std::string, std::string>& labels,
                                bool deleting) {
    return !job.metadata.uid.empty() && controller_uid.empty() && !deleting &&
           LabelOf(labels, api::kJobNameLabel) == job.metadata.name &&
           LabelOf(labels, api::kOperatorNameLabel) == api::kOperatorName;
  };
  auto adopt = [&](Action::Kind kind, const std::string& object_name, const std::string& uid) {
    adoptions.push_back({kind, object_name,
                         {{"metadata", {{"uid", uid}, {"ownerReferences", nlohmann::json::array({OwnerRef(job)})}}}}});
  };
  std::vector<PodView> pods;
  for (const auto& p : all_pods) {
    if (job.metadata.uid.empty() || p.controller_uid == job.metadata.uid) {
      pods.push_back(p);
    } else if (orphan_of_this_job(p.controller_uid, p.labels, p.deleting)) {
      adopt(Action::Kind::kAdoptPod, p.name, p.uid);
      pods.push_back(p);
      pods.back().controller_uid = job.metadata.uid;
    }
  }
  std::vector<ServiceView> services;
  for (const auto& sv : all_services) {
    if (job.metadata.uid.empty() || sv.controller_uid == job.metadata.uid) {
      services.push_back(sv);
    } else if (orphan_of_this_job(sv.controller_uid, sv.labels, sv.deleting)) {
      adopt(Action::Kind::kAdoptService, sv.name, sv.uid);
      services.push_back(sv);
      services.back().controller_uid = job.metadata.uid;
    }
  }
  // A job whose pods were made without the task token (by training-operator
  // before the cluster moved to this operator, or under --task-auth=false)
  // keeps getting pods without it: a task holding a token refuses calls
  // from tasks without one, so a re-created pod would split the job.
  PlannerOptions options = given_options;
  if (options.task_auth && !pods.empty() &&
      std::none_of(pods.begin(), pods.end(), [](const PodView& p) { return p.task_token; })) {
    options.task_auth = false;
    options.task_tls = false;
  }
  std::optional<PodGroupView> pod_group;
  if (observed_pod_group && (job.metadata.uid.empty() || observed_pod_group->controller_uid == job.metadata.uid)) {
    pod_group = observed_pod_group;
  }
  Builder b{job, pods, services, {}, {}};
  b.plan.status = job.status;
  JobStatus& st = b.plan.status;
  auto finish = [&]() -> Plan {
    // Adopted objects count as the job's in this very plan, so they come first.
    b.plan.actions.insert(b.plan.actions.begin(), adoptions.begin(), adoptions.end());
    // The job's Secret (and NetworkPolicy) come before any pod that needs
    // them; creating one that exists is a no-op, so every pass that creates
    // pods asks again (a deleted Secret comes back before new pods).
    const bool creates_pods = std::any_of(b.plan.actions.begin(), b.plan.actions.end(),
                                          [](const Action& a) { return a.kind == Action::Kind::kCreatePod; });
    if (creates_pods) {
      std::vector<Action> first;
      if (options.task_auth && api::NeedsTfConfig(job)) {
        first.push_back({Action::Kind::kCreateSecret, api::AuthSecretName(job.metadata.name), BuildAuthSecret(job)});
      }
      if (options.network_policy) {
        first.push_back(
            {Action::Kind::kCreateNetworkPolicy, api::NetworkPolicyName(job.metadata.name), BuildNetworkPolicy(job)});
      }
      b.plan.actions.insert(b.plan.actions.begin(), first.begin(), first.end());
    }
    if (!options.gang_scheduler.empty()) {
      const bool done = IsTrue(b.plan.status, api::kConditionSucceeded) || IsTrue(b.plan.status, api::kConditionFailed) ||
                        job.spec.run_policy.suspend.value_or(false);
      std::vector<Action> group;
      if (done) {
        // Kubeflow deletes the PodGroup of a finished or suspended job.
        if (pod_group && !pod_group->deleting) group.push_back({Action::Kind::kDeletePodGroup, name, nullptr});
      } else {
        nlohmann::json desired = DesiredPodGroup(job, options, pod_group);
        if (!pod_group) {
          group.push_back({Action::Kind::kCreatePodGroup, name, desired});
        } else if (!pod_group->deleting && Field(pod_group->object, "spec") != desired["spec"]) {
          nlohmann::json updated = pod_group->object;
          updated["spec"] = desired["spec"];
          group.push_back({Action::Kind::kUpdatePodGroup, name, std::move(updated)});
        }
        // Volcano admits a gang as a whole: until it has (phase past
        // Pending), creating pods would only park them.
        const bool admitted = pod_group && !pod_group->deleting && !pod_group->phase.empty() && pod_group->phase != "Pending";
        if (IsVolcano(options) && !admitted) {
          std::erase_if(b.plan.actions, [](const Action& a) {
            return a.kind == Action::Kind::kCreatePod || a.kind == Action::Kind::kCreateService ||
                   a.kind == Action::Kind::kCreateSecret || a.kind == Action::Kind::kCreateNetworkPolicy;
          });
        }
      }
      b.plan.actions.insert(b.plan.actions.begin(), group.begin(), group.end());
    }
    b.plan.status_changed = !SameIgnoringReconcileTime(b.plan.status, original.status);
    if (b.plan.status_changed) b.plan.status.last_reconcile_time = now;
    return std::move(b.plan);
  };

  if (!FindCondition(st, api::kConditionCreated)) {
    // Kubeflow records no event for it: the condition says it.
    SetCondition(st, api::kConditionCreated, api::kConditionTrue, api::kReasonCreated, "TFJob " + name + " is created.", now);
    // Said once, when the job is first seen: without a gang scheduler the
    // policy has nothing to act on (Kubeflow ignores it silently).
    if (options.gang_scheduler.empty() && job.spec.run_policy.scheduling_policy.is_object()) {
      b.Event("Warning", "SchedulingPolicyIgnored",
              "TFJob " + name + " has runPolicy.schedulingPolicy, but the operator runs without "
              "--gang-scheduler-name: no PodGroup is created");
    }
  }

  // What the CRD schema cannot express, checked here: the job fails, naming the field.
  if (auto errors = api::Validate(job); !errors.empty()) {
    if (!IsTrue(st, api::kConditionFailed)) {
      const std::string msg = "TFJob " + qualified + " is invalid: " + api::ToMessage(errors);
      SetCondition(st, api::kConditionFailed, api::kConditionTrue, api::kReasonFailedValidation, msg, now);
      if (st.completion_time.empty()) st.completion_time = now;
      b.Event("Warning", api::kReasonFailedValidation, msg);
    }
    return finish();
  }

  if (IsTrue(st, api::kConditionSucceeded) || IsTrue(st, api::kConditionFailed)) {
    b.Cleanup(CleanPolicy(job));
    // Kubeflow: once a job has succeeded, what was still active counts as
    // succeeded (a failed job's counts stay as they were).
    if (IsTrue(st, api::kConditionSucceeded)) {
      for (auto& [key, rs] : st.replica_statuses) {
        rs.succeeded += rs.active;
        rs.active = 0;
      }
    }
    ApplyTtl(b, job, now_tp);
    return finish();
  }

  if (job.spec.run_policy.suspend.value_or(false)) {
    b.DeleteAll();
    for (auto& [k, rs] : st.replica_statuses) rs.active = 0;
    const std::string msg = "TFJob " + name + " is suspended.";
    if (IsTrue(st, api::kConditionRunning)) SetCondition(st, api::kConditionRunning, api::kConditionFalse, api::kReasonSuspended, msg, now);
    if (!IsTrue(st, api::kConditionSuspended)) {
      SetCondition(st, api::kConditionSuspended, api::kConditionTrue, api::kReasonSuspended, msg, now);
      b.Event("Normal", api::kReasonSuspended, msg);
    }
    return finish();
  }
  if (IsTrue(st, api::kConditionSuspended)) {
    const std::string msg = "TFJob " + name + " is resumed.";
    SetCondition(st, api::kConditionSuspended, api::kConditionFalse, api::kReasonResumed, msg, now);
    st.start_time = now;  // the deadline counts from the resume
    b.Event("Normal", api::kReasonResumed, msg);
  }
  // Kubeflow starts the clock (startTime, so activeDeadlineSeconds) when
  // it first creates pods: with Volcano, once the PodGroup is admitted.
  const bool admitted = !IsVolcano(options) ||
                        (pod_group && !pod_group->deleting && !pod_group->phase.empty() && pod_group->phase != "Pending");
  if (st.start_time.empty() && admitted) st.start_time = now;

  // Restarts so far: kubelet restarts of OnFailure/Always pods plus the
  // operator's own ExitCode re-creations, kept in status and on the job
  // (kRestartsAnnotation: Kubeflow's CRD prunes the status field).
  const std::map<std::string, int32_t> annotated = AnnotatedRestarts(job);
  for (auto& [key, rs] : st.replica_statuses) {
    if (auto it = annotated.find(key); it != annotated.end()) rs.restarts = std::max(rs.restarts, it->second);
  }
  for (const auto& [key, count] : annotated) {
    if (!st.replica_statuses.count(key)) st.replica_statuses[key].restarts = count;
  }
  int64_t restarts = 0;
  for (const auto& [key, rs] : st.replica_statuses) restarts += rs.restarts;
  for (const ReplicaSpec& spec : job.spec.replica_specs) {
    const auto policy = api::ParseRestartPolicy(spec.restart_policy).value_or(api::RestartPolicy::kNever);
    if (policy != api::RestartPolicy::kOnFailure && policy != api::RestartPolicy::kAlways) continue;
    const std::string type = api::TypeLabel(spec);
    for (const auto& p : pods) {
      if (LabelOf(p.labels, api::kReplicaTypeLabel) == type) restarts += p.restart_count;
    }
  }
  const auto& limit = job.spec.run_policy.backoff_limit;
  const bool past_backoff = limit && (*limit == 0 ? restarts > 0 : restarts >= *limit);
  const auto& deadline = job.spec.run_policy.active_deadline_seconds;
  std::optional<Time> start = ParseRfc3339(st.start_time);
  const bool past_deadline = deadline && start && now_tp - *start >= std::chrono::seconds(*deadline);
  if (past_backoff || past_deadline) {
    // Kubeflow's words (JobFailed for the backoff limit and the deadline).
    const std::string msg = past_backoff ? "Job " + name + " has failed because it has reached the specified backoff limit"
                                         : "Job " + name + " has failed because it was active longer than specified deadline";
    // A deadline or backoff failure must stop the work whatever
    // cleanPodPolicy says (as Kubeflow's does).
    b.KillActive();
    b.Cleanup(CleanPolicy(job));
    SetCondition(st, api::kConditionFailed, api::kConditionTrue, api::kReasonFailed, msg, now);
    st.completion_time = now;
    b.Event("Normal", api::kReasonFailed, msg);
    ApplyTtl(b, job, now_tp);
    return finish();
  }

  bool has_chief = false;
  for (const auto& spec : job.spec.replica_specs) has_chief |= spec.type == ReplicaType::kChief;
  const bool dynamic_workers = job.spec.enable_dynamic_worker.value_or(false);
  std::vector<std::string> failed_msgs;
  std::string restarting_msg;   // Kubeflow's, for the first replica type restarting
  std::string exit_code_failure;  // Kubeflow's, for an ExitCode pod that failed for good
  bool warned_scheduler = false, warned_restart_policy = false;
  bool running = false, succeeded = false;
  std::map<std::string, api::ReplicaStatus> statuses;
  std::map<std::string, int32_t> restart_counts;  // by key, after this pass

  for (const ReplicaSpec& spec : job.spec.replica_specs) {
    if (!spec.type) continue;
    const std::string type = api::TypeLabel(spec);
    const std::string key = api::CanonicalKey(spec);
    const int n = api::ReplicasOrDefault(spec);
    const auto policy = api::ParseRestartPolicy(spec.restart_policy).value_or(api::RestartPolicy::kNever);
    api::ReplicaStatus rs;
    if (auto it = st.replica_statuses.find(key); it != st.replica_statuses.end()) rs = it->second;
    rs.active = rs.succeeded = rs.failed = 0;
    rs.selector = api::Selector(name, type);

    std::map<int, std::vector<const PodView*>> by_index;
    for (const auto& p : pods) {
      if (LabelOf(p.labels, api::kReplicaTypeLabel) != type) continue;
      auto idx = IndexOf(p.labels);
      if (!idx || *idx >= n) {
        b.DeletePod(p);  // scaled down, or not ours to keep
        b.DeleteServiceNamed(p.name);
        continue;
      }
      by_index[*idx].push_back(&p);
    }
    std::set<int> have_service;
    for (const auto& sv : services) {
      if (LabelOf(sv.labels, api::kReplicaTypeLabel) != type) continue;
      auto idx = IndexOf(sv.labels);
      if (!idx || *idx >= n) {
        b.DeleteService(sv);
        continue;
      }
      have_service.insert(*idx);
    }

    int failed_here = 0, restarting_here = 0, succeeded_here = 0, running_here = 0;
    bool worker0_succeeded = false;
    for (int i = 0; i < n; ++i) {
      if (!have_service.count(i)) {
        b.plan.actions.push_back({Action::Kind::kCreateService, api::ServiceName(name, type, i), BuildService(job, spec, i)});
      }
      auto it = by_index.find(i);
      if (it == by_index.end()) {
        auto pod = BuildPod(job, spec, i, options);
        if (!pod.ok()) {
          SetCondition(st, api::kConditionFailed, api::kConditionTrue, api::kReasonFailed,
                       "TFJob " + qualified + " cannot build pod " + api::PodName(name, type, i) + ": " + pod.status().message(), now);
          st.completion_time = now;
          return finish();
        }
        // Kubeflow's warnings when a template sets what the replica spec
        // (or the gang scheduler) decides (once a pass each).
        const std::string scheduler = Str((*pod)["spec"], "schedulerName");
        if (!options.gang_scheduler.empty() && scheduler != options.gang_scheduler && !warned_scheduler) {
          warned_scheduler = true;
          b.Event("Warning", "SetPodTemplateSchedulerName",
                  "Another scheduler is specified when gang-scheduling is enabled and it will not be overwritten");
        }
        if (!Str(Field(spec.template_json, "spec"), "restartPolicy").empty() && !warned_restart_policy) {
          warned_restart_policy = true;
          b.Event("Warning", "SetPodTemplateRestartPolicy",
                  "Restart policy in pod template will be overwritten by restart policy in replica spec");
        }
        b.plan.actions.push_back({Action::Kind::kCreatePod, api::PodName(name, type, i), std::move(pod).value()});
        continue;
      }
      // More than one pod for an index (a stale cache raced a create): keep
      // the newest picture, never add another.
      const PodView& p = *it->second.front();
      if (p.deleting) continue;
      if (p.terminated_code) {
        b.Event("Normal", "ExitedWithCode",
                "Pod: " + job.metadata.namespace_ + "." + p.name + " exited with code " + std::to_string(*p.terminated_code));
      }
      if (p.phase != "Succeeded" && p.phase != "Failed" && !p.abnormal_message.empty()) {
        b.Event("Warning", p.abnormal_reason, p.abnormal_message);
      }
      if (p.phase == "Running") {
        ++rs.active;
        ++running_here;
      } else if (p.phase == "Succeeded") {
        ++rs.succeeded;
        ++succeeded_here;
        if (i == 0 && p.exit_code.value_or(0) == 0) worker0_succeeded = true;
      } else if (p.phase == "Failed") {
        // A failed pod whose tensorflow container never terminated (evicted
        // before it started, refused by the kubelet's admission, a node
        // shutdown) counts as exit code 0xbeef under ExitCode, as in
        // Kubeflow: >= 128, retryable.
        const bool retryable = policy == api::RestartPolicy::kExitCode
                                   ? p.exit_code.value_or(kNoExitCode) >= 128
                                   : policy == api::RestartPolicy::kOnFailure || policy == api::RestartPolicy::kAlways;
        if (retryable) {
          b.DeletePod(p);  // recreated on the next pass, once it is gone
          ++rs.restarts;
          ++restarting_here;
        } else {
          ++rs.failed;
          ++failed_here;
          if (policy == api::RestartPolicy::kExitCode && exit_code_failure.empty()) {
            exit_code_failure = "job \"" + name + "\" is failing because \"" + key + "\" replica(s) failed.";
          }
        }
      }
    }
    restart_counts[key] = rs.restarts;
    statuses[key] = rs;
    if (restarting_here > 0) {
      const std::string msg = "job " + name + " is restarting because " + key + " replica(s) failed.";
      b.Event("Warning", api::kReasonRestarting, msg);
      if (restarting_msg.empty()) restarting_msg = msg;
    }
    // Kubeflow's enableDynamicWorker: failed workers do not fail the job
    // (an ExitCode failure for good still does).
    if (failed_here > 0 && !(dynamic_workers && spec.type == ReplicaType::kWorker && exit_code_failure.empty())) {
      failed_msgs.push_back(std::to_string(failed_here) + " " + key + " replica(s) failed.");
    }
    // Success and Running follow the chief, or worker(s) without one
    // (Kubeflow: nothing left expected, or worker 0 done).
    if (spec.type == ReplicaType::kChief) {
      if (succeeded_here == n) succeeded = true;
      if (running_here > 0) running = true;
    } else if (!has_chief && spec.type == ReplicaType::kWorker) {
      const bool all = job.spec.success_policy.value_or("") == api::kSuccessPolicyAllWorkers;
      if (succeeded_here == n || (!all && worker0_succeeded)) succeeded = true;
      if (running_here > 0) running = true;
    }
  }
  st.replica_statuses = statuses;

  // Record, then act: the restart counts go on the job before any pod is
  // deleted for a restart (kPatchJob runs first; the pass stops if it fails).
  std::map<std::string, int32_t> counted = annotated;
  bool grew = false;
  for (const auto& [key, count] : restart_counts) {
    if (count > counted[key]) {
      counted[key] = count;
      grew = true;
    }
  }
  if (grew) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [key, count] : counted) {
      if (count > 0) j[key] = count;
    }
    b.plan.actions.insert(b.plan.actions.begin(),
                          {Action::Kind::kPatchJob, name,
                           {{"metadata", {{"annotations", {{std::string(api::kRestartsAnnotation), j.dump()}}}}}}});
  }

  if (!failed_msgs.empty()) {
    // Kubeflow's UpdateJobStatus: an event for each failed type, in its
    // order (Chief, Evaluator, Master, PS, Worker: the job's replica order
    // here), and the condition from the first, since Failed is final.
    const std::string msg = "TFJob " + qualified + " has failed because " + failed_msgs.front();
    if (!exit_code_failure.empty()) {
      // Kubeflow fails an ExitCode job with this message first; its general
      // one follows as an event.
      b.Event("Warning", api::kReasonFailed, exit_code_failure);
    }
    SetCondition(st, api::kConditionFailed, api::kConditionTrue, api::kReasonFailed,
                 exit_code_failure.empty() ? msg : exit_code_failure, now);
    st.completion_time = now;
    for (const auto& m : failed_msgs) b.Event("Normal", api::kReasonFailed, "TFJob " + qualified + " has failed because " + m);
    b.Cleanup(CleanPolicy(job));
    ApplyTtl(b, job, now_tp);
    return finish();
  }
  if (succeeded) {
    const std::string msg = "TFJob " + qualified + " successfully completed.";
    SetCondition(st, api::kConditionSucceeded, api::kConditionTrue, api::kReasonSucceeded, msg, now);
    st.completion_time = now;
    b.Event("Normal", api::kReasonSucceeded, msg);
    // Drop the creates of this pass: a finished job starts nothing new.
    std::erase_if(b.plan.actions, [](const Action& a) {
      return a.kind == Action::Kind::kCreatePod || a.kind == Action::Kind::kCreateService;
    });
    b.Cleanup(CleanPolicy(job));
    ApplyTtl(b, job, now_tp);
    return finish();
  }
  if (!restarting_msg.empty()) {
    SetCondition(st, api::kConditionRestarting, api::kConditionTrue, api::kReasonRestarting, restarting_msg, now);
  } else if (running) {
    SetCondition(st, api::kConditionRunning, api::kConditionTrue, api::kReasonRunning, "TFJob " + qualified + " is running.", now);
  }
  if (deadline && start) {
    const Time end = *start + std::chrono::seconds(*deadline);
    b.plan.requeue_after = std::chrono::ceil<std::chrono::seconds>(end - now_tp);
  }
  return finish();
}

}  // namespace tfjob::op::controller
