#include "services/strategy/progress.h"

#include <cmath>
#include <cstdio>

namespace tfjob::strategy {

std::string FormatValue(double v) {
  char buf[64];
  if (v != 0 && std::fabs(v) < 1e-3)
    std::snprintf(buf, sizeof buf, "%.4e", v);
  else
    std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

std::string FormatProgress(int64_t step, int64_t total, double seconds, const NamedValues& values) {
  std::string line = std::to_string(step) + "/" + (total > 0 ? std::to_string(total) : std::string("Unknown"));
  line += " - " + std::to_string(static_cast<int64_t>(std::lround(seconds))) + "s";
  for (const auto& [name, v] : values) line += " - " + name + ": " + FormatValue(v);
  return line;
}

}  // namespace tfjob::strategy
