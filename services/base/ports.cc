#include "services/base/ports.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace tfjob::base {
namespace {

std::string Errno() { return std::strerror(errno); }

}  // namespace

Status ListeningSocket::Describe() {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return Unavailable("getsockname: " + Errno());
  char host[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port_ = ntohs(a->sin6_port);
    address_ = '[';
    address_ += host;
    address_ += "]:";
    address_ += std::to_string(port_);
  } else if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port_ = ntohs(a->sin_port);
    address_ = std::string(host) + ":" + std::to_string(port_);
  } else {
    return InvalidArgument("not a TCP/IP socket");
  }
  return Status::Ok();
}

ListeningSocket::~ListeningSocket() {
  if (fd_ >= 0) close(fd_);
}

ListeningSocket::ListeningSocket(ListeningSocket&& o) noexcept
    : fd_(o.fd_), port_(o.port_), address_(std::move(o.address_)) {
  o.fd_ = -1;
}

ListeningSocket& ListeningSocket::operator=(ListeningSocket&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    port_ = o.port_;
    address_ = std::move(o.address_);
    o.fd_ = -1;
  }
  return *this;
}

int ListeningSocket::Release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

StatusOr<ListeningSocket> ListeningSocket::Listen(const std::string& host, int port) {
  const std::string where =
      (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  if (port < 0 || port > 65535) return InvalidArgument("listen on " + where + ": port must be in 0..65535");
  sockaddr_storage ss{};
  socklen_t len = 0;
  const bool any = host.empty() || host == "::";
  if (any || host.find(':') != std::string::npos) {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<uint16_t>(port));
    a6->sin6_addr = in6addr_any;
    if (!any && inet_pton(AF_INET6, host.c_str(), &a6->sin6_addr) != 1) {
      return InvalidArgument("listen on " + where + ": \"" + host + "\" is not an IP address");
    }
    len = sizeof(sockaddr_in6);
  } else {
    auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
    a4->sin_family = AF_INET;
    a4->sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, host.c_str(), &a4->sin_addr) != 1) {
      return InvalidArgument("listen on " + where + ": \"" + host + "\" is not an IP address");
    }
    len = sizeof(sockaddr_in);
  }
  ListeningSocket s;
  s.fd_ = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s.fd_ < 0 && any && (errno == EAFNOSUPPORT || errno == EPROTONOSUPPORT)) {
    // A host without IPv6: every IPv4 interface instead.
    ss = {};
    auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
    a4->sin_family = AF_INET;
    a4->sin_port = htons(static_cast<uint16_t>(port));
    a4->sin_addr.s_addr = htonl(INADDR_ANY);
    len = sizeof(sockaddr_in);
    s.fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  }
  if (s.fd_ < 0) return Unavailable("listen on " + where + ": socket: " + Errno());
  int one = 1, zero = 0;
  // A restarted server gets its port back at once (connections of the old
  // one in TIME_WAIT do not block it); two listeners still cannot share it.
  setsockopt(s.fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (any && ss.ss_family == AF_INET6) setsockopt(s.fd_, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  if (bind(s.fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0 || listen(s.fd_, 128) != 0) {
    return Unavailable("listen on " + where + ": " + Errno());
  }
  if (Status d = s.Describe(); !d.ok()) return d.WithContext("listen on " + where);
  return s;
}

StatusOr<ListeningSocket> ListeningSocket::Adopt(int fd, const std::string& what) {
  int type = 0, listening = 0;
  socklen_t len = sizeof type;
  if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) {
    return InvalidArgument(what + ": descriptor " + std::to_string(fd) + " is not an open socket (" + Errno() + ")");
  }
  len = sizeof listening;
  const bool is_listening =
      type == SOCK_STREAM && getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening;
  ListeningSocket s;
  s.fd_ = fd;
  if (!is_listening || !s.Describe().ok()) {
    s.Release();  // not ours to close: the caller still owns a descriptor it gave us by mistake
    return InvalidArgument(what + ": descriptor " + std::to_string(fd) + " is not a listening TCP socket");
  }
  // Owned from here on: a program this process starts must not inherit it.
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  return s;
}

void PassListenerToChild(int fd, ChildOptions& child) {
  child.pass_fds.emplace_back(fd, kChildListenFd);
  // A string built from the number: GCC 12 misreads `= "3"` here (-Wrestrict).
  child.env.insert_or_assign(kListenFdEnv, std::to_string(kChildListenFd));
}

StatusOr<std::optional<int>> InheritedListenerFd(const EnvFn& env) {
  const std::optional<std::string> v = env(kListenFdEnv);
  if (!v || v->empty()) return std::optional<int>();
  char* end = nullptr;
  errno = 0;
  const long fd = std::strtol(v->c_str(), &end, 10);
  if (*end != '\0' || errno != 0 || fd < 0 || fd > 1 << 20) {
    return InvalidArgument(std::string(kListenFdEnv) + ": \"" + *v + "\" is not a file descriptor number");
  }
  return std::optional<int>(static_cast<int>(fd));
}

StatusOr<std::optional<ListeningSocket>> AdoptInheritedListener(std::optional<int> fd) {
  if (!fd) return std::optional<ListeningSocket>();
  ASSIGN_OR_RETURN(ListeningSocket s, ListeningSocket::Adopt(*fd, kListenFdEnv));
  return std::optional<ListeningSocket>(std::move(s));
}

StatusOr<std::optional<ListeningSocket>> InheritedListener(const EnvFn& env) {
  ASSIGN_OR_RETURN(std::optional<int> fd, InheritedListenerFd(env));
  return AdoptInheritedListener(fd);
}

}  // namespace tfjob::base
