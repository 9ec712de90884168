// cuBLAS, opened on first use (common/shared_library.h): cublas_library.cc
// defines the cuBLAS functions this build calls, each forwarding to the
// library once it is open, so that a task of the GPU build that never
// touches a device never loads cuBLAS and cuBLASLt (about 150 MB resident).
// Thread-safety: any thread. Failure: LoadCublas says why the library
// cannot serve; a forwarded function returns CUBLAS_STATUS_NOT_INITIALIZED
// then.
#pragma once

#include "common/status.h"

namespace tfjob::gpu {

// OK once cuBLAS is open and has every function this build calls.
Status LoadCublas();

}  // namespace tfjob::gpu
