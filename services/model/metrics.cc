#include "services/model/metrics.h"

#include <cmath>

namespace tfjob::model {
namespace {

StatusOr<int64_t> LabelAt(const Tensor& labels, int64_t i) {
  if (labels.dtype() == DType::kInt64) return labels.data<int64_t>()[i];
  return static_cast<int64_t>(std::lround(labels.data<float>()[i]));
}

int64_t ArgMaxRow(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t j = 1; j < n; ++j)
    if (row[j] > row[best]) best = j;
  return best;
}

}  // namespace

std::string MetricName(MetricType t) {
  switch (t) {
    case MetricType::kAccuracy: return "accuracy";
    case MetricType::kBinaryAccuracy: return "binary_accuracy";
    case MetricType::kSparseCategoricalAccuracy: return "sparse_categorical_accuracy";
    case MetricType::kCategoricalAccuracy: return "categorical_accuracy";
  }
  return "metric";
}

MetricType AccuracyForLoss(LossType loss) {
  switch (loss) {
    case LossType::kBinaryCrossentropy: return MetricType::kBinaryAccuracy;
    case LossType::kSparseCategoricalCrossentropy: return MetricType::kSparseCategoricalAccuracy;
    case LossType::kCategoricalCrossentropy: return MetricType::kCategoricalAccuracy;
    case LossType::kMeanSquaredError: return MetricType::kAccuracy;
  }
  return MetricType::kAccuracy;
}

Status UpdateMetric(MetricType t, const Tensor& pred, const Tensor& labels, bool logits, MetricState& state) {
  if (pred.dtype() != DType::kFloat32 || pred.rank() < 1) return InvalidArgument("metric: predictions must be float32");
  const int64_t batch = pred.dim(0);
  const float* p = pred.data<float>();
  switch (t) {
    case MetricType::kSparseCategoricalAccuracy: {
      if (pred.rank() != 2) return InvalidArgument("sparse_categorical_accuracy: predictions must be [batch, classes]");
      const int64_t c = pred.dim(-1);
      if (labels.size() != batch) return InvalidArgument("sparse_categorical_accuracy: one label per example expected");
      for (int64_t b = 0; b < batch; ++b) {
        ASSIGN_OR_RETURN(int64_t y, LabelAt(labels, b));
        state.total += ArgMaxRow(p + b * c, c) == y ? 1 : 0;
      }
      state.count += static_cast<double>(batch);
      return Status::Ok();
    }
    case MetricType::kCategoricalAccuracy: {
      if (pred.rank() != 2) return InvalidArgument("categorical_accuracy: predictions must be [batch, classes]");
      const int64_t c = pred.dim(-1);
      if (labels.shape() != pred.shape() || labels.dtype() != DType::kFloat32) {
        return InvalidArgument("categorical_accuracy: labels must be one-hot like the predictions");
      }
      for (int64_t b = 0; b < batch; ++b) {
        state.total += ArgMaxRow(p + b * c, c) == ArgMaxRow(labels.data<float>() + b * c, c) ? 1 : 0;
      }
      state.count += static_cast<double>(batch);
      return Status::Ok();
    }
    case MetricType::kBinaryAccuracy: {
      if (labels.size() != pred.size()) return InvalidArgument("binary_accuracy: labels do not match predictions");
      const float threshold = logits ? 0.f : 0.5f;
      for (int64_t i = 0; i < pred.size(); ++i) {
        ASSIGN_OR_RETURN(int64_t y, LabelAt(labels, i));
        state.total += (p[i] > threshold) == (y > 0) ? 1 : 0;
      }
      state.count += static_cast<double>(pred.size());
      return Status::Ok();
    }
    case MetricType::kAccuracy: {
      if (labels.size() != pred.size()) return InvalidArgument("accuracy: labels do not match predictions");
      for (int64_t i = 0; i < pred.size(); ++i) {
        float y =
            labels.dtype() == DType::kInt64 ? static_cast<float>(labels.data<int64_t>()[i]) : labels.data<float>()[i];
        state.total += p[i] == y ? 1 : 0;
      }
      state.count += static_cast<double>(pred.size());
      return Status::Ok();
    }
  }
  return InvalidArgument("unknown metric");
}

}  // namespace tfjob::model
