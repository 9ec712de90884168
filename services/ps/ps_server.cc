// PsServer: one listening socket for both planes. gRPC gets the HTTP/2
// connections (through AddInsecureChannelFromFd), the data plane the ones
// that open with its hello; each connection is told apart by its first four
// bytes, read without consuming them.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include <grpcpp/server_posix.h>

#include "common/mutex.h"
#include "services/ps/ps_service.h"
#include "services/rpc/rpc.h"

namespace tfjob::ps {
namespace {

// How long a new connection may take to send its first bytes.
constexpr auto kFirstBytesTimeout = std::chrono::seconds(10);
// gRPC's HTTP/2 client preface begins with these.
constexpr char kHttp2Preface[4] = {'P', 'R', 'I', ' '};

std::string PeerName(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
    std::string out = "[";
    out.append(host).append("]:").append(std::to_string(port));
    return out;
  }
  const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
  inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
  port = ntohs(a->sin_port);
  return std::string(host) + ":" + std::to_string(port);
}

// The connection's first four bytes, left in the socket. False when they
// do not come in time or the connection closes first.
bool PeekFirstBytes(int fd, char out[4]) {
  const auto deadline = std::chrono::steady_clock::now() + kFirstBytesTimeout;
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (n < 0 && errno != EINTR) return false;
    if (n <= 0) continue;
    const ssize_t r = recv(fd, out, 4, MSG_PEEK | MSG_DONTWAIT);
    if (r == 4) return true;
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) return false;
    // Fewer than four bytes so far: wait a little for the rest.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

StatusOr<std::unique_ptr<PsServer>> PsServer::Start(const std::string& address, PsOptions options) {
  ASSIGN_OR_RETURN(net::HostPort hp, net::SplitAddress(address));
  std::string host = hp.host;
  if (host == "::" || host == "0.0.0.0") host = "";  // every interface, dual-stack where possible
  ASSIGN_OR_RETURN(net::Listener listener, net::Listen(host, hp.port));
  return Start(std::move(listener), std::move(options));
}

StatusOr<std::unique_ptr<PsServer>> PsServer::Start(net::Listener listener, PsOptions options) {
  int accepting = 0;
  socklen_t len = sizeof accepting;
  if (getsockopt(listener.fd.get(), SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 || !accepting) {
    return InvalidArgument("descriptor " + std::to_string(listener.fd.get()) + " is not a listening socket");
  }
  std::unique_ptr<PsServer> s(new PsServer());
  s->listener_ = std::move(listener.fd);
  s->listener_fd_ = s->listener_.get();
  s->port_ = listener.port;
  s->wake_ = net::Fd(eventfd(0, EFD_CLOEXEC));
  if (!s->wake_.valid()) return Internal(std::string("eventfd: ") + std::strerror(errno));
  s->tls_ = options.credentials.tls;
  s->service_ = std::make_unique<ParameterServerService>(options);
  // gRPC listens on nothing itself: the acceptor hands it its connections.
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(rpc::kMaxMessageBytes);
  builder.SetMaxSendMessageSize(rpc::kMaxMessageBytes);
  builder.RegisterService(s->service_.get());
  if (s->tls_) {
    s->grpc_tls_ = builder.experimental().AddExternalConnectionAcceptor(
        grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
        rpc::ServerCredentials(options.credentials));
  }
  s->server_ = builder.BuildAndStart();
  if (!s->server_) return Internal("cannot start the parameter server's gRPC server");
  s->acceptor_ = std::thread([p = s.get()] { p->AcceptLoop(); });
  return s;
}

PsServer::~PsServer() { Stop(); }

void PsServer::Wait() {
  service_->WaitForShutdown();
  Stop();
}

void PsServer::AcceptLoop() {
  while (true) {
    pollfd p[2] = {{listener_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents != 0) return;
    if ((p[0].revents & POLLIN) == 0) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    const int fd = accept4(listener_.get(), reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors or a connection reset before accept: try again shortly.
      if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    MutexLock g(mu_);
    Reap();
    Connection& c = connections_.emplace_back();
    c.fd = fd;
    c.thread = std::thread([this, conn = &c, peer = PeerName(ss)] { Serve(conn, peer); });
  }
}

void PsServer::Serve(Connection* c, std::string peer) {
  char first[4];
  if (PeekFirstBytes(c->fd, first)) {
    uint32_t magic;
    std::memcpy(&magic, first, 4);
    if (magic == wire::kHelloMagic || magic == wire::kTlsMagic) {
      net::Fd conn(c->fd);  // borrowed: Reap closes the descriptor
      bool ok = true;
      if (magic == wire::kTlsMagic) {
        char preface[4];
        ok = tls_ && recv(c->fd, preface, sizeof preface, MSG_WAITALL) == sizeof preface &&
             net::StartTls(conn, *tls_, tls::Role::kServer, std::chrono::steady_clock::now() + kFirstBytesTimeout,
                           "data-plane client " + peer)
                 .ok();
      } else if (tls_) {
        // Said in clear, so a task started without the job's TLS learns why.
        (void)wire::SendError(conn,
                              Status(Code::kUnauthenticated,
                                     "this parameter server accepts only TLS connections with the job's certificate"),
                              std::chrono::steady_clock::now() + kFirstBytesTimeout, peer);
        ok = false;
      }
      if (ok) service_->ServeData(conn, peer, stopping_, c->busy);
      conn.Release();
      // Whatever ended it (the peer left, or broke the protocol), the peer
      // learns now; the descriptor itself is closed by Reap.
      shutdown(c->fd, SHUT_RDWR);
    } else if (tls_ || std::memcmp(first, kHttp2Preface, 4) == 0) {
      // With TLS, gRPC checks the handshake itself and drops what is not TLS.
      MutexLock g(mu_);
      if (grpc_open_) {
        // gRPC's event engine expects a non-blocking socket.
        fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL, 0) | O_NONBLOCK);
        if (grpc_tls_) {
          grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters params;
          params.listener_fd = listener_fd_;
          params.fd = c->fd;
          grpc_tls_->HandleNewConnection(&params);
        } else {
          grpc::AddInsecureChannelFromFd(server_.get(), c->fd);
        }
        c->to_grpc = true;
      }
    } else {
      shutdown(c->fd, SHUT_RDWR);  // neither plane's bytes: hang up at once
    }
  } else {
    shutdown(c->fd, SHUT_RDWR);  // silent, or gone before four bytes came
  }
  c->done.store(true);
}

void PsServer::Reap() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (!it->done.load()) {
      ++it;
      continue;
    }
    it->thread.join();
    if (!it->to_grpc) close(it->fd);
    it = connections_.erase(it);
  }
}

void PsServer::Stop(std::chrono::milliseconds grace) {
  {
    MutexLock g(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  stopping_.store(true);
  const uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof one);
  acceptor_.join();
  listener_.Reset();
  // Data connections: idle ones close now; one in the middle of a request
  // gets until the grace period ends to finish it.
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (true) {
    bool waiting = false;
    {
      MutexLock g(mu_);
      const bool late = std::chrono::steady_clock::now() >= deadline;
      for (Connection& c : connections_) {
        if (c.done.load() || c.to_grpc) continue;
        if (c.busy.load() && !late) {
          waiting = true;
        } else {
          shutdown(c.fd, SHUT_RDWR);
        }
      }
      if (!waiting) grpc_open_ = false;
    }
    if (!waiting) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // A short deadline lets the Shutdown RPC that triggered this complete.
  server_->Shutdown(std::chrono::system_clock::now() + grace);
  server_->Wait();
  // Joined outside mu_: a connection thread may still be waiting for it.
  std::list<Connection> rest;
  {
    MutexLock g(mu_);
    rest.splice(rest.end(), connections_);
  }
  for (Connection& c : rest) {
    c.thread.join();
    if (!c.to_grpc) close(c.fd);
  }
}

}  // namespace tfjob::ps
