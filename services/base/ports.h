// Listening sockets, and the one way a process hands one to a child.
//
// A port is never picked by binding port 0, closing the socket and passing
// the number on: another process could take it in between. Either a server
// binds port 0 itself and reports what it got (HttpServer, rpc::StartServer
// with ":0"), or -- when the port must be known before the child starts,
// because it goes into the TF_CONFIG of every task -- the launcher binds and
// listens, keeps the socket, and the child inherits it:
//
//   launcher (tfjob-runtime local, tfjob run)        child (tfjob-runtime)
//   ListeningSocket::Listen("127.0.0.1", 0) -> P     TFJOB_LISTEN_FD=3
//   TF_CONFIG names 127.0.0.1:P                      InheritedListener(env)
//   SpawnChild, PassListenerToChild (fd 3 + env)     serves on fd 3, port P
//
// Ownership: ListeningSocket owns its descriptor (closed on destruction,
// close-on-exec while owned). Thread-safety: plain values. Failure: Status
// codes below.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "common/child_process.h"
#include "common/status.h"
#include "contract/env.h"

namespace tfjob::base {

// The variable that tells a child which descriptor is its listening socket.
inline constexpr const char* kListenFdEnv = contract::kListenFdEnv;
// The descriptor number a launcher gives that socket in the child.
inline constexpr int kChildListenFd = 3;

class ListeningSocket {
 public:
  ListeningSocket() = default;
  ~ListeningSocket();
  ListeningSocket(ListeningSocket&& o) noexcept;
  ListeningSocket& operator=(ListeningSocket&& o) noexcept;
  ListeningSocket(const ListeningSocket&) = delete;
  ListeningSocket& operator=(const ListeningSocket&) = delete;

  // Binds `host` (a numeric IPv4 or IPv6 address; "" or "::" is every
  // interface, IPv6 and IPv4) at `port` (0: the kernel picks one) and
  // listens. INVALID_ARGUMENT for a host that is not an address or a port
  // outside 0..65535; UNAVAILABLE when it cannot bind.
  static StatusOr<ListeningSocket> Listen(const std::string& host, int port);
  // Takes ownership of `fd`, which must be a listening TCP socket (what a
  // launcher passed down); marks it close-on-exec. INVALID_ARGUMENT naming
  // `what` otherwise.
  static StatusOr<ListeningSocket> Adopt(int fd, const std::string& what);

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  int port() const { return port_; }
  // Where it listens: "127.0.0.1:PORT", "[::]:PORT", "[::1]:PORT".
  const std::string& address() const { return address_; }
  // Gives the descriptor up to the caller (who must close it).
  int Release();

 private:
  Status Describe();  // sets port_ and address_ from the socket

  int fd_ = -1;
  int port_ = 0;
  std::string address_;
};

// Hands `fd` to a child about to be spawned: it arrives as the child's
// kChildListenFd, named by kListenFdEnv.
void PassListenerToChild(int fd, ChildOptions& child);

using EnvFn = std::function<std::optional<std::string>(const std::string&)>;
// The listening socket a launcher passed down (kListenFdEnv), or nullopt
// when the variable is unset or empty. INVALID_ARGUMENT when it does not
// name a listening TCP socket.
StatusOr<std::optional<ListeningSocket>> InheritedListener(const EnvFn& env);
// Its two halves: the descriptor kListenFdEnv names (nullopt when unset or
// empty; INVALID_ARGUMENT when not a number), read with the rest of the
// configuration, and adopting it once the role starts.
StatusOr<std::optional<int>> InheritedListenerFd(const EnvFn& env);
StatusOr<std::optional<ListeningSocket>> AdoptInheritedListener(std::optional<int> fd);

}  // namespace tfjob::base
