// Mixed precision, Keras' way: variables and everything sent between tasks
// stay float32; a layer whose dtype policy is mixed_bfloat16 or
// mixed_float16 computes its matrix products and convolutions in the low
// precision (operands rounded to it, products accumulated in float32, the
// result rounded to it, as a bfloat16 / float16 tensor would hold it).
// Elementwise work, softmax, losses and BatchNormalization's statistics
// stay float32, as Keras keeps them.
//
// The precision a kernel computes in is the calling thread's
// (ComputePrecision), set by the model around each layer call with a
// PrecisionScope: a replica thread's layers never see another thread's.
//
// Where it runs:
// - bfloat16: oneDNN's matmul and convolutions with bfloat16 operands on a
//   CPU with AVX512-BF16 or AMX (BfloatPath says why not elsewhere);
// - float16: no CPU this project runs on has a float16 matrix path
//   (AVX512-FP16 and oneDNN 3's use of it are missing): Float16Path
//   refuses, unless TFJOB_FLOAT16_EMULATION=1 asks for float16's numerics
//   on float32 units (rounded operands and results, overflow to infinity
//   at 65504): what the tests use to check loss scaling, with none of
//   float16's speed;
// - on a GPU, both: cuBLAS on tensor cores (services/gpu), bfloat16 from
//   compute capability 8.0, float16 from 7.0 (GpuPathFor).
//
// Thread-safety: the scope is per thread; the conversions are reentrant.
// Failure: BfloatPath / Float16Path return FAILED_PRECONDITION naming what
// is missing; nothing else fails.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tfjob {

enum class Precision { kFloat32, kBfloat16, kFloat16 };

// "float32", "bfloat16", "float16".
std::string_view PrecisionName(Precision p);
// Keras' policy names: "float32", "mixed_bfloat16", "mixed_float16".
std::string_view PolicyName(Precision p);
// From a flag ("bfloat16", "float16", "float32") or a Keras policy name
// ("mixed_bfloat16", "mixed_float16"). INVALID_ARGUMENT otherwise; Keras'
// pure "bfloat16" / "float16" policies (variables in the low precision
// too) are refused with that reason.
StatusOr<Precision> ParsePrecision(std::string_view name);

// The calling thread's compute precision (float32 unless a scope says
// otherwise).
Precision ComputePrecision();

class PrecisionScope {
 public:
  explicit PrecisionScope(Precision p);
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  Precision previous_;
};

// Whether this process can compute in `p` on the CPU: OK for float32
// always; FAILED_PRECONDITION naming what is missing otherwise.
Status BfloatPath();
Status Float16Path();
Status CpuPathFor(Precision p);
// Whether GPU `device` can compute in `p`: the CUDA backend registers the
// answer (services/gpu: RegisterBackend), which names the device and its
// compute capability when it cannot. Without one registered (a build
// without CUDA) FAILED_PRECONDITION for bfloat16 and float16. The check is
// a plain function pointer, set once before training starts.
using GpuPathCheck = Status (*)(Precision p, int device);
void RegisterGpuPathCheck(GpuPathCheck check);
Status GpuPathFor(Precision p, int device);
// Whether float16 is emulated: off unless SetFloat16Emulation(true)
// (tfjob-runtime sets it from TFJOB_FLOAT16_EMULATION=1 at start-up).
// Process-wide; set it before training starts.
void SetFloat16Emulation(bool on);
bool Float16Emulated();
// Whether the CPU has AVX512-BF16 or AMX-BF16 (cpuid).
bool CpuHasBfloat16();

// Round to nearest even, NaN kept a NaN.
uint16_t ToBfloat16(float x);
float FromBfloat16(uint16_t b);
void ToBfloat16(const float* x, uint16_t* out, int64_t n);
// Every value replaced by the nearest value of `p` (float16: overflow to
// infinity beyond 65504, subnormals kept); a no-op for float32.
void RoundTo(Precision p, float* x, int64_t n);
float RoundTo(Precision p, float x);

}  // namespace tfjob
