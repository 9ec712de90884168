#include "operator/controller/controller.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <iostream>

#include "common/mutex.h"
#include "common/time.h"
#include "operator/api/codec.h"
#include "operator/controller/cache.h"
#include "operator/controller/kueue_workload.h"
#include "operator/controller/views.h"
#include "operator/api/names.h"

namespace tfjob::op::controller {

Controller::Controller(kube::Client& client, ControllerOptions options, prometheus::Registry& reg)
    : client_(client),
      options_(std::move(options)),
      jobs_(client, kube::kTFJobs, options_.ns, "", [](nlohmann::json o) { return CachedJob(std::move(o)); }),
      pods_(client, kube::kPods, options_.ns, std::string(api::kJobNameLabel),
            [](nlohmann::json o) { return CachedPod(std::move(o)); }),
      services_(client, kube::kServices, options_.ns, std::string(api::kJobNameLabel),
                [](nlohmann::json o) { return CachedService(std::move(o)); }),
      metrics_(reg, std::max(1, options_.workers)),
      queue_(std::chrono::milliseconds(5), std::chrono::seconds(300), metrics_.QueueObserver()) {
  jobs_.AddHandler([this](const std::string& type, const nlohmann::json& obj) {
    const std::string key = kube::ObjectKey(obj);
    if (type == "DELETED") {
      const auto& m = obj["metadata"];
      metrics_.JobDeleted(m.value("namespace", ""));
      MutexLock g(events_mu_);
      recorded_events_.erase(m.value("uid", ""));
    }
    queue_.Add(key);
  });
  auto owner = [this](const std::string&, const nlohmann::json& obj) { EnqueueOwner(obj); };
  if (!options_.planner.gang_scheduler.empty()) {
    const PodGroupResource r = PodGroupResourceFor(options_.planner.gang_scheduler);
    pod_group_resource_ = kube::Resource{r.group, r.version, "podgroups"};
    // A PodGroup's phase (Volcano admitting the gang) or an edit of its spec
    // brings its job back.
    pod_groups_ =
        std::make_unique<kube::Informer>(client, pod_group_resource_, options_.ns, std::string(api::kJobNameLabel));
    pod_groups_->AddHandler(owner);
  }
  if (options_.planner.kueue == kKueueExternal) {
    // Kueue's admission and eviction of a Workload bring its job back; a
    // flavor is read when pods are made, so its changes need no job.
    workloads_ = std::make_unique<kube::Informer>(client, kWorkloads, options_.ns, std::string(api::kJobNameLabel));
    workloads_->AddHandler(owner);
    workloads_->SetIndexLabel(std::string(api::kJobNameLabel));
    flavors_ = std::make_unique<kube::Informer>(client, kResourceFlavors, "");
  }
  if (options_.planner.node_unreachable_grace.count() > 0) {
    // A node whose Ready condition changes brings back the jobs with pods
    // on it; the planner's requeue then times the grace.
    nodes_ = std::make_unique<kube::Informer>(client, kube::kNodes, "", "",
                                              [](nlohmann::json o) { return CachedNode(std::move(o)); });
    nodes_->AddHandler([this](const std::string& type, const nlohmann::json& obj) { NodeChanged(type, obj); });
  }
  pods_.AddHandler([this](const std::string& type, const nlohmann::json& obj) {
    if (type == "DELETED") {
      MutexLock g(expect_mu_);
      deleted_uids_.erase(ViewPod(obj).uid);
    }
    EnqueueOwner(obj);
  });
  services_.AddHandler(owner);
  // Each reconcile lists its job's pods and services by this label.
  pods_.SetIndexLabel(std::string(api::kJobNameLabel));
  services_.SetIndexLabel(std::string(api::kJobNameLabel));
}

Controller::~Controller() { Stop(); }

void Controller::EnqueueOwner(const nlohmann::json& obj) {
  if (!obj.is_object() || !obj.contains("metadata")) return;
  const auto& m = obj["metadata"];
  const auto labels = m.value("labels", nlohmann::json::object());
  if (!labels.is_object() || !labels.contains(std::string(api::kJobNameLabel))) return;
  const auto& job = labels[std::string(api::kJobNameLabel)];
  if (job.is_string()) queue_.Add(m.value("namespace", "") + "/" + job.get<std::string>());
}

void Controller::NodeChanged(const std::string& type, const nlohmann::json& obj) {
  const NodeView node = ViewNode(obj);
  {
    MutexLock g(nodes_mu_);
    if (type == "DELETED") {
      node_ready_.erase(node.name);
      return;  // its pods go with it (the pod garbage collector)
    }
    auto [it, added] = node_ready_.emplace(node.name, node.ready);
    if (!added && it->second == node.ready) return;
    it->second = node.ready;
  }
  for (const auto& pod : pods_.List(options_.ns)) {
    if (internal::Str(internal::Field(pod, "spec"), "nodeName") == node.name) EnqueueOwner(pod);
  }
}

void Controller::Start() {
  running_ = true;
  jobs_.Start();
  pods_.Start();
  services_.Start();
  if (pod_groups_) pod_groups_->Start();
  if (workloads_) workloads_->Start();
  if (flavors_) flavors_->Start();
  if (nodes_) nodes_->Start();
  for (int i = 0; i < std::max(1, options_.workers); ++i) workers_.emplace_back([this] { Work(); });
}

void Controller::Stop() {
  if (!running_.exchange(false)) return;
  queue_.ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
  jobs_.Stop();
  pods_.Stop();
  services_.Stop();
  if (pod_groups_) pod_groups_->Stop();
  if (workloads_) workloads_->Stop();
  if (flavors_) flavors_->Stop();
  if (nodes_) nodes_->Stop();
}

bool Controller::Ready() const {
  return jobs_.HasSynced() && pods_.HasSynced() && services_.HasSynced() &&
         (!pod_groups_ || pod_groups_->HasSynced()) && (!workloads_ || workloads_->HasSynced()) &&
         (!flavors_ || flavors_->HasSynced()) && (!nodes_ || nodes_->HasSynced());
}

void Controller::Work() {
  while (auto key = queue_.Get()) {
    // Acting on caches that have not listed yet could recreate what exists.
    while (!Ready() && running_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    metrics_.ReconcileStarted();
    const auto t0 = std::chrono::steady_clock::now();
    bool requeue_after = false;
    Status s;
    try {
      s = Reconcile(*key, &requeue_after);
    } catch (const std::exception& e) {
      // A bug, not an input: counted like controller-runtime's recovered
      // panics, retried, and the operator stays up for its other jobs.
      metrics_.ReconcilePanicked();
      s = Internal(std::string("reconcile threw: ") + e.what());
    } catch (...) {
      metrics_.ReconcilePanicked();
      s = Internal("reconcile threw a non-standard exception");
    }
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    metrics_.ReconcileFinished(took, !s.ok()         ? ReconcileResult::kError
                                     : requeue_after ? ReconcileResult::kRequeueAfter
                                                     : ReconcileResult::kSuccess);
    if (s.ok()) {
      queue_.Forget(*key);
    } else {
      // One line per failed attempt: the retry (with backoff) follows.
      std::cerr << "tfjob-operator: reconcile " << *key << ": " << s.message() << std::endl;
      queue_.AddRateLimited(*key);
    }
    queue_.Done(*key);
    metrics_.QueueDepth(queue_.Depth());
  }
}

void Controller::RecordEvent(const api::TFJob& job, const Event& e) {
  {
    MutexLock g(events_mu_);
    auto& seen = recorded_events_[job.metadata.uid];
    // Bounded: a job that somehow keeps producing new messages does not
    // grow this without end.
    if (seen.size() > 1000) seen.clear();
    if (!seen.insert(std::hash<std::string>{}(e.type + "/" + e.reason + "/" + e.message)).second) return;
  }
  const std::string now = FormatRfc3339(std::chrono::system_clock::now());
  nlohmann::json ev{{"apiVersion", "v1"},
                    {"kind", "Event"},
                    {"metadata", {{"generateName", job.metadata.name + "."}, {"namespace", job.metadata.namespace_}}},
                    {"involvedObject",
                     {{"apiVersion", std::string(api::kApiVersion)},
                      {"kind", std::string(api::kKind)},
                      {"name", job.metadata.name},
                      {"namespace", job.metadata.namespace_},
                      {"uid", job.metadata.uid}}},
                    {"type", e.type},
                    {"reason", e.reason},
                    {"message", e.message},
                    {"firstTimestamp", now},
                    {"lastTimestamp", now},
                    {"count", 1},
                    {"source", {{"component", std::string(api::kOperatorName)}}}};
  if (options_.events) {
    options_.events->Record(job.metadata.namespace_, std::move(ev));
    return;
  }
  (void)client_.Create(kube::kEvents, job.metadata.namespace_, ev);  // events are best effort
}

void Controller::RefreshMetrics() {
  const auto [unfinished, longest] = queue_.InFlight();
  metrics_.QueueInFlight(unfinished, longest);
}

Status Controller::Reconcile(const std::string& key, bool* requeue_after) {
  const auto slash = key.find('/');
  const std::string ns = key.substr(0, slash), name = key.substr(slash + 1);
  auto cached = jobs_.Get(ns, name);
  if (!cached) return Status::Ok();  // deleted; its pods go by ownerReference
  auto decoded = api::Decode(*cached);
  if (!decoded.ok()) {
    // The schema let through something the operator cannot use: say so in
    // status, once, and leave it.
    const std::string msg = "TFJob " + key + " is invalid: " + decoded.status().message();
    // Anything here may be malformed too (no status, status not an object).
    nlohmann::json conds = nlohmann::json::array();
    if (cached->is_object() && cached->contains("status") && (*cached)["status"].is_object()) {
      conds = (*cached)["status"].value("conditions", nlohmann::json::array());
    }
    if (!conds.is_array()) conds = nlohmann::json::array();
    for (const auto& c : conds) {
      if (c.is_object() && c.value("type", "") == "Failed" && c.value("message", "") == msg) return Status::Ok();
    }
    const std::string now = FormatRfc3339(std::chrono::system_clock::now());
    nlohmann::json patch{{"status",
                          {{"conditions", nlohmann::json::array({{{"type", "Failed"},
                                                                  {"status", "True"},
                                                                  {"reason", std::string(api::kReasonFailedValidation)},
                                                                  {"message", msg},
                                                                  {"lastUpdateTime", now},
                                                                  {"lastTransitionTime", now}}})}}}};
    return client_.MergePatch(kube::kTFJobs, ns, name, patch, true).status();
  }
  const api::TFJob& job = *decoded;
  const std::map<std::string, std::string> selector{{std::string(api::kJobNameLabel), name}};
  std::vector<PodView> pods;
  {
    MutexLock g(expect_mu_);
    for (const auto& p : pods_.List(ns, selector)) {
      PodView v = ViewPod(p);
      if (deleted_uids_.count(v.uid)) v.deleting = true;
      pods.push_back(std::move(v));
    }
  }
  std::vector<ServiceView> services;
  for (const auto& s : services_.List(ns, selector)) services.push_back(ViewService(s));

  std::optional<PodGroupView> pod_group;
  if (pod_groups_) {
    if (auto pg = pod_groups_->Get(ns, name)) pod_group = ViewPodGroup(*pg);
  }
  ObservedKueue kueue;
  if (workloads_) {
    // The one the job controls; Kueue's name first, should there be more.
    for (const auto& w : workloads_->List(ns, selector)) {
      WorkloadView v = ViewWorkload(w);
      if (v.controller_uid != job.metadata.uid) continue;
      if (!kueue.workload || v.name == WorkloadName(job)) kueue.workload = std::move(v);
    }
    for (const auto& f : flavors_->List("")) {
      const std::string flavor = internal::Str(internal::Field(f, "metadata"), "name");
      if (!flavor.empty()) kueue.flavors[flavor] = internal::Field(f, "spec");
    }
  }
  ObservedNodes nodes;  // the nodes its pods are bound to
  if (nodes_) {
    for (const auto& p : pods) {
      if (p.node_name.empty() || nodes.count(p.node_name)) continue;
      if (auto n = nodes_->Get("", p.node_name)) nodes[p.node_name] = ViewNode(*n);
    }
  }
  Plan plan = PlanJob(job, pods, services, std::chrono::system_clock::now(), options_.planner, pod_group, kueue, nodes);
  if (plan.skipped) return Status::Ok();
  // The cache may still hold a job that was just deleted; creating pods for
  // it would leave orphans. Where the status is written first, that write
  // settles it: it carries the cached resourceVersion, so a deleted job
  // answers 404 and a job re-created under the name 409. Otherwise one live
  // read settles it before anything is made.
  const bool creates = std::any_of(plan.actions.begin(), plan.actions.end(), [](const Action& a) {
    return a.kind == Action::Kind::kCreatePod || a.kind == Action::Kind::kCreateService ||
           a.kind == Action::Kind::kCreatePodGroup || a.kind == Action::Kind::kCreateWorkload;
  });
  if (creates && !plan.status_changed) {
    auto live = client_.Get(kube::kTFJobs, ns, name);
    if (live.status().code() == Code::kNotFound) return Status::Ok();
    if (!live.ok()) return live.status();
    const auto& meta = (*live)["metadata"];
    if (!meta.is_object() || meta.value("uid", "") != job.metadata.uid)
      return Status::Ok();  // a new job by that name: its own events follow
    if (meta.contains("deletionTimestamp")) return Status::Ok();
  }
  // Record, then act: the status (with any restart it counts) is written
  // first, so a failed write (409 from a stale cache) changes nothing and the
  // retry plans again from the same observed world; a restart is never
  // carried out without being counted.
  if (plan.status_changed) {
    api::TFJob updated = job;
    updated.status = plan.status;
    auto r = client_.UpdateStatus(kube::kTFJobs, ns, api::Encode(updated));
    if (r.status().code() == Code::kNotFound) return Status::Ok();  // deleted: its DELETED event follows
    if (!r.ok()) return r.status();                                 // the watch brings the newer version; we plan again
    metrics_.JobStatusWritten(job.metadata.namespace_, job.status, plan.status);
  }
  {
    MutexLock g(expect_mu_);
    for (const Action& a : plan.actions) {
      if (a.kind != Action::Kind::kDeletePod && a.kind != Action::Kind::kForceDeletePod) continue;
      for (const auto& p : pods) {
        if (p.name == a.name && !p.uid.empty()) deleted_uids_.insert(p.uid);
      }
    }
  }
  Status first_error;
  Execute(job, plan, first_error);
  for (const Event& e : plan.events) RecordEvent(job, e);
  if (plan.requeue_after) {
    queue_.AddAfter(key, std::chrono::duration_cast<std::chrono::milliseconds>(*plan.requeue_after) +
                             std::chrono::milliseconds(50));
    if (requeue_after) *requeue_after = true;
  }
  return first_error;
}

}  // namespace tfjob::op::controller
