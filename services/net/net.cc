#include "services/net/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace tfjob::net {
namespace {

constexpr uint32_t kMessageMagic = 0x47464A54;  // "TFJG" little endian
constexpr uint32_t kMaxMessageBytes = 1 << 20;

std::string Errno(int e) { return std::strerror(e); }

int MillisUntil(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1000 * 1000));
}

Status SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return Internal("fcntl: " + Errno(errno));
  return Status::Ok();
}

}  // namespace

int Fd::Release() {
  tls_.reset();
  armed_us_[0] = armed_us_[1] = -1;
  return std::exchange(fd_, -1);
}

Status StartTls(Fd& fd, const tls::Config& config, tls::Role role, std::chrono::steady_clock::time_point deadline,
                const std::string& peer) {
  ASSIGN_OR_RETURN(fd.tls_, tls::Session::Handshake(config, fd.get(), role, deadline, peer));
  return Status::Ok();
}

ssize_t Send(const Fd& fd, const void* data, size_t n, int flags) {
  if (fd.tls()) return fd.tls()->Write(data, n);
  return ::send(fd.get(), data, n, flags | MSG_NOSIGNAL);
}

ssize_t Sendv(const Fd& fd, const iovec* iov, int iovcnt, int flags) {
  if (fd.tls()) return fd.tls()->Writev(iov, iovcnt);
  msghdr mh{};
  mh.msg_iov = const_cast<iovec*>(iov);
  mh.msg_iovlen = static_cast<size_t>(iovcnt);
  return ::sendmsg(fd.get(), &mh, flags | MSG_NOSIGNAL);
}

ssize_t Recv(const Fd& fd, void* data, size_t n, int flags) {
  if (fd.tls()) return fd.tls()->Read(data, n);
  return ::recv(fd.get(), data, n, flags);
}

Status IoError(const Fd& fd, int err, const std::string& peer) {
  if (fd.tls() && err == EACCES) {
    return Status(Code::kUnauthenticated,
                  peer + " refused this task's TLS certificate: it is not from the CA of " + peer + "'s job");
  }
  return Unavailable("connection to " + peer + " failed: " + std::strerror(err));
}

bool Buffered(const Fd& fd) { return fd.tls() && fd.tls()->Buffered(); }
bool Unsent(const Fd& fd) { return fd.tls() && fd.tls()->Unsent(); }
int Flush(const Fd& fd) { return fd.tls() ? fd.tls()->Flush() : 0; }

void Fd::Reset() {
  tls_.reset();
  armed_us_[0] = armed_us_[1] = -1;
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

StatusOr<HostPort> SplitAddress(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return InvalidArgument("address \"" + address + "\" has no port");
  }
  HostPort hp;
  hp.host = address.substr(0, colon);
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']')
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  const std::string port = address.substr(colon + 1);
  if (port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return InvalidArgument("address \"" + address + "\": bad port");
  }
  hp.port = std::stoi(port);
  if (hp.port > 65535) return InvalidArgument("address \"" + address + "\": port out of range");
  return hp;
}

StatusOr<Listener> Listen(const std::string& host, int port) {
  const bool any = host.empty() || host == "*";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  // For "every interface" try IPv6 first (dual-stack: it also takes IPv4).
  const int rc = getaddrinfo(any ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) return InvalidArgument("listen on " + host + ":" + service + ": " + gai_strerror(rc));
  std::vector<addrinfo*> candidates;
  for (addrinfo* a = res; a; a = a->ai_next) candidates.push_back(a);
  std::stable_sort(candidates.begin(), candidates.end(), [any](addrinfo* a, addrinfo* b) {
    return any && a->ai_family == AF_INET6 && b->ai_family != AF_INET6;
  });
  std::string last = "no address";
  for (addrinfo* a : candidates) {
    Fd fd(socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      last = Errno(errno);
      continue;
    }
    int one = 1, zero = 0;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (a->ai_family == AF_INET6 && any) setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || listen(fd.get(), 128) != 0) {
      last = Errno(errno);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    const int got = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                             : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    freeaddrinfo(res);
    return Listener{std::move(fd), got};
  }
  freeaddrinfo(res);
  return Unavailable("listen on " + (any ? std::string("*") : host) + ":" + service + ": " + last);
}

Status Configure(int fd) {
  RETURN_IF_ERROR(SetNonBlocking(fd));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return Status::Ok();
}

StatusOr<Fd> Connect(const std::string& address, Clock::time_point deadline, const std::string& what) {
  ASSIGN_OR_RETURN(HostPort hp, SplitAddress(address));
  auto backoff = std::chrono::milliseconds(20);
  std::string last = "timed out";
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const std::string service = std::to_string(hp.port);
    const int rc = getaddrinfo(hp.host.c_str(), service.c_str(), &hints, &res);
    if (rc != 0) {
      // DNS names of pods appear only once the pod exists: retry like a refusal.
      last = std::string("resolving: ") + gai_strerror(rc);
    } else {
      for (addrinfo* a = res; a; a = a->ai_next) {
        Fd fd(socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
        if (!fd.valid()) {
          last = Errno(errno);
          continue;
        }
        if (Status s = Configure(fd.get()); !s.ok()) {
          freeaddrinfo(res);
          return s;
        }
        int r = connect(fd.get(), a->ai_addr, a->ai_addrlen);
        if (r != 0 && errno == EINPROGRESS) {
          pollfd p{fd.get(), POLLOUT, 0};
          const int n = poll(&p, 1, std::max(1, std::min(MillisUntil(deadline), 2000)));
          int err = 0;
          socklen_t len = sizeof err;
          if (n == 1 && getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
            r = 0;
          } else {
            errno = n == 1 ? err : ETIMEDOUT;
          }
        }
        if (r == 0) {
          freeaddrinfo(res);
          return fd;
        }
        last = Errno(errno);
      }
      freeaddrinfo(res);
    }
    if (Clock::now() + backoff >= deadline) break;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  return Unavailable(what + " " + address + " unreachable: " + last);
}

Status SendAll(const Fd& fd, const void* data, size_t n, Clock::time_point deadline, const std::string& peer) {
  const char* p = static_cast<const char*>(data);
  while (n > 0 || Unsent(fd)) {
    const ssize_t w = n > 0 ? Send(fd, p, n, MSG_DONTWAIT) : (Flush(fd) == 0 ? 0 : -1);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w == 0) continue;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return IoError(fd, errno, peer);
    pollfd pf{fd.get(), POLLOUT, 0};
    const int left = MillisUntil(deadline);
    if (left == 0) return DeadlineExceeded(peer + " did not accept data in time");
    poll(&pf, 1, left);
  }
  return Status::Ok();
}

Status RecvAll(const Fd& fd, void* data, size_t n, Clock::time_point deadline, const std::string& peer) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = Recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return Unavailable(peer + " closed the connection");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return IoError(fd, errno, peer);
    if (Buffered(fd)) continue;
    pollfd pf{fd.get(), POLLIN, 0};
    const int left = MillisUntil(deadline);
    if (left == 0) return DeadlineExceeded("nothing from " + peer + " in time");
    poll(&pf, 1, left);
  }
  return Status::Ok();
}

Status SendMessage(const Fd& fd, const google::protobuf::MessageLite& m, Clock::time_point deadline,
                   const std::string& peer) {
  std::string body;
  if (!m.SerializeToString(&body)) return Internal("collective: cannot serialise a control message");
  std::string frame(8, '\0');
  const uint32_t magic = kMessageMagic, len = static_cast<uint32_t>(body.size());
  std::memcpy(frame.data(), &magic, 4);
  std::memcpy(frame.data() + 4, &len, 4);
  frame += body;
  return SendAll(fd, frame.data(), frame.size(), deadline, peer);
}

Status RecvMessage(const Fd& fd, google::protobuf::MessageLite& m, Clock::time_point deadline,
                   const std::string& peer) {
  uint32_t head[2];
  RETURN_IF_ERROR(RecvAll(fd, head, sizeof head, deadline, peer));
  if (head[0] != kMessageMagic)
    return InvalidArgument("collective: " + peer + " sent something that is not a control message");
  if (head[1] > kMaxMessageBytes) {
    return InvalidArgument("collective: " + peer + " sent a control message of " + std::to_string(head[1]) + " bytes");
  }
  std::string body(head[1], '\0');
  RETURN_IF_ERROR(RecvAll(fd, body.data(), body.size(), deadline, peer));
  if (!m.ParseFromString(body)) return InvalidArgument("collective: " + peer + " sent a malformed control message");
  return Status::Ok();
}

bool Readable(const Fd& fd) {
  if (Buffered(fd)) return true;
  pollfd p{fd.get(), POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

}  // namespace tfjob::net
