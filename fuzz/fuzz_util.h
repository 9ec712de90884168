// Shared by the libFuzzer harnesses. A harness reports a bug by aborting:
// libFuzzer then saves the input as crash-<sha1> and exits non-zero, which
// is what scripts/fuzz.sh and CI look for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/status.h"

namespace tfjob::fuzz {

[[noreturn]] inline void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what.c_str());
  std::abort();
}

inline void Check(bool ok, const std::string& what) {
  if (!ok) Fail(what);
}

// The parsers promise that bad input is INVALID_ARGUMENT naming where it
// came from; anything else (INTERNAL, a bare message) means a check is
// missing somewhere.
inline void CheckInvalidArgument(const Status& s, const std::string& source) {
  Check(s.code() == Code::kInvalidArgument,
        "expected INVALID_ARGUMENT, got " + std::string(CodeName(s.code())) + ": " + s.message());
  Check(s.message().rfind(source, 0) == 0, "error does not name \"" + source + "\": " + s.message());
}

// TFJOB_FUZZ_KNOWN_BUGS=1 turns off the skips that keep reported, not yet
// fixed findings from stopping every run, to reproduce them or to check a fix.
inline bool KnownBugsOn() {
  static const bool on = std::getenv("TFJOB_FUZZ_KNOWN_BUGS") != nullptr;
  return on;
}

inline std::string AsString(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace tfjob::fuzz
