// The cuBLAS functions this build calls, forwarding to libcublas opened on
// first use (cublas_library.h). Each keeps cuBLAS' own declaration (from
// cublas_v2.h), so the callers are unchanged; a function added to the
// callers must be added here, or the link fails naming it.
#include "services/gpu/cublas_library.h"

#include <cublas_v2.h>

#include "common/shared_library.h"

#define TFJOB_STR2(x) #x
#define TFJOB_STR(x) TFJOB_STR2(x)

namespace tfjob::gpu {

// Used by the forwarders below, outside the namespace.
SharedLibrary& CublasLibrary() {
  static SharedLibrary library("cuBLAS", {"libcublas.so." TFJOB_STR(CUBLAS_VER_MAJOR)}, TFJOB_CUDA_LIBRARY_DIR);
  return library;
}

namespace {

constexpr const char* kFunctions[] = {"cublasCreate_v2", "cublasSetStream_v2", "cublasSetMathMode",    "cublasSgemm_v2",
                                      "cublasSgemv_v2",  "cublasGemmEx",       "cublasGetStatusString"};

}  // namespace

Status LoadCublas() {
  for (const char* f : kFunctions) RETURN_IF_ERROR(CublasLibrary().SymbolStatus(f));
  return Status::Ok();
}

}  // namespace tfjob::gpu

// cuBLAS' `name`, forwarded.
#define TFJOB_CUBLAS_FORWARD(ret, name, params, args, fallback) \
  TFJOB_FORWARD_TO_LIBRARY(tfjob::gpu::CublasLibrary(), ret, name, params, args, fallback)

extern "C" {

TFJOB_CUBLAS_FORWARD(cublasStatus_t, cublasCreate_v2, (cublasHandle_t * handle), (handle),
                     CUBLAS_STATUS_NOT_INITIALIZED)
TFJOB_CUBLAS_FORWARD(cublasStatus_t, cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream), (handle, stream),
                     CUBLAS_STATUS_NOT_INITIALIZED)
TFJOB_CUBLAS_FORWARD(cublasStatus_t, cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode), (handle, mode),
                     CUBLAS_STATUS_NOT_INITIALIZED)
TFJOB_CUBLAS_FORWARD(cublasStatus_t, cublasSgemm_v2,
                     (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                      const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta, float* C,
                      int ldc),
                     (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc),
                     CUBLAS_STATUS_NOT_INITIALIZED)
TFJOB_CUBLAS_FORWARD(cublasStatus_t, cublasSgemv_v2,
                     (cublasHandle_t handle, cublasOperation_t trans, int m, int n, const float* alpha, const float* A,
                      int lda, const float* x, int incx, const float* beta, float* y, int incy),
                     (handle, trans, m, n, alpha, A, lda, x, incx, beta, y, incy), CUBLAS_STATUS_NOT_INITIALIZED)
// Mixed precision's products (bfloat16 / float16 operands, float32 result).
// Written out: cublas_api.h also declares a C++ overload of cublasGemmEx
// (a cudaDataType compute type), which the macro's decltype(&name) cannot
// choose between.
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  using Fn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  static const auto f = reinterpret_cast<Fn>(tfjob::gpu::CublasLibrary().Symbol("cublasGemmEx"));
  return f ? f(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc, computeType,
               algo)
           : CUBLAS_STATUS_NOT_INITIALIZED;
}
TFJOB_CUBLAS_FORWARD(const char*, cublasGetStatusString, (cublasStatus_t status), (status), "cuBLAS is not loaded")

}  // extern "C"
