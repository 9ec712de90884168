// CUDA kernels behind a plain C++17 interface, so kernels.cu does not see the
// project's C++20 headers. Pointers are device pointers; `stream` is a
// cudaStream_t. Each function queues its kernels on the stream and returns
// the launch's cudaError_t as an int (0 on success); none waits for the
// device. Sizes are element counts. The backend (cuda_backend.cc) checks
// shapes before calling; kernels never read or write outside the sizes they
// are given (indices are clamped into range).
#pragma once

#include <cstdint>

#include "services/gpu/kernel_math.h"

namespace tfjob::gpu::kernels {

// y[i] += alpha * x[i]
int Axpy(int64_t n, float alpha, const float* x, float* y, void* stream);
int Fill(float* p, int64_t n, float value, void* stream);

int Unary(int op, const float* a, float* out, int64_t n, void* stream);
// b has bn elements: bn == n (same shape), 1 (scalar) or a divisor of n
// (suffix broadcast: b repeats over a's leading dims).
int Binary(int op, const float* a, const float* b, float* out, int64_t n, int64_t bn, void* stream);
int Scale(const float* a, float s, float* out, int64_t n, void* stream);
int Transpose(const float* a, float* out, int64_t rows, int64_t cols, void* stream);
int BiasAdd(float* y, const float* bias, int64_t rows, int64_t cols, void* stream);
// Row softmax (or log-softmax), max subtracted.
int Softmax(const float* a, float* out, int64_t rows, int64_t cols, bool log, void* stream);
// kind: 0 relu, 1 sigmoid, 2 tanh, 3 softmax (rows x cols).
int ActivationGrad(int kind, const float* y, float* g, int64_t rows, int64_t cols, void* stream);
// op: 0 sum, 1 mean, 2 max; a is [outer, n, inner], out [outer, inner].
int ReduceAxis(int op, const float* a, float* out, int64_t outer, int64_t n, int64_t inner, void* stream);
int ArgMax(const float* a, int64_t* out, int64_t rows, int64_t cols, void* stream);
int Gather(const float* params, const int64_t* ids, float* out, int64_t nids, int64_t rows, int64_t row, void* stream);
int ScatterAdd(float* ref, const int64_t* ids, const float* updates, int64_t nids, int64_t rows, int64_t row,
               void* stream);
// Mixed precision's operands: x rounded to nearest even into bfloat16
// (math::Bfloat16Bits) or float16 (__float2half_rn: past 65504 infinite),
// each value's 16 bits in out[i].
int ToLowPrecision(bool bfloat16, const float* x, uint16_t* out, int64_t n, void* stream);
int CastToInt(const float* a, int64_t* out, int64_t n, void* stream);
int CastToFloat(const int64_t* a, float* out, int64_t n, void* stream);

int EmbeddingForward(const float* table, const int64_t* ids, float* out, int64_t out_rows, int64_t bag, bool combine,
                     float scale, int64_t dim, int64_t vocab, void* stream);
int EmbeddingBackward(const float* dy, const int64_t* positions, const int64_t* offsets, int64_t k, int64_t divisor,
                      float scale, int64_t dim, float* values, void* stream);

// NHWC windows (kernel_math.h's Window; one thread per output element).
int Im2Col(const math::Window& g, const float* x, float* patches, void* stream);
int Col2Im(const math::Window& g, const float* patches, float* dx, void* stream);
// arg may be null for average pooling.
int Pool2D(const math::Window& g, bool max, const float* x, float* y, int64_t* arg, void* stream);
int Pool2DBackward(const math::Window& g, bool max, const float* dy, const int64_t* arg, float* dx, void* stream);
// out[p, k, q] = scale * a[p, q] for k in [0, n).
int BroadcastAxis(const float* a, float* out, int64_t outer, int64_t n, int64_t inner, float scale, void* stream);
// Per column of x [rows, cols]: mean and biased variance, a block per
// column, each a fixed-order tree (the same every run).
int Moments(const float* x, float* mean, float* var, int64_t rows, int64_t cols, void* stream);
int InverseSqrt(const float* a, float eps, float* out, int64_t n, void* stream);

// loss: 0 mse, 1 bce, 2 cce. grad may be null (evaluation). scratch holds
// `rows` floats. stats[slot] += mean loss * rows; stats[slot + 1] += rows.
int Loss(int loss, bool from_logits, const float* pred, const float* target, float* grad, int64_t rows, int64_t cols,
         float* scratch, float* stats, int64_t slot, void* stream);
// metric: 0 argmax match, 1 binary (threshold 0 for logits, else 0.5;
// target positive when >= 0.5), 2 exact equality. scratch holds `rows`
// floats. stats[slot] += correct; stats[slot + 1] += counted.
int Metric(int metric, bool logits, const float* pred, const float* target, int64_t rows, int64_t cols, float* scratch,
           float* stats, int64_t slot, void* stream);

int OptimizerDense(const math::Opt& o, float* w, const float* g, float* s0, float* s1, float* s2, int64_t n,
                   void* stream);
int OptimizerRows(const math::Opt& o, float* w, const int64_t* ids, const float* values, float* s0, float* s1,
                  float* s2, int64_t k, int64_t rows, int64_t row, void* stream);
int OptimizerMasked(const math::Opt& o, float* w, const float* g, const float* mask, float* s0, float* s1, float* s2,
                    int64_t rows, int64_t row, void* stream);

}  // namespace tfjob::gpu::kernels
