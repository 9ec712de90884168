// The CPU's single-precision matrix product, for every layer and op that
// multiplies matrices on the host (Dense, the convolutions' patch products,
// the recurrent layers' input products, ops::MatMul):
//
//   C = op(A) * op(B) + beta * C,   row-major, op(X) = X or X^T
//
// with A [m, k] (stored [k, m] when transposed), B [k, n] (stored [n, k]),
// C [m, n], and leading dimensions (the distance between rows as stored)
// lda, ldb, ldc, so a column block of a wider matrix is a valid operand.
//
// Where it runs: oneDNN (Debian's libdnnl, the library TensorFlow computes
// with on CPUs) in builds that found it, where the machine has it
// (TFJOB_HAVE_DNNL, UseOneDnn): its matmul primitive for a batch's products
// that are not accumulated into (at most 64 rows, or a transposed A with an
// inner dimension of at most 64: a weight gradient), where it beat sgemm
// (1.53x on the MNIST CNN's dense input gradient, 1.12x on its forward pass;
// and an sgemm call right after a primitive ran about 80 us late, so a
// layer's products do not mix the two), its sgemm for the rest (see
// docs/architecture.md for the figures that chose it), else Eigen's
// general product (also in a oneDNN build when TFJOB_CPU_KERNELS=eigen is
// set, for benchmarks that compare the two). Both use the compute threads
// SetComputeThreads set (threads.h), from whichever thread calls.
//
// Thread-safety: reentrant; calls from several threads run independently.
// Failure: none at run time; dimensions are the caller's to check (an
// assertion guards the programmer's error of negative sizes).
#pragma once

#include <cstdint>

#include "services/tensor/precision.h"

namespace tfjob {

void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Gemm in a low precision (what Gemm calls when the thread's
// ComputePrecision is not float32; gemm_low.cc): operands rounded to `p`,
// float32 accumulation, the result rounded to `p`. bfloat16 runs on
// oneDNN's matmul where UseOneDnn; elsewhere, and for float16, the same
// numerics on float32 units.
void LowPrecisionGemm(Precision p, bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a,
                      int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// C = op(A) op(B) in float32 through oneDNN's matmul primitive (gemm_low.cc;
// one primitive per shape, cached per thread); false where the build or
// oneDNN has none, C then untouched. Gemm's route for the products of a
// batch's rows (below).
bool MatmulFloat32(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                   const float* b, int64_t ldb, float* c, int64_t ldc);

// The library Gemm (and conv2d.h's kernels) use: "oneDNN <version>" or
// "Eigen <version>".
const char* GemmLibrary();

// Whether oneDNN computes: a build with it, libdnnl present on this
// machine (it is opened on first use: onednn_library.h), and no
// UseEigenKernels() before the first kernel (decided then, once).
bool UseOneDnn();
// Eigen's products and the im2col convolution instead of oneDNN's
// (tfjob-runtime calls it for TFJOB_CPU_KERNELS=eigen at start-up). Call it
// before any kernel runs.
void UseEigenKernels();

}  // namespace tfjob
