#include "services/model/activation.h"

#include "services/tensor/backend.h"
#include "services/tensor/eigen.h"

namespace tfjob::model {

StatusOr<Activation> ParseActivation(std::string_view name) {
  if (name.empty() || name == "linear") return Activation::kLinear;
  if (name == "relu") return Activation::kRelu;
  if (name == "sigmoid") return Activation::kSigmoid;
  if (name == "tanh") return Activation::kTanh;
  if (name == "softmax") return Activation::kSoftmax;
  return InvalidArgument("unknown activation \"" + std::string(name) +
                         "\" (known: linear, relu, sigmoid, tanh, softmax)");
}

std::string_view ActivationName(Activation a) {
  switch (a) {
    case Activation::kLinear: return "linear";
    case Activation::kRelu: return "relu";
    case Activation::kSigmoid: return "sigmoid";
    case Activation::kTanh: return "tanh";
    case Activation::kSoftmax: return "softmax";
  }
  return "linear";
}

namespace {

Eigen::Map<RowMatrix> LastAxisRows(Tensor& t) {
  int64_t n = t.rank() == 0 ? 1 : t.dim(-1);
  int64_t rows = n == 0 ? 0 : t.size() / n;
  return {t.data<float>(), rows, n};
}

Eigen::Map<const RowMatrix> LastAxisRows(const Tensor& t) {
  int64_t n = t.rank() == 0 ? 1 : t.dim(-1);
  int64_t rows = n == 0 ? 0 : t.size() / n;
  return {t.data<float>(), rows, n};
}

}  // namespace

void ApplyActivation(Activation a, Tensor& x) {
  auto v = AsArray(x);
  switch (a) {
    case Activation::kLinear: break;
    case Activation::kRelu: v = v.max(0.f); break;
    case Activation::kSigmoid: v = (1.f + (-v).exp()).inverse(); break;
    case Activation::kTanh: v = v.tanh(); break;
    case Activation::kSoftmax: {
      if (x.size() == 0) break;
      auto m = LastAxisRows(x);
      m.colwise() -= m.rowwise().maxCoeff();
      m.array() = m.array().exp();
      m.array().colwise() /= m.rowwise().sum().array();
      break;
    }
  }
}

void ActivationBackward(Activation a, const Tensor& y, Tensor& grad) {
  auto g = AsArray(grad);
  auto o = AsArray(y);
  switch (a) {
    case Activation::kLinear: break;
    case Activation::kRelu: g = (o > 0.f).select(g, 0.f); break;
    case Activation::kSigmoid: g *= o * (1.f - o); break;
    case Activation::kTanh: g *= 1.f - o.square(); break;
    case Activation::kSoftmax: {
      if (y.size() == 0) break;
      auto p = LastAxisRows(y);
      auto d = LastAxisRows(grad);
      Eigen::VectorXf dot = (d.array() * p.array()).rowwise().sum();
      d.array() = p.array() * (d.colwise() - dot).array();
      break;
    }
  }
}

Status Activate(Activation a, Tensor& x) {
  if (x.on_cpu()) {
    ApplyActivation(a, x);
    return Status::Ok();
  }
  if (a == Activation::kLinear || x.size() == 0) return Status::Ok();
  ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(x.device()));
  switch (a) {
    case Activation::kRelu: return b->UnaryOp(device::Unary::kRelu, x, x);
    case Activation::kSigmoid: return b->UnaryOp(device::Unary::kSigmoid, x, x);
    case Activation::kTanh: return b->UnaryOp(device::Unary::kTanh, x, x);
    case Activation::kSoftmax: return b->Softmax(x, false, x);
    case Activation::kLinear: break;
  }
  return Status::Ok();
}

Status ActivateBackward(Activation a, const Tensor& y, Tensor& grad) {
  if (y.on_cpu() && grad.on_cpu()) {
    ActivationBackward(a, y, grad);
    return Status::Ok();
  }
  RETURN_IF_ERROR(device::CheckSameDevice("activation gradient", {&y, &grad}));
  if (a == Activation::kLinear || y.size() == 0) return Status::Ok();
  ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(y.device()));
  switch (a) {
    case Activation::kRelu: return b->ActivationBackward(device::ActivationGrad::kRelu, y, grad);
    case Activation::kSigmoid: return b->ActivationBackward(device::ActivationGrad::kSigmoid, y, grad);
    case Activation::kTanh: return b->ActivationBackward(device::ActivationGrad::kTanh, y, grad);
    case Activation::kSoftmax: return b->ActivationBackward(device::ActivationGrad::kSoftmax, y, grad);
    case Activation::kLinear: break;
  }
  return Status::Ok();
}

}  // namespace tfjob::model
