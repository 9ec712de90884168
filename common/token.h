// Secret tokens: random ones, and comparison that does not leak where two
// differ. Shared by the runtime (task-to-task authentication) and the
// operator (the token it puts in each job's Secret).
// Thread-safety: reentrant. Failure: none.
#pragma once

#include <string>
#include <string_view>

namespace tfjob {

// 32 random bytes from the system's entropy source, hex-encoded.
std::string NewToken();

// Equal, in time that depends only on `want`'s length.
bool TokenMatches(std::string_view given, std::string_view want);

}  // namespace tfjob
