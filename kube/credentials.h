// The credentials a RestClient sends, kept current while the operator runs,
// as client-go keeps them:
//   - a fixed bearer token;
//   - a token file (kubeconfig tokenFile, the in-cluster projected
//     service-account token): re-read when the file changes (its inode,
//     size or modification time; the kubelet swaps a symlink) and at least
//     every minute; a failed re-read keeps the last good token;
//   - an exec credential plugin (client.authentication.k8s.io/v1 or
//     v1beta1): run on first use and again before its expirationTimestamp
//     (a tenth of its lifetime early, at most a minute), with
//     KUBERNETES_EXEC_INFO set; it may return a token or a client
//     certificate and key;
//   - a static client certificate and key (from the kubeconfig).
// After the server answers 401, Invalidate() makes the next Current()
// re-read the file or re-run the plugin, whatever the clock says.
//
// Ownership: owns nothing shared; RestClient holds it in a shared_ptr.
// Thread-safety: every method is safe to call concurrently; a plugin run
// holds the lock, so concurrent requests wait for one run, not several.
// Failure: UNAUTHENTICATED naming the file or the plugin (its exit code and
// the first line of its stderr, or its install hint when it cannot start);
// INVALID_ARGUMENT for an ExecCredential that is malformed, of the wrong
// apiVersion, or holds no credential.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <sys/stat.h>

#include "common/mutex.h"
#include "common/status.h"
#include "kube/config.h"

namespace tfjob::kube {

// Wall-clock time source: credential expiry and the once-a-minute re-read
// are judged by it, so tests can move time.
using WallClock = std::function<std::chrono::system_clock::time_point()>;

struct AuthState {
  std::string bearer_token;                     // "" when none
  std::string client_cert_pem, client_key_pem;  // "" when none
  // Where the certificate came from, for TLS errors.
  std::string client_cert_origin, client_key_origin;
  // Changes whenever the certificate or key does: connections made with an
  // older generation carry an older certificate.
  uint64_t cert_generation = 0;
};

class Credentials {
 public:
  struct Options {
    WallClock clock;                        // default: the system clock
    std::chrono::seconds exec_timeout{60};  // a plugin running longer is killed
  };

  explicit Credentials(ClusterConfig config, Options options);
  explicit Credentials(ClusterConfig config) : Credentials(std::move(config), Options{}) {}

  // What to send now, refreshed as needed (see above).
  StatusOr<AuthState> Current();
  // The server rejected what we sent (401): refresh before the next use.
  void Invalidate();
  // Whether Invalidate can yield something new (a token file or a plugin).
  bool Refreshable() const { return !config_.token_file.empty() || config_.exec.has_value(); }
  // Times the exec plugin has been run (for tests and logs).
  int64_t exec_runs() const;

 private:
  struct FileStamp {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = -1;
    int64_t mtime_ns = -1;
    bool operator==(const FileStamp&) const = default;
  };
  Status RefreshTokenFile(std::chrono::system_clock::time_point now) TFJOB_REQUIRES(mu_);
  Status RunExec(std::chrono::system_clock::time_point now) TFJOB_REQUIRES(mu_);

  const ClusterConfig config_;
  const Options options_;
  mutable Mutex mu_;
  AuthState state_ TFJOB_GUARDED_BY(mu_);
  bool invalid_ TFJOB_GUARDED_BY(mu_) = false;
  // Token file.
  FileStamp stamp_ TFJOB_GUARDED_BY(mu_);
  std::optional<std::chrono::system_clock::time_point> read_at_ TFJOB_GUARDED_BY(mu_);
  // Exec plugin.
  bool have_exec_ TFJOB_GUARDED_BY(mu_) = false;
  std::optional<std::chrono::system_clock::time_point> refresh_at_ TFJOB_GUARDED_BY(mu_), expires_at_
      TFJOB_GUARDED_BY(mu_);
  int64_t exec_runs_ TFJOB_GUARDED_BY(mu_) = 0;
};

}  // namespace tfjob::kube
