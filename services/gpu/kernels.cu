#include "services/gpu/kernels.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>

namespace tfjob::gpu::kernels {
namespace {

constexpr int kThreads = 256;

cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }

// Grid-stride loops: enough blocks to fill the device, never more than the
// work needs.
unsigned Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 8192 ? 8192 : b));
}

#define TFJOB_FOR(i, n)                                                                  \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

int Done() { return static_cast<int>(cudaGetLastError()); }

__device__ __forceinline__ int64_t ClampIndex(int64_t i, int64_t rows) {
  return i < 0 ? 0 : (i >= rows ? rows - 1 : i);
}

__global__ void AxpyK(int64_t n, float alpha, const float* x, float* y) { TFJOB_FOR(i, n) y[i] += alpha * x[i]; }

__global__ void FillK(float* p, int64_t n, float v) { TFJOB_FOR(i, n) p[i] = v; }

__global__ void UnaryK(int op, const float* a, float* out, int64_t n) {
  TFJOB_FOR(i, n) out[i] = math::Unary(op, a[i]);
}

__global__ void BinaryK(int op, const float* a, const float* b, float* out, int64_t n, int64_t bn) {
  TFJOB_FOR(i, n) {
    const float rhs = bn == n ? b[i] : (bn == 1 ? b[0] : b[i % bn]);
    out[i] = math::Binary(op, a[i], rhs);
  }
}

__global__ void ScaleK(const float* a, float s, float* out, int64_t n) { TFJOB_FOR(i, n) out[i] = a[i] * s; }

__global__ void TransposeK(const float* a, float* out, int64_t rows, int64_t cols) {
  TFJOB_FOR(i, rows * cols) {
    const int64_t r = i / cols, c = i % cols;
    out[c * rows + r] = a[i];
  }
}

__global__ void BiasAddK(float* y, const float* bias, int64_t rows, int64_t cols) {
  TFJOB_FOR(i, rows * cols) y[i] += bias[i % cols];
}

// One thread per row: rows are short (classes) in the models this serves.
__global__ void SoftmaxK(const float* a, float* out, int64_t rows, int64_t cols, bool log) {
  TFJOB_FOR(r, rows) {
    const float* x = a + r * cols;
    float* o = out + r * cols;
    float m = -FLT_MAX;
    for (int64_t j = 0; j < cols; ++j) m = fmaxf(m, x[j]);
    float sum = 0.f;
    for (int64_t j = 0; j < cols; ++j) sum += expf(x[j] - m);
    if (log) {
      const float lse = logf(sum);
      for (int64_t j = 0; j < cols; ++j) o[j] = (x[j] - m) - lse;
    } else {
      for (int64_t j = 0; j < cols; ++j) o[j] = expf(x[j] - m) / sum;
    }
  }
}

__global__ void ActivationGradK(int kind, const float* y, float* g, int64_t n) {
  TFJOB_FOR(i, n) g[i] = math::ActivationGrad(kind, y[i], g[i]);
}

__global__ void SoftmaxGradK(const float* y, float* g, int64_t rows, int64_t cols) {
  TFJOB_FOR(r, rows) {
    const float* p = y + r * cols;
    float* d = g + r * cols;
    float dot = 0.f;
    for (int64_t j = 0; j < cols; ++j) dot += d[j] * p[j];
    for (int64_t j = 0; j < cols; ++j) d[j] = p[j] * (d[j] - dot);
  }
}

// Short reductions: a thread per output, in index order.
__global__ void ReduceSerialK(int op, const float* a, float* out, int64_t outer, int64_t n, int64_t inner) {
  TFJOB_FOR(o, outer * inner) {
    const int64_t p = o / inner, q = o % inner;
    const float* base = a + p * n * inner + q;
    float acc = op == 2 ? -INFINITY : 0.f;
    for (int64_t k = 0; k < n; ++k) acc = op == 2 ? fmaxf(acc, base[k * inner]) : acc + base[k * inner];
    if (op == 1) acc /= static_cast<float>(n);
    out[o] = acc;
  }
}

// Long reductions: a block per output; each thread sums a fixed stride, then
// a tree in shared memory. The order depends only on n, so it is the same
// every run.
__global__ void ReduceBlockK(int op, const float* a, float* out, int64_t outer, int64_t n, int64_t inner) {
  __shared__ float part[kThreads];
  for (int64_t o = blockIdx.x; o < outer * inner; o += gridDim.x) {
    const int64_t p = o / inner, q = o % inner;
    const float* base = a + p * n * inner + q;
    float acc = op == 2 ? -INFINITY : 0.f;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      acc = op == 2 ? fmaxf(acc, base[k * inner]) : acc + base[k * inner];
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (static_cast<int>(threadIdx.x) < s) {
        part[threadIdx.x] =
            op == 2 ? fmaxf(part[threadIdx.x], part[threadIdx.x + s]) : part[threadIdx.x] + part[threadIdx.x + s];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) out[o] = op == 1 ? part[0] / static_cast<float>(n) : part[0];
    __syncthreads();
  }
}

__global__ void ArgMaxK(const float* a, int64_t* out, int64_t rows, int64_t cols) {
  TFJOB_FOR(r, rows) {
    const float* x = a + r * cols;
    int64_t best = 0;
    for (int64_t j = 1; j < cols; ++j) {
      if (x[j] > x[best]) best = j;
    }
    out[r] = best;
  }
}

__global__ void GatherK(const float* params, const int64_t* ids, float* out, int64_t nids, int64_t rows, int64_t row) {
  TFJOB_FOR(i, nids * row) {
    const int64_t k = i / row, c = i % row;
    out[i] = params[ClampIndex(ids[k], rows) * row + c];
  }
}

__global__ void ScatterAddK(float* ref, const int64_t* ids, const float* updates, int64_t nids, int64_t rows,
                            int64_t row) {
  TFJOB_FOR(i, nids * row) {
    const int64_t k = i / row, c = i % row;
    atomicAdd(ref + ClampIndex(ids[k], rows) * row + c, updates[i]);
  }
}

__global__ void CastToIntK(const float* a, int64_t* out, int64_t n) {
  TFJOB_FOR(i, n) out[i] = static_cast<int64_t>(a[i]);
}

__global__ void CastToFloatK(const int64_t* a, float* out, int64_t n) {
  TFJOB_FOR(i, n) out[i] = static_cast<float>(a[i]);
}

__global__ void EmbeddingForwardK(const float* table, const int64_t* ids, float* out, int64_t out_rows, int64_t bag,
                                  bool combine, float scale, int64_t dim, int64_t vocab) {
  TFJOB_FOR(i, out_rows * dim) {
    const int64_t r = i / dim, c = i % dim;
    if (!combine) {
      out[i] = table[ClampIndex(ids[r], vocab) * dim + c];
      continue;
    }
    float acc = 0.f;
    for (int64_t j = 0; j < bag; ++j) acc += table[ClampIndex(ids[r * bag + j], vocab) * dim + c];
    out[i] = acc * scale;
  }
}

__global__ void EmbeddingBackwardK(const float* dy, const int64_t* positions, const int64_t* offsets, int64_t k,
                                   int64_t divisor, float scale, int64_t dim, float* values) {
  TFJOB_FOR(i, k * dim) {
    const int64_t s = i / dim, c = i % dim;
    float acc = 0.f;
    for (int64_t p = offsets[s]; p < offsets[s + 1]; ++p) acc += scale * dy[(positions[p] / divisor) * dim + c];
    values[i] = acc;
  }
}

// Per-row loss terms (and gradients), the same formulas as losses.cc.
__global__ void LossRowsK(int loss, bool from_logits, const float* pred, const float* target, float* grad, int64_t rows,
                          int64_t cols, float* row_loss) {
  const float n = static_cast<float>(rows * cols);
  const float inv_b = 1.f / static_cast<float>(rows);
  TFJOB_FOR(r, rows) {
    const float* p = pred + r * cols;
    const float* y = target + r * cols;
    float* g = grad ? grad + r * cols : nullptr;
    float total = 0.f;
    if (loss == 0 || loss == 1) {
      for (int64_t j = 0; j < cols; ++j) {
        const math::LossTerm t = loss == 0 ? math::Mse(p[j], y[j]) : math::Bce(p[j], y[j], from_logits);
        total += t.loss;
        if (g) g[j] = t.grad / n;
      }
    } else if (from_logits) {
      float m = -FLT_MAX;
      for (int64_t j = 0; j < cols; ++j) m = fmaxf(m, p[j]);
      float sum = 0.f, ysum = 0.f;
      for (int64_t j = 0; j < cols; ++j) {
        sum += expf(p[j] - m);
        ysum += y[j];
      }
      const float lse = logf(sum);
      for (int64_t j = 0; j < cols; ++j) {
        const float logp = (p[j] - m) - lse;
        total -= y[j] * logp;
        if (g) g[j] = (expf(logp) * ysum - y[j]) * inv_b;
      }
    } else {
      float s = 0.f;
      for (int64_t j = 0; j < cols; ++j) s += p[j];
      float dot = 0.f;
      for (int64_t j = 0; j < cols; ++j) {
        const float q = p[j] / s;
        const float qc = math::Clamp(q, math::kEps, 1.f - math::kEps);
        total -= y[j] * logf(qc);
        const float dq = (q > math::kEps && q < 1.f - math::kEps) ? -y[j] / q : 0.f;
        dot += dq * q;
        if (g) g[j] = dq;  // finished below, once the dot product is known
      }
      if (g) {
        for (int64_t j = 0; j < cols; ++j) g[j] = (g[j] - dot) / s * inv_b;
      }
    }
    row_loss[r] = total;
  }
}

// The sum of every thread's `acc` over the block (blockDim.x a power of two,
// at most kThreads) by a tree of fixed shape in `part`, so the same every
// run. Every thread of the block must call it; each gets the sum, and
// `part` may be used again when it returns.
__device__ float BlockSum(float acc, float* part) {
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  const float sum = part[0];
  __syncthreads();
  return sum;
}

// One block: the rows' terms added in a fixed tree, then folded into stats.
// `denominator` turns the total into the batch mean; `weight` is what the
// mean counts for (the batch size).
__global__ void FoldK(const float* terms, int64_t rows, float denominator, float weight, float count, float* stats,
                      int64_t slot) {
  __shared__ float part[kThreads];
  float acc = 0.f;
  for (int64_t k = threadIdx.x; k < rows; k += blockDim.x) acc += terms[k];
  const float total = BlockSum(acc, part);
  if (threadIdx.x == 0) {
    stats[slot] += denominator > 0.f ? total / denominator * weight : total;
    stats[slot + 1] += count;
  }
}

__global__ void MetricRowsK(int metric, bool logits, const float* pred, const float* target, int64_t rows, int64_t cols,
                            float* row_correct) {
  TFJOB_FOR(r, rows) {
    const float* p = pred + r * cols;
    const float* y = target + r * cols;
    float correct = 0.f;
    if (metric == 0) {
      int64_t bp = 0, by = 0;
      for (int64_t j = 1; j < cols; ++j) {
        if (p[j] > p[bp]) bp = j;
        if (y[j] > y[by]) by = j;
      }
      correct = bp == by ? 1.f : 0.f;
    } else if (metric == 1) {
      const float threshold = logits ? 0.f : 0.5f;
      for (int64_t j = 0; j < cols; ++j) correct += ((p[j] > threshold) == (y[j] >= 0.5f)) ? 1.f : 0.f;
    } else {
      for (int64_t j = 0; j < cols; ++j) correct += p[j] == y[j] ? 1.f : 0.f;
    }
    row_correct[r] = correct;
  }
}

__global__ void OptimizerDenseK(math::Opt o, float* w, const float* g, float* s0, float* s1, float* s2, int64_t n) {
  TFJOB_FOR(i, n) { math::Update(o, w[i], g[i], s0 ? s0 + i : nullptr, s1 ? s1 + i : nullptr, s2 ? s2 + i : nullptr); }
}

__global__ void OptimizerRowsK(math::Opt o, float* w, const int64_t* ids, const float* values, float* s0, float* s1,
                               float* s2, int64_t k, int64_t rows, int64_t row) {
  TFJOB_FOR(i, k * row) {
    const int64_t at = ClampIndex(ids[i / row], rows) * row + i % row;
    math::Update(o, w[at], values[i], s0 ? s0 + at : nullptr, s1 ? s1 + at : nullptr, s2 ? s2 + at : nullptr);
  }
}

__global__ void OptimizerMaskedK(math::Opt o, float* w, const float* g, const float* mask, float* s0, float* s1,
                                 float* s2, int64_t rows, int64_t row) {
  TFJOB_FOR(i, rows * row) {
    if (mask[i / row] > 0.f) {
      math::Update(o, w[i], g[i], s0 ? s0 + i : nullptr, s1 ? s1 + i : nullptr, s2 ? s2 + i : nullptr);
    }
  }
}

__global__ void Im2ColK(math::Window g, const float* x, float* p, int64_t n) {
  TFJOB_FOR(i, n) p[i] = math::Im2ColAt(g, x, i);
}

__global__ void Col2ImK(math::Window g, const float* p, float* dx, int64_t n) {
  TFJOB_FOR(i, n) dx[i] = math::Col2ImAt(g, p, i);
}

__global__ void Pool2DK(math::Window g, bool max, const float* x, float* y, int64_t* arg, int64_t n) {
  TFJOB_FOR(i, n) y[i] = math::PoolAt(g, max, x, i, arg ? arg + i : nullptr);
}

__global__ void Pool2DGradK(math::Window g, bool max, const float* dy, const int64_t* arg, float* dx, int64_t n) {
  TFJOB_FOR(i, n) dx[i] = math::PoolGradAt(g, max, dy, arg, i);
}

__global__ void BroadcastAxisK(const float* a, float* out, int64_t outer, int64_t n, int64_t inner, float scale) {
  TFJOB_FOR(i, outer * n * inner) {
    const int64_t q = i % inner, p = i / (n * inner);
    out[i] = a[p * inner + q] * scale;
  }
}

// A block per column: each thread sums a fixed stride of rows, then a tree
// in shared memory; the variance pass does the same around that mean.
__global__ void MomentsK(const float* x, float* mean, float* var, int64_t rows, int64_t cols) {
  __shared__ float part[kThreads];
  for (int64_t c = blockIdx.x; c < cols; c += gridDim.x) {
    float acc = 0.f;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) acc += x[r * cols + c];
    const float m = rows > 0 ? BlockSum(acc, part) / static_cast<float>(rows) : 0.f;
    acc = 0.f;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
      const float d = x[r * cols + c] - m;
      acc += d * d;
    }
    const float squares = BlockSum(acc, part);
    if (threadIdx.x == 0) {
      mean[c] = m;
      var[c] = rows > 0 ? squares / static_cast<float>(rows) : 0.f;
    }
  }
}

__global__ void InverseSqrtK(const float* a, float eps, float* out, int64_t n) {
  TFJOB_FOR(i, n) out[i] = 1.f / sqrtf(a[i] + eps);
}

}  // namespace

int Axpy(int64_t n, float alpha, const float* x, float* y, void* stream) {
  if (n > 0) AxpyK<<<Blocks(n), kThreads, 0, S(stream)>>>(n, alpha, x, y);
  return Done();
}

int Fill(float* p, int64_t n, float value, void* stream) {
  if (n > 0) FillK<<<Blocks(n), kThreads, 0, S(stream)>>>(p, n, value);
  return Done();
}

int Unary(int op, const float* a, float* out, int64_t n, void* stream) {
  if (n > 0) UnaryK<<<Blocks(n), kThreads, 0, S(stream)>>>(op, a, out, n);
  return Done();
}

int Binary(int op, const float* a, const float* b, float* out, int64_t n, int64_t bn, void* stream) {
  if (n > 0) BinaryK<<<Blocks(n), kThreads, 0, S(stream)>>>(op, a, b, out, n, bn);
  return Done();
}

int Scale(const float* a, float s, float* out, int64_t n, void* stream) {
  if (n > 0) ScaleK<<<Blocks(n), kThreads, 0, S(stream)>>>(a, s, out, n);
  return Done();
}

int Transpose(const float* a, float* out, int64_t rows, int64_t cols, void* stream) {
  if (rows * cols > 0) TransposeK<<<Blocks(rows * cols), kThreads, 0, S(stream)>>>(a, out, rows, cols);
  return Done();
}

int BiasAdd(float* y, const float* bias, int64_t rows, int64_t cols, void* stream) {
  if (rows * cols > 0) BiasAddK<<<Blocks(rows * cols), kThreads, 0, S(stream)>>>(y, bias, rows, cols);
  return Done();
}

int Softmax(const float* a, float* out, int64_t rows, int64_t cols, bool log, void* stream) {
  if (rows > 0 && cols > 0) SoftmaxK<<<Blocks(rows), kThreads, 0, S(stream)>>>(a, out, rows, cols, log);
  return Done();
}

int ActivationGrad(int kind, const float* y, float* g, int64_t rows, int64_t cols, void* stream) {
  const int64_t n = rows * cols;
  if (n == 0) return Done();
  if (kind == 3) {
    SoftmaxGradK<<<Blocks(rows), kThreads, 0, S(stream)>>>(y, g, rows, cols);
  } else {
    ActivationGradK<<<Blocks(n), kThreads, 0, S(stream)>>>(kind, y, g, n);
  }
  return Done();
}

int ReduceAxis(int op, const float* a, float* out, int64_t outer, int64_t n, int64_t inner, void* stream) {
  const int64_t outputs = outer * inner;
  if (outputs == 0) return Done();
  if (n <= 64) {
    ReduceSerialK<<<Blocks(outputs), kThreads, 0, S(stream)>>>(op, a, out, outer, n, inner);
  } else {
    const int64_t blocks = outputs < 8192 ? outputs : 8192;
    ReduceBlockK<<<static_cast<unsigned>(blocks), kThreads, 0, S(stream)>>>(op, a, out, outer, n, inner);
  }
  return Done();
}

int ArgMax(const float* a, int64_t* out, int64_t rows, int64_t cols, void* stream) {
  if (rows > 0 && cols > 0) ArgMaxK<<<Blocks(rows), kThreads, 0, S(stream)>>>(a, out, rows, cols);
  return Done();
}

int Gather(const float* params, const int64_t* ids, float* out, int64_t nids, int64_t rows, int64_t row, void* stream) {
  if (nids * row > 0 && rows > 0)
    GatherK<<<Blocks(nids * row), kThreads, 0, S(stream)>>>(params, ids, out, nids, rows, row);
  return Done();
}

int ScatterAdd(float* ref, const int64_t* ids, const float* updates, int64_t nids, int64_t rows, int64_t row,
               void* stream) {
  if (nids * row > 0 && rows > 0) {
    ScatterAddK<<<Blocks(nids * row), kThreads, 0, S(stream)>>>(ref, ids, updates, nids, rows, row);
  }
  return Done();
}

namespace {

__global__ void ToBfloat16K(const float* x, uint16_t* out, int64_t n) {
  TFJOB_FOR(i, n) out[i] = math::Bfloat16Bits(x[i]);
}

__global__ void ToHalfK(const float* x, uint16_t* out, int64_t n) {
  TFJOB_FOR(i, n) out[i] = __half_as_ushort(__float2half_rn(x[i]));
}

}  // namespace

int ToLowPrecision(bool bfloat16, const float* x, uint16_t* out, int64_t n, void* stream) {
  if (n <= 0) return Done();
  if (bfloat16) {
    ToBfloat16K<<<Blocks(n), kThreads, 0, S(stream)>>>(x, out, n);
  } else {
    ToHalfK<<<Blocks(n), kThreads, 0, S(stream)>>>(x, out, n);
  }
  return Done();
}

int CastToInt(const float* a, int64_t* out, int64_t n, void* stream) {
  if (n > 0) CastToIntK<<<Blocks(n), kThreads, 0, S(stream)>>>(a, out, n);
  return Done();
}

int CastToFloat(const int64_t* a, float* out, int64_t n, void* stream) {
  if (n > 0) CastToFloatK<<<Blocks(n), kThreads, 0, S(stream)>>>(a, out, n);
  return Done();
}

int EmbeddingForward(const float* table, const int64_t* ids, float* out, int64_t out_rows, int64_t bag, bool combine,
                     float scale, int64_t dim, int64_t vocab, void* stream) {
  if (out_rows * dim > 0 && vocab > 0) {
    EmbeddingForwardK<<<Blocks(out_rows * dim), kThreads, 0, S(stream)>>>(table, ids, out, out_rows, bag, combine,
                                                                          scale, dim, vocab);
  }
  return Done();
}

int EmbeddingBackward(const float* dy, const int64_t* positions, const int64_t* offsets, int64_t k, int64_t divisor,
                      float scale, int64_t dim, float* values, void* stream) {
  if (k * dim > 0) {
    EmbeddingBackwardK<<<Blocks(k * dim), kThreads, 0, S(stream)>>>(dy, positions, offsets, k, divisor, scale, dim,
                                                                    values);
  }
  return Done();
}

int Loss(int loss, bool from_logits, const float* pred, const float* target, float* grad, int64_t rows, int64_t cols,
         float* scratch, float* stats, int64_t slot, void* stream) {
  if (rows == 0) return Done();
  LossRowsK<<<Blocks(rows), kThreads, 0, S(stream)>>>(loss, from_logits, pred, target, grad, rows, cols, scratch);
  // MSE and BCE average over every element, cross-entropy over rows.
  const float denominator = loss == 2 ? static_cast<float>(rows) : static_cast<float>(rows * cols);
  FoldK<<<1, kThreads, 0, S(stream)>>>(scratch, rows, denominator, static_cast<float>(rows), static_cast<float>(rows),
                                       stats, slot);
  return Done();
}

int Metric(int metric, bool logits, const float* pred, const float* target, int64_t rows, int64_t cols, float* scratch,
           float* stats, int64_t slot, void* stream) {
  if (rows == 0) return Done();
  MetricRowsK<<<Blocks(rows), kThreads, 0, S(stream)>>>(metric, logits, pred, target, rows, cols, scratch);
  const float counted = metric == 0 ? static_cast<float>(rows) : static_cast<float>(rows * cols);
  FoldK<<<1, kThreads, 0, S(stream)>>>(scratch, rows, 0.f, 1.f, counted, stats, slot);
  return Done();
}

int OptimizerDense(const math::Opt& o, float* w, const float* g, float* s0, float* s1, float* s2, int64_t n,
                   void* stream) {
  if (n > 0) OptimizerDenseK<<<Blocks(n), kThreads, 0, S(stream)>>>(o, w, g, s0, s1, s2, n);
  return Done();
}

int OptimizerRows(const math::Opt& o, float* w, const int64_t* ids, const float* values, float* s0, float* s1,
                  float* s2, int64_t k, int64_t rows, int64_t row, void* stream) {
  if (k * row > 0 && rows > 0) {
    OptimizerRowsK<<<Blocks(k * row), kThreads, 0, S(stream)>>>(o, w, ids, values, s0, s1, s2, k, rows, row);
  }
  return Done();
}

int OptimizerMasked(const math::Opt& o, float* w, const float* g, const float* mask, float* s0, float* s1, float* s2,
                    int64_t rows, int64_t row, void* stream) {
  if (rows * row > 0) {
    OptimizerMaskedK<<<Blocks(rows * row), kThreads, 0, S(stream)>>>(o, w, g, mask, s0, s1, s2, rows, row);
  }
  return Done();
}

int Im2Col(const math::Window& g, const float* x, float* patches, void* stream) {
  const int64_t n = g.n * g.oh * g.ow * g.kh * g.kw * g.c;
  if (n > 0) Im2ColK<<<Blocks(n), kThreads, 0, S(stream)>>>(g, x, patches, n);
  return Done();
}

int Col2Im(const math::Window& g, const float* patches, float* dx, void* stream) {
  const int64_t n = g.n * g.h * g.w * g.c;
  if (n > 0) Col2ImK<<<Blocks(n), kThreads, 0, S(stream)>>>(g, patches, dx, n);
  return Done();
}

int Pool2D(const math::Window& g, bool max, const float* x, float* y, int64_t* arg, void* stream) {
  const int64_t n = g.n * g.oh * g.ow * g.c;
  if (n > 0) Pool2DK<<<Blocks(n), kThreads, 0, S(stream)>>>(g, max, x, y, arg, n);
  return Done();
}

int Pool2DBackward(const math::Window& g, bool max, const float* dy, const int64_t* arg, float* dx, void* stream) {
  const int64_t n = g.n * g.h * g.w * g.c;
  if (n > 0) Pool2DGradK<<<Blocks(n), kThreads, 0, S(stream)>>>(g, max, dy, arg, dx, n);
  return Done();
}

int BroadcastAxis(const float* a, float* out, int64_t outer, int64_t n, int64_t inner, float scale, void* stream) {
  const int64_t total = outer * n * inner;
  if (total > 0) BroadcastAxisK<<<Blocks(total), kThreads, 0, S(stream)>>>(a, out, outer, n, inner, scale);
  return Done();
}

int Moments(const float* x, float* mean, float* var, int64_t rows, int64_t cols, void* stream) {
  if (cols > 0) {
    const int64_t blocks = cols < 8192 ? cols : 8192;
    MomentsK<<<static_cast<unsigned>(blocks), kThreads, 0, S(stream)>>>(x, mean, var, rows, cols);
  }
  return Done();
}

int InverseSqrt(const float* a, float eps, float* out, int64_t n, void* stream) {
  if (n > 0) InverseSqrtK<<<Blocks(n), kThreads, 0, S(stream)>>>(a, eps, out, n);
  return Done();
}

}  // namespace tfjob::gpu::kernels
