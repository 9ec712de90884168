// Per-job PKI for mutual TLS between a job's tasks: a fresh CA that exists
// for one job and one certificate, signed by it, that every task of that job
// presents both as server and as client. A task trusts only its own job's CA,
// so holding that certificate is what makes a peer a member of the job; the
// CA's private key is discarded once the certificate is signed, so nothing
// can issue a second one. The operator keeps the three PEM texts in the job's
// Secret; `tfjob run` and `tfjob-runtime local` make them per run.
//
// Thread-safety: reentrant. Failure: INTERNAL naming the OpenSSL step;
// UNAVAILABLE for files that cannot be written.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tfjob::pki {

// The name in every task certificate (DNS subjectAltName) and the name a
// client checks: the certificate says "a task of the job whose CA signed
// me", not which host, since a task's address changes with restarts.
inline constexpr const char* kTaskServerName = "tfjob-task";

// Where a task finds its TLS files: a directory (the job's Secret mounted
// as a volume) holding these three names, the Secret's keys.
inline constexpr const char* kTlsDirEnv = "TFJOB_TLS_DIR";
inline constexpr const char* kCaFile = "ca.crt";
inline constexpr const char* kCertFile = "tls.crt";
inline constexpr const char* kKeyFile = "tls.key";

struct JobPki {
  std::string ca_pem;    // the job's CA certificate (what peers are checked against)
  std::string cert_pem;  // the tasks' certificate, signed by that CA
  std::string key_pem;   // its private key (PKCS#8 PEM)
};

// A new CA with subject CN "tfjob CA <job>" and a certificate with CN
// "<job>" and DNS:tfjob-task, usable for serverAuth and clientAuth. EC P-256
// keys, SHA-256 signatures, valid from an hour ago (clock skew) for ten
// years: the CA lives as long as the job, and a certificate that expired
// under a long job would stop it.
StatusOr<JobPki> NewJobPki(std::string_view job);

// Writes ca.crt, tls.crt and tls.key (mode 0600) into `dir`, which must exist.
Status WriteTlsDir(const std::string& dir, const JobPki& pki);

// A new job's material (NewJobPki(job)) in a private directory made under
// $TMPDIR (else /tmp), removed with its files when the object goes: what
// `tfjob-runtime local --tls` and the benchmarks give their tasks.
// Ownership: owns the directory. Failure: Make's Status.
class TempTlsDir {
 public:
  static StatusOr<std::unique_ptr<TempTlsDir>> Make(std::string_view job);
  ~TempTlsDir();
  TempTlsDir(const TempTlsDir&) = delete;
  TempTlsDir& operator=(const TempTlsDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  explicit TempTlsDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// What NewJobPki is made of, for other certificates (the tests' PKI): a new
// EC P-256 key and a certificate for it with subject CN `cn`, X.509v3
// extensions by OpenSSL's names ({"basicConstraints", "critical,CA:TRUE"},
// {"subjectAltName", "IP:127.0.0.1"}, ...), valid from `not_before_s` to
// `not_after_s` seconds from now, with a 128-bit random serial number,
// signed by `issuer` (a CA's certificate and key) or, without one, by itself.
struct KeyPair {
  std::string cert_pem;
  std::string key_pem;
};
StatusOr<KeyPair> Issue(const std::string& cn, const std::vector<std::pair<std::string, std::string>>& extensions,
                        const KeyPair* issuer, long not_before_s, long not_after_s);

}  // namespace tfjob::pki
