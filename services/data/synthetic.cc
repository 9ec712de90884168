#include "services/data/synthetic.h"

#include <cmath>
#include <numbers>
#include <random>
#include <string>

namespace tfjob::data {
namespace {

// std::normal_distribution's algorithm is implementation-defined, so the
// same seed would give different data with another standard library.
class Normal {
 public:
  explicit Normal(uint64_t seed) : rng_(seed) {}

  double Next() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    // u1 in (0, 1] keeps log() finite; 53 bits fill a double's mantissa.
    double u1 = static_cast<double>((rng_() >> 11) + 1) * 0x1.0p-53;
    double u2 = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    double r = std::sqrt(-2.0 * std::log(u1));
    double theta = 2.0 * std::numbers::pi * u2;
    spare_ = r * std::sin(theta);
    have_spare_ = true;
    return r * std::cos(theta);
  }

  // The modulo bias of a 64-bit draw is negligible for any class count.
  int64_t Uniform(int64_t n) { return static_cast<int64_t>(rng_() % static_cast<uint64_t>(n)); }

 private:
  std::mt19937_64 rng_;
  double spare_ = 0;
  bool have_spare_ = false;
};

}  // namespace

StatusOr<SyntheticData> MakeSynthetic(const SyntheticOptions& opts) {
  if (opts.num_examples < 0) {
    return InvalidArgument("synthetic: num_examples " + std::to_string(opts.num_examples) + " must be >= 0");
  }
  if (opts.num_classes < 2) {
    return InvalidArgument("synthetic: num_classes " + std::to_string(opts.num_classes) + " must be >= 2");
  }
  if (opts.feature_shape.empty()) return InvalidArgument("synthetic: feature_shape must not be empty");
  for (int64_t d : opts.feature_shape) {
    if (d < 1) {
      return InvalidArgument("synthetic: feature_shape " + ShapeString(opts.feature_shape) + " has dim " +
                             std::to_string(d) + "; every dim must be >= 1");
    }
  }
  if (!std::isfinite(opts.noise) || opts.noise < 0) {
    return InvalidArgument("synthetic: noise " + std::to_string(opts.noise) + " must be finite and >= 0");
  }

  Shape centre_shape = opts.feature_shape;
  centre_shape.insert(centre_shape.begin(), opts.num_classes);
  ASSIGN_OR_RETURN(Tensor centres, Tensor::Create(DType::kFloat32, centre_shape));
  Shape feature_shape = opts.feature_shape;
  feature_shape.insert(feature_shape.begin(), opts.num_examples);
  ASSIGN_OR_RETURN(Tensor features, Tensor::Create(DType::kFloat32, feature_shape));
  ASSIGN_OR_RETURN(Tensor labels, Tensor::Create(DType::kInt64, {opts.num_examples}));

  Normal rng(opts.seed);
  const int64_t dim = centres.size() / opts.num_classes;
  float* c = centres.data<float>();
  for (int64_t i = 0; i < centres.size(); ++i) c[i] = static_cast<float>(rng.Next());

  float* x = features.data<float>();
  int64_t* y = labels.data<int64_t>();
  for (int64_t i = 0; i < opts.num_examples; ++i) {
    int64_t k = rng.Uniform(opts.num_classes);
    y[i] = k;
    const float* centre = c + k * dim;
    float* row = x + i * dim;
    for (int64_t j = 0; j < dim; ++j) row[j] = static_cast<float>(centre[j] + opts.noise * rng.Next());
  }
  return SyntheticData{std::move(features), std::move(labels)};
}

}  // namespace tfjob::data
