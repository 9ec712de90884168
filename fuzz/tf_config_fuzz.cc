// TF_CONFIG as every runtime process reads it at start-up: any text must give
// a ClusterConfig or INVALID_ARGUMENT "TF_CONFIG: ...", and a config that
// parsed must survive the operator's serialiser unchanged.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_util.h"
#include "services/cluster/cluster.h"

using tfjob::cluster::ClusterConfig;
using tfjob::cluster::TaskRequirement;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = tfjob::fuzz::AsString(data, size);
  for (TaskRequirement requirement : {TaskRequirement::kRequired, TaskRequirement::kOptional}) {
    tfjob::StatusOr<ClusterConfig> config = tfjob::cluster::ParseTfConfig(text, requirement);
    if (!config.ok()) {
      tfjob::fuzz::CheckInvalidArgument(config.status(), "TF_CONFIG: ");
      continue;
    }
    const std::string again = tfjob::cluster::ToTfConfigJson(*config);
    tfjob::StatusOr<ClusterConfig> reparsed = tfjob::cluster::ParseTfConfig(again, requirement);
    tfjob::fuzz::Check(reparsed.ok(),
                       "serialised TF_CONFIG does not parse: " + again + ": " + reparsed.status().ToString());
    tfjob::fuzz::Check(*reparsed == *config, "serialised TF_CONFIG parses differently: " + again);
  }
  return 0;
}
