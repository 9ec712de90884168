#include "common/token.h"

#include <random>

namespace tfjob {

std::string NewToken() {
  std::random_device rd;  // /dev/urandom
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 32; ++i) {
    const unsigned b = rd() & 0xff;
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

bool TokenMatches(std::string_view given, std::string_view want) {
  unsigned char diff = given.size() == want.size() ? 0 : 1;
  for (size_t i = 0; i < want.size(); ++i) {
    diff |= static_cast<unsigned char>(want[i] ^ (i < given.size() ? given[i] : 0));
  }
  return diff == 0;
}

}  // namespace tfjob
