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

namespace tfjob::strategy {

class DynamicLossScale {
 public:
  struct Options {
    double initial = 32768;       // 2^15, Keras' initial_scale
    int64_t growth_steps = 2000;  // Keras' dynamic_growth_steps
  };
  DynamicLossScale() : DynamicLossScale(Options{}) {}
  explicit DynamicLossScale(Options o) : o_(o), scale_(o.initial) {}

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

}  // namespace tfjob::strategy
