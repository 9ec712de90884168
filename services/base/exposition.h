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
#include <string>

#include <prometheus/histogram.h>
#include <prometheus/registry.h>

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

}  // namespace tfjob::base
