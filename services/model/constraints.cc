#include "services/model/constraints.h"

#include <algorithm>
#include <cmath>

namespace tfjob::model {

Status ApplyConstraint(const Constraint& c, Tensor& value) {
  if (c.kind == Constraint::Kind::kNone) return Status::Ok();
  if (!value.on_cpu()) return FailedPrecondition("weight constraints are applied on the host only");
  float* w = value.data<float>();
  const int64_t n = value.size();
  if (c.kind == Constraint::Kind::kNonNeg) {
    for (int64_t i = 0; i < n; ++i) w[i] = w[i] >= 0 ? w[i] : 0.f;
    return Status::Ok();
  }
  // Norms over `axis`: one per combination of the other axes.
  const Shape& shape = value.shape();
  const int rank = static_cast<int>(shape.size());
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  for (int64_t a : c.axis) {
    const int64_t k = a < 0 ? a + rank : a;
    if (k < 0 || k >= rank) {
      return InvalidArgument("constraint axis " + std::to_string(a) + " is outside a weight of shape " +
                             ShapeString(shape));
    }
    reduced[static_cast<size_t>(k)] = true;
  }
  // Each element's group: its index with the reduced axes dropped.
  std::vector<int64_t> group(static_cast<size_t>(n));
  int64_t groups = 1;
  for (int d = 0; d < rank; ++d) groups *= reduced[static_cast<size_t>(d)] ? 1 : shape[static_cast<size_t>(d)];
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, g = 0, scale = 1;
    for (int d = rank; d-- > 0;) {
      const int64_t coord = rest % shape[static_cast<size_t>(d)];
      rest /= shape[static_cast<size_t>(d)];
      if (!reduced[static_cast<size_t>(d)]) {
        g += coord * scale;
        scale *= shape[static_cast<size_t>(d)];
      }
    }
    group[static_cast<size_t>(i)] = g;
  }
  std::vector<double> sq(static_cast<size_t>(groups), 0.0);
  for (int64_t i = 0; i < n; ++i) sq[static_cast<size_t>(group[static_cast<size_t>(i)])] += double(w[i]) * w[i];
  constexpr double kEpsilon = 1e-7;  // Keras' backend epsilon
  std::vector<double> factor(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) {
    const double norm = std::sqrt(sq[static_cast<size_t>(g)]);
    double desired = 1;
    switch (c.kind) {
      case Constraint::Kind::kMaxNorm: desired = std::clamp(norm, 0.0, c.max_value); break;
      case Constraint::Kind::kUnitNorm: desired = 1; break;
      case Constraint::Kind::kMinMaxNorm:
        desired = c.rate * std::clamp(norm, c.min_value, c.max_value) + (1 - c.rate) * norm;
        break;
      default: break;
    }
    factor[static_cast<size_t>(g)] = desired / (kEpsilon + norm);
  }
  for (int64_t i = 0; i < n; ++i)
    w[i] = static_cast<float>(w[i] * factor[static_cast<size_t>(group[static_cast<size_t>(i)])]);
  return Status::Ok();
}

}  // namespace tfjob::model
