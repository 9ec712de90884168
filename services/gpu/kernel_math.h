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
#include <cstring>

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

// float32 to bfloat16's bits, rounded to nearest even, a NaN kept a quiet
// NaN (never rounded into infinity): services/tensor/precision.cc's
// ToBfloat16 bit for bit, so the GPU's mixed-precision operands are the
// CPU's. (cuda_bf16.h's __float2bfloat16_rn rounds the same way but makes
// every NaN the canonical one.)
TFJOB_HD uint16_t Bfloat16Bits(float x) {
  uint32_t u;
#ifdef __CUDA_ARCH__
  u = __float_as_uint(x);
#else
  std::memcpy(&u, &x, sizeof u);
#endif
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
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
      if (o.nesterov)
        w += o.momentum * m - o.lr * g;
      else
        w += m;
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

// ---- windows over NHWC tensors: Conv2D's im2col and col2im, pooling ----
//
// The geometry of a kernel or pooling window as the layer computed it
// (TensorFlow's "valid" / "same"; services/model/layer_shapes.h). Each
// function below computes one output element; the kernels run one thread
// per element, the host test loops over them. Sums run in the order the
// CPU layers accumulate in (output pixels by increasing row, then column),
// without atomics: the same every run, and the host's bit for bit where no
// multiply-add can be fused (max pooling, the forward sums), else to the
// last bit.
struct Window {
  int64_t n, h, w, c;  // input [n, h, w, c]
  int64_t kh, kw;      // window
  int64_t sh, sw;      // strides
  int64_t oh, ow;      // output pixels
  int64_t pt, pl;      // padding before (top, left)
};

// Output positions o along one axis whose window covers input position v:
// o * stride - pad <= v < o * stride - pad + window, as [lo, hi).
TFJOB_HD void Covering(int64_t v, int64_t pad, int64_t window, int64_t stride, int64_t out, int64_t& lo, int64_t& hi) {
  const int64_t num = v + pad;
  hi = num / stride + 1;
  if (hi > out) hi = out;
  const int64_t m = num - window;
  lo = m < 0 ? 0 : m / stride + 1;
}

// Element i of the patch matrix [n * oh * ow, kh * kw * c]: the input under
// kernel tap (ky, kx), channel ch, of output pixel row; 0 over padding.
TFJOB_HD float Im2ColAt(const Window& g, const float* x, int64_t i) {
  const int64_t k = g.kh * g.kw * g.c;
  const int64_t row = i / k, col = i % k;
  const int64_t ch = col % g.c, tap = col / g.c, kx = tap % g.kw, ky = tap / g.kw;
  const int64_t ox = row % g.ow, rest = row / g.ow, oy = rest % g.oh, b = rest / g.oh;
  const int64_t iy = oy * g.sh - g.pt + ky, ix = ox * g.sw - g.pl + kx;
  if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return 0.f;
  return x[((b * g.h + iy) * g.w + ix) * g.c + ch];
}

// Element i of dx [n, h, w, c]: the sum of the patch-matrix gradients of
// every tap that copied this input.
TFJOB_HD float Col2ImAt(const Window& g, const float* dp, int64_t i) {
  const int64_t ch = i % g.c, rest = i / g.c, ix = rest % g.w, rest2 = rest / g.w, iy = rest2 % g.h, b = rest2 / g.h;
  const int64_t k = g.kh * g.kw * g.c;
  int64_t y0, y1, x0, x1;
  Covering(iy, g.pt, g.kh, g.sh, g.oh, y0, y1);
  Covering(ix, g.pl, g.kw, g.sw, g.ow, x0, x1);
  float acc = 0.f;
  for (int64_t oy = y0; oy < y1; ++oy) {
    const int64_t ky = iy + g.pt - oy * g.sh;
    for (int64_t ox = x0; ox < x1; ++ox) {
      const int64_t kx = ix + g.pl - ox * g.sw;
      acc += dp[((b * g.oh + oy) * g.ow + ox) * k + (ky * g.kw + kx) * g.c + ch];
    }
  }
  return acc;
}

// The input rows [y0, y1) and columns [x0, x1) under output pixel (oy, ox),
// padding excluded.
TFJOB_HD void PoolWindow(const Window& g, int64_t oy, int64_t ox, int64_t& y0, int64_t& y1, int64_t& x0, int64_t& x1) {
  const int64_t y = oy * g.sh - g.pt, x = ox * g.sw - g.pl;
  y0 = y < 0 ? 0 : y;
  y1 = y + g.kh < g.h ? y + g.kh : g.h;
  x0 = x < 0 ? 0 : x;
  x1 = x + g.kw < g.w ? x + g.kw : g.w;
}

// Element i of y [n, oh, ow, c]. Max: the first maximum wins (strictly
// greater replaces), and *arg receives its flat input offset. Average: the
// divisor counts real inputs only.
TFJOB_HD float PoolAt(const Window& g, bool max, const float* x, int64_t i, int64_t* arg) {
  const int64_t ch = i % g.c, rest = i / g.c, ox = rest % g.ow, rest2 = rest / g.ow, oy = rest2 % g.oh,
                b = rest2 / g.oh;
  int64_t y0, y1, x0, x1;
  PoolWindow(g, oy, ox, y0, y1, x0, x1);
  float acc = 0.f;
  int64_t best = -1;
  for (int64_t iy = y0; iy < y1; ++iy) {
    for (int64_t ix = x0; ix < x1; ++ix) {
      const int64_t at = ((b * g.h + iy) * g.w + ix) * g.c + ch;
      if (!max) {
        acc += x[at];
      } else if (best < 0 || x[at] > acc) {
        acc = x[at];
        best = at;
      }
    }
  }
  if (max) {
    if (arg) *arg = best;
    return acc;
  }
  return acc * (1.f / static_cast<float>((y1 - y0) * (x1 - x0)));
}

// Element i of dx [n, h, w, c] for pooling: the gradients of the outputs
// whose maximum it was (max) or whose average it entered (average).
TFJOB_HD float PoolGradAt(const Window& g, bool max, const float* dy, const int64_t* arg, int64_t i) {
  const int64_t ch = i % g.c, rest = i / g.c, ix = rest % g.w, rest2 = rest / g.w, iy = rest2 % g.h, b = rest2 / g.h;
  int64_t oy0, oy1, ox0, ox1;
  Covering(iy, g.pt, g.kh, g.sh, g.oh, oy0, oy1);
  Covering(ix, g.pl, g.kw, g.sw, g.ow, ox0, ox1);
  float acc = 0.f;
  for (int64_t oy = oy0; oy < oy1; ++oy) {
    for (int64_t ox = ox0; ox < ox1; ++ox) {
      const int64_t o = ((b * g.oh + oy) * g.ow + ox) * g.c + ch;
      if (max) {
        if (arg[o] == i) acc += dy[o];
      } else {
        int64_t y0, y1, x0, x1;
        PoolWindow(g, oy, ox, y0, y1, x0, x1);
        acc += dy[o] * (1.f / static_cast<float>((y1 - y0) * (x1 - x0)));
      }
    }
  }
  return acc;
}

}  // namespace tfjob::gpu::math
