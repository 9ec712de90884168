// A TCP listener on a loopback port that never accepts: the kernel
// completes the handshake and no HTTP/2 answer ever comes, so a gRPC channel
// to it stays connecting, as one to the address of a pod whose node is gone
// does (its calls run out of time before the channel connects).
//
// Ownership: owns its socket until Close() or destruction. Not thread-safe.
// Failure: a socket that cannot be bound and listened on is a test failure
// (ADD_FAILURE), and address() then names port 0.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace tfjob::testing {

class SilentListener {
 public:
  SilentListener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd_, 16) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "no listening socket";
      return;
    }
    port_ = ntohs(a.sin_port);
  }
  ~SilentListener() { Close(); }
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Frees the port (for a real server to listen there next).
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace tfjob::testing
