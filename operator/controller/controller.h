// The TFJob controller: informers on TFJobs and on the pods and services that
// carry the job-name label, a rate-limited work queue, and workers that
// reconcile one job key at a time (with gang scheduling, also the jobs'
// PodGroups, selected by the job-name label; with --kueue=external, the jobs'
// Kueue Workloads, likewise, and the ResourceFlavors): observe (from the caches) -> plan
// (planner.h, pure) -> act (through the Client). Creates that find the
// object present and deletes that find it gone count as success, so acting on
// a stale cache is harmless; a 409 on the status write requeues.
//
// Its Prometheus series (Kubeflow's and controller-runtime's names) are
// operator_metrics.h's, registered on the Registry it is given.
// Ownership: borrows the Client and Registry (they outlive the controller).
// Thread-safety: Start/Stop from one thread; everything else internal.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <thread>
#include <vector>

#include <prometheus/registry.h>

#include "common/mutex.h"
#include "operator/controller/operator_metrics.h"
#include "operator/controller/planner.h"
#include "kube/client.h"
#include "kube/event_sink.h"
#include "kube/informer.h"
#include "kube/workqueue.h"

namespace tfjob::op::controller {

// Kueue's resources with --kueue=external: Workloads (written and read as
// v1beta1), ResourceFlavors (cluster-scoped), and the PriorityClasses a
// Workload's priority comes from.
inline const kube::Resource kWorkloads{"kueue.x-k8s.io", "v1beta1", "workloads"};
inline const kube::Resource kResourceFlavors{"kueue.x-k8s.io", "v1beta1", "resourceflavors"};
inline const kube::Resource kPriorityClasses{"scheduling.k8s.io", "v1", "priorityclasses"};

struct ControllerOptions {
  std::string ns;  // "" watches every namespace
  PlannerOptions planner;
  int workers = 2;
  // Where events go: queued to this sink (its own client and rate limit,
  // written off the reconcile path, as the operator binary does), or, when
  // null, created at once through the controller's client (tests that read
  // an event right after a reconcile).
  kube::EventSink* events = nullptr;
};

class Controller {
 public:
  Controller(kube::Client& client, ControllerOptions options, prometheus::Registry& registry);
  ~Controller();

  void Start();
  void Stop();
  bool Ready() const;  // every cache has synced

  // One reconcile of "ns/name" (what a worker runs). *requeue_after is set
  // when the plan asked for a timed requeue (a deadline, a TTL).
  Status Reconcile(const std::string& key, bool* requeue_after = nullptr);
  size_t QueueDepth() const { return queue_.Depth(); }
  // Gauges read at scrape time (the work queue's unfinished work).
  void RefreshMetrics();

 private:
  void Work();
  void EnqueueOwner(const nlohmann::json& obj);
  // A node added, changed or deleted: the jobs with pods on it are queued
  // when its Ready status changed.
  void NodeChanged(const std::string& type, const nlohmann::json& obj);
  // Carries out a plan: the restart counts first (nothing else when that
  // fails), then the other actions in order, then the creates. The first
  // error goes to first_error (when that is still OK); every other action
  // is still tried. Rethrows, on the caller's thread, what a create threw.
  void Execute(const api::TFJob& job, const Plan& plan, Status& first_error);
  // One action other than kPatchJob and the creates, with its events: the
  // error to requeue for, OK when done (an object already gone or already
  // there counts as done where Kubeflow counts it so).
  Status ExecuteAction(const api::TFJob& job, const Action& a);
  // The plan's pod and service creates: the two kinds side by side, each in
  // slow-start batches (act.cc); the first failure goes to first_error.
  void CreateInBatches(const api::TFJob& job, const std::vector<const Action*>& creates, Status& first_error);
  // One pod or service create, with its event: OK when created, or found
  // present and ours (see ClaimExisting). Called from several threads.
  Status CreateOne(const api::TFJob& job, const Action& a);
  // The job's task-auth Secret with a token and, with task_tls, the job's
  // TLS material; an existing one keeps what it has and gets what it lacks.
  Status EnsureSecret(const api::TFJob& job, const Action& create);
  // The job's Workload, spec.priority filled from its PriorityClass (an
  // unknown class: a Warning event and the error, so a requeue); one that
  // exists already counts as made.
  Status CreateWorkload(const api::TFJob& job, const Action& create);
  // Records an event on the TFJob, once: an event this process already
  // recorded for the job (same type, reason and message) is not sent again
  // (the planner re-derives per-pod events on every pass).
  void RecordEvent(const api::TFJob& job, const Event& e);
  // After a create found `name` present: OK when the job controls it, an
  // orphan with the job's labels is adopted, anything else is
  // ALREADY_EXISTS naming it.
  Status ClaimExisting(const api::TFJob& job, const kube::Resource& r, const std::string& name);

  kube::Client& client_;
  const ControllerOptions options_;
  // Deletion expectations: pods we deleted whose DELETED event the cache has
  // not shown yet. The planner sees them as deleting, so a stale cache never
  // makes it restart (and count) the same failed pod twice.
  Mutex expect_mu_;
  std::set<std::string> deleted_uids_ TFJOB_GUARDED_BY(expect_mu_);
  // Events already recorded, by job uid: a 64-bit hash of each one's
  // "type/reason/message", not the string (about a hundred bytes an event,
  // a dozen events a job; two messages of one job colliding would cost one
  // event). A
  // job's entry goes when the job does.
  Mutex events_mu_;
  std::unordered_map<std::string, std::unordered_set<uint64_t>> recorded_events_ TFJOB_GUARDED_BY(events_mu_);
  kube::Informer jobs_, pods_, services_;
  // The jobs' PodGroups, when gang scheduling is on.
  std::unique_ptr<kube::Informer> pod_groups_;
  kube::Resource pod_group_resource_;
  // With --kueue=external: the jobs' Workloads (selected by the job-name
  // label the operator puts on them) and the ResourceFlavors.
  std::unique_ptr<kube::Informer> workloads_, flavors_;
  // With PlannerOptions::node_unreachable_grace: the nodes (name and Ready
  // condition only), and each one's Ready status as last seen, so that only
  // a change brings back the jobs on it.
  std::unique_ptr<kube::Informer> nodes_;
  Mutex nodes_mu_;
  std::map<std::string, std::string> node_ready_ TFJOB_GUARDED_BY(nodes_mu_);
  // Before queue_, which reports to it.
  OperatorMetrics metrics_;
  kube::WorkQueue queue_;
  std::vector<std::thread> workers_;
  std::atomic<bool> running_{false};
};

}  // namespace tfjob::op::controller
