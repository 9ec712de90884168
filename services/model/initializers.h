// Keras' initializers (keras.initializers): what a variable's first value is
// drawn from. The distributions are Keras' (VarianceScaling's truncated
// normal is rescaled as Keras does, so its standard deviation is the one
// asked for); the bits come from the job's seed, not from Keras' generator.
//
// Thread-safety: plain values; Fill is reentrant. Failure: ParseInitializer
// returns INVALID_ARGUMENT naming the initializer and what is wrong with it.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "services/tensor/tensor.h"

namespace tfjob {
class Rng;
}

namespace tfjob::model {

struct Initializer {
  enum class Kind {
    kZeros,
    kOnes,
    kConstant,
    kRandomUniform,
    kRandomNormal,
    kTruncatedNormal,
    kVarianceScaling,
    kOrthogonal,
    kIdentity,
    kValue,  // VariableSpec::value (adapted statistics, given weights)
  };
  enum class Mode { kFanIn, kFanOut, kFanAvg };
  enum class Distribution { kTruncatedNormal, kUntruncatedNormal, kUniform };

  Kind kind = Kind::kZeros;
  // RandomUniform [minval, maxval); RandomNormal / TruncatedNormal mean and
  // stddev; Constant's value; Orthogonal's and Identity's gain.
  double minval = -0.05, maxval = 0.05;
  double mean = 0, stddev = 0.05;
  double value = 0;
  double gain = 1;
  // VarianceScaling
  double scale = 1;
  Mode mode = Mode::kFanIn;
  Distribution distribution = Distribution::kTruncatedNormal;

  static constexpr Initializer VarianceScaling(double scale, Mode mode, Distribution d) {
    Initializer i;
    i.kind = Kind::kVarianceScaling;
    i.scale = scale;
    i.mode = mode;
    i.distribution = d;
    return i;
  }
  static constexpr Initializer Of(Kind k) {
    Initializer i;
    i.kind = k;
    return i;
  }
  static constexpr Initializer Uniform(double lo, double hi) {
    Initializer i;
    i.kind = Kind::kRandomUniform;
    i.minval = lo;
    i.maxval = hi;
    return i;
  }

  // The defaults layers use: Keras' glorot_uniform kernels, zero biases,
  // RandomUniform(-0.05, 0.05) embeddings.
  static const Initializer kZeros, kOnes, kGlorotUniform, kUniform005, kValue;

  bool operator==(const Initializer& o) const;
  // Keras' class name and arguments ("VarianceScaling(scale=2, mode=fan_in, ...)").
  std::string ToString() const;
};

// constexpr: layer specs with these defaults may be built during static
// initialization.
inline constexpr Initializer Initializer::kZeros = Initializer::Of(Initializer::Kind::kZeros);
inline constexpr Initializer Initializer::kOnes = Initializer::Of(Initializer::Kind::kOnes);
inline constexpr Initializer Initializer::kGlorotUniform =
    Initializer::VarianceScaling(1.0, Initializer::Mode::kFanAvg, Initializer::Distribution::kUniform);
inline constexpr Initializer Initializer::kUniform005 = Initializer::Uniform(-0.05, 0.05);
inline constexpr Initializer Initializer::kValue = Initializer::Of(Initializer::Kind::kValue);

// Keras 3's {"class_name": "HeNormal", "config": {"seed": null}, ...} or
// Keras 2's {"class_name": ..., "config": {...}} or name ("he_normal").
// Every argument is read or checked; `seed` is accepted and ignored (the
// job's seed decides the bits).
StatusOr<Initializer> ParseInitializer(const nlohmann::json& v);

// Fills the float32 host tensor `t` (its shape is the variable's) from `rng`.
// Fans as Keras computes them: a kernel of rank > 2 counts its receptive
// field. Orthogonal and Identity need a rank-2 shape (Identity square or not,
// as Keras' eye); INVALID_ARGUMENT otherwise.
Status FillInitializer(const Initializer& init, Tensor& t, Rng& rng);

}  // namespace tfjob::model
