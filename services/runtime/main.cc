// tfjob-runtime: one binary for every role (see services/runtime/runtime.h).
#include <iostream>

#include "services/runtime/runtime.h"
#ifdef TFJOB_HAVE_CUDA
#include "services/gpu/gpu.h"
#endif

int main(int argc, char** argv) {
#ifdef TFJOB_HAVE_CUDA
  // Tensors may then live on GPUs (fit --device); CUDA itself starts only
  // when one is asked for.
  tfjob::gpu::RegisterBackend();
#endif
  return tfjob::runtime::RunMain({argv + 1, argv + argc}, tfjob::programs::BuiltinPrograms(), std::cout, std::cerr);
}
