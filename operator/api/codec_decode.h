// Decode's body (codec_decode.cc): a JSON document to a TFJob, type-checking
// every field the model has and the parts of the pod template the operator
// reads; not for use outside operator/api. codec.cc's Decode wraps DecodeImpl
// in its exception guard; codec_encode.cc compares the typed lists with what
// the Decode* helpers read there, so that Encode writes only what changed.
//
// The Decode* helpers take the field's value (nullptr when the key is absent
// or its value is null, which decodes to an empty collection) and the path
// their errors name.
//
// Thread-safety: pure functions of their arguments. Failure: INVALID_ARGUMENT
// naming the field's path; nothing here throws on a value of the wrong type
// (every access is type-checked first).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "operator/api/types.h"

namespace tfjob::op::api::codec_internal {

StatusOr<std::vector<OwnerReference>> DecodeOwnerReferences(const nlohmann::json* v, const std::string& path);
StatusOr<std::vector<JobCondition>> DecodeConditions(const nlohmann::json* v, const std::string& path);
StatusOr<std::map<std::string, ReplicaStatus>> DecodeReplicaStatuses(const nlohmann::json* v, const std::string& path);
// Decode without its exception guard.
StatusOr<TFJob> DecodeImpl(const nlohmann::json& doc);

}  // namespace tfjob::op::api::codec_internal
