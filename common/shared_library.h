// A shared library opened at run time, on first use, for the dependencies a
// binary needs only in some tasks: the GPU build's cuBLAS and NCCL
// (services/gpu/cublas_library.cc, services/collective/nccl_library.cc),
// which cost a CPU-only task of that build about 150 MB of memory and a
// third of a second of start-up when linked as ordinary dependencies.
//
// Ownership: the library stays loaded for the life of the process (a
// symbol handed out must stay callable). Thread-safety: every member may be
// called from any thread; the first call opens the library, once.
// Failure: a library that cannot be opened, or lacks a symbol, is a
// FAILED_PRECONDITION naming the library, the file names tried and the
// dynamic loader's reason; nothing aborts.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace tfjob {

class SharedLibrary {
 public:
  // `what` names the library in errors ("cuBLAS"). Each of `file_names` is
  // tried in turn as the dynamic loader searches for it (LD_LIBRARY_PATH,
  // the binary's RUNPATH, the ld.so cache), then inside `fallback_dir`
  // (the folder the build found it in) when that is not empty.
  SharedLibrary(std::string what, std::vector<std::string> file_names, std::string fallback_dir);

  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  // Opens the library if it is not open yet: OK once it is.
  Status Load();
  // The address of `symbol`, or null when the library or the symbol is
  // missing (LoadStatus then, or SymbolStatus, says why).
  void* Symbol(const char* symbol);
  Status SymbolStatus(const char* symbol);

 private:
  std::string what_;
  std::vector<std::string> file_names_;
  std::string fallback_dir_;
  std::once_flag once_;
  void* handle_ = nullptr;  // written once, under once_
  Status status_;           // likewise
};

}  // namespace tfjob

// Defines the C function `ret name params` (declared by the library's own
// header, so a signature that differs fails to compile) as a forwarder to
// the same-named symbol of `library` (an expression giving a
// SharedLibrary&), which is looked up once, on the first call; `fallback`
// is returned while the library or the symbol is missing.
#define TFJOB_FORWARD_TO_LIBRARY(library, ret, name, params, args, fallback)          \
  ret name params {                                                                   \
    static const auto f = reinterpret_cast<decltype(&name)>((library).Symbol(#name)); \
    return f ? f args : fallback;                                                     \
  }
