// Command-line flags: "--name value" or "--name=value", declared up front so
// an unknown or malformed flag is an error naming it. Positional arguments
// and everything after "--" are kept in order.
// Thread-safety: single-threaded use at start-up. Failure: INVALID_ARGUMENT.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace tfjob {

class Flags {
 public:
  // Declares a flag taking a value, with an optional default.
  Flags& Value(const std::string& name, std::string help, std::string default_value = "", bool required = false);
  // Declares a boolean flag ("--verbose"; "--verbose=false" also accepted).
  Flags& Bool(const std::string& name, std::string help);

  Status Parse(const std::vector<std::string>& args);

  const std::string& Get(const std::string& name) const;
  bool Has(const std::string& name) const;  // given on the command line
  bool GetBool(const std::string& name) const;
  // Declared with Bool (so "--name" takes no value); false for unknown names.
  bool IsBool(const std::string& name) const;
  StatusOr<int64_t> GetInt(const std::string& name) const;
  StatusOr<double> GetDouble(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // Arguments after "--", untouched.
  const std::vector<std::string>& rest() const { return rest_; }
  std::string Usage() const;

 private:
  struct Spec {
    std::string help;
    std::string value;
    bool is_bool = false;
    bool required = false;
    bool given = false;
  };
  std::map<std::string, Spec> specs_;
  std::vector<std::string> positional_, rest_;
};

}  // namespace tfjob
