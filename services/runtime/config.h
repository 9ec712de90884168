// tfjob-runtime's configuration: everything it takes from its environment
// (contract/env.h lists every variable) and its one global flag, read once at
// start-up (RunMain), validated, and passed down as typed values. Nothing
// below the runtime's entry point reads the environment; this file's
// ProcessEnv is the runtime's only getenv.
//
// Pure values; the Read* functions are reentrant (they read files the
// variables name: the task token file, the TLS directory, a kubeconfig).
// ApplyProcessSettings sets process-wide state in the tensor and PS
// libraries: call it once, before any kernel runs or client is made.
// Failure: INVALID_ARGUMENT naming the variable and quoting its value (the
// runtime exits 2 with that line, before any work).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "services/cluster/cluster.h"
#include "services/cluster/resolver.h"
#include "services/monitoring/runtime_metrics.h"
#include "services/rpc/auth.h"

namespace tfjob::runtime {

// The live process environment: what RunMain reads the configuration from.
cluster::Env ProcessEnv();

struct ProcessSettings {
  // TFJOB_CPU_KERNELS=eigen: Eigen's products and the im2col convolution
  // instead of oneDNN's (bench/roofline.sh compares the two).
  bool eigen_kernels = false;
  // TFJOB_CPU_KERNELS=direct: oneDNN's direct convolutions where Winograd
  // would apply (services/tensor/conv2d.h; bench/roofline.sh compares them).
  bool direct_convolutions = false;
  // TFJOB_FLOAT16_EMULATION=1: float16 layers computed in float32 and rounded
  // (services/tensor/precision.h), where no float16 path is built.
  bool float16_emulation = false;
  // TFJOB_PS_SHM=0: parameter-server payloads inline even on one host
  // (services/ps/shm.h).
  bool ps_shared_memory = true;
  // TFJOB_RUNTIME_SELF: what `tfjob-runtime local` starts for each task when
  // not /proc/self/exe (the GPU bundle's wrapper, scripts/gpu-bundle.sh);
  // "" for /proc/self/exe.
  std::string self_exe;
};

StatusOr<ProcessSettings> ReadProcessSettings(const cluster::Env& env);
void ApplyProcessSettings(const ProcessSettings& settings);

struct Timeouts {
  // TFJOB_CONNECT_TIMEOUT_SECONDS: how long the chief waits for peers that do
  // not answer yet (default 300).
  std::chrono::milliseconds connect{300000};
  // TFJOB_PS_TIMEOUT_SECONDS: once training runs, how long the chief waits
  // for a parameter server that stopped answering (default 30).
  std::chrono::milliseconds ps{30000};
};

StatusOr<Timeouts> ReadTimeouts(const cluster::Env& env);

// What a task of a cluster needs besides the program's own flags. `local`
// (which only launches tasks, each reading its own) does not read it.
struct RoleConfig {
  Timeouts timeouts;
  // TF_CONFIG, the Slurm step, or the Kubernetes resolver's settings.
  cluster::ResolverConfig resolver;
  // The job's token and TLS material (TFJOB_AUTH_TOKEN[_FILE], TFJOB_TLS_DIR).
  rpc::Credentials credentials;
  // TFJOB_LISTEN_FD: a listening socket a launcher opened at this task's port.
  std::optional<int> listen_fd;
  // TFJOB_PS_MAX_TENSOR_BYTES: the most one tensor (and one data-plane
  // request) may carry to this PS; nullopt: PsOptions' default (16 GiB).
  std::optional<uint64_t> ps_max_tensor_bytes;
  // TFJOB_POD_CREATED_MS, which the operator sets: when it created this pod
  // (ms since the epoch). A chief claims a generation inside its pod's range
  // (ChiefContext::pod_created_ms); 0 when unset (local runs, Slurm).
  uint64_t pod_created_ms = 0;
};

StatusOr<RoleConfig> ReadRoleConfig(const cluster::Env& env);

struct RuntimeConfig {
  ProcessSettings process;
  // --metrics-port (which wins) or TFJOB_METRICS_PORT, and TFJOB_JOB_NAME;
  // the task's identity is filled in once the cluster is resolved.
  runtime_metrics::ExporterConfig metrics;
  RoleConfig role;
};

}  // namespace tfjob::runtime
