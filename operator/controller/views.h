// Reading JSON of any shape (views.cc), as the planner's files and the
// controller's caches read observed objects: a missing key, or a value of
// another type, reads as null, "" or empty. (views.cc also defines ViewPod,
// ViewService, ViewPodGroup and ViewWorkload, declared in planner.h.) Not for use outside
// operator/controller.
// Thread-safety: pure functions of their arguments, thread-compatible.
// Failure: none; they never throw on any JSON they are given.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace tfjob::op::controller::internal {

// j[key], or null when j is not an object or has no such key.
const nlohmann::json& Field(const nlohmann::json& j, const char* key);
// j[key] when it is a string, else "".
std::string Str(const nlohmann::json& j, const char* key);
// The string-valued entries of an object (labels, annotations).
std::map<std::string, std::string> StringMap(const nlohmann::json& j);
// The uid of the ownerReference with controller: true, or "".
std::string ControllerUid(const nlohmann::json& meta);

}  // namespace tfjob::op::controller::internal
