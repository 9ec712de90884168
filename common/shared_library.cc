#include "common/shared_library.h"

#include <dlfcn.h>

namespace tfjob {

SharedLibrary::SharedLibrary(std::string what, std::vector<std::string> file_names, std::string fallback_dir)
    : what_(std::move(what)), file_names_(std::move(file_names)), fallback_dir_(std::move(fallback_dir)) {}

Status SharedLibrary::Load() {
  std::call_once(once_, [this] {
    std::vector<std::string> tries = file_names_;
    if (!fallback_dir_.empty()) {
      for (const std::string& name : file_names_) tries.push_back(fallback_dir_ + "/" + name);
    }
    std::string reasons;
    for (const std::string& path : tries) {
      // RTLD_LOCAL: its symbols serve the lookups below, not the process.
      handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle_) return;
      const char* why = dlerror();
      reasons += std::string(reasons.empty() ? "" : "; ") + (why ? why : path + ": not loadable");
    }
    status_ = FailedPrecondition(what_ + " could not be loaded (" + reasons + ")");
  });
  return status_;
}

void* SharedLibrary::Symbol(const char* symbol) {
  if (!Load().ok()) return nullptr;
  return dlsym(handle_, symbol);
}

Status SharedLibrary::SymbolStatus(const char* symbol) {
  RETURN_IF_ERROR(Load());
  if (dlsym(handle_, symbol) == nullptr) {
    return FailedPrecondition(what_ + " has no " + symbol +
                              " (an older version than this build was compiled against?)");
  }
  return Status::Ok();
}

}  // namespace tfjob
