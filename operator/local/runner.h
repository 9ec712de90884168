// `tfjob run MANIFEST.yaml`: a TFJob on this machine with no cluster, under
// the operator's own rules. The same pure planner decides; a process backend
// plays kubelet and API server: each pod is a child process running the
// tensorflow container's command and args with its env and a TF_CONFIG whose
// addresses are 127.0.0.1 ports (one per replica, stable across restarts).
// The runner binds each replica's port itself and keeps the listening
// socket for the whole run; every (re)start of the replica inherits it as
// fd 3 with TFJOB_LISTEN_FD=3 (services/base/ports.h), so no other process
// can take the port, even while the replica restarts.
// OnFailure / Always restart the process in place (a container restart, which
// backoffLimit counts); Never / ExitCode leave the pod Succeeded or Failed for
// the planner. Output lines are prefixed with the pod name; status
// transitions are printed; the state directory holds status.json (the TFJob
// status as the operator would write it), one <pod>.pid per live replica, and
// prometheus-targets.json (Prometheus file_sd: each replica's /metrics port;
// replicas get TFJOB_METRICS_PORT=0 and TFJOB_JOB_NAME, bind a port
// themselves and report it with a "metrics: serving on :P" line, which the
// runner echoes as "[tfjob] POD: metrics on 127.0.0.1:P"; [] once the run is
// over).
//
// While a replica is down its port answers connections with a reset, as a
// closed port would, so its peers never wait on it. Replicas die with the
// runner (PR_SET_PDEATHSIG), even when it is SIGKILLed.
//
// Failure: an invalid manifest prints the operator's validation message and
// returns 2; a command that cannot be executed fails its replica (exit 127,
// with the reason on its output) per its restart policy. Returns 0 when the
// job Succeeded, 1 when it Failed. Nothing is left running on return.
#pragma once

#include <atomic>
#include <chrono>
#include <iosfwd>
#include <string>

namespace tfjob::op::local {

struct RunOptions {
  std::string state_dir;  // "" -> a fresh directory under /tmp
  std::string bin_dir;    // commands without '/' are looked up here first, then on PATH
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
  std::chrono::milliseconds tick{100};
  std::chrono::seconds finish_grace{10};  // for processes still running when the job ends
  // Mutual TLS between the replicas: a PKI for this run (common/pki.h),
  // written to <state_dir>/tls (mode 0700; the key 0600), named by
  // TFJOB_TLS_DIR in every replica's environment, as the operator's
  // --task-tls mounts the job's Secret.
  bool task_tls = false;
  // Set (e.g. by a SIGTERM handler) to stop every replica and return 1.
  const std::atomic<bool>* stop = nullptr;
};

int RunJob(const std::string& manifest, const RunOptions& options);

}  // namespace tfjob::op::local
