#include "common/flags.h"

#include <cerrno>
#include <cstdlib>

namespace tfjob {

Flags& Flags::Value(const std::string& name, std::string help, std::string def, bool required) {
  specs_[name] = Spec{std::move(help), std::move(def), false, required, false};
  return *this;
}

Flags& Flags::Bool(const std::string& name, std::string help) {
  specs_[name] = Spec{std::move(help), "false", true, false, false};
  return *this;
}

Status Flags::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      rest_.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      break;
    }
    if (a.rfind("--", 0) != 0 || a.size() == 2) {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    auto it = specs_.find(name);
    if (it == specs_.end()) return InvalidArgument("unknown flag --" + name);
    Spec& s = it->second;
    if (s.is_bool) {
      if (!inline_value) value = "true";
      if (value != "true" && value != "false") return InvalidArgument("flag --" + name + " takes true or false");
    } else if (!inline_value) {
      if (i + 1 >= args.size()) return InvalidArgument("flag --" + name + " needs a value");
      value = args[++i];
    }
    s.value = value;
    s.given = true;
  }
  for (const auto& [name, s] : specs_) {
    if (s.required && !s.given) return InvalidArgument("missing required flag --" + name);
  }
  return Status::Ok();
}

const std::string& Flags::Get(const std::string& name) const { return specs_.at(name).value; }
bool Flags::Has(const std::string& name) const { return specs_.at(name).given; }
bool Flags::GetBool(const std::string& name) const { return specs_.at(name).value == "true"; }
bool Flags::IsBool(const std::string& name) const {
  auto it = specs_.find(name);
  return it != specs_.end() && it->second.is_bool;
}

StatusOr<int64_t> Flags::GetInt(const std::string& name) const {
  const std::string& v = Get(name);
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE)
    return InvalidArgument("flag --" + name + ": not an integer: \"" + v + "\"");
  return static_cast<int64_t>(x);
}

StatusOr<double> Flags::GetDouble(const std::string& name) const {
  const std::string& v = Get(name);
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0') return InvalidArgument("flag --" + name + ": not a number: \"" + v + "\"");
  return x;
}

std::string Flags::Usage() const {
  std::string out;
  for (const auto& [name, s] : specs_) {
    out += "  --" + name + (s.is_bool ? "" : " VALUE") + "\t" + s.help;
    if (!s.is_bool && !s.value.empty() && !s.required) out += " (default " + s.value + ")";
    out += "\n";
  }
  return out;
}

}  // namespace tfjob
