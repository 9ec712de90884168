#include "services/base/exposition.h"

#include <prometheus/text_serializer.h>

namespace tfjob::base {

std::string Serialize(const prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

prometheus::Histogram::BucketBoundaries ExponentialBuckets(double start, double factor, int count) {
  prometheus::Histogram::BucketBoundaries b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

HttpHandler MetricsHandler(const prometheus::Registry& registry, std::function<void()> before_scrape) {
  return [&registry, before = std::move(before_scrape)] {
    if (before) before();
    return HttpResponse{200, Serialize(registry), kExpositionContentType};
  };
}

}  // namespace tfjob::base
