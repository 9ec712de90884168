// tfjob-runtime: one binary for every role (see services/runtime/runtime.h).
#include <iostream>

#include "services/runtime/runtime.h"
#ifdef TFJOB_HAVE_CUDA
#include "services/gpu/gpu.h"
#endif
#ifdef TFJOB_TCMALLOC
#include <gperftools/tcmalloc.h>

// tcmalloc is linked for the malloc it replaces (services/runtime/
// CMakeLists.txt); naming one of its functions keeps a linker that drops
// unused libraries (--as-needed, Ubuntu's default) from dropping it.
namespace {
[[maybe_unused]] const char* const allocator = tc_version(nullptr, nullptr, nullptr);
}  // namespace
#endif

int main(int argc, char** argv) {
#ifdef TFJOB_HAVE_CUDA
  // Tensors may then live on GPUs (fit --device); CUDA itself starts only
  // when one is asked for.
  tfjob::gpu::RegisterBackend();
#endif
  return tfjob::runtime::RunMain({argv + 1, argv + argc}, tfjob::programs::BuiltinPrograms(), std::cout, std::cerr);
}
