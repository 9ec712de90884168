#include "services/runtime/config.h"

#include <cstdlib>
#include <limits>

#include "contract/env.h"
#include "services/base/ports.h"
#include "services/programs/program.h"
#include "services/ps/ps_client.h"
#include "services/tensor/conv2d.h"
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

// A whole number in 1..max, nullopt when unset; anything else is
// INVALID_ARGUMENT quoting the value, then "is not <meaning>".
StatusOr<std::optional<uint64_t>> ReadPositive(const cluster::Env& env, const char* name, uint64_t max,
                                               const std::string& meaning) {
  auto v = env(name);
  if (!v) return std::optional<uint64_t>();
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || n == 0 || (*v)[0] == '-' || n > max) {
    return InvalidArgument(std::string(name) + ": \"" + Elide(*v) + "\" is not " + meaning);
  }
  return std::optional<uint64_t>(n);
}

}  // namespace

cluster::Env ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

StatusOr<ProcessSettings> ReadProcessSettings(const cluster::Env& env) {
  ProcessSettings s;
  ASSIGN_OR_RETURN(std::string kernels,
                   OneOf(env, contract::kCpuKernelsEnv, {"eigen", "direct"},
                         "\"eigen\" or \"direct\" (unset: oneDNN where present, Winograd where it applies)"));
  s.eigen_kernels = kernels == "eigen";
  s.direct_convolutions = kernels == "direct";
  ASSIGN_OR_RETURN(std::string f16, OneOf(env, contract::kFloat16EmulationEnv, {"0", "1"}, "0 or 1"));
  s.float16_emulation = f16 == "1";
  ASSIGN_OR_RETURN(std::string shm, OneOf(env, contract::kPsSharedMemoryEnv, {"0", "1"}, "0 or 1"));
  s.ps_shared_memory = shm != "0";
  s.self_exe = env(contract::kRuntimeSelfEnv).value_or("");
  return s;
}

void ApplyProcessSettings(const ProcessSettings& settings) {
  if (settings.eigen_kernels) UseEigenKernels();
  if (settings.direct_convolutions) UseDirectConvolutionsOnly();
  SetFloat16Emulation(settings.float16_emulation);
  ps::SetSharedMemory(settings.ps_shared_memory);
}

StatusOr<Timeouts> ReadTimeouts(const cluster::Env& env) {
  Timeouts t;
  if (auto v = env(contract::kConnectTimeoutEnv)) {
    char* end = nullptr;
    const double secs = std::strtod(v->c_str(), &end);
    if (v->empty() || *end != '\0' || secs <= 0) {
      return InvalidArgument(std::string(contract::kConnectTimeoutEnv) + ": \"" + Elide(*v) +
                             "\" is not a positive number");
    }
    t.connect = std::chrono::milliseconds(static_cast<int64_t>(secs * 1000));
  }
  if (auto v = env(contract::kPsTimeoutEnv)) {
    char* end = nullptr;
    const double secs = std::strtod(v->c_str(), &end);
    if (v->empty() || *end != '\0' || !(secs > 0) || secs > 86400) {
      return InvalidArgument(std::string(contract::kPsTimeoutEnv) + ": \"" + Elide(*v) +
                             "\" is not a number of seconds in (0, 86400]");
    }
    t.ps = std::chrono::milliseconds(static_cast<int64_t>(secs * 1000));
  }
  return t;
}

StatusOr<RoleConfig> ReadRoleConfig(const cluster::Env& env) {
  RoleConfig c;
  ASSIGN_OR_RETURN(c.timeouts, ReadTimeouts(env));
  ASSIGN_OR_RETURN(c.resolver, cluster::ReadResolverConfig(env));
  ASSIGN_OR_RETURN(c.credentials, rpc::CredentialsFromEnv(env));
  ASSIGN_OR_RETURN(c.listen_fd, base::InheritedListenerFd(env));
  ASSIGN_OR_RETURN(c.ps_max_tensor_bytes,
                   ReadPositive(env, contract::kPsMaxTensorBytesEnv, std::numeric_limits<uint64_t>::max(),
                                "a positive number of bytes"));
  ASSIGN_OR_RETURN(auto created, ReadPositive(env, contract::kPodCreatedEnv, programs::kMaxPodCreatedMs,
                                              "a time in milliseconds since the epoch (the operator sets it)"));
  c.pod_created_ms = created.value_or(0);
  return c;
}

}  // namespace tfjob::runtime
