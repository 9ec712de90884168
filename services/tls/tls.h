// Mutual TLS between a job's tasks (the optional half of task
// authentication; rpc/auth.h is the token). A task started with
// TFJOB_TLS_DIR (common/pki.h: ca.crt, tls.crt, tls.key, the job's Secret
// mounted as a volume) presents the job's certificate on every connection it
// makes or accepts and accepts only peers whose certificate the job's CA
// signed, for TLS 1.3 only. gRPC gets the PEM texts (rpc.h); the two raw TCP
// transports, the PS data plane and the collective ring, run a Session over
// their socket.
//
// Ownership: Config is immutable and shared (shared_ptr); a Session owns its
// SSL object but not the descriptor. Thread-safety: Config is safe to share;
// a Session's calls are serialised by its own mutex, so one thread may read
// while another writes, as the ring's keepalive thread does. Failure: Status
// values naming the file or the peer; a peer without the job's certificate
// is UNAUTHENTICATED.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/mutex.h"
#include "common/pki.h"
#include "common/status.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace tfjob::tls {

using Clock = std::chrono::steady_clock;
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

class Config {
 public:
  ~Config();
  Config(const Config&) = delete;
  Config& operator=(const Config&) = delete;

  // Checks that the three texts parse and that the key belongs to the
  // certificate. INVALID_ARGUMENT naming `origin` (a directory) otherwise.
  static StatusOr<std::shared_ptr<const Config>> FromPem(const pki::JobPki& pem,
                                                         const std::string& origin = "TLS material");
  // Reads ca.crt, tls.crt and tls.key from `dir`.
  static StatusOr<std::shared_ptr<const Config>> FromDir(const std::string& dir);
  // From TFJOB_TLS_DIR; null (no TLS) when it is unset or empty.
  static StatusOr<std::shared_ptr<const Config>> FromEnv(const EnvLookup& env);

  const pki::JobPki& pem() const { return pem_; }
  SSL_CTX* context() const { return ctx_; }

 private:
  Config() = default;
  pki::JobPki pem_;
  SSL_CTX* ctx_ = nullptr;
};

enum class Role { kClient, kServer };

// One TLS connection over a TCP socket the caller owns. The calls mirror
// send(2) and recv(2): a count, 0 for the end of the stream, or -1 with
// errno (EAGAIN when a non-blocking socket has nothing to give or take;
// EPROTO for a TLS failure). On a blocking socket they block as the socket
// would (its SO_RCVTIMEO / SO_SNDTIMEO apply).
//
// Writes are encrypted into a buffer of the session's and sent from there:
// Write accepts all it returns, even where part of it is still in that
// buffer (Unsent()), and sends the rest on the next Write or Flush. So a
// writer that has nothing more to write calls Flush until Unsent() is false.
// Reads can leave decrypted bytes in the session that poll() does not see:
// a reader asks Buffered() before it waits.
class Session {
 public:
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Runs the handshake on `fd` (blocking or not) until `deadline`.
  // UNAUTHENTICATED when the peer has no certificate from the job's CA (or,
  // as a client, one not issued for tasks); UNAVAILABLE when the connection
  // fails; DEADLINE_EXCEEDED at the deadline. `peer` names the other side.
  static StatusOr<std::unique_ptr<Session>> Handshake(const Config& config, int fd, Role role,
                                                      Clock::time_point deadline, const std::string& peer);

  ssize_t Write(const void* data, size_t n);
  // Gathers small pieces into one record; stops at the first piece not
  // wholly accepted. Returns the bytes accepted, or -1 when none were.
  ssize_t Writev(const iovec* iov, int iovcnt);
  ssize_t Read(void* data, size_t n);
  // 0 once everything accepted is in the kernel; -1 with errno otherwise.
  int Flush();
  bool Unsent() const;
  bool Buffered() const;

 private:
  Session(SSL* ssl, int fd) : ssl_(ssl), fd_(fd) {}
  int FlushLocked() TFJOB_REQUIRES(mu_);
  ssize_t WriteLocked(const void* data, size_t n) TFJOB_REQUIRES(mu_);

  mutable Mutex mu_;
  SSL* ssl_;  // used under mu_ (an opaque OpenSSL type: nothing to annotate)
  int fd_;
  std::string out_ TFJOB_GUARDED_BY(mu_);  // ciphertext not yet sent: out_[out_off_..]
  size_t out_off_ TFJOB_GUARDED_BY(mu_) = 0;
  std::string gather_ TFJOB_GUARDED_BY(mu_);  // Writev's small pieces, kept to reuse its capacity
};

}  // namespace tfjob::tls
