// oneDNN, opened on first use (common/shared_library.h): onednn_library.cc
// defines the oneDNN C functions this build calls (directly, and through
// dnnl.hpp's wrappers), each forwarding to libdnnl once it is open. So a
// binary starts without libdnnl (the GPU bundle carries none, to stay under
// the GPU host's 64 MiB a copy), and its CPU kernels then compute with
// Eigen (gemm.h's UseOneDnn is false).
// Thread-safety: any thread. Failure: LoadOneDnn says why oneDNN cannot
// serve; a forwarded function returns dnnl_runtime_error (or null) then.
#pragma once

#include "common/status.h"

namespace tfjob {

// OK once libdnnl is open and has every function this build calls.
Status LoadOneDnn();

}  // namespace tfjob
