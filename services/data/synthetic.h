// Seeded synthetic classification data (Gaussian blobs) for tests, examples
// and benchmarks that must not depend on files.
//
// Ownership: results are returned by value and own their memory.
//
// Thread-safety: reentrant; concurrent calls are safe.
//
// Failure behaviour: invalid options are INVALID_ARGUMENT naming the option
// and its value; a result too large to allocate is RESOURCE_EXHAUSTED.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "services/tensor/tensor.h"

namespace tfjob::data {

struct SyntheticOptions {
  int64_t num_examples = 1000;                // >= 0
  std::vector<int64_t> feature_shape = {16};  // non-empty, every dim >= 1
  int64_t num_classes = 2;                    // >= 2
  uint64_t seed = 0;
  double noise = 0.5;  // std-dev around each centre; finite, >= 0
};

struct SyntheticData {
  Tensor features;  // float32 [num_examples, feature_shape...]
  Tensor labels;    // int64 [num_examples], uniform over 0..num_classes-1
};

// One centre per class with N(0, 1) coordinates; each example picks a class
// uniformly and is centre + noise * N(0, 1) per coordinate, so classes are
// linearly separable with high accuracy at the default noise. The output is a
// pure function of the options; it uses mt19937_64 and a hand-written
// Box-Muller transform rather than std::normal_distribution, whose algorithm
// differs between standard libraries.
StatusOr<SyntheticData> MakeSynthetic(const SyntheticOptions& opts);

}  // namespace tfjob::data
