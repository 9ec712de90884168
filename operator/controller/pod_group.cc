// Gang scheduling: the PodGroup a job should have (Volcano's or the
// scheduler-plugins'), with Kubeflow's minMember and minResources.
#include <cctype>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "operator/api/defaults.h"
#include "operator/api/names.h"
#include "operator/controller/builders.h"
#include "operator/controller/pod_group.h"
#include "operator/controller/views.h"

namespace tfjob::op::controller {

PodGroupResource PodGroupResourceFor(const std::string& gang_scheduler) {
  if (gang_scheduler.empty()) return {};
  if (gang_scheduler == kGangSchedulerVolcano) return {"scheduling.volcano.sh", "v1beta1", "PodGroup"};
  return {"scheduling.x-k8s.io", "v1alpha1", "PodGroup"};
}

namespace internal {

using api::ReplicaSpec;
using api::TFJob;

bool IsVolcano(const PlannerOptions& o) { return o.gang_scheduler == kGangSchedulerVolcano; }

namespace {

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
  static const std::map<std::string, std::pair<__int128, bool>> kSuffixes = {{"", {1, false}},
                                                                             {"n", {0, false}},
                                                                             {"u", {0, false}},
                                                                             {"m", {0, false}},
                                                                             {"k", {1000, false}},
                                                                             {"M", {1000000, false}},
                                                                             {"G", {1000000000, false}},
                                                                             {"T", {1000000000000LL, false}},
                                                                             {"P", {1000000000000000LL, false}},
                                                                             {"E", {1000000000000000000LL, false}},
                                                                             {"Ki", {1LL << 10, true}},
                                                                             {"Mi", {1LL << 20, true}},
                                                                             {"Gi", {1LL << 30, true}},
                                                                             {"Ti", {1LL << 40, true}},
                                                                             {"Pi", {1LL << 50, true}},
                                                                             {"Ei", {1LL << 60, true}}};
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
  static const std::pair<int, const char*> kDecimal[] = {{18, "E"}, {15, "P"}, {12, "T"}, {9, "G"},  {6, "M"},
                                                         {3, "k"},  {0, ""},   {-3, "m"}, {-6, "u"}, {-9, "n"}};
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
        const nlohmann::json& list =
            Field(resources, "requests").is_object() ? Field(resources, "requests") : Field(resources, "limits");
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

}  // namespace

// Kubeflow's ReconcileJobs: minMember is the sum of replicas unless
// schedulingPolicy.minAvailable is set; Volcano's queue defaults to
// "default" and an existing PodGroup's queue is kept; scheduler-plugins
// takes scheduleTimeoutSeconds instead of a queue and a priority class.
// minResources is passed through when given, else computed from the pods'
// requests as Kubeflow does (MinResources). Validation has checked the types.
nlohmann::json DesiredPodGroup(const TFJob& job, const PlannerOptions& opt,
                               const std::optional<PodGroupView>& existing) {
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
    if (field("queue").is_string() && !field("queue").get<std::string>().empty())
      queue = field("queue").get<std::string>();
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

}  // namespace internal
}  // namespace tfjob::op::controller
