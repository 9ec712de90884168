#include "services/tls/tls.h"
#include "common/mutex.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

namespace tfjob::tls {
namespace {

// Plaintext taken per SSL_write (16 records), and how much ciphertext may
// wait to be sent before writes are refused (the socket is full).
constexpr size_t kMaxChunk = 256 << 10;
constexpr size_t kMaxUnsent = 1 << 20;
// Pieces smaller than this are gathered into one record (frame headers).
constexpr size_t kSmall = 4096;
constexpr size_t kRecord = 16384;
// Certificates and keys are a few KiB; anything far larger is not one.
constexpr std::streamsize kMaxPemBytes = 1 << 20;

std::string OpenSslReason() {
  const unsigned long e = ERR_get_error();
  if (e == 0) return "unknown TLS error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  // "error:0A000086:SSL routines::certificate verify failed" -> the reason.
  const char* last = std::strrchr(buf, ':');
  return last && last[1] ? std::string(last + 1) : std::string(buf);
}

bool IsRefusal(const std::string& reason) {
  return reason.find("alert") != std::string::npos || reason.find("certificate") != std::string::npos ||
         reason.find("unknown ca") != std::string::npos;
}

// Where a session's TLS records go: appended straight to its own buffer
// (the BIO's data), from which FlushLocked sends them. A memory BIO would
// hold them in a buffer of its own, to be copied out again.
BIO_METHOD* OutputMethod() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "tfjob TLS output");
    BIO_meth_set_write_ex(m, [](BIO* b, const char* data, size_t n, size_t* written) -> int {
      static_cast<std::string*>(BIO_get_data(b))->append(data, n);
      *written = n;
      return 1;
    });
    BIO_meth_set_ctrl(m, [](BIO*, int cmd, long, void*) -> long { return cmd == BIO_CTRL_FLUSH ? 1 : 0; });
    BIO_meth_set_create(m, [](BIO* b) -> int {
      BIO_set_init(b, 1);
      return 1;
    });
    return m;
  }();
  return method;
}

bool WaitFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // let the next call report the socket's error
  }
}

StatusOr<std::string> ReadPemFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument(std::string(pki::kTlsDirEnv) + ": cannot read \"" + path + "\"");
  std::string text(static_cast<size_t>(kMaxPemBytes) + 1, '\0');
  in.read(text.data(), kMaxPemBytes + 1);
  if (in.bad()) return InvalidArgument(std::string(pki::kTlsDirEnv) + ": cannot read \"" + path + "\"");
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > static_cast<size_t>(kMaxPemBytes)) {
    return InvalidArgument(std::string(pki::kTlsDirEnv) + ": \"" + path + "\" is larger than 1 MiB: not a PEM file");
  }
  return text;
}

}  // namespace

Config::~Config() {
  if (ctx_) SSL_CTX_free(ctx_);
}

StatusOr<std::shared_ptr<const Config>> Config::FromPem(const pki::JobPki& pem, const std::string& origin) {
  std::shared_ptr<Config> c(new Config());
  c->pem_ = pem;
  c->ctx_ = SSL_CTX_new(TLS_method());
  if (!c->ctx_) return Internal("TLS: cannot create a context: " + OpenSslReason());
  SSL_CTX* ctx = c->ctx_;
  ERR_clear_error();
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  // Every connection is new: no tickets or cache to keep, and a peer that
  // closes without close_notify is an end of stream (the framing above
  // TLS says whether anything is missing).
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  // AES-128-GCM first: as strong as the job needs and a third faster than
  // AES-256-GCM, which is OpenSSL's first choice, on every tensor byte.
  SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256");

  auto bad = [&](const std::string& what) {
    return InvalidArgument(origin + ": " + what + " (" + OpenSslReason() + ")");
  };
  {
    BIO* b = BIO_new_mem_buf(pem.ca_pem.data(), static_cast<int>(pem.ca_pem.size()));
    int added = 0;
    while (X509* x = PEM_read_bio_X509(b, nullptr, nullptr, nullptr)) {
      added += X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), x) == 1;
      X509_free(x);
    }
    BIO_free(b);
    ERR_clear_error();  // the loop ends on "no start line"
    if (added == 0) return bad(std::string(pki::kCaFile) + " holds no certificate");
  }
  {
    BIO* b = BIO_new_mem_buf(pem.cert_pem.data(), static_cast<int>(pem.cert_pem.size()));
    X509* x = PEM_read_bio_X509(b, nullptr, nullptr, nullptr);
    BIO_free(b);
    const bool ok = x && SSL_CTX_use_certificate(ctx, x) == 1;
    X509_free(x);
    if (!ok) return bad(std::string(pki::kCertFile) + " is not a usable certificate");
  }
  {
    BIO* b = BIO_new_mem_buf(pem.key_pem.data(), static_cast<int>(pem.key_pem.size()));
    EVP_PKEY* k = PEM_read_bio_PrivateKey(b, nullptr, nullptr, nullptr);
    BIO_free(b);
    if (!k) return bad(std::string(pki::kKeyFile) + " is not a private key");
    const bool ok = SSL_CTX_use_PrivateKey(ctx, k) == 1;
    EVP_PKEY_free(k);
    if (!ok) return bad(std::string(pki::kKeyFile) + " does not belong to " + pki::kCertFile);
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    return bad(std::string(pki::kKeyFile) + " does not belong to " + pki::kCertFile);
  }
  return std::shared_ptr<const Config>(std::move(c));
}

StatusOr<std::shared_ptr<const Config>> Config::FromDir(const std::string& dir) {
  pki::JobPki pem;
  ASSIGN_OR_RETURN(pem.ca_pem, ReadPemFile(dir + "/" + pki::kCaFile));
  ASSIGN_OR_RETURN(pem.cert_pem, ReadPemFile(dir + "/" + pki::kCertFile));
  ASSIGN_OR_RETURN(pem.key_pem, ReadPemFile(dir + "/" + pki::kKeyFile));
  return FromPem(pem, std::string(pki::kTlsDirEnv) + " \"" + dir + "\"");
}

StatusOr<std::shared_ptr<const Config>> Config::FromEnv(const EnvLookup& env) {
  auto dir = env(pki::kTlsDirEnv);
  if (!dir || dir->empty()) return std::shared_ptr<const Config>();
  return FromDir(*dir);
}

Session::~Session() { SSL_free(ssl_); }

StatusOr<std::unique_ptr<Session>> Session::Handshake(const Config& config, int fd, Role role,
                                                      Clock::time_point deadline, const std::string& peer) {
  SSL* ssl = SSL_new(config.context());
  if (!ssl) return Internal("TLS: cannot create a session: " + OpenSslReason());
  std::unique_ptr<Session> s(new Session(ssl, fd));
  // Reads come straight from the socket (poll() then sees what is waiting);
  // writes go to the session's buffer first, so a write never has to be
  // retried with the same bytes (what OpenSSL demands of a socket that was
  // full).
  BIO* rbio = BIO_new_socket(fd, BIO_NOCLOSE);
  BIO* wbio = BIO_new(OutputMethod());
  if (!rbio || !wbio) {
    BIO_free(rbio);
    BIO_free(wbio);
    return Internal("TLS: cannot create the session's I/O");
  }
  BIO_set_data(wbio, &s->out_);
  SSL_set_bio(ssl, rbio, wbio);
  if (role == Role::kClient) {
    SSL_set_connect_state(ssl);
    SSL_set1_host(ssl, pki::kTaskServerName);
    SSL_set_tlsext_host_name(ssl, pki::kTaskServerName);
  } else {
    SSL_set_accept_state(ssl);
  }
  // The handshake waits with poll(), so it never blocks in a read past
  // the deadline, whatever mode the caller's socket is in.
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0 && (flags & O_NONBLOCK) == 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  struct Restore {
    int fd, flags;
    ~Restore() {
      if (flags >= 0 && (flags & O_NONBLOCK) == 0) fcntl(fd, F_SETFL, flags);
    }
  } restore{fd, flags};

  MutexLock g(s->mu_);
  while (true) {
    ERR_clear_error();
    const int r = SSL_do_handshake(ssl);
    const int e = r == 1 ? SSL_ERROR_NONE : SSL_get_error(ssl, r);
    const std::string reason = e == SSL_ERROR_SSL ? OpenSslReason() : "";
    while (s->out_off_ < s->out_.size()) {
      if (s->FlushLocked() == 0) break;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        return Unavailable("TLS handshake with " + peer + " failed: " + std::strerror(errno));
      }
      if (!WaitFor(fd, POLLOUT, deadline)) return DeadlineExceeded("TLS handshake with " + peer + " timed out");
    }
    if (r == 1) return s;
    if (e == SSL_ERROR_WANT_READ) {
      if (!WaitFor(fd, POLLIN, deadline)) return DeadlineExceeded("TLS handshake with " + peer + " timed out");
      continue;
    }
    if (e == SSL_ERROR_WANT_WRITE) continue;
    const long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) {
      return Status(Code::kUnauthenticated, "TLS: " + peer + " has no certificate from this job's CA (" +
                                                X509_verify_cert_error_string(verify) + ")");
    }
    if (e == SSL_ERROR_SSL && IsRefusal(reason)) {
      return Status(Code::kUnauthenticated, "TLS handshake with " + peer + " refused: " + reason);
    }
    if (e == SSL_ERROR_SSL) {
      return Unavailable("TLS handshake with " + peer + " failed: " + reason + " (does it use the job's TLS?)");
    }
    return Unavailable("TLS handshake with " + peer + " failed: the connection closed");
  }
}

int Session::FlushLocked() {
  while (out_off_ < out_.size()) {
    const ssize_t w = ::send(fd_, out_.data() + out_off_, out_.size() - out_off_, MSG_NOSIGNAL);
    if (w > 0) {
      out_off_ += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w == 0) errno = EAGAIN;
    return -1;
  }
  out_.clear();
  out_off_ = 0;
  return 0;
}

int Session::Flush() {
  MutexLock g(mu_);
  return FlushLocked();
}

bool Session::Unsent() const {
  MutexLock g(mu_);
  return out_off_ < out_.size();
}

bool Session::Buffered() const {
  MutexLock g(mu_);
  return SSL_pending(ssl_) > 0;
}

ssize_t Session::WriteLocked(const void* data, size_t n) {
  if (n == 0) return 0;
  if (FlushLocked() < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
  if (out_.size() - out_off_ >= kMaxUnsent) {
    errno = EAGAIN;
    return -1;
  }
  const size_t take = std::min(n, kMaxChunk);
  // What was sent already goes before more is appended.
  if (out_off_ > 0) {
    out_.erase(0, out_off_);
    out_off_ = 0;
  }
  ERR_clear_error();
  const int r = SSL_write(ssl_, data, static_cast<int>(take));
  if (r <= 0) {
    errno = EPROTO;
    return -1;
  }
  if (FlushLocked() < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
  return r;
}

ssize_t Session::Write(const void* data, size_t n) {
  MutexLock g(mu_);
  return WriteLocked(data, n);
}

ssize_t Session::Writev(const iovec* iov, int iovcnt) {
  MutexLock g(mu_);
  ssize_t total = 0;
  std::string& small = gather_;
  int i = 0;
  while (i < iovcnt) {
    if (iov[i].iov_len < kSmall) {
      small.clear();
      int j = i;
      while (j < iovcnt && iov[j].iov_len < kSmall && small.size() + iov[j].iov_len <= kRecord) {
        small.append(static_cast<const char*>(iov[j].iov_base), iov[j].iov_len);
        ++j;
      }
      if (!small.empty()) {
        // At most one record: accepted whole or not at all.
        const ssize_t w = WriteLocked(small.data(), small.size());
        if (w < 0) return total > 0 ? total : -1;
        total += w;
      }
      i = j;
      continue;
    }
    const ssize_t w = WriteLocked(iov[i].iov_base, iov[i].iov_len);
    if (w < 0) return total > 0 ? total : -1;
    total += w;
    if (static_cast<size_t>(w) < iov[i].iov_len) return total;
    ++i;
  }
  return total;
}

ssize_t Session::Read(void* data, size_t n) {
  MutexLock g(mu_);
  if (n == 0) return 0;
  ERR_clear_error();
  errno = 0;
  const int r = SSL_read(ssl_, data, static_cast<int>(std::min<size_t>(n, INT_MAX)));
  const int e = r > 0 ? SSL_ERROR_NONE : SSL_get_error(ssl_, r);
  const int saved = errno;
  const std::string reason = e == SSL_ERROR_SSL ? OpenSslReason() : "";
  // Reading can make TLS answer (a key update): send it on its way.
  if (out_off_ < out_.size()) (void)FlushLocked();
  if (r > 0) return r;
  switch (e) {
    case SSL_ERROR_ZERO_RETURN: return 0;
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE: errno = EAGAIN; return -1;
    case SSL_ERROR_SYSCALL:
      if (saved == 0) return 0;
      errno = saved;
      return -1;
    default:
      // The peer refused this task's certificate (TLS 1.3 tells a client
      // after its handshake, on the first read), or the stream is corrupt.
      errno = IsRefusal(reason) ? EACCES : EPROTO;
      return -1;
  }
}

}  // namespace tfjob::tls
