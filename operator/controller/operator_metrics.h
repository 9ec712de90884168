// The operator's Prometheus series, under the names Kubeflow's training
// operator and controller-runtime give them (operator dashboards and alerts
// are built on them; docs/monitoring.md lists them):
//   training_operator_jobs_{created,deleted,successful,failed,restarted}_total
//     {job_namespace, framework="tensorflow"};
//   controller-runtime's, all with controller="tfjob-controller":
//     controller_runtime_reconcile_total{controller,result},
//     controller_runtime_reconcile_errors_total,
//     controller_runtime_terminal_reconcile_errors_total (always 0),
//     controller_runtime_reconcile_panics_total (an exception out of a
//     reconcile: counted, retried, the operator stays up),
//     controller_runtime_reconcile_time_seconds,
//     controller_runtime_max_concurrent_reconciles,
//     controller_runtime_active_workers;
//   client-go's work-queue series, labelled as controller-runtime v0.19 does
//     (name and controller both "tfjob-controller"): workqueue_depth,
//     workqueue_adds_total, workqueue_queue_duration_seconds,
//     workqueue_work_duration_seconds, workqueue_retries_total,
//     workqueue_unfinished_work_seconds,
//     workqueue_longest_running_processor_seconds;
//   and this operator's own: tfjob_operator_reconcile_duration_seconds,
//     tfjob_operator_reconcile_errors_total, tfjob_operator_workqueue_depth.
// Series without labels start at zero, so rate() sees the first increment.
//
// Ownership: borrows the Registry (it must outlive this object); the series
// live in the Registry. The work-queue observer (QueueObserver) is shared
// with the queue that reports to it.
// Thread-safety: every method may be called from any thread at once
// (prometheus-cpp's metrics and families are thread-safe).
// Failure: the constructor throws what prometheus::Registry::Register throws
// when the Registry holds one of these names otherwise (another type or
// constant labels: a bug); on a Registry that already holds these series (a
// second controller) it shares them. Nothing else fails or throws.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "kube/workqueue.h"
#include "operator/api/types.h"

namespace tfjob::op::controller {

// How a reconcile ended, as controller_runtime_reconcile_total's result.
enum class ReconcileResult { kSuccess, kRequeueAfter, kError };

class OperatorMetrics {
 public:
  // Registers every series; controller_runtime_max_concurrent_reconciles is
  // set to `max_concurrent_reconciles`.
  OperatorMetrics(prometheus::Registry& registry, int max_concurrent_reconciles);
  OperatorMetrics(const OperatorMetrics&) = delete;
  OperatorMetrics& operator=(const OperatorMetrics&) = delete;

  // What the work queue reports to (the workqueue_* series it drives).
  std::shared_ptr<kube::WorkQueueMetrics> QueueObserver() const { return queue_observer_; }

  // A TFJob in namespace `ns` was deleted.
  void JobDeleted(const std::string& ns);
  // A job's status in namespace `ns`, `before`, was written as `after`: a
  // condition that became present (Created) or True (Succeeded, Failed,
  // Restarting) counts the job created, successful, failed or restarted. A
  // namespace's five job counters all start at zero on its first call.
  void JobStatusWritten(const std::string& ns, const api::JobStatus& before, const api::JobStatus& after);

  // A worker took a key and starts its reconcile.
  void ReconcileStarted();
  // The reconcile threw (counted as controller-runtime counts a panic); its
  // ReconcileFinished, with kError, follows.
  void ReconcilePanicked();
  // The reconcile started last ended after `seconds`, with `result`.
  void ReconcileFinished(double seconds, ReconcileResult result);

  // Keys waiting in the work queue (tfjob_operator_workqueue_depth).
  void QueueDepth(size_t depth);
  // The keys being processed: their seconds so far, summed, and the longest
  // (refreshed at scrape time).
  void QueueInFlight(double unfinished_seconds, double longest_seconds);

 private:
  std::shared_ptr<kube::WorkQueueMetrics> queue_observer_;
  prometheus::Family<prometheus::Counter>& created_;
  prometheus::Family<prometheus::Counter>& deleted_;
  prometheus::Family<prometheus::Counter>& successful_;
  prometheus::Family<prometheus::Counter>& failed_;
  prometheus::Family<prometheus::Counter>& restarted_;
  prometheus::Family<prometheus::Histogram>& reconcile_seconds_;
  prometheus::Family<prometheus::Counter>& reconcile_errors_;
  prometheus::Family<prometheus::Gauge>& depth_;
  // controller-runtime's.
  prometheus::Family<prometheus::Counter>& cr_reconcile_total_;
  prometheus::Counter& cr_reconcile_errors_;
  prometheus::Counter& cr_terminal_errors_;
  prometheus::Counter& cr_reconcile_panics_;
  prometheus::Histogram& cr_reconcile_time_;
  prometheus::Gauge& cr_active_workers_;
  prometheus::Gauge& unfinished_work_;
  prometheus::Gauge& longest_running_;
};

}  // namespace tfjob::op::controller
