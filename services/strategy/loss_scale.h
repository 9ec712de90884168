// Keras' dynamic loss scaling (LossScaleOptimizer) for float16 layers: the
// loss is multiplied by a scale before back-propagation so small gradients
// survive float16, the variables' gradients are divided by it again
// (Model::set_loss_scale), and each step's outcome moves the scale:
// non-finite gradients skip the step's update and halve the scale (not
// below 1, as TensorFlow's); after `growth_steps` finite steps in a row it
// doubles.
//
// Every replica of a synchronous step sees the same reduced gradients, so
// each copy of this state takes the same decisions.
//
// Thread-safety: none; one owner. Failure: none.
#pragma once

#include <cstdint>
#include <mutex>

#include "services/model/spec.h"

namespace tfjob::strategy {

class DynamicLossScale {
 public:
  struct Options {
    double initial = 32768;       // 2^15, Keras' initial_scale
    int64_t growth_steps = 2000;  // Keras' dynamic_growth_steps
  };
  DynamicLossScale() : DynamicLossScale(Options{}) {}
  explicit DynamicLossScale(Options o) : o_(o), scale_(o.initial) {}
  // The job's optimizer's loss_scale arguments.
  static Options OptionsOf(const model::OptimizerSpec& o) {
    return {.initial = o.initial_scale, .growth_steps = o.dynamic_growth_steps};
  }

  float scale() const { return static_cast<float>(scale_); }
  // After a step: whether its gradients were all finite (and were applied).
  void Update(bool finite);
  int64_t skipped_steps() const { return skipped_; }

 private:
  Options o_;
  double scale_;
  int64_t good_ = 0;  // finite steps since the scale last changed
  int64_t skipped_ = 0;
};

// One scale for the concurrent closures of a parameter-server worker, each
// step reading it and reporting to it in whatever order the steps end (as
// TensorFlow's loss-scale variable is read and updated by asynchronous
// steps). Thread-safe.
class SharedLossScale {
 public:
  explicit SharedLossScale(DynamicLossScale::Options o) : scale_(o) {}
  float scale() const {
    std::lock_guard<std::mutex> l(mu_);
    return scale_.scale();
  }
  void Update(bool finite) {
    std::lock_guard<std::mutex> l(mu_);
    scale_.Update(finite);
  }

 private:
  mutable std::mutex mu_;
  DynamicLossScale scale_;
};

}  // namespace tfjob::strategy
