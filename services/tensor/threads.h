// Sets how many threads the CPU kernels use (Eigen's matrix products through
// OpenMP). Process-wide; call once at start-up, before kernels run.
#pragma once

namespace tfjob {

void SetComputeThreads(int n);
int ComputeThreads();

// OpenMP's thread count is per calling thread: a training thread other than
// the one that called SetComputeThreads would run OpenMP kernels (oneDNN's)
// on every core. Kernels call this first; cheap when it already matches.
void UseComputeThreadsHere();

}  // namespace tfjob
