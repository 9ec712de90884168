// The per-element arithmetic of the CUDA kernels, written once for both
// sides: nvcc compiles it into the kernels (kernels.cu), and the host
// compiler into kernel_math_test, which checks it against the CPU
// implementations on machines without a GPU. Plain C++17, no project headers.
//
// Every function mirrors one CPU formula (services/model/optimizers.cc,
// losses.cc, activation.cc) operation for operation, so the device agrees
// with the host to float32 rounding.
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define TFJOB_HD __host__ __device__ __forceinline__
#else
#define TFJOB_HD inline
#endif

namespace tfjob::gpu::math {

constexpr float kEps = 1e-7f;

TFJOB_HD float Clamp(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }
TFJOB_HD float Sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

// Unary ops (device::Unary order).
TFJOB_HD float Unary(int op, float x) {
  switch (op) {
    case 0: return x > 0.f ? x : 0.f;  // relu
    case 1: return Sigmoid(x);
    case 2: return tanhf(x);
    case 3: return expf(x);
    case 4: return logf(x);
    default: return x * x;  // square
  }
}

// Binary ops (device::Binary order).
TFJOB_HD float Binary(int op, float a, float b) {
  switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    default: return a / b;
  }
}

// Elementwise activation derivatives from the output y (device::ActivationGrad
// order, softmax excluded: it needs the whole row).
TFJOB_HD float ActivationGrad(int kind, float y, float g) {
  switch (kind) {
    case 0: return y > 0.f ? g : 0.f;
    case 1: return g * (y * (1.f - y));
    default: return g * (1.f - y * y);  // tanh
  }
}

// Binary cross-entropy of one element: the loss term, and the gradient
// before the 1/n of the batch mean.
struct LossTerm {
  float loss;
  float grad;
};
TFJOB_HD LossTerm Bce(float x, float y, bool from_logits) {
  if (from_logits) {
    const float loss = (x > 0.f ? x : 0.f) - x * y + log1pf(expf(-fabsf(x)));
    return {loss, Sigmoid(x) - y};
  }
  const float q = Clamp(x, kEps, 1.f - kEps);
  const float loss = -(y * logf(q) + (1.f - y) * logf(1.f - q));
  const float grad = (x > kEps && x < 1.f - kEps) ? (q - y) / (q * (1.f - q)) : 0.f;
  return {loss, grad};
}
TFJOB_HD LossTerm Mse(float p, float y) {
  const float d = p - y;
  return {d * d, 2.f * d};
}

// Optimizer hyper-parameters as the kernels see them (device::OptimizerStep).
struct Opt {
  int rule;  // 0 sgd, 1 adagrad, 2 rmsprop, 3 adam
  float lr, momentum, rho, beta_1, beta_2, epsilon, alpha;
  bool nesterov, centered, amsgrad;
};

// Slot order is Optimizer::SlotNames(): sgd [momentum]; adagrad
// [accumulator]; rmsprop [velocity, momentum?, average_gradient?]; adam
// [momentum, velocity, velocity_hat?]. s1/s2 may be null when absent.
TFJOB_HD void Update(const Opt& o, float& w, float g, float* s0, float* s1, float* s2) {
  switch (o.rule) {
    case 0: {
      if (o.momentum <= 0.f) {
        w -= o.lr * g;
        return;
      }
      float m = o.momentum * *s0 - o.lr * g;
      *s0 = m;
      if (o.nesterov) w += o.momentum * m - o.lr * g;
      else w += m;
      return;
    }
    case 1: {
      float a = *s0 + g * g;
      *s0 = a;
      w -= o.lr * g / sqrtf(a + o.epsilon);
      return;
    }
    case 2: {
      float v = o.rho * *s0 + (1.f - o.rho) * (g * g);
      *s0 = v;
      float inc;
      if (o.centered) {
        float* mgp = o.momentum > 0.f ? s2 : s1;
        float mg = o.rho * *mgp + (1.f - o.rho) * g;
        *mgp = mg;
        inc = o.lr * g / sqrtf(v - mg * mg + o.epsilon);
      } else {
        inc = o.lr * g / sqrtf(v + o.epsilon);
      }
      if (o.momentum > 0.f) {
        float m = o.momentum * *s1 + inc;
        *s1 = m;
        w -= m;
      } else {
        w -= inc;
      }
      return;
    }
    default: {
      float m = *s0 + (g - *s0) * (1.f - o.beta_1);
      float v = *s1 + (g * g - *s1) * (1.f - o.beta_2);
      *s0 = m;
      *s1 = v;
      if (o.amsgrad) {
        float vh = *s2 > v ? *s2 : v;
        *s2 = vh;
        w -= o.alpha * m / (sqrtf(vh) + o.epsilon);
      } else {
        w -= o.alpha * m / (sqrtf(v) + o.epsilon);
      }
      return;
    }
  }
}

}  // namespace tfjob::gpu::math
