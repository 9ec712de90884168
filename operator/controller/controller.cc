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
#include "operator/controller/planner_internal.h"
#include "operator/api/names.h"
#include "services/base/exposition.h"

namespace tfjob::op::controller {
namespace {

using internal::FindCondition;
using internal::IsTrue;

bool Has(const api::JobStatus& s, std::string_view type) { return FindCondition(s, type) != nullptr; }

prometheus::Family<prometheus::Counter>& Counter(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}

// 0.5 ms .. ~131 s.
prometheus::Histogram::BucketBoundaries ReconcileBuckets() { return base::ExponentialBuckets(0.0005, 4, 10); }

prometheus::Labels JobLabels(const std::string& ns) { return {{"job_namespace", ns}, {"framework", "tensorflow"}}; }

// controller-runtime's controller label; its workqueue series (v0.19) carry
// the queue's name twice, as name and as controller.
const prometheus::Labels kController{{"controller", std::string(api::kOperatorName)}};
const prometheus::Labels kQueue{{"name", std::string(api::kOperatorName)},
                                {"controller", std::string(api::kOperatorName)}};

// controller-runtime's reconcile_time_seconds buckets.
prometheus::Histogram::BucketBoundaries ReconcileTimeBuckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5,
          1.75,  2.0,  2.5,   3.0,  3.5, 4.0,  4.5, 5,    6,   7,    8,   9,    10,  15,  20,  25,  30,  40,  50,   60};
}

// controller-runtime's workqueue metrics: latencies in 10^-8 .. 10^3 s buckets.
class QueueMetrics final : public kube::WorkQueueMetrics {
 public:
  explicit QueueMetrics(prometheus::Registry& r)
      : depth_(prometheus::BuildGauge()
                   .Name("workqueue_depth")
                   .Help("Current depth of workqueue")
                   .Register(r)
                   .Add(kQueue)),
        adds_(prometheus::BuildCounter()
                  .Name("workqueue_adds_total")
                  .Help("Total number of adds handled by workqueue")
                  .Register(r)
                  .Add(kQueue)),
        queued_(prometheus::BuildHistogram()
                    .Name("workqueue_queue_duration_seconds")
                    .Help("How long in seconds an item stays in workqueue before being requested")
                    .Register(r)
                    .Add(kQueue, base::ExponentialBuckets(10e-9, 10, 12))),
        worked_(prometheus::BuildHistogram()
                    .Name("workqueue_work_duration_seconds")
                    .Help("How long in seconds processing an item from workqueue takes.")
                    .Register(r)
                    .Add(kQueue, base::ExponentialBuckets(10e-9, 10, 12))),
        retries_(prometheus::BuildCounter()
                     .Name("workqueue_retries_total")
                     .Help("Total number of retries handled by workqueue")
                     .Register(r)
                     .Add(kQueue)) {}
  void Added() override { adds_.Increment(); }
  void Depth(size_t d) override { depth_.Set(static_cast<double>(d)); }
  void Queued(double s) override { queued_.Observe(s); }
  void Worked(double s) override { worked_.Observe(s); }
  void Retried() override { retries_.Increment(); }

 private:
  prometheus::Gauge& depth_;
  prometheus::Counter& adds_;
  prometheus::Histogram& queued_;
  prometheus::Histogram& worked_;
  prometheus::Counter& retries_;
};

}  // namespace

Controller::Controller(kube::Client& client, ControllerOptions options, prometheus::Registry& reg)
    : client_(client),
      options_(std::move(options)),
      jobs_(client, kube::kTFJobs, options_.ns, "", [](nlohmann::json o) { return CachedJob(std::move(o)); }),
      pods_(client, kube::kPods, options_.ns, std::string(api::kJobNameLabel),
            [](nlohmann::json o) { return CachedPod(std::move(o)); }),
      services_(client, kube::kServices, options_.ns, std::string(api::kJobNameLabel),
                [](nlohmann::json o) { return CachedService(std::move(o)); }),
      queue_metrics_(std::make_shared<QueueMetrics>(reg)),
      queue_(std::chrono::milliseconds(5), std::chrono::seconds(300), queue_metrics_),
      created_(Counter(reg, "training_operator_jobs_created_total", "Counts number of jobs created")),
      deleted_(Counter(reg, "training_operator_jobs_deleted_total", "Counts number of jobs deleted")),
      successful_(Counter(reg, "training_operator_jobs_successful_total", "Counts number of jobs successful")),
      failed_(Counter(reg, "training_operator_jobs_failed_total", "Counts number of jobs failed")),
      restarted_(Counter(reg, "training_operator_jobs_restarted_total", "Counts number of jobs restarted")),
      reconcile_seconds_(prometheus::BuildHistogram()
                             .Name("tfjob_operator_reconcile_duration_seconds")
                             .Help("Time to reconcile one TFJob")
                             .Register(reg)),
      reconcile_errors_(Counter(reg, "tfjob_operator_reconcile_errors_total", "Reconciles that ended in an error")),
      depth_(prometheus::BuildGauge()
                 .Name("tfjob_operator_workqueue_depth")
                 .Help("TFJob keys waiting to be reconciled")
                 .Register(reg)),
      cr_reconcile_total_(
          Counter(reg, "controller_runtime_reconcile_total", "Total number of reconciliations per controller")),
      cr_reconcile_errors_(Counter(reg, "controller_runtime_reconcile_errors_total",
                                   "Total number of reconciliation errors per controller")
                               .Add(kController)),
      // Always 0, as in training-operator: it never returns a terminal error.
      cr_terminal_errors_(Counter(reg, "controller_runtime_terminal_reconcile_errors_total",
                                  "Total number of terminal reconciliation errors per controller")
                              .Add(kController)),
      cr_reconcile_panics_(Counter(reg, "controller_runtime_reconcile_panics_total",
                                   "Total number of reconciliation panics per controller")
                               .Add(kController)),
      cr_reconcile_time_(prometheus::BuildHistogram()
                             .Name("controller_runtime_reconcile_time_seconds")
                             .Help("Length of time per reconciliation per controller")
                             .Register(reg)
                             .Add(kController, ReconcileTimeBuckets())),
      cr_active_workers_(prometheus::BuildGauge()
                             .Name("controller_runtime_active_workers")
                             .Help("Number of currently used workers per controller")
                             .Register(reg)
                             .Add(kController)),
      unfinished_work_(
          prometheus::BuildGauge()
              .Name("workqueue_unfinished_work_seconds")
              .Help("How many seconds of work has been done that is in progress and hasn't been observed by "
                    "work_duration. Large values indicate stuck threads. One can deduce the number of stuck "
                    "threads by observing the rate at which this increases.")
              .Register(reg)
              .Add(kQueue)),
      longest_running_(prometheus::BuildGauge()
                           .Name("workqueue_longest_running_processor_seconds")
                           .Help("How many seconds has the longest running processor for workqueue been running.")
                           .Register(reg)
                           .Add(kQueue)) {
  // Series without labels start at zero, so rate() sees the first increment.
  reconcile_errors_.Add({});
  depth_.Add({});
  for (const char* result : {"success", "error", "requeue", "requeue_after"}) {
    prometheus::Labels l = kController;
    l["result"] = result;
    cr_reconcile_total_.Add(l);
  }
  prometheus::BuildGauge()
      .Name("controller_runtime_max_concurrent_reconciles")
      .Help("Maximum number of concurrent reconciles per controller")
      .Register(reg)
      .Add(kController)
      .Set(std::max(1, options_.workers));
  jobs_.AddHandler([this](const std::string& type, const nlohmann::json& obj) {
    const std::string key = kube::ObjectKey(obj);
    if (type == "DELETED") {
      const auto& m = obj["metadata"];
      deleted_.Add(JobLabels(m.value("namespace", ""))).Increment();
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

void Controller::Start() {
  running_ = true;
  jobs_.Start();
  pods_.Start();
  services_.Start();
  if (pod_groups_) pod_groups_->Start();
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
}

bool Controller::Ready() const {
  return jobs_.HasSynced() && pods_.HasSynced() && services_.HasSynced() && (!pod_groups_ || pod_groups_->HasSynced());
}

void Controller::Work() {
  while (auto key = queue_.Get()) {
    // Acting on caches that have not listed yet could recreate what exists.
    while (!Ready() && running_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    cr_active_workers_.Increment();
    const auto t0 = std::chrono::steady_clock::now();
    bool requeue_after = false;
    Status s;
    try {
      s = Reconcile(*key, &requeue_after);
    } catch (const std::exception& e) {
      // A bug, not an input: counted like controller-runtime's recovered
      // panics, retried, and the operator stays up for its other jobs.
      cr_reconcile_panics_.Increment();
      s = Internal(std::string("reconcile threw: ") + e.what());
    } catch (...) {
      cr_reconcile_panics_.Increment();
      s = Internal("reconcile threw a non-standard exception");
    }
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    reconcile_seconds_.Add({}, ReconcileBuckets()).Observe(took);
    cr_reconcile_time_.Observe(took);
    cr_active_workers_.Decrement();
    prometheus::Labels result = kController;
    result["result"] = !s.ok() ? "error" : requeue_after ? "requeue_after" : "success";
    cr_reconcile_total_.Add(result).Increment();
    if (s.ok()) {
      queue_.Forget(*key);
    } else {
      cr_reconcile_errors_.Increment();
      reconcile_errors_.Add({}).Increment();
      // One line per failed attempt: the retry (with backoff) follows.
      std::cerr << "tfjob-operator: reconcile " << *key << ": " << s.message() << std::endl;
      queue_.AddRateLimited(*key);
    }
    queue_.Done(*key);
    depth_.Add({}).Set(static_cast<double>(queue_.Depth()));
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

void Controller::CountTransitions(const api::TFJob& job, const api::JobStatus& before, const api::JobStatus& after) {
  const auto labels = JobLabels(job.metadata.namespace_);
  // A namespace's job counters all start at zero once it has a job, so
  // rate() sees its first success or failure (Add returns the existing
  // series after the first time).
  for (auto* family : {&created_, &deleted_, &successful_, &failed_, &restarted_}) family->Add(labels);
  if (!Has(before, api::kConditionCreated) && Has(after, api::kConditionCreated)) created_.Add(labels).Increment();
  if (!IsTrue(before, api::kConditionSucceeded) && IsTrue(after, api::kConditionSucceeded))
    successful_.Add(labels).Increment();
  if (!IsTrue(before, api::kConditionFailed) && IsTrue(after, api::kConditionFailed)) failed_.Add(labels).Increment();
  if (!IsTrue(before, api::kConditionRestarting) && IsTrue(after, api::kConditionRestarting))
    restarted_.Add(labels).Increment();
}

void Controller::RefreshMetrics() {
  const auto [unfinished, longest] = queue_.InFlight();
  unfinished_work_.Set(unfinished);
  longest_running_.Set(longest);
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
  Plan plan = PlanJob(job, pods, services, std::chrono::system_clock::now(), options_.planner, pod_group);
  if (plan.skipped) return Status::Ok();
  // The cache may still hold a job that was just deleted; creating pods for
  // it would leave orphans. Where the status is written first, that write
  // settles it: it carries the cached resourceVersion, so a deleted job
  // answers 404 and a job re-created under the name 409. Otherwise one live
  // read settles it before anything is made.
  const bool creates = std::any_of(plan.actions.begin(), plan.actions.end(), [](const Action& a) {
    return a.kind == Action::Kind::kCreatePod || a.kind == Action::Kind::kCreateService ||
           a.kind == Action::Kind::kCreatePodGroup;
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
    CountTransitions(job, job.status, plan.status);
  }
  {
    MutexLock g(expect_mu_);
    for (const Action& a : plan.actions) {
      if (a.kind != Action::Kind::kDeletePod) continue;
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
