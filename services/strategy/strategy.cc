#include "services/strategy/strategy.h"

namespace tfjob::strategy {

namespace {
constexpr std::pair<StrategyKind, std::string_view> kNames[] = {
    {StrategyKind::kOneDevice, "one_device"},
    {StrategyKind::kMirrored, "mirrored"},
    {StrategyKind::kMultiWorkerMirrored, "multi_worker_mirrored"},
    {StrategyKind::kCentralStorage, "central_storage"},
    {StrategyKind::kParameterServer, "parameter_server"},
};
}  // namespace

std::string_view StrategyName(StrategyKind k) {
  for (const auto& [kind, name] : kNames) {
    if (kind == k) return name;
  }
  return "?";
}

}  // namespace tfjob::strategy
