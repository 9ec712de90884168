// The runtime's view of TF_CONFIG (contract/tf_config.h holds its types,
// reader and writer): where it comes from. Resolvers take an Env instead of
// calling getenv, so tests can supply variables without touching the
// process environment; the runtime reads its live environment once, in its
// configuration (services/runtime/config.h).
//
// Thread-safety: pure. Failure: FromEnv returns NOT_FOUND when TF_CONFIG is
// unset or blank, ParseTfConfig's errors otherwise.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "common/status.h"
#include "contract/tf_config.h"

namespace tfjob::cluster {

// TF_CONFIG's types, reader and writer, by their runtime names.
using contract::ClusterConfig;
using contract::ClusterSpec;
using contract::IsChief;
using contract::IsKnownTaskType;
using contract::kChief;
using contract::kEvaluator;
using contract::kMaster;
using contract::kPs;
using contract::kWorker;
using contract::ParseTfConfig;
using contract::TaskId;
using contract::TaskRequirement;
using contract::ToTfConfigJson;
using contract::ValidateAddress;
using contract::ValidateDistinctAddresses;
using contract::ValidateJobName;
using contract::ValidateRoleCounts;

// Looks up one environment variable. Readers of the configuration take this
// instead of calling getenv, so tests can supply variables without touching
// the process environment.
using Env = std::function<std::optional<std::string>(const std::string&)>;

// A fixed set of variables; anything else is unset.
Env FixedEnv(std::map<std::string, std::string> vars);

// Reads and parses TF_CONFIG. NOT_FOUND "TF_CONFIG is not set" when unset or
// empty, so callers can fall back to a single local process.
StatusOr<ClusterConfig> FromEnv(const Env& env, TaskRequirement task = TaskRequirement::kRequired);

}  // namespace tfjob::cluster
