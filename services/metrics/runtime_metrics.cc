#include "services/metrics/runtime_metrics.h"

#include <cmath>
#include <cstdlib>
#include <ostream>

namespace tfjob::runtime_metrics {
namespace {

metrics::Labels TaskLabels(const Identity& id) {
  return {{"job_name", id.job_name}, {"task_type", id.task_type}, {"task_index", std::to_string(id.task_index)}};
}

// Closures and worker steps: 1 ms .. ~33 s.
std::vector<double> ClosureBuckets() { return metrics::ExponentialBuckets(0.001, 2, 16); }
// PS RPCs: 100 us .. ~13 s.
std::vector<double> RpcBuckets() { return metrics::ExponentialBuckets(0.0001, 2, 18); }

}  // namespace

RuntimeMetrics::RuntimeMetrics(Identity id, WallClock now)
    : id_(std::move(id)),
      now_(std::move(now)),
      steps_(registry_.AddCounter("tfjob_runtime_steps_total", "Training steps completed (chief)", TaskLabels(id_))),
      examples_(registry_.AddCounter("tfjob_runtime_examples_total", "Training examples processed (chief)",
                                     TaskLabels(id_))),
      examples_per_second_(registry_.AddGauge("tfjob_runtime_examples_per_second",
                                              "Training throughput over the last epoch (chief)", TaskLabels(id_))),
      loss_(registry_.AddGauge("tfjob_runtime_loss", "Mean training loss over the last epoch (chief)", TaskLabels(id_))),
      closure_latency_(registry_.AddHistogram("tfjob_runtime_closure_latency_seconds",
                                              "Scheduled closures' round trip to a worker (coordinator)",
                                              ClosureBuckets(), TaskLabels(id_))),
      closures_retried_(registry_.AddCounter("tfjob_runtime_closures_retried_total",
                                             "Closures re-queued after their worker failed (coordinator)",
                                             TaskLabels(id_))),
      worker_failures_(registry_.AddCounter("tfjob_runtime_worker_failures_total",
                                            "Worker failures or restarts the coordinator noticed", TaskLabels(id_))),
      checkpoints_(registry_.AddCounter("tfjob_runtime_checkpoints_total", "Checkpoints written successfully",
                                        TaskLabels(id_))),
      checkpoint_age_(registry_.AddGauge("tfjob_runtime_checkpoint_age_seconds",
                                         "Seconds since the last successful checkpoint (absent before the first)",
                                         TaskLabels(id_))),
      checkpoint_step_(registry_.AddGauge("tfjob_runtime_last_checkpoint_step", "Training step of the last checkpoint",
                                          TaskLabels(id_))),
      evaluation_(registry_.AddGauge("tfjob_runtime_evaluation",
                                     "Evaluation results of the latest evaluated checkpoint (label metric)",
                                     TaskLabels(id_))),
      evaluated_step_(registry_.AddGauge("tfjob_runtime_evaluated_step", "Training step of the latest evaluated checkpoint",
                                         TaskLabels(id_))),
      ps_received_(registry_.AddCounter("tfjob_runtime_ps_received_bytes_total",
                                        "Request bytes a parameter server received, by RPC method", TaskLabels(id_))),
      ps_sent_(registry_.AddCounter("tfjob_runtime_ps_sent_bytes_total",
                                    "Response bytes a parameter server sent, by RPC method", TaskLabels(id_))),
      ps_latency_(registry_.AddHistogram("tfjob_runtime_ps_rpc_latency_seconds",
                                         "Time a parameter server spent serving an RPC, by method", RpcBuckets(),
                                         TaskLabels(id_))),
      worker_closures_(registry_.AddCounter("tfjob_runtime_worker_closures_total", "Closures a worker executed",
                                            TaskLabels(id_))),
      worker_closure_seconds_(registry_.AddHistogram("tfjob_runtime_worker_closure_seconds",
                                                     "Time a worker spent executing one closure", ClosureBuckets(),
                                                     TaskLabels(id_))) {
  // Each role's own counters start at zero (see the header).
  const std::string& t = id_.task_type;
  if (t == "chief" || t == "master" || t == "local") {
    steps_.Add({});
    examples_.Add({});
    closure_latency_.Add({});
    closures_retried_.Add({});
    worker_failures_.Add({});
    checkpoints_.Add({});
  } else if (t == "ps") {
    for (const char* m : {"Pull", "Push"}) {
      ps_received_.Add({{"method", m}});
      ps_sent_.Add({{"method", m}});
      ps_latency_.Add({{"method", m}});
    }
  } else if (t == "worker") {
    worker_closures_.Add({});
    worker_closure_seconds_.Add({});
  }
}

void RuntimeMetrics::RecordTraining(int64_t steps, int64_t examples, double seconds, std::optional<double> loss) {
  steps_.Add({}).Increment(static_cast<double>(steps));
  examples_.Add({}).Increment(static_cast<double>(examples));
  if (seconds > 0) examples_per_second_.Add({}).Set(static_cast<double>(examples) / seconds);
  if (loss && std::isfinite(*loss)) loss_.Add({}).Set(*loss);
}

void RuntimeMetrics::RecordClosure(double seconds) { closure_latency_.Add({}).Observe(seconds); }
void RuntimeMetrics::RecordClosureRetried() { closures_retried_.Add({}).Increment(); }
void RuntimeMetrics::RecordWorkerFailure() { worker_failures_.Add({}).Increment(); }

void RuntimeMetrics::RecordCheckpoint(int64_t step) {
  checkpoints_.Add({}).Increment();
  checkpoint_step_.Add({}).Set(static_cast<double>(step));
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now_().time_since_epoch()).count();
  // 0 means "none yet"; a clock at the epoch is not worth a second flag.
  last_checkpoint_ns_.store(ns == 0 ? 1 : ns);
}

void RuntimeMetrics::RecordEvaluation(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  for (const auto& [name, v] : values) {
    if (std::isfinite(v)) evaluation_.Add({{"metric", name}}).Set(v);
  }
  evaluated_step_.Add({}).Set(static_cast<double>(step));
}

void RuntimeMetrics::RecordPsRpc(std::string_view method, size_t received_bytes, size_t sent_bytes, double seconds) {
  const metrics::Labels l{{"method", std::string(method)}};
  ps_received_.Add(l).Increment(static_cast<double>(received_bytes));
  ps_sent_.Add(l).Increment(static_cast<double>(sent_bytes));
  ps_latency_.Add(l).Observe(seconds);
}

void RuntimeMetrics::RecordWorkerClosure(double seconds) {
  worker_closures_.Add({}).Increment();
  worker_closure_seconds_.Add({}).Observe(seconds);
}

std::string RuntimeMetrics::Serialize() {
  if (const int64_t last = last_checkpoint_ns_.load(); last != 0) {
    const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(now_().time_since_epoch()).count();
    // A clock stepped backwards reads as a fresh checkpoint, never negative.
    checkpoint_age_.Add({}).Set(std::max<double>(0.0, static_cast<double>(now - last) / 1e9));
  }
  return registry_.Serialize();
}

StatusOr<ExporterConfig> ParseExporterConfig(const EnvFn& env, const std::optional<std::string>& flag_port,
                                             std::string task_type, int64_t task_index) {
  ExporterConfig c;
  c.identity.job_name = env("TFJOB_JOB_NAME").value_or("");
  if (c.identity.job_name.empty()) c.identity.job_name = "local";
  c.identity.task_type = std::move(task_type);
  c.identity.task_index = task_index;
  const std::optional<std::string> text = flag_port ? flag_port : env("TFJOB_METRICS_PORT");
  if (!text || text->empty()) return c;
  const char* what = flag_port ? "flag --metrics-port" : "TFJOB_METRICS_PORT";
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
  std::map<std::string, HttpHandler> routes{
      {"/metrics", [m] { return HttpResponse{200, m->Serialize(), kExpositionContentType}; }},
      {"/healthz", [] { return HttpResponse{200, "ok\n"}; }},
      {"/readyz", [] { return HttpResponse{200, "ok\n"}; }},
  };
  // Appended, not "lit" + std::string&&: GCC 12 reports a false -Wrestrict there.
  std::string listen = ":";
  listen += std::to_string(*config.port);
  ASSIGN_OR_RETURN(e->server_, HttpServer::Start(listen, std::move(routes)));
  out << "metrics: serving on :" << e->server_->port() << std::endl;
  return e;
}

}  // namespace tfjob::runtime_metrics
