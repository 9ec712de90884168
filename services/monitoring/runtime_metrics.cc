#include "services/monitoring/runtime_metrics.h"

#include <cmath>
#include <cstdlib>
#include <ostream>

#include "contract/env.h"
#include "services/base/exposition.h"

namespace tfjob::runtime_metrics {
namespace {

// Closures and worker steps: 1 ms .. ~33 s.
prometheus::Histogram::BucketBoundaries ClosureBuckets() { return base::ExponentialBuckets(0.001, 2, 16); }
// PS RPCs: 100 us .. ~13 s.
prometheus::Histogram::BucketBoundaries RpcBuckets() { return base::ExponentialBuckets(0.0001, 2, 18); }

prometheus::Family<prometheus::Counter>& Counter(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}
prometheus::Family<prometheus::Gauge>& Gauge(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}
prometheus::Family<prometheus::Histogram>& Histogram(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r);
}

}  // namespace

RuntimeMetrics::RuntimeMetrics(Identity id, WallClock now)
    : id_(std::move(id)),
      now_(std::move(now)),
      steps_(Counter(registry_, "tfjob_runtime_steps_total", "Training steps completed (chief)")),
      examples_(Counter(registry_, "tfjob_runtime_examples_total", "Training examples processed (chief)")),
      examples_per_second_(
          Gauge(registry_, "tfjob_runtime_examples_per_second", "Training throughput over the last epoch (chief)")),
      loss_(Gauge(registry_, "tfjob_runtime_loss", "Mean training loss over the last epoch (chief)")),
      closure_latency_(Histogram(registry_, "tfjob_runtime_closure_latency_seconds",
                                 "Scheduled closures' round trip to a worker (coordinator)")),
      closures_retried_(Counter(registry_, "tfjob_runtime_closures_retried_total",
                                "Closures re-queued after their worker failed (coordinator)")),
      worker_failures_(Counter(registry_, "tfjob_runtime_worker_failures_total",
                               "Worker failures or restarts the coordinator noticed")),
      checkpoints_(Counter(registry_, "tfjob_runtime_checkpoints_total", "Checkpoints written successfully")),
      checkpoint_age_(Gauge(registry_, "tfjob_runtime_checkpoint_age_seconds",
                            "Seconds since the last successful checkpoint (absent before the first)")),
      checkpoint_step_(Gauge(registry_, "tfjob_runtime_last_checkpoint_step", "Training step of the last checkpoint")),
      evaluation_(Gauge(registry_, "tfjob_runtime_evaluation",
                        "Evaluation results of the latest evaluated checkpoint (label metric)")),
      evaluated_step_(
          Gauge(registry_, "tfjob_runtime_evaluated_step", "Training step of the latest evaluated checkpoint")),
      ps_received_(Counter(registry_, "tfjob_runtime_ps_received_bytes_total",
                           "Request bytes a parameter server received, by RPC method")),
      ps_sent_(Counter(registry_, "tfjob_runtime_ps_sent_bytes_total",
                       "Response bytes a parameter server sent, by RPC method")),
      ps_latency_(Histogram(registry_, "tfjob_runtime_ps_rpc_latency_seconds",
                            "Time a parameter server spent serving an RPC, by method")),
      worker_closures_(Counter(registry_, "tfjob_runtime_worker_closures_total", "Closures a worker executed")),
      worker_closure_seconds_(
          Histogram(registry_, "tfjob_runtime_worker_closure_seconds", "Time a worker spent executing one closure")) {
  // Each role's own counters start at zero (see the header).
  const std::string& t = id_.task_type;
  if (t == "chief" || t == "master" || t == "local") {
    steps_.Add(With());
    examples_.Add(With());
    closure_latency_.Add(With(), ClosureBuckets());
    closures_retried_.Add(With());
    worker_failures_.Add(With());
    checkpoints_.Add(With());
  } else if (t == "ps") {
    for (const char* m : {"Pull", "Push", "PushPull"}) {
      ps_received_.Add(With({{"method", m}}));
      ps_sent_.Add(With({{"method", m}}));
      ps_latency_.Add(With({{"method", m}}), RpcBuckets());
    }
  } else if (t == "worker") {
    worker_closures_.Add(With());
    worker_closure_seconds_.Add(With(), ClosureBuckets());
  }
}

RuntimeMetrics::Labels RuntimeMetrics::With(Labels extra) const {
  extra["job_name"] = id_.job_name;
  extra["task_type"] = id_.task_type;
  extra["task_index"] = std::to_string(id_.task_index);
  return extra;
}

void RuntimeMetrics::RecordTraining(int64_t steps, int64_t examples, double seconds, std::optional<double> loss) {
  steps_.Add(With()).Increment(static_cast<double>(steps));
  examples_.Add(With()).Increment(static_cast<double>(examples));
  if (seconds > 0) examples_per_second_.Add(With()).Set(static_cast<double>(examples) / seconds);
  if (loss && std::isfinite(*loss)) loss_.Add(With()).Set(*loss);
}

void RuntimeMetrics::RecordClosure(double seconds) { closure_latency_.Add(With(), ClosureBuckets()).Observe(seconds); }
void RuntimeMetrics::RecordClosureRetried() { closures_retried_.Add(With()).Increment(); }
void RuntimeMetrics::RecordWorkerFailure() { worker_failures_.Add(With()).Increment(); }

void RuntimeMetrics::RecordCheckpoint(int64_t step) {
  checkpoints_.Add(With()).Increment();
  checkpoint_step_.Add(With()).Set(static_cast<double>(step));
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now_().time_since_epoch()).count();
  // 0 means "none yet"; a clock at the epoch is not worth a second flag.
  last_checkpoint_ns_.store(ns == 0 ? 1 : ns);
}

void RuntimeMetrics::RecordEvaluation(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  for (const auto& [name, v] : values) {
    if (std::isfinite(v)) evaluation_.Add(With({{"metric", name}})).Set(v);
  }
  evaluated_step_.Add(With()).Set(static_cast<double>(step));
}

void RuntimeMetrics::RecordPsRpc(std::string_view method, size_t received_bytes, size_t sent_bytes, double seconds) {
  const Labels l = With({{"method", std::string(method)}});
  ps_received_.Add(l).Increment(static_cast<double>(received_bytes));
  ps_sent_.Add(l).Increment(static_cast<double>(sent_bytes));
  ps_latency_.Add(l, RpcBuckets()).Observe(seconds);
}

void RuntimeMetrics::RecordWorkerClosure(double seconds) {
  worker_closures_.Add(With()).Increment();
  worker_closure_seconds_.Add(With(), ClosureBuckets()).Observe(seconds);
}

void RuntimeMetrics::UpdateScrapeTimeGauges() {
  if (const int64_t last = last_checkpoint_ns_.load(); last != 0) {
    const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(now_().time_since_epoch()).count();
    // A clock stepped backwards reads as a fresh checkpoint, never negative.
    checkpoint_age_.Add(With()).Set(std::max<double>(0.0, static_cast<double>(now - last) / 1e9));
  }
}

std::string RuntimeMetrics::Serialize() {
  UpdateScrapeTimeGauges();
  return base::Serialize(registry_);
}

StatusOr<ExporterConfig> ParseExporterConfig(const EnvFn& env, const std::optional<std::string>& flag_port,
                                             std::string task_type, int64_t task_index) {
  ExporterConfig c;
  c.identity.job_name = env(contract::kJobNameEnv).value_or("");
  if (c.identity.job_name.empty()) c.identity.job_name = "local";
  c.identity.task_type = std::move(task_type);
  c.identity.task_index = task_index;
  const std::optional<std::string> text = flag_port ? flag_port : env(contract::kMetricsPortEnv);
  if (!text || text->empty()) return c;
  const char* what = flag_port ? "flag --metrics-port" : contract::kMetricsPortEnv;
  char* end = nullptr;
  const long port = std::strtol(text->c_str(), &end, 10);
  if (*end != '\0' || port < 0 || port > 65535) {
    return InvalidArgument(std::string(what) + ": \"" + *text + "\" is not a port number (0..65535; 0 picks one)");
  }
  c.port = static_cast<int>(port);
  return c;
}

StatusOr<std::unique_ptr<Exporter>> Exporter::Start(const ExporterConfig& config, std::ostream& out) {
  auto e = std::make_unique<Exporter>();
  e->metrics_ = std::make_unique<RuntimeMetrics>(config.identity);
  if (!config.port) return e;
  RuntimeMetrics* m = e->metrics_.get();
  std::map<std::string, base::HttpHandler> routes{
      {"/metrics", base::MetricsHandler(m->registry(), [m] { m->UpdateScrapeTimeGauges(); })},
      {"/healthz",
       [] {
         return base::HttpResponse{200, "ok\n"};
       }},
      {"/readyz",
       [] {
         return base::HttpResponse{200, "ok\n"};
       }},
  };
  // Appended, not "lit" + std::string&&: GCC 12 reports a false -Wrestrict there.
  std::string listen = ":";
  listen += std::to_string(*config.port);
  ASSIGN_OR_RETURN(e->server_, base::HttpServer::Start(listen, std::move(routes)));
  out << "metrics: serving on :" << e->server_->port() << std::endl;
  return e;
}

}  // namespace tfjob::runtime_metrics
