// The readers Decode and Encode share (codec_read.h): a field's value
// to its typed value, or INVALID_ARGUMENT naming the field's path.
#include "operator/api/codec_read.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace tfjob::op::api::codec_internal {
namespace {

StatusOr<std::optional<int64_t>> ReadInt(const json* v, const std::string& path, int64_t lo, int64_t hi,
                                         const char* width) {
  using R = std::optional<int64_t>;
  if (!v) return R();
  auto out_of_range = [&] {
    return InvalidArgument(path + ": " + v->dump() + " is out of range for a " + width + " integer");
  };
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) return out_of_range();
    return R(static_cast<int64_t>(u));
  }
  if (v->is_number_integer()) {
    const int64_t i = v->get<int64_t>();
    if (i < lo || i > hi) return out_of_range();
    return R(i);
  }
  if (v->is_number_float()) {
    // A whole-number float (YAML "1e3", JSON "2.0") is an integer, as in the
    // API server's JSON decoding of integer fields.
    const double d = v->get<double>();
    if (!std::isfinite(d) || std::trunc(d) != d) return TypeError(path, "an integer");
    // double(hi) + 1 is exact for int32 and rounds to 2^63 for int64, so the
    // comparison never lets through a value whose cast would overflow.
    if (d < static_cast<double>(lo) || d >= static_cast<double>(hi) + 1.0) return out_of_range();
    return R(static_cast<int64_t>(d));
  }
  return TypeError(path, "an integer");
}

}  // namespace

std::string ChildPath(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

std::string IndexPath(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

std::string Quote(const std::string& s) { return json(s).dump(-1, ' ', false, json::error_handler_t::replace); }

Status TypeError(const std::string& path, const char* expected) {
  return InvalidArgument(path + ": expected " + expected);
}

const json* Field(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

StatusOr<std::optional<int32_t>> ReadInt32(const json* v, const std::string& path) {
  ASSIGN_OR_RETURN(std::optional<int64_t> i, ReadInt(v, path, std::numeric_limits<int32_t>::min(),
                                                     std::numeric_limits<int32_t>::max(), "32-bit"));
  if (!i) return std::optional<int32_t>();
  return std::optional<int32_t>(static_cast<int32_t>(*i));
}

StatusOr<std::optional<int64_t>> ReadInt64(const json* v, const std::string& path) {
  return ReadInt(v, path, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), "64-bit");
}

StatusOr<std::optional<std::string>> ReadString(const json* v, const std::string& path) {
  if (!v) return std::optional<std::string>();
  if (!v->is_string()) return TypeError(path, "a string");
  return std::optional<std::string>(v->get_ref<const std::string&>());
}

StatusOr<std::optional<bool>> ReadBool(const json* v, const std::string& path) {
  if (!v) return std::optional<bool>();
  if (!v->is_boolean()) return TypeError(path, "a boolean");
  return std::optional<bool>(v->get<bool>());
}

// An object passed through whole; null when absent.
StatusOr<json> ReadObject(const json* v, const std::string& path) {
  if (!v) return json();
  if (!v->is_object()) return TypeError(path, "an object");
  return *v;
}

StatusOr<std::map<std::string, std::string>> ReadStringMap(const json* v, const std::string& path) {
  std::map<std::string, std::string> out;
  if (!v) return out;
  if (!v->is_object()) return TypeError(path, "an object");
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (!it->is_string()) return TypeError(ChildPath(path, it.key()), "a string");
    out.emplace(it.key(), it->get_ref<const std::string&>());
  }
  return out;
}

Status ExpectObjectOrNull(const json* v, const std::string& path) {
  if (v && !v->is_object()) return TypeError(path, "an object");
  return Status::Ok();
}

Status ExpectArrayOrNull(const json* v, const std::string& path) {
  if (v && !v->is_array()) return TypeError(path, "an array");
  return Status::Ok();
}

}  // namespace tfjob::op::api::codec_internal
