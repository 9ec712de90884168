// The runtime's exit codes: the contract between tfjob-runtime and whatever
// restarts it (the operator's ExitCode restart policy, Kubeflow's rule that
// codes 1-127 are permanent and 128 and above retryable; Slurm; the local
// launchers). docs/fault-tolerance.md says what each means for a job.
//
// Pure constants; thread-safe.
#pragma once

#include "common/signals.h"

namespace tfjob::contract {

// Training (or the role's work) is complete.
inline constexpr int kExitSuccess = 0;
// Any failure not below: permanent under the ExitCode policy.
inline constexpr int kExitFailure = 1;
// Bad input found before any work (a flag, TF_CONFIG, a model or data
// file), or input a worker found bad once work began: permanent, and the
// one line on stderr names it.
inline constexpr int kExitBadInput = 2;
// A signal (SIGTERM: a pod deleted or preempted) stopped the task before
// its work was done: 143, as if the signal had killed it, so the ExitCode
// policy restarts it. Defined beside the signal handling in common/.
inline constexpr int kExitStopped = tfjob::kExitStopped;

// Kubeflow's ExitCode policy: which codes the operator restarts
// (training-operator's IsRetryableExitCode; 0xbeef, its code for a pod
// whose container never ran, included).
constexpr bool IsRetryableExitCode(int code) { return code >= 128; }

}  // namespace tfjob::contract
