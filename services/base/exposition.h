// Prometheus metrics on prometheus-cpp (Debian's prometheus-cpp-dev): the
// operator and every runtime task keep their counters, gauges and histograms
// in a prometheus::Registry, and /metrics renders it with prometheus-cpp's
// TextSerializer (text format 0.0.4).
//
// Ownership: the caller owns the registry; a handler borrows it and must not
// outlive it. Thread-safety: prometheus-cpp's metrics and Collect are safe
// to use concurrently. Failure: invalid metric or label names are programmer
// errors (prometheus-cpp throws when a family or child is added); rendering
// never fails.
#pragma once

#include <functional>
#include <mutex>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "common/mutex.h"
#include "services/base/http_server.h"

namespace tfjob::base {

// The Prometheus text exposition content type.
inline constexpr const char* kExpositionContentType = "text/plain; version=0.0.4; charset=utf-8";

// Everything in `registry`, in the text exposition format.
std::string Serialize(const prometheus::Registry& registry);

// Bucket bounds start, start*factor, ... (`count` of them; +Inf is implied).
prometheus::Histogram::BucketBoundaries ExponentialBuckets(double start, double factor, int count);

// A /metrics route: runs `before_scrape` (gauges computed at scrape time),
// then renders `registry`.
HttpHandler MetricsHandler(const prometheus::Registry& registry, std::function<void()> before_scrape = {});

// The process_* series every Prometheus client library exports (what
// dashboards and alerts on operators expect): process_cpu_seconds_total,
// process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds, process_start_time_seconds, read from
// /proc/self. Refresh() before each scrape. Thread-safety: Refresh may be
// called from any thread (serialised inside).
class ProcessMetrics {
 public:
  explicit ProcessMetrics(prometheus::Registry& registry);
  void Refresh();

 private:
  Mutex mu_;
  prometheus::Counter& cpu_;
  double cpu_seen_ TFJOB_GUARDED_BY(mu_) = 0;  // what cpu_ holds
  prometheus::Gauge& resident_;
  prometheus::Gauge& virtual_;
  prometheus::Gauge& open_fds_;
  prometheus::Gauge& max_fds_;
  prometheus::Gauge& start_time_;
};

}  // namespace tfjob::base
