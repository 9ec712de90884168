#include "operator/controller/operator_metrics.h"

#include <string_view>

#include "operator/api/names.h"
#include "operator/controller/conditions.h"
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

const char* ResultLabel(ReconcileResult r) {
  switch (r) {
    case ReconcileResult::kSuccess: return "success";
    case ReconcileResult::kRequeueAfter: return "requeue_after";
    case ReconcileResult::kError: return "error";
  }
  return "error";
}

}  // namespace

// The work-queue series are registered first, then the rest, in the order
// the controller has always registered them (the exposition keeps it).
OperatorMetrics::OperatorMetrics(prometheus::Registry& reg, int max_concurrent_reconciles)
    : queue_observer_(std::make_shared<QueueMetrics>(reg)),
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
      .Set(max_concurrent_reconciles);
}

void OperatorMetrics::JobDeleted(const std::string& ns) { deleted_.Add(JobLabels(ns)).Increment(); }

void OperatorMetrics::JobStatusWritten(const std::string& ns, const api::JobStatus& before,
                                       const api::JobStatus& after) {
  const auto labels = JobLabels(ns);
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

void OperatorMetrics::ReconcileStarted() { cr_active_workers_.Increment(); }

void OperatorMetrics::ReconcilePanicked() { cr_reconcile_panics_.Increment(); }

void OperatorMetrics::ReconcileFinished(double seconds, ReconcileResult result) {
  reconcile_seconds_.Add({}, ReconcileBuckets()).Observe(seconds);
  cr_reconcile_time_.Observe(seconds);
  cr_active_workers_.Decrement();
  prometheus::Labels labels = kController;
  labels["result"] = ResultLabel(result);
  cr_reconcile_total_.Add(labels).Increment();
  if (result == ReconcileResult::kError) {
    cr_reconcile_errors_.Increment();
    reconcile_errors_.Add({}).Increment();
  }
}

void OperatorMetrics::QueueDepth(size_t depth) { depth_.Add({}).Set(static_cast<double>(depth)); }

void OperatorMetrics::QueueInFlight(double unfinished_seconds, double longest_seconds) {
  unfinished_work_.Set(unfinished_seconds);
  longest_running_.Set(longest_seconds);
}

}  // namespace tfjob::op::controller
