#include "services/runtime/settings.h"

#include "services/ps/ps_client.h"
#include "services/tensor/gemm.h"
#include "services/tensor/precision.h"

namespace tfjob::runtime {
namespace {

// A variable that is unset or empty takes its default; otherwise it must be
// one of `values`.
StatusOr<std::string> OneOf(const cluster::Env& env, const std::string& name, std::initializer_list<const char*> values,
                            const std::string& meaning) {
  const std::optional<std::string> v = env(name);
  if (!v || v->empty()) return std::string();
  for (const char* allowed : values) {
    if (*v == allowed) return *v;
  }
  return InvalidArgument(name + ": \"" + Elide(*v) + "\" is not " + meaning);
}

}  // namespace

StatusOr<ProcessSettings> ReadProcessSettings(const cluster::Env& env) {
  ProcessSettings s;
  ASSIGN_OR_RETURN(std::string kernels,
                   OneOf(env, "TFJOB_CPU_KERNELS", {"eigen"}, "\"eigen\" (unset: oneDNN where present)"));
  s.eigen_kernels = kernels == "eigen";
  ASSIGN_OR_RETURN(std::string f16, OneOf(env, "TFJOB_FLOAT16_EMULATION", {"0", "1"}, "0 or 1"));
  s.float16_emulation = f16 == "1";
  ASSIGN_OR_RETURN(std::string shm, OneOf(env, "TFJOB_PS_SHM", {"0", "1"}, "0 or 1"));
  s.ps_shared_memory = shm != "0";
  s.self_exe = env("TFJOB_RUNTIME_SELF").value_or("");
  return s;
}

void ApplyProcessSettings(const ProcessSettings& settings) {
  if (settings.eigen_kernels) UseEigenKernels();
  SetFloat16Emulation(settings.float16_emulation);
  ps::SetSharedMemory(settings.ps_shared_memory);
}

}  // namespace tfjob::runtime
