// TCP plumbing shared by the data planes (the collectives and the parameter
// server): owned descriptors, listening (dual-stack where the host has IPv6),
// connecting with a deadline, and whole-buffer reads and writes on
// non-blocking sockets that give up at a deadline. Addresses are "host:port" as TF_CONFIG writes them; IPv6
// literals are bracketed ("[::1]:2222"). A connection can run TLS
// (tls/tls.h): after StartTls every byte written or read through Send,
// Sendv, Recv and the *All functions goes through the session, so the code
// above is the same with and without it.
//
// Ownership: Fd owns one descriptor (and its TLS session) and closes it.
// Thread-safety: Fd is not synchronised, but the I/O functions may be called
// from two threads at once on one Fd (a TLS session serialises its own
// calls); the free functions are reentrant. Failure: Status values naming
// the address or peer; SIGPIPE is never raised (MSG_NOSIGNAL).
#pragma once

#include <chrono>
#include <sys/uio.h>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include <google/protobuf/message_lite.h>

#include "common/status.h"
#include "services/tls/tls.h"

namespace tfjob::net {

using Clock = std::chrono::steady_clock;

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)), tls_(std::move(o.tls_)) { std::swap(armed_us_, o.armed_us_); }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
      tls_ = std::move(o.tls_);
      std::swap(armed_us_, o.armed_us_);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset();
  // Gives up the descriptor without closing it (its TLS session is freed).
  int Release();
  // Null unless StartTls succeeded on this connection.
  tls::Session* tls() const { return tls_.get(); }
  // The send or receive timeout last set on the socket (SO_SNDTIMEO /
  // SO_RCVTIMEO) in microseconds, 0 for none, -1 when not known: calls with
  // about the same deadline leave it as it is instead of a system call each.
  // Whoever uses the connection updates it, one thread at a time as for the
  // descriptor itself.
  int64_t& armed_timeout_us(bool send) const { return armed_us_[send ? 1 : 0]; }

 private:
  friend Status StartTls(Fd&, const tls::Config&, tls::Role, std::chrono::steady_clock::time_point, const std::string&);
  int fd_ = -1;
  std::unique_ptr<tls::Session> tls_;
  mutable int64_t armed_us_[2] = {-1, -1};
};

// Runs the TLS handshake (tls::Session::Handshake's errors) and, when it
// succeeds, routes all of `fd`'s I/O through the session.
Status StartTls(Fd& fd, const tls::Config& config, tls::Role role, std::chrono::steady_clock::time_point deadline,
                const std::string& peer);

// send(2), sendmsg(2) and recv(2) on `fd`, through its TLS session when it
// has one (which ignores `flags`: the socket's own mode decides whether a
// call waits). Same results: a count, 0 at the end of the stream, -1 and
// errno. MSG_NOSIGNAL is always added.
ssize_t Send(const Fd& fd, const void* data, size_t n, int flags);
ssize_t Sendv(const Fd& fd, const iovec* iov, int iovcnt, int flags);
ssize_t Recv(const Fd& fd, void* data, size_t n, int flags);
// TLS only (false without): decrypted bytes waiting that poll() cannot see,
// and bytes accepted by Send that are not yet in the kernel (Flush sends
// them: 0 when none are left, -1 and errno EAGAIN while some are).
bool Buffered(const Fd& fd);
bool Unsent(const Fd& fd);
int Flush(const Fd& fd);
// The error for a send or recv on `fd` that failed with `err`: UNAUTHENTICATED
// when its TLS peer refused this task's certificate (TLS 1.3 says so only on
// the first read after the handshake; a retry would be refused again), else
// UNAVAILABLE "connection to <peer> failed: <reason>".
Status IoError(const Fd& fd, int err, const std::string& peer);

struct HostPort {
  std::string host;  // brackets removed
  int port = 0;
};
// INVALID_ARGUMENT for text that is not host:port with a port in 0..65535.
StatusOr<HostPort> SplitAddress(const std::string& address);

// A listening socket and the port it got (useful with port 0).
struct Listener {
  Fd fd;
  int port = 0;
};
// Listens on `host` ("" or "*": every interface, IPv6 and IPv4 where the
// host has IPv6) at `port` (0 picks a free one). SO_REUSEADDR, so a
// restarted task gets its port back at once.
StatusOr<Listener> Listen(const std::string& host, int port);

// Connects to `address`, retrying refused or unreachable attempts with
// backoff until `deadline`. The socket is non-blocking with TCP_NODELAY.
// UNAVAILABLE "<what> <address> unreachable: <reason>" at the deadline.
StatusOr<Fd> Connect(const std::string& address, Clock::time_point deadline, const std::string& what);

// Makes an accepted socket non-blocking with TCP_NODELAY.
Status Configure(int fd);

// Whole-buffer I/O on a non-blocking socket, waiting with poll() until
// `deadline`. Errors name `peer`: UNAVAILABLE when the connection closed or
// failed, DEADLINE_EXCEEDED when time ran out.
// SendAll returns once every byte is in the kernel (TLS: flushed).
Status SendAll(const Fd& fd, const void* data, size_t n, Clock::time_point deadline, const std::string& peer);
Status RecvAll(const Fd& fd, void* data, size_t n, Clock::time_point deadline, const std::string& peer);

// Control messages: u32 magic "TFJG" | u32 length | message (at most 1 MiB).
Status SendMessage(const Fd& fd, const google::protobuf::MessageLite& m, Clock::time_point deadline,
                   const std::string& peer);
Status RecvMessage(const Fd& fd, google::protobuf::MessageLite& m, Clock::time_point deadline, const std::string& peer);

// True when `fd` has data or a hang-up waiting (without consuming it).
bool Readable(const Fd& fd);

}  // namespace tfjob::net
