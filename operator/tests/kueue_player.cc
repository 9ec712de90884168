#include "operator/tests/kueue_player.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <fstream>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace tfjob::op::envtest {
namespace {

namespace t = ::tfjob::testing;

const json& Field(const json& j, const std::string& key) {
  static const json null;
  return j.is_object() && j.contains(key) ? j[key] : null;
}

bool Empty(const json& j) { return j.is_null() || j.empty(); }

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

// KubeflowJob.OrderedReplicaTypes (kubeflowjob_controller.go, from
// tfjob_controller.go's JobControl.OrderedReplicaTypes), the types the job
// has: the order of the Workload's pod sets, which RunWithPodSetsInfo and
// RestorePodSetsInfo match by position.
std::vector<std::string> OrderedReplicaTypes(const json& job) {
  std::vector<std::string> out;
  const json& specs = Field(Field(job, "spec"), "tfReplicaSpecs");
  for (const char* type : {"Chief", "Master", "PS", "Worker", "Evaluator"}) {
    if (!Field(specs, type).is_null()) out.push_back(type);
  }
  return out;
}

// Kueue's CRDs, once per process (the control plane is the process's).
bool InstallKueueCrds(t::ControlPlane* cp, std::string* why) {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [&] {
    const std::string dir = t::SourceDir() + "/../shared/kueue/crds";
    // `create`: the Workload CRD is too large for client-side apply's
    // annotation. --validate=false: the 1.26 API server does not know the
    // CRD field selectableFields (1.30+) and drops it (../shared/kueue/README.md).
    auto r = cp->Kubectl({"create", "--validate=false", "-f", dir});
    if (r.exit_code != 0) {
      error = "kubectl create of Kueue's CRDs from " + dir + " failed: " + r.err;
      return;
    }
    for (const char* crd : {"workloads.kueue.x-k8s.io", "resourceflavors.kueue.x-k8s.io"}) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      std::string established;
      while (established != "True" && std::chrono::steady_clock::now() < deadline) {
        r = cp->Kubectl({"get", "crd", crd, "-o", R"(jsonpath={.status.conditions[?(@.type=="Established")].status})"});
        established = r.out;
        if (established != "True") std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (established != "True") {
        error = std::string("Kueue's CRD ") + crd + " was not established in 60 s: " + r.err;
        return;
      }
    }
  });
  *why = error;
  return error.empty();
}

// Merges `from` (a map) into obj[section][key]; a key already there with
// another value is a conflict, which fails Kueue's start
// (podset.go, PodSetInfo.Merge: utilmaps.HaveConflict).
void MergeMap(json& obj, const char* section, const char* key, const json& from) {
  if (Empty(from)) return;
  json& into = obj[section][key];
  if (!into.is_object()) into = json::object();
  for (auto it = from.begin(); it != from.end(); ++it) {
    if (into.contains(it.key()) && into[it.key()] != it.value()) {
      ADD_FAILURE() << "Kueue's podset.Merge: conflict for " << key << " " << it.key();
    }
    into[it.key()] = it.value();
  }
}

// podset.Merge (pkg/podset/podset.go) of a pod set's info into a template
// (both template-shaped here): labels, annotations and the node selector
// merged, tolerations appended unless already there.
void Merge(json& tmpl, const json& info) {
  MergeMap(tmpl, "metadata", "labels", Field(Field(info, "metadata"), "labels"));
  MergeMap(tmpl, "metadata", "annotations", Field(Field(info, "metadata"), "annotations"));
  MergeMap(tmpl, "spec", "nodeSelector", Field(Field(info, "spec"), "nodeSelector"));
  const json& tolerations = Field(Field(info, "spec"), "tolerations");
  if (Empty(tolerations)) return;
  json& into = tmpl["spec"]["tolerations"];
  if (!into.is_array()) into = json::array();
  for (const auto& toleration : tolerations) {
    if (std::find(into.begin(), into.end(), toleration) == into.end()) into.push_back(toleration);
  }
}

// podset.RestorePodSpec (pkg/podset/podset.go) with the info
// GetPodSetsInfoFromWorkload (reconciler.go) takes from the Workload's own
// pod set (podset.FromPodSet): each field set back to the recorded
// template's, and removed where that had none.
void Restore(json& tmpl, const json& recorded) {
  const std::pair<const char*, const char*> fields[] = {{"metadata", "labels"},
                                                        {"metadata", "annotations"},
                                                        {"spec", "nodeSelector"},
                                                        {"spec", "tolerations"},
                                                        {"spec", "schedulingGates"}};
  for (const auto& [section, key] : fields) {
    const json& value = Field(Field(recorded, section), key);
    if (!Empty(value)) {
      tmpl[section][key] = value;
    } else if (tmpl.contains(section) && tmpl[section].is_object()) {
      tmpl[section].erase(key);
    }
  }
}

// The Workload's conditions with `set` in place of those of the same type.
json WithConditions(const json& workload, const std::vector<json>& set) {
  json out = json::array();
  for (const auto& c : Field(Field(workload, "status"), "conditions")) {
    bool replaced = false;
    for (const auto& s : set) replaced |= c.value("type", "") == s["type"];
    if (!replaced) out.push_back(c);
  }
  for (const auto& s : set) out.push_back(s);
  return out;
}

}  // namespace

bool IsActive(const json& job) {
  const json& statuses = Field(Field(job, "status"), "replicaStatuses");
  if (!statuses.is_object()) return false;
  for (const auto& rs : statuses) {
    if (rs.value("active", 0) != 0) return true;
  }
  return false;
}

bool PodsReady(const json& job) {
  for (const auto& c : Field(Field(job, "status"), "conditions")) {
    if (c.value("type", "") == "Running" && c.value("status", "") == "True") return true;
  }
  return false;
}

Finish Finished(const json& job) {
  for (const auto& c : Field(Field(job, "status"), "conditions")) {
    const std::string type = c.value("type", "");
    if ((type == "Succeeded" || type == "Failed") && c.value("status", "") == "True") {
      return {c.value("message", ""), type != "Failed", true};
    }
  }
  return {"", true, false};
}

std::string KueuePriorityClass(const json& job) {
  const json& spec = Field(job, "spec");
  const json& policy = Field(Field(spec, "runPolicy"), "schedulingPolicy");
  if (!Field(policy, "priorityClass").empty()) return Field(policy, "priorityClass").get<std::string>();
  for (const auto& type : OrderedReplicaTypes(job)) {
    const json& name = Field(Field(Field(Field(spec, "tfReplicaSpecs"), type), "template"), "spec");
    if (!Field(name, "priorityClassName").empty()) return Field(name, "priorityClassName").get<std::string>();
  }
  return "";
}

std::string PodLabelSelector(const std::string& job) {
  return "training.kubeflow.org/job-name=" + job + ",training.kubeflow.org/operator-name=tfjob-controller";
}

void KueuePlayer::SetUp() {
  RealApiServerTest::SetUp();
  if (HasFailure()) return;
  std::string why;
  ASSERT_TRUE(InstallKueueCrds(cp_, &why)) << why;
}

json KueuePlayer::KueueReplica(int n, json spec, json metadata) {
  spec["containers"] = json::array({{{"name", "tensorflow"}, {"image", "tfjob/runtime-cpu:0.1.0"}}});
  json tmpl{{"spec", spec}};
  if (!metadata.empty()) tmpl["metadata"] = metadata;
  return {{"replicas", n}, {"restartPolicy", "Never"}, {"template", tmpl}};
}

void KueuePlayer::SubmitJob(const std::string& name, const json& replica_specs, json run_policy, const json& labels) {
  json all_labels = labels.is_object() ? labels : json::object();
  all_labels[kQueueLabel] = "user-queue";
  if (!run_policy.contains("suspend")) run_policy["suspend"] = true;
  Apply(json{{"apiVersion", "kubeflow.org/v1"},
             {"kind", "TFJob"},
             {"metadata", {{"name", name}, {"labels", all_labels}}},
             {"spec", {{"runPolicy", run_policy}, {"tfReplicaSpecs", replica_specs}}}}
            .dump());
}

void KueuePlayer::CreateFlavor(const std::string& name, const json& node_labels, const json& tolerations) {
  json flavor{{"apiVersion", "kueue.x-k8s.io/v1beta2"},
              {"kind", "ResourceFlavor"},
              {"metadata", {{"name", name}}},
              {"spec", {{"nodeLabels", node_labels}}}};
  if (!Empty(tolerations)) flavor["spec"]["tolerations"] = tolerations;
  Apply(flavor.dump());
}

std::string KueuePlayer::CreateWorkload(const std::string& job_name) {
  const json job = Get("tfjob", job_name);
  json pod_sets = json::array();  // KubeflowJob.PodSets (topology-aware scheduling off)
  for (const auto& type : OrderedReplicaTypes(job)) {
    const json& replica = job["spec"]["tfReplicaSpecs"][type];
    pod_sets.push_back(
        {{"name", Lower(type)}, {"count", replica.value("replicas", 1)}, {"template", Field(replica, "template")}});
  }
  // Kueue adds a hash of the job's uid (workload_names.go,
  // GetWorkloadNameForOwnerWithGVK); nothing here reads the name.
  const std::string name = "tfjob-" + job_name;
  const json& meta = job["metadata"];
  json workload{{"apiVersion", "kueue.x-k8s.io/v1beta2"},
                {"kind", "Workload"},
                {"metadata",
                 {{"name", name},
                  {"namespace", ns_},
                  {"labels", {{kJobUidLabel, meta["uid"]}}},
                  {"ownerReferences", json::array({{{"apiVersion", "kubeflow.org/v1"},
                                                    {"kind", "TFJob"},
                                                    {"name", job_name},
                                                    {"uid", meta["uid"]},
                                                    {"controller", true},
                                                    {"blockOwnerDeletion", true}}})}}},
                {"spec", {{"queueName", Field(meta, "labels").value(kQueueLabel, "")}, {"podSets", pod_sets}}}};
  // ExtractPriority with KubeflowJob.PriorityClass: a PriorityClass, looked
  // up for its value (pkg/util/priority, GetPriorityFromPriorityClass).
  const std::string priority_class = KueuePriorityClass(job);
  if (!priority_class.empty()) {
    const auto found = TryGet("priorityclass", priority_class);
    EXPECT_TRUE(found.has_value()) << "no PriorityClass " << priority_class;
    if (found) {
      workload["spec"]["priorityClassRef"] = {
          {"group", "scheduling.k8s.io"}, {"kind", "PriorityClass"}, {"name", priority_class}};
      workload["spec"]["priority"] = (*found)["value"];
    }
  }
  Apply(workload.dump());
  return name;
}

void KueuePlayer::Admit(const std::string& workload, const std::string& flavor) {
  const json wl = Get("workloads.kueue.x-k8s.io", workload);
  // workload.SetQuotaReservation: an earlier eviction's condition turns False.
  std::vector<json> conditions = {Condition("QuotaReserved", "True", "QuotaReserved"),
                                  Condition("Admitted", "True", "Admitted")};
  for (const auto& c : Field(Field(wl, "status"), "conditions")) {
    if (c.value("type", "") == "Evicted") conditions.push_back(Condition("Evicted", "False", "QuotaReserved"));
  }
  json assignments = json::array(), updates = json::array();
  for (const auto& ps : wl["spec"]["podSets"]) {
    assignments.push_back({{"name", ps["name"]}, {"flavors", {{"cpu", flavor}}}, {"count", ps["count"]}});
    updates.push_back({{"name", ps["name"]}, {"annotations", {{kConsumesAnnotation, workload + "-" + flavor}}}});
  }
  PatchWorkloadStatus(workload, {{"admission", {{"clusterQueue", "cluster-queue"}, {"podSetAssignments", assignments}}},
                                 {"admissionChecks", json::array({{{"name", "provisioning"},
                                                                   {"state", "Ready"},
                                                                   {"message", "provisioned"},
                                                                   {"lastTransitionTime", Now()},
                                                                   {"podSetUpdates", updates}}})},
                                 {"conditions", WithConditions(wl, conditions)}});
}

void KueuePlayer::StartJob(const std::string& job, const std::string& workload) {
  const json wl = Get("workloads.kueue.x-k8s.io", workload);
  // getPodSetsInfoFromStatus (reconciler.go): podset.FromAssignment takes
  // the flavor's node labels and tolerations, the podset label names the pod
  // set, and the admission checks' podSetUpdates are merged in
  // (podset.FromUpdate).
  std::vector<json> infos;
  for (const auto& a : Field(Field(Field(wl, "status"), "admission"), "podSetAssignments")) {
    const json flavor = Get("resourceflavors.kueue.x-k8s.io", a["flavors"]["cpu"]);
    json info{{"metadata", {{"labels", {{kPodSetLabel, a["name"]}}}}},
              {"spec",
               {{"nodeSelector", Field(Field(flavor, "spec"), "nodeLabels")},
                {"tolerations", Field(Field(flavor, "spec"), "tolerations")}}}};
    for (const auto& check : Field(Field(wl, "status"), "admissionChecks")) {
      for (const auto& u : Field(check, "podSetUpdates")) {
        if (u["name"] != a["name"]) continue;
        Merge(info, {{"metadata", {{"labels", Field(u, "labels")}, {"annotations", Field(u, "annotations")}}},
                     {"spec", {{"nodeSelector", Field(u, "nodeSelector")}, {"tolerations", Field(u, "tolerations")}}}});
      }
    }
    infos.push_back(info);
  }
  // RunWithPodSetsInfo (kubeflowjob_controller.go).
  UpdateJob(job, [&](json& tfjob) {
    tfjob["spec"]["runPolicy"]["suspend"] = false;
    const auto types = OrderedReplicaTypes(tfjob);
    ASSERT_EQ(types.size(), infos.size()) << "Kueue's BadPodSetsInfoLenError";
    for (size_t i = 0; i < types.size(); ++i) Merge(tfjob["spec"]["tfReplicaSpecs"][types[i]]["template"], infos[i]);
  });
}

void KueuePlayer::Evict(const std::string& workload) {
  const json wl = Get("workloads.kueue.x-k8s.io", workload);
  PatchWorkloadStatus(workload, {{"conditions", WithConditions(wl, {Condition("Evicted", "True", "Preempted")})}});
}

void KueuePlayer::StopJob(const std::string& job, const std::string& workload) {
  const json pod_sets = Get("workloads.kueue.x-k8s.io", workload)["spec"]["podSets"];
  UpdateJob(job, [&](json& tfjob) {
    tfjob["spec"]["runPolicy"]["suspend"] = true;  // KubeflowJob.Suspend
    const auto types = OrderedReplicaTypes(tfjob);
    // RestorePodSetsInfo skips the restore when the counts differ.
    if (types.size() != pod_sets.size()) return;
    for (size_t i = 0; i < types.size(); ++i) {
      Restore(tfjob["spec"]["tfReplicaSpecs"][types[i]]["template"], pod_sets[i]["template"]);
    }
  });
}

void KueuePlayer::ClearAdmission(const std::string& workload) {
  const json wl = Get("workloads.kueue.x-k8s.io", workload);
  // reconciler.go, "handle eviction": SetRequeuedCondition and
  // UnsetQuotaReservationWithCondition; the eviction resets the checks.
  json checks = json::array();
  for (const auto& c : Field(Field(wl, "status"), "admissionChecks")) {
    checks.push_back({{"name", c["name"]}, {"state", "Pending"}, {"message", "Reset"}, {"lastTransitionTime", Now()}});
  }
  PatchWorkloadStatus(workload, {{"admission", nullptr},
                                 {"admissionChecks", checks},
                                 {"conditions", WithConditions(wl, {Condition("QuotaReserved", "False", "Pending"),
                                                                    Condition("Admitted", "False", "NoReservation"),
                                                                    Condition("Requeued", "True", "Preempted")})}});
}

void KueuePlayer::UpdateJob(const std::string& name, const std::function<void(json&)>& change) {
  static int n = 0;
  for (int attempt = 0; attempt < 20; ++attempt) {
    json job = Get("tfjob", name);
    if (job.is_null()) return;
    change(job);
    if (HasFatalFailure()) return;
    job.erase("status");
    const std::string path = dir_ + "/update-" + std::to_string(n++) + ".json";
    std::ofstream(path) << job.dump();
    const auto r = Kubectl({"replace", "-f", path}, /*may_fail=*/true);
    if (r.exit_code == 0) return;
    if (r.err.find("the object has been modified") == std::string::npos) {
      ADD_FAILURE() << "kubectl replace of TFJob " << name << ": " << r.err;
      return;
    }
  }
  ADD_FAILURE() << "TFJob " << name << ": 20 conflicting writes in a row";
}

void KueuePlayer::PatchWorkloadStatus(const std::string& workload, const json& status) {
  Kubectl({"patch", "-n", ns_, "workloads.kueue.x-k8s.io", workload, "--subresource=status", "--type=merge", "-p",
           json{{"status", status}}.dump()});
}

json KueuePlayer::Condition(const std::string& type, const std::string& status, const std::string& reason) const {
  return {{"type", type}, {"status", status}, {"reason", reason}, {"message", reason}, {"lastTransitionTime", Now()}};
}

}  // namespace tfjob::op::envtest
