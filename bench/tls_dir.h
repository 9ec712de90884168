// A job's TLS material for one benchmark run (common/pki.h): a fresh CA and
// certificate written to a private temporary directory, removed when the
// object goes. Ownership: owns the directory. Failure: Status values.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

#include "common/pki.h"
#include "common/status.h"

namespace tfjob::bench {

class TlsDir {
 public:
  static StatusOr<std::unique_ptr<TlsDir>> Make() {
    const char* tmp = std::getenv("TMPDIR");
    std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/tfjob-bench-tls.XXXXXX";
    if (!mkdtemp(path.data())) return Unavailable("cannot make a directory for the TLS material");
    std::unique_ptr<TlsDir> d(new TlsDir(path));
    ASSIGN_OR_RETURN(pki::JobPki pem, pki::NewJobPki("bench"));
    RETURN_IF_ERROR(pki::WriteTlsDir(path, pem));
    return d;
  }
  ~TlsDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TlsDir(const TlsDir&) = delete;
  TlsDir& operator=(const TlsDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  explicit TlsDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace tfjob::bench
