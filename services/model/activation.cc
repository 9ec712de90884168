#include "services/model/activation.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "services/tensor/backend.h"
#include "services/tensor/eigen.h"

namespace tfjob::model {

namespace {

constexpr std::pair<Activation, std::string_view> kNames[] = {
    {Activation::kLinear, "linear"},
    {Activation::kRelu, "relu"},
    {Activation::kSigmoid, "sigmoid"},
    {Activation::kTanh, "tanh"},
    {Activation::kSoftmax, "softmax"},
    {Activation::kElu, "elu"},
    {Activation::kSelu, "selu"},
    {Activation::kSoftplus, "softplus"},
    {Activation::kSoftsign, "softsign"},
    {Activation::kSwish, "swish"},
    {Activation::kGelu, "gelu"},
    {Activation::kGeluTanh, "gelu_new"},
    {Activation::kHardSigmoid, "hard_sigmoid"},
    {Activation::kExponential, "exponential"},
    {Activation::kRelu6, "relu6"},
    {Activation::kLeakyRelu, "leaky_relu"},
    {Activation::kMish, "mish"},
    {Activation::kLogSoftmax, "log_softmax"},
};

// SELU's constants (Klambauer et al.), as Keras and TF.js spell them.
constexpr float kSeluAlpha = 1.6732632423543772848170429916717f;
constexpr float kSeluScale = 1.0507009873554804934193349852946f;
// Keras 3's leaky_relu default negative_slope.
constexpr float kLeakySlope = 0.2f;
// gelu_new: sqrt(2 / pi) and the cubic coefficient.
constexpr float kGeluK = 0.7978845608028654f;
constexpr float kGeluC = 0.044715f;

float Sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }
// log(1 + e^x) without overflow.
float Softplus(float x) { return std::max(x, 0.f) + std::log1p(std::exp(-std::fabs(x))); }

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

// The elementwise activations beyond the four with device kernels.
float Forward1(Activation a, float x) {
  switch (a) {
    case Activation::kElu: return x > 0 ? x : std::expm1(x);
    case Activation::kSelu: return x > 0 ? kSeluScale * x : kSeluScale * kSeluAlpha * std::expm1(x);
    case Activation::kSoftplus: return Softplus(x);
    case Activation::kSoftsign: return x / (1.f + std::fabs(x));
    case Activation::kSwish: return x * Sigmoid(x);
    case Activation::kGelu: return 0.5f * x * (1.f + std::erf(x * static_cast<float>(M_SQRT1_2)));
    case Activation::kGeluTanh: return 0.5f * x * (1.f + std::tanh(kGeluK * (x + kGeluC * x * x * x)));
    case Activation::kHardSigmoid: return std::clamp(0.2f * x + 0.5f, 0.f, 1.f);
    case Activation::kExponential: return std::exp(x);
    case Activation::kRelu6: return std::clamp(x, 0.f, 6.f);
    case Activation::kLeakyRelu: return x > 0 ? x : kLeakySlope * x;
    case Activation::kMish: return x * std::tanh(Softplus(x));
    default: return x;
  }
}

// dy/dx from the output y, or from the input x where ActivationNeedsInput.
float Derivative1(Activation a, float x, float y) {
  switch (a) {
    case Activation::kElu: return y > 0 ? 1.f : y + 1.f;
    case Activation::kSelu: return y > 0 ? kSeluScale : y + kSeluScale * kSeluAlpha;
    case Activation::kSoftplus: return -std::expm1(-y);  // sigmoid(x)
    case Activation::kSoftsign: return (1.f - std::fabs(y)) * (1.f - std::fabs(y));
    case Activation::kSwish: {
      const float s = Sigmoid(x);
      return s * (1.f + x * (1.f - s));
    }
    case Activation::kGelu: {
      const float cdf = 0.5f * (1.f + std::erf(x * static_cast<float>(M_SQRT1_2)));
      const float pdf = std::exp(-0.5f * x * x) * static_cast<float>(0.5 * M_2_SQRTPI * M_SQRT1_2);
      return cdf + x * pdf;
    }
    case Activation::kGeluTanh: {
      const float t = std::tanh(kGeluK * (x + kGeluC * x * x * x));
      return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kGeluK * (1.f + 3.f * kGeluC * x * x);
    }
    case Activation::kHardSigmoid: return y > 0 && y < 1 ? 0.2f : 0.f;
    case Activation::kExponential: return y;
    case Activation::kRelu6: return y > 0 && y < 6 ? 1.f : 0.f;
    case Activation::kLeakyRelu: return y > 0 ? 1.f : kLeakySlope;
    case Activation::kMish: {
      const float t = std::tanh(Softplus(x));
      return t + x * (1.f - t * t) * Sigmoid(x);
    }
    default: return 1.f;
  }
}

}  // namespace

StatusOr<Activation> ParseActivation(std::string_view name) {
  if (name.empty()) return Activation::kLinear;
  if (name == "silu") return Activation::kSwish;  // Keras' other name for it
  std::string known;
  for (const auto& [a, n] : kNames) {
    if (n == name) return a;
    known += (known.empty() ? "" : ", ") + std::string(n);
  }
  return InvalidArgument("unknown activation \"" + std::string(name) + "\" (known: " + known + ", silu)");
}

std::string_view ActivationName(Activation a) {
  for (const auto& [act, n] : kNames) {
    if (act == a) return n;
  }
  return "linear";
}

bool ActivationNeedsInput(Activation a) {
  return a == Activation::kSwish || a == Activation::kGelu || a == Activation::kGeluTanh || a == Activation::kMish;
}

bool ActivationOnDevice(Activation a) {
  return a == Activation::kLinear || a == Activation::kRelu || a == Activation::kSigmoid || a == Activation::kTanh ||
         a == Activation::kSoftmax;
}

void ApplyActivation(Activation a, Tensor& x) {
  auto v = AsArray(x);
  switch (a) {
    case Activation::kLinear: break;
    case Activation::kRelu: v = v.max(0.f); break;
    case Activation::kSigmoid: v = (1.f + (-v).exp()).inverse(); break;
    case Activation::kTanh: v = v.tanh(); break;
    case Activation::kSoftmax:
    case Activation::kLogSoftmax: {
      if (x.size() == 0) break;
      auto m = LastAxisRows(x);
      m.colwise() -= m.rowwise().maxCoeff();
      if (a == Activation::kLogSoftmax) {
        m.colwise() -= m.array().exp().rowwise().sum().log().matrix();
        break;
      }
      m.array() = m.array().exp();
      m.array().colwise() /= m.rowwise().sum().array();
      break;
    }
    default:
      for (float& e : x.flat<float>()) e = Forward1(a, e);
      break;
  }
}

void ActivationBackward(Activation a, const Tensor& x, const Tensor& y, Tensor& grad) {
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
    case Activation::kLogSoftmax: {
      // dx = g - softmax(x) * sum(g), softmax(x) = exp(y).
      if (y.size() == 0) break;
      auto p = LastAxisRows(y);
      auto d = LastAxisRows(grad);
      Eigen::VectorXf sum = d.rowwise().sum();
      d.array() -= p.array().exp().colwise() * sum.array();
      break;
    }
    default: {
      const float* in = ActivationNeedsInput(a) ? x.data<float>() : y.data<float>();
      const float* out = y.data<float>();
      float* d = grad.data<float>();
      for (int64_t i = 0; i < grad.size(); ++i) d[i] *= Derivative1(a, in[i], out[i]);
      break;
    }
  }
}

void ActivationBackward(Activation a, const Tensor& y, Tensor& grad) { ActivationBackward(a, Tensor(), y, grad); }

Status Activate(Activation a, Tensor& x) {
  if (x.on_cpu()) {
    ApplyActivation(a, x);
    return Status::Ok();
  }
  if (!ActivationOnDevice(a)) {
    return Unimplemented("activation " + std::string(ActivationName(a)) + " has no CUDA kernel (run on the CPU)");
  }
  if (a == Activation::kLinear || x.size() == 0) return Status::Ok();
  ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(x.device()));
  switch (a) {
    case Activation::kRelu: return b->UnaryOp(device::Unary::kRelu, x, x);
    case Activation::kSigmoid: return b->UnaryOp(device::Unary::kSigmoid, x, x);
    case Activation::kTanh: return b->UnaryOp(device::Unary::kTanh, x, x);
    case Activation::kSoftmax: return b->Softmax(x, false, x);
    default: break;
  }
  return Status::Ok();
}

Status ActivateBackward(Activation a, const Tensor& x, const Tensor& y, Tensor& grad) {
  if (y.on_cpu() && grad.on_cpu() && (x.size() == 0 || x.on_cpu())) {
    ActivationBackward(a, x, y, grad);
    return Status::Ok();
  }
  if (!ActivationOnDevice(a)) {
    return Unimplemented("activation " + std::string(ActivationName(a)) + " has no CUDA kernel (run on the CPU)");
  }
  RETURN_IF_ERROR(device::CheckSameDevice("activation gradient", {&y, &grad}));
  if (a == Activation::kLinear || y.size() == 0) return Status::Ok();
  ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(y.device()));
  switch (a) {
    case Activation::kRelu: return b->ActivationBackward(device::ActivationGrad::kRelu, y, grad);
    case Activation::kSigmoid: return b->ActivationBackward(device::ActivationGrad::kSigmoid, y, grad);
    case Activation::kTanh: return b->ActivationBackward(device::ActivationGrad::kTanh, y, grad);
    case Activation::kSoftmax: return b->ActivationBackward(device::ActivationGrad::kSoftmax, y, grad);
    default: break;
  }
  return Status::Ok();
}

Status ActivateBackward(Activation a, const Tensor& y, Tensor& grad) { return ActivateBackward(a, Tensor(), y, grad); }

}  // namespace tfjob::model
