#include "common/json_reader.h"

#include "common/files.h"

#include <cmath>

namespace tfjob {
namespace {

std::string TypeName(const nlohmann::json& j) { return j.type_name(); }

template <typename T>
constexpr const char* Expected() {
  if constexpr (std::is_same_v<T, std::string>)
    return "a string";
  else if constexpr (std::is_same_v<T, int64_t>)
    return "an integer";
  else if constexpr (std::is_same_v<T, double>)
    return "a number";
  else if constexpr (std::is_same_v<T, bool>)
    return "a boolean";
  else if constexpr (std::is_same_v<T, std::vector<int64_t>>)
    return "an array of integers";
  else
    return "an array of strings";
}

template <typename T>
bool Convert(const nlohmann::json& j, T& out) {
  if constexpr (std::is_same_v<T, std::string>) {
    if (!j.is_string()) return false;
    out = j.get<std::string>();
  } else if constexpr (std::is_same_v<T, int64_t>) {
    if (j.is_number_integer()) {
      out = j.get<int64_t>();
    } else if (j.is_number_float()) {
      const double d = j.get<double>();
      // Casting a double outside int64's range is undefined: check first.
      if (!(d >= -9.2233720368547758e18 && d < 9.2233720368547758e18) || d != std::floor(d)) return false;
      out = static_cast<int64_t>(d);
    } else {
      return false;
    }
  } else if constexpr (std::is_same_v<T, double>) {
    if (!j.is_number()) return false;
    out = j.get<double>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) return false;
    out = j.get<bool>();
  } else {
    if (!j.is_array()) return false;
    T v;
    for (const auto& e : j) {
      typename T::value_type x;
      if (!Convert(e, x)) return false;
      v.push_back(std::move(x));
    }
    out = std::move(v);
  }
  return true;
}

}  // namespace

JsonReader::JsonReader(const nlohmann::json& obj, std::string path) : obj_(obj), path_(std::move(path)) {
  if (!obj_.is_object()) {
    status_ = InvalidArgument((path_.empty() ? std::string("document") : path_) + ": expected an object, got " +
                              TypeName(obj_));
  }
}

bool JsonReader::Has(const std::string& key) const { return obj_.is_object() && obj_.contains(key); }

std::string JsonReader::FieldPath(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

template <typename T>
Status JsonReader::Get(const std::string& key, T& out, bool required) {
  if (!status_.ok()) return status_;
  known_.insert(key);
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) {
    if (required) return InvalidArgument(FieldPath(key) + ": required field is missing");
    return Status::Ok();
  }
  if (!Convert(*it, out)) {
    return InvalidArgument(FieldPath(key) + ": expected " + Expected<T>() + ", got " + it->dump());
  }
  return Status::Ok();
}

Status JsonReader::Required(const std::string& k, std::string& o) { return Get(k, o, true); }
Status JsonReader::Required(const std::string& k, int64_t& o) { return Get(k, o, true); }
Status JsonReader::Required(const std::string& k, double& o) { return Get(k, o, true); }
Status JsonReader::Optional(const std::string& k, std::string& o) { return Get(k, o, false); }
Status JsonReader::Optional(const std::string& k, int64_t& o) { return Get(k, o, false); }
Status JsonReader::Optional(const std::string& k, double& o) { return Get(k, o, false); }
Status JsonReader::Optional(const std::string& k, bool& o) { return Get(k, o, false); }
Status JsonReader::Optional(const std::string& k, std::vector<int64_t>& o) { return Get(k, o, false); }
Status JsonReader::Optional(const std::string& k, std::vector<std::string>& o) { return Get(k, o, false); }

const nlohmann::json* JsonReader::Child(const std::string& key) {
  known_.insert(key);
  if (!obj_.is_object()) return nullptr;
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

Status JsonReader::Finish() const {
  if (!status_.ok()) return status_;
  for (auto it = obj_.begin(); it != obj_.end(); ++it) {
    if (!known_.count(it.key())) return InvalidArgument(FieldPath(it.key()) + ": unknown field");
  }
  return Status::Ok();
}

StatusOr<nlohmann::json> ParseJson(const std::string& text, const std::string& source) {
  // nlohmann reports syntax errors as parse_error (with the byte offset) and
  // a number it cannot hold (1e400) as out_of_range; nothing may escape.
  auto reason = [](const nlohmann::json::exception& e) {
    const std::string what = e.what();
    const size_t colon = what.find("] ");
    return colon == std::string::npos ? what : what.substr(colon + 2);
  };
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    std::string r = reason(e);
    if (r.rfind("parse error", 0) == 0 && r.find(": ") != std::string::npos) r = r.substr(r.find(": ") + 2);
    return InvalidArgument(source + ": malformed JSON at byte " + std::to_string(e.byte) + ": " + r);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(source + ": malformed JSON: " + reason(e));
  }
}

StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseJson(text, path);
}

}  // namespace tfjob
