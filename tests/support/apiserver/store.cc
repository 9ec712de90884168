#include "tests/support/apiserver/store.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/time.h"
#include "tests/support/apiserver/base64.h"

namespace tfjob::testing::apiserver {

using nlohmann::json;

namespace {

const char* kCrdId = "customresourcedefinitions.apiextensions.k8s.io";

std::string QualifiedResource(const ResourceInfo& r) { return r.group.empty() ? r.plural : r.plural + "." + r.group; }

json ErrorDetails(const ResourceInfo& r, const std::string& name, const std::string& kind) {
  json d = json::object();
  if (!name.empty()) d["name"] = name;
  if (!r.group.empty()) d["group"] = r.group;
  d["kind"] = kind;
  return d;
}

ApiError NotRegistered() { return MakeError(404, "NotFound", "the server could not find the requested resource"); }

ApiError NotFoundError(const ResourceInfo& r, const std::string& name) {
  return MakeError(404, "NotFound", QualifiedResource(r) + " \"" + name + "\" not found",
                   ErrorDetails(r, name, r.plural));
}

ApiError AlreadyExistsError(const ResourceInfo& r, const std::string& name) {
  return MakeError(409, "AlreadyExists", QualifiedResource(r) + " \"" + name + "\" already exists",
                   ErrorDetails(r, name, r.plural));
}

ApiError ConflictError(const ResourceInfo& r, const std::string& name, const std::string& why) {
  return MakeError(409, "Conflict",
                   "Operation cannot be fulfilled on " + QualifiedResource(r) + " \"" + name + "\": " + why,
                   ErrorDetails(r, name, r.plural));
}

ApiError BadRequest(std::string message) { return MakeError(400, "BadRequest", std::move(message)); }

struct Cause {
  std::string field, reason, message;
};

ApiError InvalidError(const ResourceInfo& r, const std::string& name, const std::vector<Cause>& causes) {
  std::string msg = r.kind + " \"" + name + "\" is invalid: ";
  json jc = json::array();
  std::string joined;
  for (size_t i = 0; i < causes.size(); ++i) {
    if (i) joined += ", ";
    joined += causes[i].field + ": " + causes[i].message;
    jc.push_back({{"reason", causes[i].reason}, {"message", causes[i].message}, {"field", causes[i].field}});
  }
  msg += causes.size() == 1 ? joined : "[" + joined + "]";
  json d = ErrorDetails(r, name, r.kind);
  d["causes"] = jc;
  return MakeError(422, "Invalid", msg, d);
}

std::string MetaString(const json& obj, const char* key) {
  auto m = obj.find("metadata");
  if (m == obj.end() || !m->is_object()) return "";
  auto it = m->find(key);
  return it != m->end() && it->is_string() ? it->get<std::string>() : "";
}

bool Deleting(const json& obj) { return !MetaString(obj, "deletionTimestamp").empty(); }

std::vector<std::string> Finalizers(const json& obj) {
  std::vector<std::string> out;
  auto m = obj.find("metadata");
  if (m == obj.end() || !m->is_object() || !m->contains("finalizers")) return out;
  for (const auto& f : (*m)["finalizers"]) {
    if (f.is_string()) out.push_back(f.get<std::string>());
  }
  return out;
}

bool OwnedBy(const json& obj, const std::string& uid) {
  const json& refs = obj["metadata"].value("ownerReferences", json::array());
  for (const auto& ref : refs) {
    if (ref.is_object() && ref.value("uid", "") == uid) return true;
  }
  return false;
}

// The object without what generation does not track: metadata, and status
// when a status subresource exists.
json SpecPart(const json& obj, bool has_status) {
  json s = obj;
  s.erase("metadata");
  if (has_status) s.erase("status");
  return s;
}

// Removes strategic-merge-patch directives ("$patch", "$setElementOrder/...",
// "$retainKeys", "$deleteFromPrimitiveList/...") which a JSON merge patch would
// otherwise store as fields.
void StripDirectives(json& j) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end();) {
      if (!it.key().empty() && it.key()[0] == '$') {
        it = j.erase(it);
      } else {
        StripDirectives(*it);
        ++it;
      }
    }
  } else if (j.is_array()) {
    for (auto& e : j) StripDirectives(e);
  }
}

bool ParseVersion(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  *out = std::stoull(s);
  return true;
}

}  // namespace

json ApiError::ToJson() const {
  json j = {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
            {"status", "Failure"}, {"message", message}, {"reason", reason}};
  if (!details.is_null()) j["details"] = details;
  j["code"] = code;
  return j;
}

std::string DefaultReason(int code) {
  switch (code) {
    case 400: return "BadRequest";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "NotFound";
    case 405: return "MethodNotAllowed";
    case 406: return "NotAcceptable";
    case 409: return "Conflict";
    case 410: return "Expired";
    case 413: return "RequestEntityTooLarge";
    case 415: return "UnsupportedMediaType";
    case 422: return "Invalid";
    case 429: return "TooManyRequests";
    case 503: return "ServiceUnavailable";
    case 504: return "Timeout";
    default: return code >= 500 ? "InternalError" : "Unknown";
  }
}

ApiError MakeError(int code, std::string reason, std::string message, json details) {
  ApiError e;
  e.code = code;
  e.reason = reason.empty() ? DefaultReason(code) : std::move(reason);
  e.message = std::move(message);
  e.details = std::move(details);
  return e;
}

Store::Store(Options options) : options_(std::move(options)), rng_(std::random_device{}()) {
  if (options_.compaction_window < 1) options_.compaction_window = 1;
  if (!options_.clock) options_.clock = [] { return std::chrono::system_clock::now(); };
  registry_ = BuiltinResources();
}

Store::~Store() { Shutdown(); }

std::string Store::Now() const { return FormatRfc3339(options_.clock()); }

std::string Store::NewUidLocked() {
  uint64_t a = rng_(), b = rng_();
  b = (b & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;  // RFC 4122 variant
  a = (a & 0xffffffffffff0fffULL) | 0x0000000000004000ULL;  // version 4
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xffff),
                static_cast<unsigned>(b >> 48), static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return buf;
}

// ---- Registry -------------------------------------------------------------

std::vector<ResourceInfo> Store::Resources() const {
  std::lock_guard<std::mutex> lock(mu_);
  return registry_;
}

std::optional<ResourceInfo> Store::Find(const std::string& group, const std::string& version,
                                        const std::string& plural) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& r : registry_) {
    if (r.group == group && r.version == version && r.plural == plural) return r;
  }
  return std::nullopt;
}

std::optional<ResourceInfo> Store::Resolve(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& r : registry_) {
    if (r.id() == name) return r;
  }
  for (const auto& r : registry_) {
    if (r.plural == name || r.singular == name ||
        std::find(r.short_names.begin(), r.short_names.end(), name) != r.short_names.end()) {
      return r;
    }
  }
  return std::nullopt;
}

bool Store::RegisteredLocked(const ResourceInfo& r) const {
  for (const auto& e : registry_) {
    if (e.group == r.group && e.version == r.version && e.plural == r.plural) return true;
  }
  return false;
}

const ResourceInfo* Store::FindByIdLocked(const std::string& id) const {
  for (const auto& e : registry_) {
    if (e.id() == id) return &e;
  }
  return nullptr;
}

void Store::RegisterCrdLocked(const json& crd) {
  auto resources = ResourcesFromCrd(crd);
  if (!resources.ok()) return;
  std::string name = MetaString(crd, "name");
  registry_.erase(
      std::remove_if(registry_.begin(), registry_.end(), [&](const ResourceInfo& r) { return r.crd_name == name; }),
      registry_.end());
  for (auto& r : *resources) registry_.push_back(r);
}

void Store::UnregisterCrdLocked(const std::string& crd_name) {
  std::set<std::string> ids;
  for (const auto& r : registry_) {
    if (r.crd_name == crd_name) ids.insert(r.id());
  }
  // As k8s does, deleting a CRD deletes its objects.
  for (const auto& id : ids) {
    auto it = objects_.find(id);
    if (it == objects_.end()) continue;
    std::vector<Key> keys;
    for (const auto& [k, _] : it->second) keys.push_back(k);
    for (const auto& k : keys) RemoveLocked(id, k);
    objects_.erase(id);
  }
  registry_.erase(
      std::remove_if(registry_.begin(), registry_.end(), [&](const ResourceInfo& r) { return r.crd_name == crd_name; }),
      registry_.end());
}

json Store::CrdStatus(const json& crd, const json& old_status) const {
  std::string now = Now();
  auto since = [&](const std::string& type) {
    if (old_status.is_object()) {
      for (const auto& c : old_status.value("conditions", json::array())) {
        if (c.value("type", "") == type && c.contains("lastTransitionTime")) return c["lastTransitionTime"];
      }
    }
    return json(now);
  };
  json names = crd["spec"].value("names", json::object());
  if (!names.contains("singular")) {
    std::string s = names.value("kind", "");
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    names["singular"] = s;
  }
  if (!names.contains("listKind")) names["listKind"] = names.value("kind", "") + "List";
  json stored = json::array();
  for (const auto& v : crd["spec"].value("versions", json::array())) {
    if (v.is_object() && v.value("storage", false)) stored.push_back(v.value("name", ""));
  }
  return {{"conditions",
           {{{"type", "NamesAccepted"},
             {"status", "True"},
             {"reason", "NoConflicts"},
             {"message", "no conflicts found"},
             {"lastTransitionTime", since("NamesAccepted")}},
            {{"type", "Established"},
             {"status", "True"},
             {"reason", "InitialNamesAccepted"},
             {"message", "the initial names have been accepted"},
             {"lastTransitionTime", since("Established")}}}},
          {"acceptedNames", names},
          {"storedVersions", stored}};
}

// ---- Validation -----------------------------------------------------------

std::optional<ApiError> Store::CheckShapeLocked(const ResourceInfo& r, json& obj) const {
  if (!obj.is_object()) return BadRequest("the request body must be a JSON object");
  for (const char* field : {"apiVersion", "kind"}) {
    if (obj.contains(field) && !obj[field].is_string() && !obj[field].is_null()) {
      return BadRequest(std::string(field) + " must be a string");
    }
  }
  auto str = [&](const char* f) {
    return obj.contains(f) && obj[f].is_string() ? obj[f].get<std::string>() : std::string();
  };
  std::string api_version = str("apiVersion");
  std::string kind = str("kind");
  if (!api_version.empty() && api_version != r.api_version()) {
    return BadRequest("the API version in the data (" + api_version + ") does not match the expected API version (" +
                      r.api_version() + ")");
  }
  if (!kind.empty() && kind != r.kind) {
    return BadRequest("the kind in the data (" + kind + ") does not match the expected kind (" + r.kind + ")");
  }
  obj["apiVersion"] = r.api_version();
  obj["kind"] = r.kind;
  if (!obj.contains("metadata") || obj["metadata"].is_null()) obj["metadata"] = json::object();
  json& meta = obj["metadata"];
  if (!meta.is_object()) return BadRequest("metadata must be an object");
  for (const char* field :
       {"name", "generateName", "namespace", "resourceVersion", "uid", "creationTimestamp", "deletionTimestamp"}) {
    if (!meta.contains(field)) continue;
    if (meta[field].is_null()) {
      meta.erase(field);
    } else if (!meta[field].is_string()) {
      return BadRequest(std::string("metadata.") + field + " must be a string");
    }
  }
  for (const char* field : {"labels", "annotations"}) {
    if (!meta.contains(field)) continue;
    if (meta[field].is_null()) {
      meta.erase(field);
      continue;
    }
    if (!meta[field].is_object()) return BadRequest(std::string("metadata.") + field + " must be a map of strings");
    for (const auto& [k, v] : meta[field].items()) {
      if (!v.is_string()) return BadRequest(std::string("metadata.") + field + "." + k + " must be a string");
    }
  }
  if (meta.contains("finalizers")) {
    if (meta["finalizers"].is_null()) {
      meta.erase("finalizers");
    } else {
      if (!meta["finalizers"].is_array()) return BadRequest("metadata.finalizers must be a list of strings");
      for (const auto& f : meta["finalizers"]) {
        if (!f.is_string()) return BadRequest("metadata.finalizers must be a list of strings");
      }
    }
  }
  if (meta.contains("ownerReferences")) {
    if (meta["ownerReferences"].is_null()) {
      meta.erase("ownerReferences");
    } else {
      if (!meta["ownerReferences"].is_array()) return BadRequest("metadata.ownerReferences must be a list");
      for (const auto& ref : meta["ownerReferences"]) {
        if (!ref.is_object()) return BadRequest("metadata.ownerReferences must be a list of objects");
        for (const char* f : {"apiVersion", "kind", "name", "uid"}) {
          if (ref.contains(f) && !ref[f].is_string()) {
            return BadRequest(std::string("metadata.ownerReferences[].") + f + " must be a string");
          }
        }
        for (const char* f : {"controller", "blockOwnerDeletion"}) {
          if (ref.contains(f) && !ref[f].is_boolean() && !ref[f].is_null()) {
            return BadRequest(std::string("metadata.ownerReferences[].") + f + " must be a boolean");
          }
        }
      }
    }
  }
  return std::nullopt;
}

std::optional<ApiError> Store::ValidateMetaLocked(const ResourceInfo& r, const json& obj) const {
  std::vector<Cause> causes;
  const json& meta = obj["metadata"];
  std::string name = meta.value("name", "");
  std::string why;
  switch (r.name_rule) {
    case NameRule::kDns1123Subdomain: why = CheckDns1123Subdomain(name); break;
    case NameRule::kDns1123Label: why = CheckDns1123Label(name); break;
    case NameRule::kDns1035Label: why = CheckDns1035Label(name); break;
  }
  if (!why.empty()) causes.push_back({"metadata.name", "FieldValueInvalid", "Invalid value: \"" + name + "\": " + why});
  if (r.namespaced) {
    std::string ns = meta.value("namespace", "");
    if (std::string w = CheckDns1123Label(ns); !w.empty()) {
      causes.push_back({"metadata.namespace", "FieldValueInvalid", "Invalid value: \"" + ns + "\": " + w});
    }
  }
  if (r.id() == kCrdId) {
    auto resources = ResourcesFromCrd(obj);
    if (!resources.ok()) causes.push_back({"spec", "FieldValueInvalid", resources.status().message()});
  }
  if (meta.contains("labels")) {
    for (const auto& [k, v] : meta["labels"].items()) {
      if (std::string w = CheckQualifiedName(k); !w.empty()) {
        causes.push_back({"metadata.labels", "FieldValueInvalid", "Invalid value: \"" + k + "\": " + w});
      }
      std::string value = v.get<std::string>();
      if (std::string w = CheckLabelValue(value); !w.empty()) {
        causes.push_back({"metadata.labels", "FieldValueInvalid", "Invalid value: \"" + value + "\": " + w});
      }
    }
  }
  if (meta.contains("annotations")) {
    size_t total = 0;
    for (const auto& [k, v] : meta["annotations"].items()) {
      total += k.size() + v.get<std::string>().size();
      if (std::string w = CheckQualifiedName(k); !w.empty()) {
        causes.push_back({"metadata.annotations", "FieldValueInvalid", "Invalid value: \"" + k + "\": " + w});
      }
    }
    if (total > 256 * 1024) {
      causes.push_back({"metadata.annotations", "FieldValueTooLong", "Too long: must have at most 262144 bytes"});
    }
  }
  if (meta.contains("finalizers")) {
    for (const auto& f : meta["finalizers"]) {
      if (std::string w = CheckQualifiedName(f.get<std::string>()); !w.empty()) {
        causes.push_back(
            {"metadata.finalizers", "FieldValueInvalid", "Invalid value: \"" + f.get<std::string>() + "\": " + w});
      }
    }
  }
  if (meta.contains("ownerReferences")) {
    int controllers = 0;
    for (const auto& ref : meta["ownerReferences"]) {
      for (const char* f : {"apiVersion", "kind", "name", "uid"}) {
        if (ref.value(f, "").empty()) {
          causes.push_back({std::string("metadata.ownerReferences.") + f, "FieldValueInvalid",
                            std::string("Invalid value: \"\": ") + f + " must not be empty"});
        }
      }
      if (ref.value("controller", false)) ++controllers;
    }
    if (controllers > 1) {
      causes.push_back({"metadata.ownerReferences", "FieldValueInvalid",
                        "Invalid value: only one reference can have Controller set to true"});
    }
  }
  if (causes.empty()) return std::nullopt;
  return InvalidError(r, name, causes);
}

// ---- Writes ---------------------------------------------------------------

json Store::CommitLocked(const ResourceInfo& r, json obj, const char* type, const json* prev) {
  ++rv_;
  obj["metadata"]["resourceVersion"] = std::to_string(rv_);
  std::string ns = r.namespaced ? MetaString(obj, "namespace") : "";
  objects_[r.id()][{ns, MetaString(obj, "name")}] = obj;
  log_.push_back({rv_, type, r.id(), ns, obj, prev ? *prev : json()});
  while (log_.size() > options_.compaction_window) {
    compacted_rv_ = log_.front().rv;
    log_.pop_front();
  }
  cv_.notify_all();
  return obj;
}

json Store::RemoveLocked(const std::string& resource_id, const Key& key) {
  auto& objs = objects_[resource_id];
  auto it = objs.find(key);
  if (it == objs.end()) return json();
  json obj = std::move(it->second);
  objs.erase(it);
  ++rv_;
  obj["metadata"]["resourceVersion"] = std::to_string(rv_);
  pending_policy_.erase(MetaString(obj, "uid"));
  log_.push_back({rv_, "DELETED", resource_id, key.first, obj, json()});
  while (log_.size() > options_.compaction_window) {
    compacted_rv_ = log_.front().rv;
    log_.pop_front();
  }
  cv_.notify_all();
  return obj;
}

ApiResult<json> Store::Create(const ResourceInfo& r_in, const std::string& ns_in, json body, bool dry_run) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!RegisteredLocked(r_in)) return NotRegistered();
  const ResourceInfo r = *FindByIdLocked(r_in.id());
  if (auto e = CheckShapeLocked(r, body)) return *e;
  json& meta = body["metadata"];
  std::string ns = r.namespaced ? ns_in : "";
  if (r.namespaced) {
    std::string body_ns = meta.value("namespace", "");
    if (!body_ns.empty() && body_ns != ns) {
      return BadRequest("the namespace of the provided object does not match the namespace sent on the request");
    }
    meta["namespace"] = ns;
  } else {
    meta.erase("namespace");
  }
  if (!meta.value("resourceVersion", "").empty()) {
    return MakeError(500, "InternalError",
                     "Internal error occurred: resourceVersion should not be set on objects to be created");
  }
  std::string name = meta.value("name", "");
  Objects& objs = objects_[r.id()];
  if (name.empty()) {
    std::string prefix = meta.value("generateName", "");
    if (prefix.empty()) {
      return InvalidError(
          r, "", {{"metadata.name", "FieldValueRequired", "Required value: name or generateName is required"}});
    }
    if (prefix.size() > 58) prefix.resize(58);
    static const char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
    for (int attempt = 0; name.empty() || objs.count({ns, name}); ++attempt) {
      if (attempt > 100) return MakeError(500, "InternalError", "could not generate a unique name");
      name = prefix;
      for (int i = 0; i < 5; ++i) name += kAlphabet[rng_() % (sizeof kAlphabet - 1)];
    }
    meta["name"] = name;
  }
  if (auto e = ValidateMetaLocked(r, body)) return *e;
  if (objs.count({ns, name})) return AlreadyExistsError(r, name);

  meta["uid"] = NewUidLocked();
  meta["creationTimestamp"] = Now();
  meta["generation"] = 1;
  for (const char* f : {"deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"}) meta.erase(f);
  if (r.has_status) body.erase("status");
  if (r.id() == "pods") body["status"] = {{"phase", "Pending"}};
  if (r.id() == "namespaces") body["status"] = {{"phase", "Active"}};
  if (r.id() == "services") body["status"] = {{"loadBalancer", json::object()}};
  if (r.id() == kCrdId) body["status"] = CrdStatus(body, json());
  if (dry_run) return body;
  json out = CommitLocked(r, std::move(body), "ADDED", nullptr);
  if (r.id() == kCrdId) RegisterCrdLocked(out);
  return out;
}

ApiResult<json> Store::Update(const ResourceInfo& r_in, const std::string& ns_in, const std::string& name, json body,
                              bool status, bool dry_run) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!RegisteredLocked(r_in)) return NotRegistered();
  const ResourceInfo r = *FindByIdLocked(r_in.id());
  if (status && !r.has_status) return NotRegistered();
  if (auto e = CheckShapeLocked(r, body)) return *e;
  std::string ns = r.namespaced ? ns_in : "";
  json& meta = body["metadata"];
  std::string body_name = meta.value("name", "");
  if (!body_name.empty() && body_name != name) {
    return BadRequest("the name of the object (" + body_name + ") does not match the name on the URL (" + name + ")");
  }
  std::string body_ns = meta.value("namespace", "");
  if (r.namespaced && !body_ns.empty() && body_ns != ns) {
    return BadRequest("the namespace of the provided object does not match the namespace sent on the request");
  }
  auto& objs = objects_[r.id()];
  auto it = objs.find({ns, name});
  if (it == objs.end()) return NotFoundError(r, name);
  json old = it->second;
  std::string rv = meta.value("resourceVersion", "");
  if (!rv.empty() && rv != MetaString(old, "resourceVersion")) {
    return ConflictError(r, name,
                         "the object has been modified; please apply your changes to the latest version and try again");
  }
  std::string uid = meta.value("uid", "");
  if (!uid.empty() && uid != MetaString(old, "uid")) {
    return ConflictError(
        r, name,
        "Precondition failed: UID in precondition: " + MetaString(old, "uid") + ", UID in object meta: " + uid);
  }
  return UpdateLocked(r, old, std::move(body), status, dry_run);
}

ApiResult<json> Store::UpdateLocked(const ResourceInfo& r, const json& old, json next, bool status, bool dry_run) {
  json result;
  if (status) {
    result = old;
    if (next.contains("status")) {
      result["status"] = next["status"];
    } else {
      result.erase("status");
    }
  } else {
    result = std::move(next);
    if (r.has_status) {
      if (old.contains("status")) {
        result["status"] = old["status"];
      } else {
        result.erase("status");
      }
    }
    json& m = result["metadata"];
    const json& om = old["metadata"];
    for (const char* f : {"name", "namespace", "uid", "creationTimestamp", "generation", "deletionTimestamp",
                          "deletionGracePeriodSeconds", "resourceVersion"}) {
      if (om.contains(f)) {
        m[f] = om[f];
      } else {
        m.erase(f);
      }
    }
    m.erase("managedFields");
    m.erase("selfLink");
  }
  std::string name = MetaString(old, "name");
  if (auto e = ValidateMetaLocked(r, result)) return *e;
  if (Deleting(old)) {
    std::vector<std::string> before = Finalizers(old);
    for (const auto& f : Finalizers(result)) {
      if (std::find(before.begin(), before.end(), f) == before.end()) {
        return InvalidError(r, name,
                            {{"metadata.finalizers", "FieldValueForbidden",
                              "Forbidden: no new finalizers can be added if the object is being deleted, "
                              "found new finalizers []string{\"" +
                                  f + "\"}"}});
      }
    }
  }
  if (r.id() == kCrdId && !status) result["status"] = CrdStatus(result, old.value("status", json()));
  if (SpecPart(result, r.has_status) != SpecPart(old, r.has_status)) {
    result["metadata"]["generation"] = old["metadata"].value("generation", 0) + 1;
  }
  // As etcd3's GuaranteedUpdate: an update that changes nothing is not written.
  if (result == old) return result;
  if (dry_run) return result;
  Key key{r.namespaced ? MetaString(old, "namespace") : "", name};
  if (Deleting(result) && Finalizers(result).empty()) {
    auto pol = pending_policy_.find(MetaString(result, "uid"));
    std::string policy = pol == pending_policy_.end() ? "Background" : pol->second;
    objects_[r.id()][key] = result;
    std::set<std::string> visited;
    json removed;
    FinishDeletionLocked(r, key, policy, &visited, &removed);
    return removed;
  }
  json out = CommitLocked(r, std::move(result), "MODIFIED", &old);
  if (r.id() == kCrdId) RegisterCrdLocked(out);
  return out;
}

ApiResult<json> Store::Patch(const ResourceInfo& r_in, const std::string& ns_in, const std::string& name,
                             PatchType type, const json& patch, bool status, bool dry_run) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!RegisteredLocked(r_in)) return NotRegistered();
  const ResourceInfo r = *FindByIdLocked(r_in.id());
  if (status && !r.has_status) return NotRegistered();
  std::string ns = r.namespaced ? ns_in : "";
  auto& objs = objects_[r.id()];
  auto it = objs.find({ns, name});
  if (it == objs.end()) return NotFoundError(r, name);
  json old = it->second;
  json patched;
  switch (type) {
    case PatchType::kMerge:
    case PatchType::kStrategicMerge: {
      if (!patch.is_object()) return BadRequest("a merge patch must be a JSON object");
      json p = patch;
      if (type == PatchType::kStrategicMerge) StripDirectives(p);
      patched = old;
      patched.merge_patch(p);
      break;
    }
    case PatchType::kJsonPatch: {
      if (!patch.is_array()) return BadRequest("a JSON patch must be a JSON array of operations");
      try {
        patched = old.patch(patch);
      } catch (const std::exception& e) {
        return MakeError(422, "Invalid",
                         std::string("the server rejected our request due to an error in our request: ") + e.what());
      }
      break;
    }
  }
  if (auto e = CheckShapeLocked(r, patched)) return *e;
  if (MetaString(patched, "name") != name) {
    return BadRequest("the name of the object (" + MetaString(patched, "name") +
                      ") does not match the name on the URL (" + name + ")");
  }
  if (r.namespaced && MetaString(patched, "namespace") != ns) {
    return BadRequest("the namespace of the provided object does not match the namespace sent on the request");
  }
  std::string rv = MetaString(patched, "resourceVersion");
  if (!rv.empty() && rv != MetaString(old, "resourceVersion")) {
    return ConflictError(r, name,
                         "the object has been modified; please apply your changes to the latest version and try again");
  }
  std::string uid = MetaString(patched, "uid");
  if (!uid.empty() && uid != MetaString(old, "uid")) {
    return ConflictError(
        r, name,
        "Precondition failed: UID in precondition: " + MetaString(old, "uid") + ", UID in object meta: " + uid);
  }
  return UpdateLocked(r, old, std::move(patched), status, dry_run);
}

// ---- Deletion -------------------------------------------------------------

ApiResult<json> Store::Delete(const ResourceInfo& r_in, const std::string& ns_in, const std::string& name,
                              const DeleteOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!RegisteredLocked(r_in)) return NotRegistered();
  const ResourceInfo r = *FindByIdLocked(r_in.id());
  std::string policy = options.propagation.empty() ? "Background" : options.propagation;
  if (policy != "Background" && policy != "Foreground" && policy != "Orphan") {
    return MakeError(422, "Invalid",
                     "propagationPolicy: Unsupported value: \"" + policy +
                         "\": supported values: \"Foreground\", \"Background\", \"Orphan\"");
  }
  std::string ns = r.namespaced ? ns_in : "";
  auto& objs = objects_[r.id()];
  auto it = objs.find({ns, name});
  if (it == objs.end()) return NotFoundError(r, name);
  const json& cur = it->second;
  if (!options.precondition_uid.empty() && options.precondition_uid != MetaString(cur, "uid")) {
    return ConflictError(r, name,
                         "Precondition failed: UID in precondition: " + options.precondition_uid +
                             ", UID in object meta: " + MetaString(cur, "uid"));
  }
  if (!options.precondition_resource_version.empty() &&
      options.precondition_resource_version != MetaString(cur, "resourceVersion")) {
    return ConflictError(
        r, name,
        "Precondition failed: ResourceVersion in precondition: " + options.precondition_resource_version +
            ", ResourceVersion in object meta: " + MetaString(cur, "resourceVersion"));
  }
  if (options.dry_run) return json(cur);
  std::set<std::string> visited;
  return DeleteLocked(r, {ns, name}, policy, &visited);
}

json Store::DeleteLocked(const ResourceInfo& r, const Key& key, const std::string& policy,
                         std::set<std::string>* visited) {
  auto& objs = objects_[r.id()];
  auto it = objs.find(key);
  if (it == objs.end()) return json();
  std::string uid = MetaString(it->second, "uid");
  if (!visited->insert(uid).second) return it->second;
  if (!Finalizers(it->second).empty()) {
    if (Deleting(it->second)) return it->second;
    json prev = it->second;
    json next = prev;
    next["metadata"]["deletionTimestamp"] = Now();
    next["metadata"]["deletionGracePeriodSeconds"] = 0;
    pending_policy_[uid] = policy;
    json out = CommitLocked(r, std::move(next), "MODIFIED", &prev);
    if (policy == "Foreground") CascadeLocked(out, r.namespaced, policy, visited);
    return out;
  }
  json removed;
  FinishDeletionLocked(r, key, policy, visited, &removed);
  return removed;
}

void Store::FinishDeletionLocked(const ResourceInfo& r, const Key& key, const std::string& policy,
                                 std::set<std::string>* visited, json* removed) {
  auto& objs = objects_[r.id()];
  auto it = objs.find(key);
  if (it == objs.end()) return;
  json obj = it->second;
  // Foreground: dependents go first; Orphan: they lose the reference first.
  if (policy == "Foreground" || policy == "Orphan") CascadeLocked(obj, r.namespaced, policy, visited);
  *removed = RemoveLocked(r.id(), key);
  if (policy == "Background") CascadeLocked(*removed, r.namespaced, policy, visited);
  if (r.id() == "namespaces") {
    // The namespace controller's job, done at once.
    std::vector<std::pair<ResourceInfo, Key>> members;
    for (const auto& [id, objs] : objects_) {
      const ResourceInfo* mr = FindByIdLocked(id);
      if (!mr || !mr->namespaced) continue;
      for (const auto& [k, _] : objs) {
        if (k.first == key.second) members.push_back({*mr, k});
      }
    }
    for (const auto& [mr, k] : members) DeleteLocked(mr, k, "Background", visited);
  }
  if (r.id() == kCrdId) UnregisterCrdLocked(key.second);
}

void Store::CascadeLocked(const json& owner, bool owner_namespaced, const std::string& policy,
                          std::set<std::string>* visited) {
  std::string uid = MetaString(owner, "uid");
  std::string ns = MetaString(owner, "namespace");
  if (uid.empty()) return;
  std::vector<std::pair<std::string, Key>> dependents;
  std::set<std::string> live_uids;
  for (const auto& [id, objs] : objects_) {
    for (const auto& [k, obj] : objs) {
      live_uids.insert(MetaString(obj, "uid"));
      if (owner_namespaced && k.first != ns) continue;
      if (OwnedBy(obj, uid)) dependents.push_back({id, k});
    }
  }
  live_uids.erase(uid);
  for (const auto& [id, k] : dependents) {
    const ResourceInfo* dr = FindByIdLocked(id);
    if (!dr) continue;
    ResourceInfo r = *dr;
    auto it = objects_[id].find(k);
    if (it == objects_[id].end()) continue;
    // Another owner still alive keeps the dependent: only this reference goes,
    // as the garbage collector does for dangling references.
    bool other_owner = false;
    for (const auto& ref : it->second["metadata"]["ownerReferences"]) {
      std::string ruid = ref.value("uid", "");
      if (ruid != uid && live_uids.count(ruid)) other_owner = true;
    }
    if (policy == "Orphan" || other_owner) {
      json prev = it->second;
      json next = prev;
      json kept = json::array();
      for (const auto& ref : prev["metadata"]["ownerReferences"]) {
        if (ref.value("uid", "") != uid) kept.push_back(ref);
      }
      if (kept.empty()) {
        next["metadata"].erase("ownerReferences");
      } else {
        next["metadata"]["ownerReferences"] = kept;
      }
      CommitLocked(r, std::move(next), "MODIFIED", &prev);
    } else {
      DeleteLocked(r, k, policy, visited);
    }
  }
}

ApiResult<ListResult> Store::DeleteCollection(const ResourceInfo& r_in, const std::string& ns, const ListOptions& list,
                                              const DeleteOptions& options) {
  ListOptions unpaged = list;
  unpaged.limit = 0;
  unpaged.continue_token.clear();
  auto items = List(r_in, ns, unpaged);
  if (!items.ok()) return items;
  ListResult out;
  for (const auto& obj : items.value().items) {
    auto d = Delete(r_in, ns.empty() ? MetaString(obj, "namespace") : ns, MetaString(obj, "name"), options);
    if (d.ok()) out.items.push_back(d.value());
  }
  out.resource_version = std::to_string(resource_version());
  return out;
}

// ---- Reads ----------------------------------------------------------------

ApiResult<json> Store::Get(const ResourceInfo& r_in, const std::string& ns, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!RegisteredLocked(r_in)) return NotRegistered();
  const ResourceInfo& r = *FindByIdLocked(r_in.id());
  auto objs = objects_.find(r.id());
  if (objs != objects_.end()) {
    auto it = objs->second.find({r.namespaced ? ns : "", name});
    if (it != objs->second.end()) return it->second;
  }
  return NotFoundError(r, name);
}

ApiResult<ListResult> Store::List(const ResourceInfo& r_in, const std::string& ns, const ListOptions& options) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!RegisteredLocked(r_in)) return NotRegistered();
  const ResourceInfo& r = *FindByIdLocked(r_in.id());
  ListResult out;
  uint64_t list_rv = rv_;
  Key start;
  bool has_start = false;
  if (!options.continue_token.empty()) {
    std::string raw;
    json token;
    if (Unbase64(options.continue_token, &raw)) token = json::parse(raw, nullptr, false);
    if (!token.is_object() || !token.contains("rv") || !token["rv"].is_number_unsigned() || !token.contains("ns") ||
        !token["ns"].is_string() || !token.contains("name") || !token["name"].is_string()) {
      return BadRequest("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)");
    }
    list_rv = token["rv"].get<uint64_t>();
    if (list_rv < compacted_rv_) {
      return MakeError(410, "Expired",
                       "The provided continue parameter is too old to display a consistent list result. You can "
                       "start a new list without the continue parameter.");
    }
    start = {token["ns"].get<std::string>(), token["name"].get<std::string>()};
    has_start = true;
  }
  auto objs = objects_.find(r.id());
  if (objs != objects_.end()) {
    auto it = has_start ? objs->second.upper_bound(start) : objs->second.begin();
    for (; it != objs->second.end(); ++it) {
      if (r.namespaced && !ns.empty() && it->first.first != ns) continue;
      const json& obj = it->second;
      if (!options.labels.Matches(obj["metadata"].value("labels", json()))) continue;
      if (!options.fields.Matches(obj)) continue;
      if (options.limit > 0 && static_cast<int64_t>(out.items.size()) == options.limit) {
        Key last{r.namespaced ? MetaString(out.items.back(), "namespace") : "", MetaString(out.items.back(), "name")};
        out.continue_token = Base64(json({{"rv", list_rv}, {"ns", last.first}, {"name", last.second}}).dump());
        int64_t remaining = 0;
        for (auto rest = it; rest != objs->second.end(); ++rest) {
          if (r.namespaced && !ns.empty() && rest->first.first != ns) continue;
          if (options.labels.Matches(rest->second["metadata"].value("labels", json())) &&
              options.fields.Matches(rest->second)) {
            ++remaining;
          }
        }
        out.remaining = remaining;
        break;
      }
      out.items.push_back(obj);
    }
  }
  out.resource_version = std::to_string(list_rv);
  return out;
}

// ---- Watch ----------------------------------------------------------------

namespace {

bool CursorMatches(const WatchCursor& c, const json& obj) {
  return c.labels.Matches(obj["metadata"].value("labels", json())) && c.fields.Matches(obj);
}

}  // namespace

ApiResult<std::vector<WatchEvent>> Store::StartWatch(WatchCursor* cursor, const std::string& resource_version,
                                                     bool send_initial_events) {
  std::lock_guard<std::mutex> lock(mu_);
  const ResourceInfo* r = FindByIdLocked(cursor->resource_id);
  if (!r) return NotRegistered();
  std::vector<WatchEvent> initial;
  if (resource_version.empty() || resource_version == "0" || send_initial_events) {
    auto objs = objects_.find(cursor->resource_id);
    if (objs != objects_.end()) {
      for (const auto& [k, obj] : objs->second) {
        if (!cursor->ns.empty() && k.first != cursor->ns) continue;
        if (CursorMatches(*cursor, obj)) initial.push_back({"ADDED", obj});
      }
    }
    cursor->position = rv_;
  } else {
    uint64_t v;
    if (!ParseVersion(resource_version, &v)) {
      return BadRequest("resourceVersion: Invalid value: \"" + resource_version + "\": must be an unsigned integer");
    }
    if (v < compacted_rv_) {
      return MakeError(410, "Expired",
                       "too old resource version: " + resource_version + " (" + std::to_string(compacted_rv_) + ")");
    }
    if (v > rv_) {
      return MakeError(
          504, "Timeout", "Too large resource version: " + resource_version + ", current: " + std::to_string(rv_),
          {{"causes", {{{"reason", "ResourceVersionTooLarge"}, {"message", "Too large resource version"}}}},
           {"retryAfterSeconds", 1}});
    }
    cursor->position = v;
  }
  cursor->epoch = drop_epoch_;
  cursor->active = true;
  ++watch_counts_[cursor->resource_id];
  return initial;
}

void Store::EndWatch(WatchCursor* cursor) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!cursor->active) return;
  cursor->active = false;
  if (--watch_counts_[cursor->resource_id] <= 0) watch_counts_.erase(cursor->resource_id);
}

Store::WaitOutcome Store::Wait(WatchCursor* c, std::chrono::steady_clock::time_point deadline,
                               std::vector<WatchEvent>* events) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (shutdown_) return WaitOutcome::kShutdown;
    if (c->epoch != drop_epoch_) return WaitOutcome::kDropped;
    if (c->position < compacted_rv_) return WaitOutcome::kExpired;
    if (c->position < rv_) {
      // log_ holds versions (compacted_rv_, rv_] with no gaps.
      size_t start = static_cast<size_t>(c->position - compacted_rv_);
      for (size_t i = start; i < log_.size(); ++i) {
        const Event& e = log_[i];
        if (e.resource_id != c->resource_id || (!c->ns.empty() && e.ns != c->ns)) continue;
        bool now_matches = CursorMatches(*c, e.object);
        if (e.type == "MODIFIED") {
          bool before = !e.prev.is_null() && CursorMatches(*c, e.prev);
          if (now_matches && before)
            events->push_back({"MODIFIED", e.object});
          else if (now_matches)
            events->push_back({"ADDED", e.object});
          else if (before)
            events->push_back({"DELETED", e.object});
        } else if (now_matches) {
          events->push_back({e.type, e.object});
        }
      }
      c->position = rv_;
      if (!events->empty()) return WaitOutcome::kEvents;
    }
    if (std::chrono::steady_clock::now() >= deadline) return WaitOutcome::kTimeout;
    cv_.wait_until(lock, deadline);
  }
}

void Store::DropWatches() {
  std::lock_guard<std::mutex> lock(mu_);
  ++drop_epoch_;
  cv_.notify_all();
}

void Store::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  cv_.notify_all();
}

int Store::ActiveWatches(const std::string& resource_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!resource_id.empty()) {
    auto it = watch_counts_.find(resource_id);
    return it == watch_counts_.end() ? 0 : it->second;
  }
  int n = 0;
  for (const auto& [_, count] : watch_counts_) n += count;
  return n;
}

uint64_t Store::resource_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rv_;
}

uint64_t Store::compacted_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return compacted_rv_;
}

void Store::CompactNow() {
  std::lock_guard<std::mutex> lock(mu_);
  log_.clear();
  compacted_rv_ = rv_;
  cv_.notify_all();
}

bool Store::WaitForWrite(uint64_t since, std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, deadline, [&] { return rv_ > since || shutdown_; }) && rv_ > since;
}

}  // namespace tfjob::testing::apiserver
