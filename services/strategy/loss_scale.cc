#include "services/strategy/loss_scale.h"

#include <algorithm>

namespace tfjob::strategy {

void DynamicLossScale::Update(bool finite) {
  if (!finite) {
    scale_ = std::max(scale_ / 2, 1.0);
    good_ = 0;
    ++skipped_;
    return;
  }
  if (++good_ >= o_.growth_steps) {
    // Doubling stops where float32 could no longer hold the scaled loss.
    if (scale_ * 2 < 1e30) scale_ *= 2;
    good_ = 0;
  }
}

}  // namespace tfjob::strategy
