// The GPU's sustained matrix-product rates, the limits bench/gpu_train.sh
// reports the wide MLP against: cuBLAS' cublasGemmEx on square N x N
// operands (default 8192), each type timed with CUDA events over
// --iterations products after --warmup ones, one JSON line each:
//   fp32  float32 operands, CUBLAS_COMPUTE_32F, no tensor cores
//         (CUBLAS_DEFAULT_MATH: what the backend's float32 MatMul runs)
//   tf32  float32 operands, CUBLAS_COMPUTE_32F_FAST_TF32 (tensor cores)
//   bf16  bfloat16 operands, float32 result and accumulation (the
//         backend's mixed_bfloat16 MatMul: services/gpu/cuda_backend.cc)
//   fp16  float16 operands, likewise (mixed_float16)
// A type the device has no tensor cores for (compute capability below 8.0
// for tf32 and bf16, 7.0 for fp16) prints a line with "skipped" and why.
// Operands are random values of magnitude 0.5..1 (zeros would run cooler
// and faster than a layer's data). Plain CUDA runtime and cuBLAS, no
// project library, so the GPU bundle carries it for a few kilobytes.
//
// usage: bench_gpu_gemm [--size N] [--warmup W] [--iterations I] [--device D]
// Exit status: 0 (also where no GPU is visible: "no GPU: ..." on stdout); 1
// when CUDA or cuBLAS fails (the error on stderr); 2 for a bad argument.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Options {
  int size = 8192, warmup = 3, iterations = 20, device = 0;
};

bool Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "bench_gpu_gemm: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

bool Check(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return true;
  std::fprintf(stderr, "bench_gpu_gemm: %s: %s\n", what, cublasGetStatusString(s));
  return false;
}

struct Type {
  const char* name;
  cudaDataType operand;
  cublasComputeType_t compute;
  int min_capability;  // major * 10 + minor
  size_t bytes;        // per operand element
};

// Random operands of magnitude 0.5..1 and random sign, as `t` stores them.
std::vector<uint8_t> RandomOperand(const Type& t, size_t n, uint64_t seed) {
  std::vector<uint8_t> out(n * t.bytes);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const uint32_t r = static_cast<uint32_t>(x >> 20), sign = static_cast<uint32_t>(x >> 63);
    if (t.bytes == 4) {
      const uint32_t bits = (sign << 31) | (126u << 23) | (r & 0x7fffffu);
      std::memcpy(out.data() + 4 * i, &bits, 4);
    } else {
      // bfloat16: 8 exponent bits (126: 0.5..1), 7 mantissa bits; float16:
      // 5 exponent bits (14: 0.5..1), 10 mantissa bits.
      const uint16_t bits = t.operand == CUDA_R_16BF ? static_cast<uint16_t>((sign << 15) | (126u << 7) | (r & 0x7fu))
                                                     : static_cast<uint16_t>((sign << 15) | (14u << 10) | (r & 0x3ffu));
      std::memcpy(out.data() + 2 * i, &bits, 2);
    }
  }
  return out;
}

// One type's rate; false when CUDA or cuBLAS failed (said on stderr).
bool Measure(const Options& o, const Type& t, cublasHandle_t blas, int capability, const std::string& device) {
  const int n = o.size;
  if (capability < t.min_capability) {
    std::printf(
        "{\"bench\": \"gpu_gemm\", \"type\": \"%s\", \"device\": \"%s\", \"skipped\": \"needs compute capability "
        "%d.%d, the device has %d.%d\"}\n",
        t.name, device.c_str(), t.min_capability / 10, t.min_capability % 10, capability / 10, capability % 10);
    return true;
  }
  const size_t elements = static_cast<size_t>(n) * n;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  bool ok = Check(cudaMalloc(&a, elements * t.bytes), "cudaMalloc") &&
            Check(cudaMalloc(&b, elements * t.bytes), "cudaMalloc") &&
            Check(cudaMalloc(&c, elements * sizeof(float)), "cudaMalloc");
  if (ok) {
    const std::vector<uint8_t> ha = RandomOperand(t, elements, 1), hb = RandomOperand(t, elements, 2);
    ok = Check(cudaMemcpy(a, ha.data(), ha.size(), cudaMemcpyHostToDevice), "cudaMemcpy") &&
         Check(cudaMemcpy(b, hb.data(), hb.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  const float alpha = 1.f, beta = 0.f;
  auto gemm = [&] {
    return cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, t.operand, n, b, t.operand, n, &beta, c,
                        CUDA_R_32F, n, t.compute, CUBLAS_GEMM_DEFAULT);
  };
  cudaEvent_t start = nullptr, stop = nullptr;
  ok = ok && Check(cudaEventCreate(&start), "cudaEventCreate") && Check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; ok && i < o.warmup; ++i) ok = Check(gemm(), "cublasGemmEx");
  ok = ok && Check(cudaDeviceSynchronize(), "warm-up") && Check(cudaEventRecord(start), "cudaEventRecord");
  for (int i = 0; ok && i < o.iterations; ++i) ok = Check(gemm(), "cublasGemmEx");
  ok = ok && Check(cudaEventRecord(stop), "cudaEventRecord") && Check(cudaEventSynchronize(stop), "timed products");
  float ms = 0;
  ok = ok && Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  if (ok) {
    const double seconds = ms / 1e3 / o.iterations;
    const double flops = 2.0 * n * static_cast<double>(n) * n;
    std::printf(
        "{\"bench\": \"gpu_gemm\", \"type\": \"%s\", \"device\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, "
        "\"iterations\": %d, \"seconds_per_product\": %.6g, \"tflops\": %.2f}\n",
        t.name, device.c_str(), n, n, n, o.iterations, seconds, flops / seconds / 1e12);
    std::fflush(stdout);
  }
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return ok;
}

bool ParseInt(const char* s, int lo, int hi, int& out) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) return false;
  out = static_cast<int>(v);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const char* usage = "usage: bench_gpu_gemm [--size N] [--warmup W] [--iterations I] [--device D]";
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--version") {
      std::printf("bench_gpu_gemm %s\n", TFJOB_VERSION);
      return 0;
    }
    const bool has_value = i + 1 < argc;
    bool ok = has_value;
    if (f == "--size" && has_value) {
      ok = ParseInt(argv[++i], 16, 32768, o.size);
    } else if (f == "--warmup" && has_value) {
      ok = ParseInt(argv[++i], 0, 1000, o.warmup);
    } else if (f == "--iterations" && has_value) {
      ok = ParseInt(argv[++i], 1, 100000, o.iterations);
    } else if (f == "--device" && has_value) {
      ok = ParseInt(argv[++i], 0, 1024, o.device);
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "bench_gpu_gemm: bad argument %s (%s)\n", f.c_str(), usage);
      return 2;
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= o.device) {
    std::printf("no GPU: no CUDA device %d is visible\n", o.device);
    return 0;
  }
  cudaDeviceProp p{};
  if (!Check(cudaSetDevice(o.device), "cudaSetDevice") ||
      !Check(cudaGetDeviceProperties(&p, o.device), "cudaGetDeviceProperties")) {
    return 1;
  }
  cublasHandle_t blas = nullptr;
  if (!Check(cublasCreate(&blas), "cublasCreate")) return 1;
  // Tensor cores only where the compute type asks for them: fp32 stays
  // float32 (TF32 is its own compute type here).
  if (!Check(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode")) return 1;
  const int capability = p.major * 10 + p.minor;
  const Type types[] = {{"fp32", CUDA_R_32F, CUBLAS_COMPUTE_32F, 0, 4},
                        {"tf32", CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 80, 4},
                        {"bf16", CUDA_R_16BF, CUBLAS_COMPUTE_32F, 80, 2},
                        {"fp16", CUDA_R_16F, CUBLAS_COMPUTE_32F, 70, 2}};
  bool ok = true;
  for (const Type& t : types) ok = Measure(o, t, blas, capability, p.name) && ok;
  cublasDestroy(blas);
  return ok ? 0 : 1;
}
