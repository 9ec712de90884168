// PsClient's pool of data-plane connections: opening one (the TLS preface,
// the hello with the task token, shared memory with a PS on the same host),
// taking an idle one (a readable idle connection is a PS that went away),
// giving it back, and opening several ahead of the first step.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>

#include "common/mutex.h"
#include "services/net/net.h"
#include "services/ps/ps_client.h"
#include "services/ps/ps_connection.h"
#include "services/ps/ps_service.h"
#include "services/ps/shm.h"

namespace tfjob::ps {

using wire::Clock;

namespace {

// One connection attempt to every address `address` resolves to, blocking,
// bounded by `deadline`. UNAVAILABLE when none answers (retryable).
StatusOr<net::Fd> ConnectOnce(const std::string& address, Clock::time_point deadline) {
  ASSIGN_OR_RETURN(net::HostPort hp, net::SplitAddress(address));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(hp.host.c_str(), std::to_string(hp.port).c_str(), &hints, &res);
  // DNS names of pods appear only once the pod exists: retryable, like a refusal.
  if (rc != 0) return Unavailable("resolving " + address + ": " + gai_strerror(rc));
  std::string last = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    net::Fd fd(socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      last = std::strerror(errno);
      continue;
    }
    // A blocking connect gives up after SO_SNDTIMEO.
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()).count();
    timeval tv{static_cast<time_t>(std::max<int64_t>(left, 1000) / 1000000),
               static_cast<suseconds_t>(std::max<int64_t>(left, 1000) % 1000000)};
    setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) {
      const int one = 1;
      setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      freeaddrinfo(res);
      return fd;
    }
    last = errno == EINPROGRESS ? "timed out" : std::strerror(errno);
  }
  freeaddrinfo(res);
  return Unavailable("connecting to " + address + ": " + last);
}

}  // namespace

StatusOr<std::unique_ptr<PsClient::Connection>> PsClient::TakeConnection(Clock::time_point deadline) {
  {
    MutexLock g(mu_);
    while (!idle_.empty()) {
      std::unique_ptr<Connection> c = std::move(idle_.back());
      idle_.pop_back();
      // The PS never speaks first: anything readable on an idle connection
      // is its end (a restarted or stopped PS).
      if (!net::Readable(c->fd)) {
        c->deadline = deadline;
        return c;
      }
    }
  }
  return Connect(deadline);
}

StatusOr<std::unique_ptr<PsClient::Connection>> PsClient::Connect(Clock::time_point deadline) {
  auto c = std::make_unique<Connection>();
  c->deadline = deadline;
  ASSIGN_OR_RETURN(c->fd, ConnectOnce(address_, deadline));
  if (const auto& tls = options_.credentials.tls) {
    uint32_t magic = wire::kTlsMagic;
    iovec preface{&magic, sizeof magic};
    RETURN_IF_ERROR(wire::SendAll(c->fd, {&preface, 1}, deadline, address_));
    RETURN_IF_ERROR(net::StartTls(c->fd, *tls, tls::Role::kClient, deadline, "parameter server " + address_));
  }
  const std::string& token = options_.credentials.token;
  const bool try_shm = options_.shared_memory_bytes > 0 && !options_.credentials.tls && !shm_refused_.load();
  wire::Frame hello{wire::kHelloMagic, wire::kVersion, static_cast<uint32_t>(token.size()),
                    try_shm ? wire::kHelloAsksHostKey : 0, 0};
  iovec iov[2] = {{&hello, sizeof hello}, {const_cast<char*>(token.data()), token.size()}};
  RETURN_IF_ERROR(wire::SendAll(c->fd, iov, deadline, address_));
  wire::Frame answer;
  RETURN_IF_ERROR(wire::RecvFrame(c->fd, &answer, deadline, address_));
  if (answer.magic != wire::kResponseMagic || answer.meta_bytes > wire::kMaxMetaBytes || answer.payload_bytes != 0) {
    return Internal(address_ + " does not speak the parameter server's data plane");
  }
  std::string meta(answer.meta_bytes, '\0');
  RETURN_IF_ERROR(wire::RecvAll(c->fd, meta.data(), meta.size(), deadline, address_));
  if (answer.kind != 0) return Status(static_cast<Code>(answer.kind), meta);
  // The PS's host key: the same as ours means it can map our region.
  if (try_shm && !meta.empty() && meta == shm::HostKey()) RETURN_IF_ERROR(AttachSharedMemory(*c));
  return c;
}

Status PsClient::AttachSharedMemory(Connection& c) {
  auto made = shm::Region::Create(options_.shared_memory_bytes + shm::kHeaderBytes);
  if (!made.ok()) {
    shm_refused_.store(true);
    return Status::Ok();
  }
  std::unique_ptr<shm::Region> region = std::move(made).value();
  proto::AttachShmRequest req;
  req.set_name(region->name());
  req.set_bytes(region->bytes());
  req.set_nonce(region->nonce());
  const std::string meta = req.SerializeAsString();
  wire::Frame f{wire::kRequestMagic, static_cast<uint32_t>(wire::Op::kAttachShm), static_cast<uint32_t>(meta.size()), 0,
                0};
  iovec iov[2] = {{&f, sizeof f}, {const_cast<char*>(meta.data()), meta.size()}};
  RETURN_IF_ERROR(wire::SendAll(c.fd, iov, c.deadline, address_));
  wire::Frame r;
  RETURN_IF_ERROR(wire::RecvFrame(c.fd, &r, c.deadline, address_));
  if (r.magic != wire::kResponseMagic || r.meta_bytes > wire::kMaxMetaBytes || r.payload_bytes != 0) {
    return Internal(address_ + ": malformed AttachShm response");
  }
  std::string answer(r.meta_bytes, '\0');
  RETURN_IF_ERROR(wire::RecvAll(c.fd, answer.data(), answer.size(), c.deadline, address_));
  // Mapped by the PS or not, the name is no longer needed.
  region->Unlink();
  if (r.kind != 0) {
    // A PS that cannot map it (or predates shared memory) will not later.
    shm_refused_.store(true);
    return Status::Ok();
  }
  c.region = std::move(region);
  shm_connections_.fetch_add(1);
  return Status::Ok();
}

Status PsClient::Open(size_t connections, std::chrono::milliseconds within) {
  const auto deadline = Clock::now() + within;
  {
    MutexLock g(mu_);
    if (idle_.size() >= connections) return Status::Ok();
    connections -= idle_.size();
  }
  std::vector<std::unique_ptr<Connection>> opened;
  Status s;
  for (size_t i = 0; i < connections && s.ok(); ++i) {
    auto c = Connect(deadline);
    if (c.ok()) {
      opened.push_back(std::move(c).value());
    } else {
      s = c.status();
    }
  }
  for (auto& c : opened) GiveBack(std::move(c));
  return s;
}

void PsClient::GiveBack(std::unique_ptr<Connection> c) {
  MutexLock g(mu_);
  idle_.push_back(std::move(c));
}

}  // namespace tfjob::ps
