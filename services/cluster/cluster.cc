#include "services/cluster/cluster.h"

#include <algorithm>
#include <cassert>
#include <cctype>

namespace tfjob::cluster {

Env FixedEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

StatusOr<ClusterConfig> FromEnv(const Env& env, TaskRequirement requirement) {
  assert(env && "FromEnv needs an environment accessor");
  std::optional<std::string> value = env(contract::kTfConfigEnv);
  // Launchers that run a single replica leave TF_CONFIG unset or empty; both
  // mean "no cluster" (TF would fail to parse the empty string).
  if (!value ||
      std::all_of(value->begin(), value->end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); })) {
    return NotFound("TF_CONFIG is not set");
  }
  return ParseTfConfig(*value, requirement);
}

}  // namespace tfjob::cluster
