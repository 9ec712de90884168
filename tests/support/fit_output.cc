#include "tests/support/fit_output.h"

#include <regex>
#include <sstream>

namespace tfjob::testing {

Evaluation ParseEvaluation(const std::string& out) {
  static const std::regex kHeader(R"(^(\[[^\]]*\] )?Evaluation$)");
  static const std::regex kProgress(R"(^\d+/\d+ - \S+ - loss: (\S+?)(?: - accuracy: (\S+?))?(?: - .*)?$)");
  std::istringstream in(out);
  std::string line;
  std::string prefix;
  bool after_header = false;
  Evaluation e;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!after_header) {
      if (std::regex_match(line, m, kHeader)) {
        prefix = m[1].str();
        after_header = true;
      }
      continue;
    }
    if (line.compare(0, prefix.size(), prefix) != 0) continue;
    if (!prefix.empty() || line.empty() || line[0] != '[') {
      const std::string rest = line.substr(prefix.size());
      if (std::regex_match(rest, m, kProgress)) {
        e.loss = std::stod(m[1].str());
        if (m[2].matched) e.accuracy = std::stod(m[2].str());
        return e;
      }
    }
  }
  return e;
}

}  // namespace tfjob::testing
