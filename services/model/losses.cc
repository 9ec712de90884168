#include "services/model/losses.h"

#include <cmath>

#include "services/tensor/eigen.h"

namespace tfjob::model {
namespace {

constexpr float kEps = 1e-7f;

std::string_view Name(LossType t) { return LossName(t); }

// Labels as float32 with the prediction's element count.
StatusOr<Tensor> DenseLabels(LossType t, const Tensor& pred, const Tensor& labels) {
  if (labels.size() != pred.size() || labels.rank() < 1 || labels.dim(0) != pred.dim(0)) {
    return InvalidArgument(std::string(Name(t)) + ": labels " + labels.DebugString() + " do not match predictions " +
                           pred.DebugString());
  }
  if (labels.dtype() == DType::kFloat32) return labels;
  Tensor f = Tensor::Zeros(DType::kFloat32, labels.shape());
  const int64_t* s = labels.data<int64_t>();
  for (int64_t i = 0; i < labels.size(); ++i) f.data<float>()[i] = static_cast<float>(s[i]);
  return f;
}

// Class ids as int64 [B], range-checked against C.
StatusOr<std::vector<int64_t>> SparseLabels(const Tensor& pred, const Tensor& labels) {
  const int64_t batch = pred.dim(0), classes = pred.dim(-1);
  if (labels.size() != batch || labels.rank() < 1 || labels.dim(0) != batch) {
    return InvalidArgument("SparseCategoricalCrossentropy: labels " + labels.DebugString() +
                           " should hold one class id per example for predictions " + pred.DebugString());
  }
  std::vector<int64_t> ids(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) {
    if (labels.dtype() == DType::kInt64) {
      ids[i] = labels.data<int64_t>()[i];
    } else {
      float v = labels.data<float>()[i];
      if (v != std::floor(v)) {
        return InvalidArgument("SparseCategoricalCrossentropy: label " + std::to_string(v) + " at batch position " +
                               std::to_string(i) + " is not a class id");
      }
      ids[i] = static_cast<int64_t>(v);
    }
    if (ids[i] < 0 || ids[i] >= classes) {
      return InvalidArgument("SparseCategoricalCrossentropy: label " + std::to_string(ids[i]) + " at batch position " +
                             std::to_string(i) + " is outside [0, " + std::to_string(classes) + ")");
    }
  }
  return ids;
}

LossResult Mse(const Tensor& pred, const Tensor& y) {
  LossResult r{0, Tensor::Zeros(DType::kFloat32, pred.shape())};
  auto diff = AsArray(pred) - AsArray(y);
  const float n = static_cast<float>(pred.size());
  r.loss = diff.square().sum() / n;
  AsArray(r.grad) = diff * (2.f / n);
  return r;
}

LossResult Bce(const Tensor& pred, const Tensor& y, bool from_logits) {
  LossResult r{0, Tensor::Zeros(DType::kFloat32, pred.shape())};
  auto p = AsArray(pred);
  auto t = AsArray(y);
  auto g = AsArray(r.grad);
  const float n = static_cast<float>(pred.size());
  double total = 0;
  for (int64_t i = 0; i < pred.size(); ++i) {
    const float x = p[i], yi = t[i];
    if (from_logits) {
      total += std::max(x, 0.f) - x * yi + std::log1p(std::exp(-std::fabs(x)));
      g[i] = (1.f / (1.f + std::exp(-x)) - yi) / n;
    } else {
      const float q = std::clamp(x, kEps, 1.f - kEps);
      total += -(yi * std::log(q) + (1.f - yi) * std::log(1.f - q));
      g[i] = (x > kEps && x < 1.f - kEps) ? (q - yi) / (q * (1.f - q)) / n : 0.f;
    }
  }
  r.loss = static_cast<float>(total / n);
  return r;
}

// Categorical cross-entropy against target distributions `y` [B, C].
LossResult Cce(const Tensor& pred, const float* y, bool from_logits) {
  const int64_t batch = pred.dim(0), c = pred.dim(-1);
  LossResult r{0, Tensor::Zeros(DType::kFloat32, pred.shape())};
  Eigen::Map<const RowMatrix> P(pred.data<float>(), batch, c);
  Eigen::Map<const RowMatrix> Y(y, batch, c);
  Eigen::Map<RowMatrix> G(r.grad.data<float>(), batch, c);
  const float inv_b = 1.f / static_cast<float>(batch);
  double total = 0;
  if (from_logits) {
    RowMatrix shifted = P.colwise() - P.rowwise().maxCoeff();
    Eigen::VectorXf lse = shifted.array().exp().rowwise().sum().log();
    RowMatrix logp = shifted.colwise() - lse;
    total = -(Y.array() * logp.array()).sum();
    Eigen::VectorXf ysum = Y.rowwise().sum();
    G = (logp.array().exp().colwise() * ysum.array()).matrix() - Y;
    G *= inv_b;
  } else {
    // Keras normalises probabilities to sum to one, then clips.
    for (int64_t b = 0; b < batch; ++b) {
      const float s = P.row(b).sum();
      Eigen::RowVectorXf q = P.row(b) / s;
      Eigen::RowVectorXf dq(c);
      for (int64_t j = 0; j < c; ++j) {
        const float qc = std::clamp(q[j], kEps, 1.f - kEps);
        total += -Y(b, j) * std::log(qc);
        dq[j] = (q[j] > kEps && q[j] < 1.f - kEps) ? -Y(b, j) / q[j] : 0.f;
      }
      const float dot = dq.dot(q);
      G.row(b) = (dq.array() - dot).matrix() / s * inv_b;
    }
  }
  r.loss = static_cast<float>(total * inv_b);
  return r;
}

Status CheckPrediction(const LossSpec& spec, const Shape& pred) {
  if (pred.empty() || pred[0] == 0) {
    return InvalidArgument(std::string(LossName(spec.type)) + ": empty batch of predictions " + ShapeString(pred));
  }
  if ((spec.type == LossType::kSparseCategoricalCrossentropy || spec.type == LossType::kCategoricalCrossentropy) &&
      pred.size() != 2) {
    return InvalidArgument(std::string(LossName(spec.type)) + ": predictions must be [batch, classes], got " +
                           ShapeString(pred));
  }
  return Status::Ok();
}

}  // namespace

std::string_view LossName(LossType t) {
  switch (t) {
    case LossType::kMeanSquaredError: return "MeanSquaredError";
    case LossType::kBinaryCrossentropy: return "BinaryCrossentropy";
    case LossType::kSparseCategoricalCrossentropy: return "SparseCategoricalCrossentropy";
    case LossType::kCategoricalCrossentropy: return "CategoricalCrossentropy";
  }
  return "unknown";
}

Status CheckLabels(const LossSpec& spec, const Shape& pred_shape, const Tensor& labels) {
  RETURN_IF_ERROR(CheckPrediction(spec, pred_shape));
  Tensor fake = Tensor::Zeros(DType::kFloat32, pred_shape);
  switch (spec.type) {
    case LossType::kSparseCategoricalCrossentropy: return SparseLabels(fake, labels).status();
    case LossType::kCategoricalCrossentropy:
      if (labels.dtype() != DType::kFloat32 || labels.shape() != pred_shape) {
        return InvalidArgument("CategoricalCrossentropy: labels " + labels.DebugString() +
                               " should be one-hot float32" + ShapeString(pred_shape) +
                               " (use SparseCategoricalCrossentropy for class ids)");
      }
      return Status::Ok();
    default: return DenseLabels(spec.type, fake, labels).status();
  }
}

StatusOr<LossResult> ComputeLoss(const LossSpec& spec, const Tensor& pred, const Tensor& labels) {
  if (pred.dtype() != DType::kFloat32) return InvalidArgument("loss: predictions must be float32");
  RETURN_IF_ERROR(CheckPrediction(spec, pred.shape()));
  switch (spec.type) {
    case LossType::kMeanSquaredError: {
      ASSIGN_OR_RETURN(Tensor y, DenseLabels(spec.type, pred, labels));
      return Mse(pred, y);
    }
    case LossType::kBinaryCrossentropy: {
      ASSIGN_OR_RETURN(Tensor y, DenseLabels(spec.type, pred, labels));
      return Bce(pred, y, spec.from_logits);
    }
    case LossType::kSparseCategoricalCrossentropy: {
      ASSIGN_OR_RETURN(std::vector<int64_t> ids, SparseLabels(pred, labels));
      const int64_t c = pred.dim(-1);
      std::vector<float> onehot(static_cast<size_t>(pred.size()), 0.f);
      for (size_t b = 0; b < ids.size(); ++b) onehot[b * c + ids[b]] = 1.f;
      return Cce(pred, onehot.data(), spec.from_logits);
    }
    case LossType::kCategoricalCrossentropy: {
      RETURN_IF_ERROR(CheckLabels(spec, pred.shape(), labels));
      return Cce(pred, labels.data<float>(), spec.from_logits);
    }
  }
  return InvalidArgument("unknown loss");
}

}  // namespace tfjob::model
