#include "services/tensor/precision.h"

#include <cpuid.h>
#include <immintrin.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "services/tensor/gemm.h"

namespace tfjob {
namespace {

thread_local Precision current = Precision::kFloat32;

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float FromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

float RoundBfloat16(float x) { return FromBfloat16(ToBfloat16(x)); }

// float16's nearest value, in float32 arithmetic: 11 significant bits,
// exponents down to 2^-14 (below, steps of 2^-24), infinity from 65520 on.
float RoundFloat16(float x) {
  if (!std::isfinite(x)) return x;
  const float a = std::fabs(x);
  if (a >= 65520.f) return std::copysign(INFINITY, x);
  if (a == 0.f) return x;
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  // The spacing of float16 values near a: 2^(e-11), never below 2^-24.
  const int exp = e - 11 < -24 ? -24 : e - 11;
  const float step = std::ldexp(1.f, exp);
  return std::copysign(std::nearbyint(a / step) * step, x);  // ties to even (default rounding mode)
}

// With AVX512-BF16, 16 values per instruction (VCVTNEPS2BF16 rounds to
// nearest even and keeps NaNs NaNs, as the scalar code): the conversions
// of a layer's operands cost about as much as a small product otherwise.
__attribute__((target("avx512f,avx512bf16"))) int64_t ToBfloat16Wide(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh b = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), reinterpret_cast<const __m256i&>(b));
  }
  return i;
}

__attribute__((target("avx512f,avx512bf16"))) int64_t RoundBfloat16Wide(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh b = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    const __m512i wide = _mm512_slli_epi32(_mm512_cvtepu16_epi32(reinterpret_cast<const __m256i&>(b)), 16);
    _mm512_storeu_ps(x + i, _mm512_castsi512_ps(wide));
  }
  return i;
}

bool HasAvx512Bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}

}  // namespace

std::string_view PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFloat32: return "float32";
    case Precision::kBfloat16: return "bfloat16";
    case Precision::kFloat16: return "float16";
  }
  return "float32";
}

std::string_view PolicyName(Precision p) {
  switch (p) {
    case Precision::kFloat32: return "float32";
    case Precision::kBfloat16: return "mixed_bfloat16";
    case Precision::kFloat16: return "mixed_float16";
  }
  return "float32";
}

StatusOr<Precision> ParsePrecision(std::string_view name) {
  if (name == "float32") return Precision::kFloat32;
  if (name == "mixed_bfloat16") return Precision::kBfloat16;
  if (name == "mixed_float16") return Precision::kFloat16;
  return InvalidArgument(
      "dtype policy \"" + std::string(name) +
      "\" is not supported (only float32, mixed_bfloat16 and mixed_float16: variables stay float32)");
}

Precision ComputePrecision() { return current; }

PrecisionScope::PrecisionScope(Precision p) : previous_(current) { current = p; }
PrecisionScope::~PrecisionScope() { current = previous_; }

bool CpuHasBfloat16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  const bool amx_bf16 = (d >> 22) & 1u;
  __cpuid_count(7, 1, a, b, c, d);
  const bool avx512_bf16 = (a >> 5) & 1u;
  return avx512_bf16 || amx_bf16;
}

namespace {
std::atomic<bool> g_float16_emulation{false};
}  // namespace

void SetFloat16Emulation(bool on) { g_float16_emulation.store(on, std::memory_order_relaxed); }
bool Float16Emulated() { return g_float16_emulation.load(std::memory_order_relaxed); }

Status BfloatPath() {
  if (!CpuHasBfloat16()) {
    return FailedPrecondition("bfloat16 needs a CPU with AVX512-BF16 or AMX; this one has neither");
  }
  if (!UseOneDnn()) {
    return FailedPrecondition(std::string("bfloat16 computes through oneDNN, and the CPU kernels here are ") +
                              GemmLibrary());
  }
  return Status::Ok();
}

Status Float16Path() {
  if (Float16Emulated()) return Status::Ok();
  return FailedPrecondition(
      "float16 needs a float16 matrix path: this CPU runtime has none (no AVX512-FP16 kernels; a GPU of compute "
      "capability 7.0 or higher has one, with --device gpu); use --mixed-precision bfloat16 (or "
      "TFJOB_FLOAT16_EMULATION=1 for float16's numerics without its speed)");
}

namespace {
std::atomic<GpuPathCheck> g_gpu_path_check{nullptr};
}  // namespace

void RegisterGpuPathCheck(GpuPathCheck check) { g_gpu_path_check.store(check, std::memory_order_release); }

Status GpuPathFor(Precision p, int device) {
  if (p == Precision::kFloat32) return Status::Ok();
  if (GpuPathCheck check = g_gpu_path_check.load(std::memory_order_acquire)) return check(p, device);
  return FailedPrecondition(std::string(PrecisionName(p)) + " on a GPU needs the CUDA backend, which this build lacks");
}

Status CpuPathFor(Precision p) {
  switch (p) {
    case Precision::kFloat32: return Status::Ok();
    case Precision::kBfloat16: return BfloatPath();
    case Precision::kFloat16: return Float16Path();
  }
  return Status::Ok();
}

uint16_t ToBfloat16(float x) {
  uint32_t u = Bits(x);
  if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x40u);  // stays a (quiet) NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float FromBfloat16(uint16_t b) { return FromBits(static_cast<uint32_t>(b) << 16); }

void ToBfloat16(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = HasAvx512Bf16() ? ToBfloat16Wide(x, out, n) : 0; i < n; ++i) {
    uint32_t u = Bits(x[i]);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    // NaN (exponent all ones, mantissa non-zero) must not round into infinity.
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    out[i] = static_cast<uint16_t>(nan ? ((u >> 16) | 0x40u) : rounded);
  }
}

float RoundTo(Precision p, float x) {
  switch (p) {
    case Precision::kFloat32: return x;
    case Precision::kBfloat16: return RoundBfloat16(x);
    case Precision::kFloat16: return RoundFloat16(x);
  }
  return x;
}

void RoundTo(Precision p, float* x, int64_t n) {
  if (p == Precision::kBfloat16) {
    for (int64_t i = HasAvx512Bf16() ? RoundBfloat16Wide(x, n) : 0; i < n; ++i) {
      const uint32_t u = Bits(x[i]);
      const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
      const uint32_t r = ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16;
      x[i] = nan ? x[i] : FromBits(r);
    }
  } else if (p == Precision::kFloat16) {
    for (int64_t i = 0; i < n; ++i) x[i] = RoundFloat16(x[i]);
  }
}

}  // namespace tfjob
