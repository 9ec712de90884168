// TCP plumbing for the collective library: owned descriptors, listening
// (dual-stack where the host has IPv6), connecting with a deadline, and
// whole-buffer reads and writes on non-blocking sockets that give up at a
// deadline. Addresses are "host:port" as TF_CONFIG writes them; IPv6
// literals are bracketed ("[::1]:2222").
//
// Ownership: Fd owns one descriptor and closes it. Thread-safety: Fd is not
// synchronised; the free functions are reentrant. Failure: Status values
// naming the address or peer; SIGPIPE is never raised (MSG_NOSIGNAL).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>

#include <google/protobuf/message_lite.h>

#include "common/status.h"

namespace tfjob::collective::net {

using Clock = std::chrono::steady_clock;

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset();

 private:
  int fd_ = -1;
};

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
Status SendAll(int fd, const void* data, size_t n, Clock::time_point deadline, const std::string& peer);
Status RecvAll(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& peer);

// Control messages: u32 magic "TFJG" | u32 length | message (at most 1 MiB).
Status SendMessage(int fd, const google::protobuf::MessageLite& m, Clock::time_point deadline, const std::string& peer);
Status RecvMessage(int fd, google::protobuf::MessageLite& m, Clock::time_point deadline, const std::string& peer);

// True when `fd` has data or a hang-up waiting (without consuming it).
bool Readable(int fd);

}  // namespace tfjob::collective::net
