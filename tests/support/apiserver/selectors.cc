#include "tests/support/apiserver/selectors.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace tfjob::testing::apiserver {

namespace {

enum class Tok { kIdent, kNot, kEq, kDoubleEq, kNotEq, kOpen, kClose, kComma, kIn, kNotIn, kGt, kLt, kEnd };

struct Token {
  Tok kind;
  std::string text;
};

bool IsSpecial(char c) {
  return c == ' ' || c == '\t' || c == '!' || c == '=' || c == ',' || c == '(' || c == ')' || c == '<' || c == '>';
}

std::vector<Token> Lex(std::string_view s) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (c == ' ' || c == '\t') {
      ++i;
    } else if (c == '!') {
      if (i + 1 < s.size() && s[i + 1] == '=') {
        out.push_back({Tok::kNotEq, "!="});
        i += 2;
      } else {
        out.push_back({Tok::kNot, "!"});
        ++i;
      }
    } else if (c == '=') {
      if (i + 1 < s.size() && s[i + 1] == '=') {
        out.push_back({Tok::kDoubleEq, "=="});
        i += 2;
      } else {
        out.push_back({Tok::kEq, "="});
        ++i;
      }
    } else if (c == ',') {
      out.push_back({Tok::kComma, ","}), ++i;
    } else if (c == '(') {
      out.push_back({Tok::kOpen, "("}), ++i;
    } else if (c == ')') {
      out.push_back({Tok::kClose, ")"}), ++i;
    } else if (c == '>') {
      out.push_back({Tok::kGt, ">"}), ++i;
    } else if (c == '<') {
      out.push_back({Tok::kLt, "<"}), ++i;
    } else {
      size_t j = i;
      while (j < s.size() && !IsSpecial(s[j])) ++j;
      std::string word(s.substr(i, j - i));
      Tok kind = word == "in" ? Tok::kIn : word == "notin" ? Tok::kNotIn : Tok::kIdent;
      out.push_back({kind, word});
      i = j;
    }
  }
  out.push_back({Tok::kEnd, ""});
  return out;
}

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }
bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

bool ParseInt(const std::string& s, long long* out) {
  if (s.empty() || s.size() > 18) return false;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t j = i; j < s.size(); ++j) {
    if (!std::isdigit(static_cast<unsigned char>(s[j]))) return false;
  }
  *out = std::strtoll(s.c_str(), nullptr, 10);
  return true;
}

}  // namespace

StatusOr<LabelSelector> LabelSelector::Parse(std::string_view text) {
  std::vector<Token> toks = Lex(text);
  LabelSelector sel;
  size_t p = 0;
  auto fail = [&](const std::string& why) {
    return InvalidArgument("unable to parse requirement: " + why + " (in label selector \"" + std::string(text) +
                           "\")");
  };
  if (toks[0].kind == Tok::kEnd) return sel;
  for (;;) {
    Requirement r;
    if (toks[p].kind == Tok::kNot) {
      ++p;
      if (toks[p].kind != Tok::kIdent) return fail("found '" + toks[p].text + "', expected: identifier after '!'");
      r.key = toks[p++].text;
      r.op = Op::kNotExists;
    } else {
      if (toks[p].kind != Tok::kIdent) return fail("found '" + toks[p].text + "', expected: identifier");
      r.key = toks[p++].text;
      switch (toks[p].kind) {
        case Tok::kEnd:
        case Tok::kComma: r.op = Op::kExists; break;
        case Tok::kEq:
        case Tok::kDoubleEq:
        case Tok::kNotEq: {
          r.op = toks[p].kind == Tok::kNotEq ? Op::kNotEquals : Op::kEquals;
          ++p;
          if (toks[p].kind == Tok::kIdent) {
            r.values.push_back(toks[p++].text);
          } else if (toks[p].kind == Tok::kEnd || toks[p].kind == Tok::kComma) {
            r.values.push_back("");
          } else {
            return fail("found '" + toks[p].text + "', expected: identifier");
          }
          break;
        }
        case Tok::kIn:
        case Tok::kNotIn: {
          r.op = toks[p].kind == Tok::kIn ? Op::kIn : Op::kNotIn;
          ++p;
          if (toks[p].kind != Tok::kOpen) return fail("found '" + toks[p].text + "', expected: '('");
          ++p;
          if (toks[p].kind == Tok::kClose) {
            return fail("for 'in', 'notin' operators, values set can't be empty");
          }
          for (;;) {
            if (toks[p].kind == Tok::kIdent) {
              r.values.push_back(toks[p++].text);
            } else if (toks[p].kind == Tok::kComma || toks[p].kind == Tok::kClose) {
              r.values.push_back("");
            } else {
              return fail("found '" + toks[p].text + "', expected: ',', ')' or identifier");
            }
            if (toks[p].kind == Tok::kClose) {
              ++p;
              break;
            }
            if (toks[p].kind != Tok::kComma) return fail("found '" + toks[p].text + "', expected: ',' or ')'");
            ++p;
          }
          break;
        }
        case Tok::kGt:
        case Tok::kLt: {
          r.op = toks[p].kind == Tok::kGt ? Op::kGreater : Op::kLess;
          ++p;
          long long v;
          if (toks[p].kind != Tok::kIdent || !ParseInt(toks[p].text, &v)) {
            return fail("for 'Gt', 'Lt' operators, the value must be an integer");
          }
          r.values.push_back(toks[p++].text);
          break;
        }
        default: return fail("found '" + toks[p].text + "', expected: '=', '!=', '==', 'in', notin'");
      }
    }
    if (std::string why = CheckQualifiedName(r.key); !why.empty()) return fail("key \"" + r.key + "\": " + why);
    if (r.op != Op::kGreater && r.op != Op::kLess) {
      for (const auto& v : r.values) {
        if (std::string why = CheckLabelValue(v); !why.empty()) return fail("value \"" + v + "\": " + why);
      }
    }
    sel.reqs_.push_back(std::move(r));
    if (toks[p].kind == Tok::kEnd) break;
    if (toks[p].kind != Tok::kComma) return fail("found '" + toks[p].text + "', expected: ',' or end of string");
    ++p;
  }
  return sel;
}

bool LabelSelector::Matches(const nlohmann::json& labels) const {
  for (const auto& r : reqs_) {
    const std::string* value = nullptr;
    if (labels.is_object()) {
      auto it = labels.find(r.key);
      if (it != labels.end() && it->is_string()) value = it->get_ptr<const std::string*>();
    }
    bool in_set = value && std::find(r.values.begin(), r.values.end(), *value) != r.values.end();
    bool ok = false;
    switch (r.op) {
      case Op::kExists: ok = value != nullptr; break;
      case Op::kNotExists: ok = value == nullptr; break;
      case Op::kEquals:
      case Op::kIn: ok = in_set; break;
      case Op::kNotEquals:
      case Op::kNotIn: ok = !in_set; break;
      case Op::kGreater:
      case Op::kLess: {
        long long have, want;
        if (!value || !ParseInt(*value, &have) || !ParseInt(r.values[0], &want)) return false;
        ok = r.op == Op::kGreater ? have > want : have < want;
        break;
      }
    }
    if (!ok) return false;
  }
  return true;
}

StatusOr<FieldSelector> FieldSelector::Parse(std::string_view text, const std::set<std::string>& supported) {
  FieldSelector sel;
  // Terms are split on unescaped commas; "\," "\=" "\\" are escapes.
  std::vector<std::string> terms(1);
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      terms.back() += text[i];
      terms.back() += text[++i];
    } else if (text[i] == ',') {
      terms.emplace_back();
    } else {
      terms.back() += text[i];
    }
  }
  auto unescape = [](std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\\' && i + 1 < s.size()) ++i;
      out += s[i];
    }
    return out;
  };
  for (const std::string& raw : terms) {
    std::string_view t = raw;
    while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
    while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
    if (t.empty()) {
      if (terms.size() == 1) break;
      return InvalidArgument("invalid field selector: empty term in \"" + std::string(text) + "\"");
    }
    Term term;
    size_t pos, oplen;
    if ((pos = t.find("!=")) != std::string_view::npos) {
      term.negated = true;
      oplen = 2;
    } else if ((pos = t.find("==")) != std::string_view::npos) {
      oplen = 2;
    } else if ((pos = t.find('=')) != std::string_view::npos) {
      oplen = 1;
    } else {
      return InvalidArgument("invalid selector: '" + std::string(text) + "'; can't understand '" + std::string(t) +
                             "'");
    }
    term.field = std::string(t.substr(0, pos));
    term.value = unescape(t.substr(pos + oplen));
    if (!supported.count(term.field)) {
      return InvalidArgument("field label not supported: " + term.field);
    }
    sel.terms_.push_back(std::move(term));
  }
  return sel;
}

bool FieldSelector::Matches(const nlohmann::json& object) const {
  for (const auto& t : terms_) {
    bool eq = FieldValue(object, t.field) == t.value;
    if (eq == t.negated) return false;
  }
  return true;
}

const std::string* FieldSelector::Required(std::string_view field) const {
  for (const auto& t : terms_) {
    if (!t.negated && t.field == field) return &t.value;
  }
  return nullptr;
}

std::string FieldValue(const nlohmann::json& object, std::string_view dotted_path) {
  const nlohmann::json* cur = &object;
  while (!dotted_path.empty()) {
    size_t dot = dotted_path.find('.');
    std::string key(dotted_path.substr(0, dot));
    dotted_path = dot == std::string_view::npos ? std::string_view() : dotted_path.substr(dot + 1);
    if (!cur->is_object()) return "";
    auto it = cur->find(key);
    if (it == cur->end()) return "";
    cur = &*it;
  }
  if (cur->is_string()) return cur->get<std::string>();
  if (cur->is_null()) return "";
  return cur->dump();
}

std::string CheckDns1123Label(std::string_view s) {
  if (s.empty()) return "must be non-empty";
  if (s.size() > 63) return "must be no more than 63 characters";
  if (!IsLowerAlnum(s.front()) || !IsLowerAlnum(s.back())) {
    return "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
           "and end with an alphanumeric character";
  }
  for (char c : s) {
    if (!IsLowerAlnum(c) && c != '-') {
      return "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
             "start and end with an alphanumeric character";
    }
  }
  return "";
}

std::string CheckDns1123Subdomain(std::string_view s) {
  static const char* kMsg =
      "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
      "start and end with an alphanumeric character";
  if (s.empty()) return "must be non-empty";
  if (s.size() > 253) return "must be no more than 253 characters";
  if (!IsLowerAlnum(s.front()) || !IsLowerAlnum(s.back())) return kMsg;
  for (char c : s) {
    if (!IsLowerAlnum(c) && c != '-' && c != '.') return kMsg;
  }
  return "";
}

std::string CheckDns1035Label(std::string_view s) {
  if (s.empty()) return "must be non-empty";
  if (s.size() > 63) return "must be no more than 63 characters";
  if (!(s.front() >= 'a' && s.front() <= 'z') || !IsLowerAlnum(s.back())) {
    return "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
           "character, and end with an alphanumeric character";
  }
  for (char c : s) {
    if (!IsLowerAlnum(c) && c != '-') {
      return "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
             "alphabetic character, and end with an alphanumeric character";
    }
  }
  return "";
}

namespace {

std::string CheckQualifiedNamePart(std::string_view s) {
  static const char* kMsg =
      "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
      "alphanumeric character";
  if (s.empty()) return "name part must be non-empty";
  if (s.size() > 63) return "name part must be no more than 63 characters";
  if (!IsAlnum(s.front()) || !IsAlnum(s.back())) return kMsg;
  for (char c : s) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') return kMsg;
  }
  return "";
}

}  // namespace

std::string CheckQualifiedName(std::string_view s) {
  size_t slash = s.find('/');
  if (slash == std::string_view::npos) return CheckQualifiedNamePart(s);
  if (s.find('/', slash + 1) != std::string_view::npos) {
    return "a qualified name must consist of an optional DNS subdomain prefix and '/' and a name";
  }
  std::string_view prefix = s.substr(0, slash);
  if (prefix.empty()) return "prefix part must be non-empty";
  if (std::string why = CheckDns1123Subdomain(prefix); !why.empty()) return "prefix part " + why;
  return CheckQualifiedNamePart(s.substr(slash + 1));
}

std::string CheckLabelValue(std::string_view s) {
  if (s.empty()) return "";
  if (s.size() > 63) return "must be no more than 63 characters";
  if (!IsAlnum(s.front()) || !IsAlnum(s.back())) {
    return "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
           "must start and end with an alphanumeric character";
  }
  for (char c : s) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') {
      return "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
             "must start and end with an alphanumeric character";
    }
  }
  return "";
}

}  // namespace tfjob::testing::apiserver
