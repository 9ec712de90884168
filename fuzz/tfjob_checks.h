// What both TFJob harnesses do with a decoded document: everything the
// operator and `tfjob run` do with one before planning (decode, validate,
// default, encode), checking the codec's documented round trip on the way.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_util.h"
#include "operator/api/codec.h"
#include "operator/api/defaults.h"
#include "operator/api/validation.h"

namespace tfjob::fuzz {

// JSON text that dump() cannot produce (invalid UTF-8 in a string) would
// make the operator throw when it writes the object back; the replace
// handler keeps this check itself from throwing.
inline std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

inline void ExerciseTfJob(const nlohmann::json& doc) {
  StatusOr<op::api::TFJob> job = op::api::Decode(doc);
  if (!job.ok()) {
    Check(job.status().code() == Code::kInvalidArgument,
          "Decode: expected INVALID_ARGUMENT, got " + job.status().ToString());
    return;
  }
  const nlohmann::json encoded = op::api::Encode(*job);
  Check(encoded == doc, "Encode(Decode(x)) != x for " + Dump(doc) + " -> " + Dump(encoded));

  (void)op::api::ToMessage(op::api::Validate(*job));
  op::api::SetDefaults(*job);
  const nlohmann::json defaulted = op::api::Encode(*job);
  StatusOr<op::api::TFJob> again = op::api::Decode(defaulted);
  Check(again.ok(), "a defaulted job does not decode: " + again.status().ToString());
  // SetDefaults is documented as idempotent.
  op::api::SetDefaults(*again);
  Check(op::api::Encode(*again) == defaulted, "SetDefaults is not idempotent for " + Dump(doc));
  (void)op::api::ToMessage(op::api::Validate(*again));
}

}  // namespace tfjob::fuzz
