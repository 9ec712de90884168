// Standard base64 (RFC 4648, with padding) for the API server double:
// kubeconfig certificate data and list continue tokens. Pure functions,
// thread-safe.
#pragma once

#include <string>

namespace tfjob::testing::apiserver {

std::string Base64(const std::string& in);
// False (and *out partly written) on a character outside the alphabet;
// decoding stops at the first '='.
bool Unbase64(const std::string& in, std::string* out);

}  // namespace tfjob::testing::apiserver
