#include "operator/api/validation.h"

#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace tfjob::op::api {
namespace {

using json = nlohmann::json;

constexpr size_t kDns1035LabelMaxLength = 63;

// Go's %q for the printable subset we emit: quotes, backslash escapes, and
// \x escapes for control bytes and bytes that are not valid UTF-8.
std::string GoQuote(std::string_view s) {
  std::string out = "\"";
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        default:
          if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\x%02x", c);
            out += buf;
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    // A well-formed multi-byte UTF-8 sequence is kept; anything else escaped.
    size_t len = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
      ++i;
    }
  }
  return out + "\"";
}

std::string SupportedValues(std::initializer_list<std::string_view> values) {
  std::string out = "supported values: ";
  bool first = true;
  for (std::string_view v : values) {
    if (!first) out += ", ";
    first = false;
    out += GoQuote(v);
  }
  return out;
}

FieldError Required(std::string field, std::string detail) {
  return {ErrorType::kRequired, std::move(field), "", std::move(detail)};
}

FieldError Invalid(std::string field, std::string value, std::string detail) {
  return {ErrorType::kInvalid, std::move(field), std::move(value), std::move(detail)};
}

FieldError NotSupported(std::string field, std::string_view value, std::initializer_list<std::string_view> supported) {
  return {ErrorType::kNotSupported, std::move(field), GoQuote(value), SupportedValues(supported)};
}

template <typename T>
void CheckNonNegative(std::vector<FieldError>& errors, const std::optional<T>& value, const std::string& field) {
  if (value && *value < 0) {
    errors.push_back(Invalid(field, std::to_string(*value), "must be greater than or equal to 0"));
  }
}

const json* Member(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::string StringMember(const json& obj, const char* key) {
  const json* v = Member(obj, key);
  return v && v->is_string() ? v->get<std::string>() : "";
}

void ValidateReplicaSpec(std::vector<FieldError>& errors, const ReplicaSpec& spec, const std::string& role_path) {
  if (!spec.type) {
    errors.push_back(NotSupported(role_path, spec.key, {"Chief", "Master", "PS", "Worker", "Evaluator"}));
  }
  CheckNonNegative(errors, spec.replicas, role_path + ".replicas");
  if (spec.type == ReplicaType::kChief && spec.replicas && *spec.replicas > 1) {
    errors.push_back(Invalid(role_path + ".replicas", std::to_string(*spec.replicas),
                             "must be no more than 1: a TFJob has a single chief"));
  }
  if (!spec.restart_policy.empty() && !ParseRestartPolicy(spec.restart_policy)) {
    errors.push_back(
        NotSupported(role_path + ".restartPolicy", spec.restart_policy,
                     {kRestartPolicyAlways, kRestartPolicyOnFailure, kRestartPolicyNever, kRestartPolicyExitCode}));
  }

  const std::string containers_path = role_path + ".template.spec.containers";
  const json* pod_spec = Member(spec.template_json, "spec");
  const json* containers = pod_spec ? Member(*pod_spec, "containers") : nullptr;
  if (!containers || !containers->is_array() || containers->empty()) {
    errors.push_back(Required(containers_path, "must be specified"));
  }
  bool has_tensorflow = false;
  if (containers && containers->is_array()) {
    for (size_t i = 0; i < containers->size(); ++i) {
      const json& c = (*containers)[i];
      if (StringMember(c, "image").empty()) {
        errors.push_back(Required(containers_path + "[" + std::to_string(i) + "].image", "must be required"));
      }
      has_tensorflow = has_tensorflow || StringMember(c, "name") == kDefaultContainerName;
    }
  }
  if (!has_tensorflow) {
    errors.push_back(
        Required(containers_path, "must have at least one container with name " + std::string(kDefaultContainerName)));
  }
}

}  // namespace

std::string FieldError::ToString() const {
  std::string body;
  switch (type) {
    case ErrorType::kRequired: body = "Required value"; break;
    case ErrorType::kForbidden: body = "Forbidden"; break;
    case ErrorType::kInvalid: body = "Invalid value: " + bad_value; break;
    case ErrorType::kNotSupported: body = "Unsupported value: " + bad_value; break;
    case ErrorType::kDuplicate: body = "Duplicate value: " + bad_value; break;
  }
  if (!detail.empty()) body += ": " + detail;
  return field + ": " + body;
}

std::vector<std::string> Dns1035LabelErrors(const std::string& value) {
  std::vector<std::string> errors;
  if (value.size() > kDns1035LabelMaxLength) {
    errors.push_back("must be no more than " + std::to_string(kDns1035LabelMaxLength) + " characters");
  }
  auto lower = [](char c) { return c >= 'a' && c <= 'z'; };
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  bool ok = !value.empty() && lower(value.front()) && (lower(value.back()) || digit(value.back()));
  for (char c : value) ok = ok && (lower(c) || digit(c) || c == '-');
  if (!ok) {
    errors.push_back(
        "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
        "character, and end with an alphanumeric character (regex used for validation is "
        "'[a-z]([-a-z0-9]*[a-z0-9])?')");
  }
  return errors;
}

std::vector<FieldError> Validate(const TFJob& job) {
  std::vector<FieldError> errors;

  if (auto name_errors = Dns1035LabelErrors(job.metadata.name); !name_errors.empty()) {
    std::string detail = "should match: ";
    for (size_t i = 0; i < name_errors.size(); ++i) detail += (i ? "," : "") + name_errors[i];
    errors.push_back(Invalid("metadata.name", GoQuote(job.metadata.name), detail));
  }

  const RunPolicy& rp = job.spec.run_policy;
  if (rp.clean_pod_policy && !rp.clean_pod_policy->empty() && !ParseCleanPodPolicy(*rp.clean_pod_policy)) {
    errors.push_back(NotSupported("spec.runPolicy.cleanPodPolicy", *rp.clean_pod_policy,
                                  {kCleanPodPolicyAll, kCleanPodPolicyRunning, kCleanPodPolicyNone}));
  }
  CheckNonNegative(errors, rp.ttl_seconds_after_finished, "spec.runPolicy.ttlSecondsAfterFinished");
  CheckNonNegative(errors, rp.active_deadline_seconds, "spec.runPolicy.activeDeadlineSeconds");
  CheckNonNegative(errors, rp.backoff_limit, "spec.runPolicy.backoffLimit");
  // The CRD's schema types schedulingPolicy; a server without it (or an
  // older CRD) could pass anything, and the PodGroup must not guess.
  if (rp.scheduling_policy.is_object()) {
    const json& sp = rp.scheduling_policy;
    // Mutated input may hold invalid UTF-8: render it, never throw.
    auto render = [](const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); };
    const std::string base = "spec.runPolicy.schedulingPolicy.";
    for (const char* key : {"minAvailable", "scheduleTimeoutSeconds"}) {
      const json* v = Member(sp, key);
      if (v && !v->is_null() &&
          (!v->is_number_integer() || v->get<int64_t>() < INT32_MIN || v->get<int64_t>() > INT32_MAX)) {
        errors.push_back(Invalid(base + key, render(*v), "must be a 32-bit integer"));
      }
    }
    for (const char* key : {"queue", "priorityClass"}) {
      const json* v = Member(sp, key);
      if (v && !v->is_null() && !v->is_string()) errors.push_back(Invalid(base + key, render(*v), "must be a string"));
    }
    const json* mr = Member(sp, "minResources");
    if (mr && !mr->is_null() && !mr->is_object()) {
      errors.push_back(Invalid(base + "minResources", render(*mr), "must be a map of resource names to quantities"));
    }
  } else if (!rp.scheduling_policy.is_null()) {
    errors.push_back(Invalid("spec.runPolicy.schedulingPolicy",
                             rp.scheduling_policy.dump(-1, ' ', false, json::error_handler_t::replace),
                             "must be an object"));
  }
  if (rp.managed_by && *rp.managed_by != kManagedByKubeflow && *rp.managed_by != kManagedByMultiKueue) {
    errors.push_back(
        NotSupported("spec.runPolicy.managedBy", *rp.managed_by, {kManagedByKubeflow, kManagedByMultiKueue}));
  }

  if (const auto& sp = job.spec.success_policy; sp && *sp != kSuccessPolicyDefault && *sp != kSuccessPolicyAllWorkers) {
    errors.push_back(NotSupported("spec.successPolicy", *sp, {kSuccessPolicyDefault, kSuccessPolicyAllWorkers}));
  }

  const std::string specs_path = "spec.tfReplicaSpecs";
  const auto& specs = job.spec.replica_specs;
  if (!job.spec.has_replica_specs && specs.empty()) {
    errors.push_back(Required(specs_path, "must be required"));
  } else if (specs.empty()) {
    errors.push_back(Required(specs_path, "must have at least one replica spec"));
  }

  int chief_or_master = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const ReplicaSpec& s = specs[i];
    const std::string role_path = specs_path + "[" + s.key + "]";
    if (s.type == ReplicaType::kChief) ++chief_or_master;
    for (size_t j = 0; j < i; ++j) {
      // "worker" and "Worker" are one type to Kubeflow's defaulting, which
      // would keep one of them at random. Chief vs Master is reported below.
      if (s.type && specs[j].type == s.type && specs[j].master_alias == s.master_alias) {
        errors.push_back({ErrorType::kDuplicate, role_path, GoQuote(s.key),
                          "names the same replica type as " + GoQuote(specs[j].key)});
        break;
      }
    }
    ValidateReplicaSpec(errors, s, role_path);
  }
  if (chief_or_master > 1) {
    errors.push_back({ErrorType::kForbidden, specs_path, "", "must not have more than 1 Chief or Master role"});
  }
  return errors;
}

std::string ToMessage(const std::vector<FieldError>& errors) {
  std::vector<std::string> messages;
  std::set<std::string> seen;
  for (const FieldError& e : errors) {
    std::string m = e.ToString();
    if (seen.insert(m).second) messages.push_back(std::move(m));
  }
  if (messages.empty()) return "";
  if (messages.size() == 1) return messages.front();
  std::string out = "[";
  for (size_t i = 0; i < messages.size(); ++i) out += (i ? ", " : "") + messages[i];
  return out + "]";
}

}  // namespace tfjob::op::api
