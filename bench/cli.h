// --help and --version for the benchmark binaries, answered as the project's
// other binaries answer them: the usage on stdout and exit 0, or
// "NAME VERSION" and exit 0. Looked for before the flags are parsed, so that
// neither needs a valid command line (only arguments before "--" count).
// Thread-safety: call once from main, before any thread starts.
#pragma once

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#ifndef TFJOB_VERSION
#error "bench/CMakeLists.txt defines TFJOB_VERSION for every benchmark"
#endif

namespace tfjob::bench {

// The exit code when args ask for help or the version (0), else nullopt.
inline std::optional<int> AnswerHelpOrVersion(const std::vector<std::string>& args, const std::string& name,
                                              const std::string& usage) {
  for (const std::string& a : args) {
    if (a == "--") break;
    if (a == "--help" || a == "-h") {
      std::cout << usage;
      if (!usage.empty() && usage.back() != '\n') std::cout << '\n';
      return 0;
    }
    if (a == "--version") {
      std::cout << name << " " << TFJOB_VERSION << std::endl;
      return 0;
    }
  }
  return std::nullopt;
}

}  // namespace tfjob::bench
