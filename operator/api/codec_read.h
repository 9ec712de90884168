// The readers codec_decode.cc (Decode) and codec_encode.cc (Encode) share
// (codec_read.cc): paths in error messages, typed readers, and Fields; not
// for use outside operator/api.
//
// Each reader takes the field's value (nullptr when the key is absent or its
// value is null: Kubernetes treats an explicit null as "not set") and returns
// the typed value or a type error naming `path`. Encode uses the same readers
// to decide whether a typed field still equals what the document holds, which
// is what makes Encode(Decode(x)) == x exact.
//
// Thread-safety: pure functions of their arguments; Fields holds a reference
// to the object it reads, which must outlive it. Failure: INVALID_ARGUMENT
// naming the path; nothing here throws on a value of the wrong type (every
// access is type-checked first).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tfjob::op::api::codec_internal {

using json = nlohmann::json;

// ---- paths in error messages ----
// "a.b": `key` under `path` ("" is the document itself).
std::string ChildPath(const std::string& path, const std::string& key);
std::string IndexPath(const std::string& path, size_t i);
// JSON-quoted, with invalid UTF-8 replaced rather than thrown on.
std::string Quote(const std::string& s);
Status TypeError(const std::string& path, const char* expected);

// ---- readers ----
// obj[key], or nullptr when obj is not an object, lacks key or holds null.
const json* Field(const json& obj, const char* key);
StatusOr<std::optional<int32_t>> ReadInt32(const json* v, const std::string& path);
StatusOr<std::optional<int64_t>> ReadInt64(const json* v, const std::string& path);
StatusOr<std::optional<std::string>> ReadString(const json* v, const std::string& path);
StatusOr<std::optional<bool>> ReadBool(const json* v, const std::string& path);
// An object passed through whole; null when absent.
StatusOr<json> ReadObject(const json* v, const std::string& path);
StatusOr<std::map<std::string, std::string>> ReadStringMap(const json* v, const std::string& path);
Status ExpectObjectOrNull(const json* v, const std::string& path);
Status ExpectArrayOrNull(const json* v, const std::string& path);

// An object being decoded and its path: a field's key is written once, and
// both the lookup and the path its errors name ("spec.runPolicy" +
// "backoffLimit") come from it. Read works with any reader or decoder
// taking (const json* value, const std::string& path).
class Fields {
 public:
  Fields(const json& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

  template <typename Reader>
  auto Read(const char* key, Reader&& read) const {
    return read(Field(obj_, key), ChildPath(path_, key));
  }

 private:
  const json& obj_;
  const std::string path_;
};

}  // namespace tfjob::op::api::codec_internal
