// Secret tokens: random ones, and comparison that does not leak where two
// differ. Shared by the runtime (task-to-task authentication) and the
// operator (the token it puts in each job's Secret).
// Thread-safety: reentrant. Failure: none.
#pragma once

#include <string>
#include <string_view>

namespace tfjob {

// Where a task finds its job's token (services/rpc/auth.h reads them; the
// operator and `tfjob run` set them): the token itself, or a file holding it.
inline constexpr const char* kTokenEnv = "TFJOB_AUTH_TOKEN";
inline constexpr const char* kTokenFileEnv = "TFJOB_AUTH_TOKEN_FILE";

// 32 random bytes from the system's entropy source, hex-encoded.
std::string NewToken();

// Equal, in time that depends only on `want`'s length.
bool TokenMatches(std::string_view given, std::string_view want);

}  // namespace tfjob
