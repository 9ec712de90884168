// YAML manifests -> JSON, typed the way kubectl types them.
//
// kubectl converts YAML with go-yaml v2 (YAML 1.1 resolution) before the API
// server ever sees JSON, so a manifest means what go-yaml makes of it: plain
// `yes` is true, plain `0755` is 493, `"2"` is a string. We drive yaml-cpp's
// event parser (which tells plain scalars from quoted ones through the
// non-specific tags "?" and "!") and resolve plain scalars ourselves.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include "operator/api/codec.h"

namespace tfjob::op::api {
namespace {

using json = nlohmann::json;

// Alias expansion can turn a few kilobytes into gigabytes ("billion laughs");
// no real manifest comes near this many values. The budget is per stream, so
// many small documents cannot add up to the same blow-up.
constexpr size_t kMaxValues = 1'000'000;

// Thrown inside the event handler to abort parsing with a located message;
// caught in YamlDocumentsToJson and turned into a Status.
struct YamlError {
  YAML::Mark mark;
  std::string message;
};

bool IsOneOf(const std::string& s, std::initializer_list<const char*> options) {
  for (const char* o : options) {
    if (s == o) return true;
  }
  return false;
}

// Go's strconv.ParseInt(s, 0, 64) / ParseUint(s, 0, 64) after go-yaml removed
// underscores: optional sign, then 0x / 0o / 0b / leading-0 octal / decimal.
// Returns false when `s` is not such an integer or does not fit.
bool ParseGoInt(const std::string& s, json& out) {
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    negative = s[i] == '-';
    ++i;
  }
  const bool has_sign = i > 0;
  int base = 10;
  if (s.size() - i >= 2 && s[i] == '0') {
    const char p = s[i + 1];
    if (p == 'x' || p == 'X') {
      base = 16;
      i += 2;
    } else if (p == 'o' || p == 'O') {
      base = 8;
      i += 2;
    } else if (p == 'b' || p == 'B') {
      base = 2;
      i += 2;
    } else {
      base = 8;
      i += 1;
    }
  }
  if (i >= s.size()) return false;
  unsigned __int128 value = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return false;
    }
    if (d >= base) return false;
    value = value * base + d;
    if (value > static_cast<unsigned __int128>(UINT64_MAX)) return false;
  }
  if (negative) {
    if (value > static_cast<unsigned __int128>(INT64_MAX) + 1) return false;
    out = value == static_cast<unsigned __int128>(INT64_MAX) + 1 ? INT64_MIN : -static_cast<int64_t>(value);
    return true;
  }
  if (value <= static_cast<unsigned __int128>(INT64_MAX)) {
    out = static_cast<int64_t>(value);
  } else if (!has_sign) {  // ParseUint takes no sign
    out = static_cast<uint64_t>(value);
  } else {
    return false;
  }
  return true;
}

// go-yaml's float syntax: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool IsYamlFloat(const std::string& s) {
  size_t i = 0;
  auto digits = [&] {
    const size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i - start;
  };
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (digits() == 0) return false;
  } else {
    if (digits() == 0) return false;
    if (i < s.size() && s[i] == '.') {
      ++i;
      digits();
    }
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == s.size();
}

bool IsNonFinite(const std::string& s) {
  return IsOneOf(
      s, {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", ".nan", ".NaN", ".NAN"});
}

// Well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past
// U+10FFFF). go-yaml refuses a stream that is not, so kubectl never sends
// such a manifest; nlohmann stores any bytes but throws when it writes them,
// so a string that got through here would fail far from the manifest.
// yaml-cpp passes raw bytes through; checking each scalar (keys included)
// locates the error at the scalar that holds the bad bytes.
bool IsUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

// YAML 1.1 as go-yaml v2 resolves a plain scalar. Timestamps stay strings:
// TFJob fields that hold times are strings on the wire anyway.
json ResolvePlain(const std::string& s, const YAML::Mark& mark) {
  if (IsOneOf(s, {"", "~", "null", "Null", "NULL"})) return json();
  if (IsOneOf(s, {"y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "true", "True", "TRUE"})) return true;
  if (IsOneOf(s, {"n", "N", "no", "No", "NO", "off", "Off", "OFF", "false", "False", "FALSE"})) return false;
  if (IsNonFinite(s)) throw YamlError{mark, "\"" + s + "\" is not representable in JSON"};
  const char c = s[0];
  if ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.') {
    std::string plain;
    for (char ch : s) {
      if (ch != '_') plain += ch;
    }
    json out;
    if (ParseGoInt(plain, out)) return out;
    if (IsYamlFloat(plain)) {
      const double d = std::strtod(plain.c_str(), nullptr);
      if (!std::isfinite(d)) throw YamlError{mark, "\"" + s + "\" is out of range for a float"};
      return d;
    }
  }
  return s;
}

// A scalar with an explicit standard tag (!!int, !!str, ...).
json ResolveTagged(const std::string& tag, const std::string& s, const YAML::Mark& mark) {
  static const std::string kPrefix = "tag:yaml.org,2002:";
  if (tag.rfind(kPrefix, 0) != 0) return s;  // application tags: keep the text
  const std::string name = tag.substr(kPrefix.size());
  if (name == "str" || name == "binary" || name == "timestamp") return s;
  const json v = ResolvePlain(s, mark);
  if (name == "null" && v.is_null()) return v;
  if (name == "bool" && v.is_boolean()) return v;
  if (name == "int" && v.is_number_integer()) return v;
  if (name == "float" && v.is_number()) return v.get<double>();
  if (name == "null" || name == "bool" || name == "int" || name == "float") {
    throw YamlError{mark, "\"" + s + "\" is not a valid !!" + name};
  }
  return s;
}

// Shortest text that reads back as `d`, formatted like Go's 'g' with -1.
std::string FormatFloatKey(double d) {
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  return buf;
}

// Mapping keys become strings as sigs.k8s.io/yaml makes them.
std::string KeyString(const json& key) {
  if (key.is_string()) return key.get<std::string>();
  if (key.is_null()) return "null";
  if (key.is_boolean()) return key.get<bool>() ? "true" : "false";
  if (key.is_number_unsigned()) return std::to_string(key.get<uint64_t>());
  if (key.is_number_integer()) return std::to_string(key.get<int64_t>());
  return FormatFloatKey(key.get<double>());
}

class JsonBuilder : public YAML::EventHandler {
 public:
  std::vector<json> TakeDocuments() { return std::move(documents_); }

  void OnDocumentStart(const YAML::Mark&) override {
    stack_.clear();
    anchors_.clear();
    root_ = json();
  }

  void OnDocumentEnd() override {
    // kubectl skips empty documents ("---" separators with nothing between).
    if (!root_.is_null()) documents_.push_back(std::move(root_));
  }

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    Add(json(), 1, mark, anchor, /*merge_key=*/false);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) throw YamlError{mark, "unknown anchor"};
    Add(it->second.first, it->second.second, mark, 0, false);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    if (!IsUtf8(value)) throw YamlError{mark, "invalid UTF-8 in a scalar"};
    const bool plain = tag == "?";
    json v = plain ? ResolvePlain(value, mark) : tag == "!" ? json(value) : ResolveTagged(tag, value, mark);
    Add(std::move(v), 1, mark, anchor, plain && value == "<<");
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(json::array(), mark, anchor);
  }
  void OnSequenceEnd() override { Close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(json::object(), mark, anchor);
  }
  void OnMapEnd() override { Close(); }

 private:
  struct Frame {
    json value;
    YAML::Mark mark;
    YAML::anchor_t anchor = 0;
    size_t size = 1;  // values in this subtree, for the expansion budget
    // Mapping state: the pending key, and "<<" sources applied at the end
    // so that explicit keys win wherever they appear.
    bool have_key = false;
    bool key_is_merge = false;
    std::string key;
    YAML::Mark key_mark;
    std::vector<json> merges;
  };

  void Count(size_t n, const YAML::Mark& mark) {
    total_ += n;
    if (total_ > kMaxValues) throw YamlError{mark, "document too large after alias expansion"};
  }

  void Open(json value, const YAML::Mark& mark, YAML::anchor_t anchor) {
    Count(1, mark);
    Frame f;
    f.value = std::move(value);
    f.mark = mark;
    f.anchor = anchor;
    stack_.push_back(std::move(f));
  }

  void Close() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    if (f.value.is_object()) {
      for (const json& source : f.merges) {
        for (auto it = source.begin(); it != source.end(); ++it) {
          if (!f.value.contains(it.key())) f.value[it.key()] = *it;
        }
      }
    }
    Add(std::move(f.value), f.size, f.mark, f.anchor, false, /*counted=*/true);
  }

  // Adds a finished value (of `size` values) to the enclosing container, or
  // makes it the document root.
  void Add(json v, size_t size, const YAML::Mark& mark, YAML::anchor_t anchor, bool merge_key, bool counted = false) {
    if (!counted) Count(size, mark);
    if (anchor != 0) anchors_[anchor] = {v, size};
    if (stack_.empty()) {
      root_ = std::move(v);
      return;
    }
    Frame& top = stack_.back();
    top.size += size;
    if (top.value.is_array()) {
      top.value.push_back(std::move(v));
      return;
    }
    if (!top.have_key) {
      if (v.is_object() || v.is_array()) throw YamlError{mark, "mapping keys must be scalars"};
      top.key = KeyString(v);
      top.key_mark = mark;
      top.key_is_merge = merge_key;
      top.have_key = true;
      return;
    }
    top.have_key = false;
    if (top.key_is_merge) {
      // "<<: *base" or "<<: [*a, *b]"; earlier sources win over later ones.
      if (v.is_object()) {
        top.merges.push_back(std::move(v));
      } else if (v.is_array()) {
        for (json& e : v) {
          if (!e.is_object()) throw YamlError{mark, "merge key \"<<\" needs a mapping or a list of mappings"};
          top.merges.push_back(std::move(e));
        }
      } else {
        throw YamlError{mark, "merge key \"<<\" needs a mapping or a list of mappings"};
      }
      return;
    }
    if (top.value.contains(top.key)) throw YamlError{top.key_mark, "duplicate key \"" + top.key + "\""};
    top.value[top.key] = std::move(v);
  }

  std::vector<Frame> stack_;
  std::map<YAML::anchor_t, std::pair<json, size_t>> anchors_;
  json root_;
  size_t total_ = 0;
  std::vector<json> documents_;
};

Status Located(const std::string& source, const YAML::Mark& mark, const std::string& message) {
  if (mark.is_null()) return InvalidArgument(source + ": " + message);
  return InvalidArgument(source + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1) + ": " +
                         message);
}

}  // namespace

StatusOr<std::vector<nlohmann::json>> YamlDocumentsToJson(const std::string& yaml_text, const std::string& source) {
  try {
    std::istringstream in(yaml_text);
    YAML::Parser parser(in);
    JsonBuilder builder;
    while (parser.HandleNextDocument(builder)) {
    }
    return builder.TakeDocuments();
  } catch (const YamlError& e) {
    return Located(source, e.mark, e.message);
  } catch (const YAML::Exception& e) {
    return Located(source, e.mark, e.msg);
  } catch (const std::exception& e) {
    return InvalidArgument(source + ": " + e.what());
  }
}

StatusOr<nlohmann::json> YamlToJson(const std::string& yaml_text, const std::string& source) {
  ASSIGN_OR_RETURN(std::vector<json> docs, YamlDocumentsToJson(yaml_text, source));
  auto is_tfjob = [](const json& d) {
    if (!d.is_object()) return false;
    auto kind = d.find("kind");
    return kind != d.end() && kind->is_string() && *kind == kKind;
  };
  for (json& doc : docs) {
    if (is_tfjob(doc)) return std::move(doc);
    // `kubectl get -o yaml` of several objects gives a List of them.
    auto kind = doc.is_object() ? doc.find("kind") : doc.end();
    if (kind != doc.end() && kind->is_string() && *kind == "List") {
      auto items = doc.find("items");
      if (items != doc.end() && items->is_array()) {
        for (json& item : *items) {
          if (is_tfjob(item)) return std::move(item);
        }
      }
    }
  }
  return NotFound(source + ": no document of kind " + std::string(kKind));
}

}  // namespace tfjob::op::api
