// The runtime's Prometheus metrics, one set per process, labelled with the
// task that exports them: job_name (the TFJob), task_type and task_index
// (from TF_CONFIG). The label is job_name, not job: Prometheus owns `job`
// (the scrape job) and would rename ours to exported_job.
//
// What each role records (names are the contract the dashboard uses):
//   chief:  tfjob_runtime_steps_total, _examples_total, _examples_per_second,
//           _loss, _closure_latency_seconds, _closures_retried_total,
//           _worker_failures_total, _checkpoints_total,
//           _checkpoint_age_seconds, _last_checkpoint_step
//   ps:     tfjob_runtime_ps_received_bytes_total, _ps_sent_bytes_total,
//           _ps_rpc_latency_seconds (label method)
//   worker: tfjob_runtime_worker_closures_total, _worker_closure_seconds
//   evaluator: tfjob_runtime_evaluation (label metric), _evaluated_step
// A role's own counters start at 0 so rate() sees the first increment;
// gauges appear once they have a value (checkpoint age only after the first
// checkpoint, so it is never NaN or a made-up number).
//
// Kept in a prometheus-cpp registry and rendered by its TextSerializer
// (services/base/exposition.h); every series carries the task labels as
// ordinary labels, so each line lists its labels in sorted order.
//
// Ownership: RuntimeMetrics owns its registry. It is created once per
// process (services/runtime) and handed down by pointer in options structs;
// a null pointer means "not exported". Thread-safety: every method may run
// concurrently. Failure: recording never fails.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "common/status.h"
#include "services/base/http_server.h"

namespace tfjob::runtime_metrics {

struct Identity {
  std::string job_name;
  std::string task_type;  // chief, ps, worker, evaluator; "local" without TF_CONFIG
  int64_t task_index = 0;
};

class RuntimeMetrics {
 public:
  using WallClock = std::function<std::chrono::system_clock::time_point()>;
  explicit RuntimeMetrics(
      Identity id, WallClock now = [] { return std::chrono::system_clock::now(); });

  const Identity& identity() const { return id_; }

  // Chief: a stretch of training (an epoch) finished. `loss` is its mean.
  void RecordTraining(int64_t steps, int64_t examples, double seconds, std::optional<double> loss);
  // Chief (coordinator): one closure's round trip, scheduled -> result.
  void RecordClosure(double seconds);
  void RecordClosureRetried();
  void RecordWorkerFailure();
  // Chief: a checkpoint at `step` was written successfully.
  void RecordCheckpoint(int64_t step);
  // Evaluator: values (e.g. {"loss", 0.3}, {"accuracy", 0.9}) for the
  // checkpoint at `step`.
  void RecordEvaluation(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  // PS: one RPC served.
  void RecordPsRpc(std::string_view method, size_t received_bytes, size_t sent_bytes, double seconds);
  // Worker: one closure executed.
  void RecordWorkerClosure(double seconds);

  // Computes the checkpoint age (a gauge read at scrape time); /metrics
  // runs it before rendering registry().
  void UpdateScrapeTimeGauges();
  // The /metrics body: UpdateScrapeTimeGauges, then the text format.
  std::string Serialize();
  const prometheus::Registry& registry() const { return registry_; }

 private:
  using Labels = prometheus::Labels;
  // The task's labels plus `extra` (e.g. method), the labels of one series.
  Labels With(Labels extra = {}) const;

  const Identity id_;
  const WallClock now_;
  prometheus::Registry registry_;
  prometheus::Family<prometheus::Counter>& steps_;
  prometheus::Family<prometheus::Counter>& examples_;
  prometheus::Family<prometheus::Gauge>& examples_per_second_;
  prometheus::Family<prometheus::Gauge>& loss_;
  prometheus::Family<prometheus::Histogram>& closure_latency_;
  prometheus::Family<prometheus::Counter>& closures_retried_;
  prometheus::Family<prometheus::Counter>& worker_failures_;
  prometheus::Family<prometheus::Counter>& checkpoints_;
  prometheus::Family<prometheus::Gauge>& checkpoint_age_;
  prometheus::Family<prometheus::Gauge>& checkpoint_step_;
  prometheus::Family<prometheus::Gauge>& evaluation_;
  prometheus::Family<prometheus::Gauge>& evaluated_step_;
  prometheus::Family<prometheus::Counter>& ps_received_;
  prometheus::Family<prometheus::Counter>& ps_sent_;
  prometheus::Family<prometheus::Histogram>& ps_latency_;
  prometheus::Family<prometheus::Counter>& worker_closures_;
  prometheus::Family<prometheus::Histogram>& worker_closure_seconds_;
  std::atomic<int64_t> last_checkpoint_ns_{0};  // wall clock; 0 = none yet
};

// Times one RPC on a PS and records it when it goes out of scope, with the
// request's and the response's serialized sizes. Req/Resp are protobuf
// messages (anything with ByteSizeLong()). A null `metrics` does nothing.
template <typename Req, typename Resp>
class ScopedRpc {
 public:
  ScopedRpc(RuntimeMetrics* metrics, std::string_view method, const Req* req, const Resp* resp)
      : metrics_(metrics), method_(method), req_(req), resp_(resp), start_(std::chrono::steady_clock::now()) {}
  ~ScopedRpc() {
    if (!metrics_) return;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    metrics_->RecordPsRpc(method_, req_->ByteSizeLong(), resp_->ByteSizeLong(), secs);
  }
  ScopedRpc(const ScopedRpc&) = delete;
  ScopedRpc& operator=(const ScopedRpc&) = delete;

 private:
  RuntimeMetrics* metrics_;
  std::string_view method_;
  const Req* req_;
  const Resp* resp_;
  std::chrono::steady_clock::time_point start_;
};

// How a process exports: parsed once from the command line and environment.
struct ExporterConfig {
  std::optional<int> port;  // nullopt: no HTTP server; 0: pick a free port
  Identity identity;
};

using EnvFn = std::function<std::optional<std::string>(const std::string&)>;

// `flag_port` (from --metrics-port) wins over TFJOB_METRICS_PORT; the job
// name comes from TFJOB_JOB_NAME, "local" when unset. INVALID_ARGUMENT for a
// port that is not a number in 0..65535.
StatusOr<ExporterConfig> ParseExporterConfig(const EnvFn& env, const std::optional<std::string>& flag_port,
                                             std::string task_type, int64_t task_index);

// The metrics plus, when a port is configured, the HTTP server for /metrics,
// /healthz and /readyz (ready once started: a runtime task has no caches).
class Exporter {
 public:
  // Prints "metrics: serving on :PORT" to `out` when it serves.
  static StatusOr<std::unique_ptr<Exporter>> Start(const ExporterConfig& config, std::ostream& out);
  RuntimeMetrics* metrics() { return metrics_.get(); }
  // 0 when not serving.
  int port() const { return server_ ? server_->port() : 0; }

 private:
  std::unique_ptr<RuntimeMetrics> metrics_;
  std::unique_ptr<base::HttpServer> server_;  // destroyed first: its handlers use metrics_
};

}  // namespace tfjob::runtime_metrics
