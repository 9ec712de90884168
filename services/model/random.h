// Seeded, platform-independent random numbers for initializers and data.
// std::*_distribution differ between standard libraries; these transforms do
// not, so a seed means the same weights everywhere (and on every worker).
// Thread-safety: one Rng per thread.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string_view>

namespace tfjob {

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  // Uniform in [0, 1) with 24 bits of precision.
  float Uniform() { return static_cast<float>(gen_() >> 40) * (1.0f / 16777216.0f); }
  float Uniform(float lo, float hi) { return lo + (hi - lo) * Uniform(); }
  // Standard normal by Box-Muller.
  float Normal() {
    double u1 = (static_cast<double>(gen_() >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = static_cast<double>(gen_() >> 11) * (1.0 / 9007199254740992.0);
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  uint64_t Next() { return gen_(); }

 private:
  std::mt19937_64 gen_;
};

// Mixes a base seed with a stream id (e.g. a variable index) so streams differ.
inline uint64_t MixSeed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (stream + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// FNV-1a of a name (a layer's): mixed into a seed, it gives each layer its
// own stream of dropout masks and noise.
inline uint64_t NameHash(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace tfjob
