#include "services/rpc/rpc.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

namespace tfjob::rpc {

void TensorToProto(const Tensor& t, proto::Tensor* out) {
  out->set_dtype(t.dtype() == DType::kInt64 ? proto::DTYPE_INT64 : proto::DTYPE_FLOAT32);
  out->clear_shape();
  for (int64_t d : t.shape()) out->add_shape(d);
  // assign() copies once; set_data(ptr, n) builds a temporary string first.
  out->mutable_data()->assign(reinterpret_cast<const char*>(t.raw()), t.bytes());
}

StatusOr<Tensor> TensorFromProto(const proto::Tensor& p) {
  DType dtype;
  switch (p.dtype()) {
    case proto::DTYPE_FLOAT32: dtype = DType::kFloat32; break;
    case proto::DTYPE_INT64: dtype = DType::kInt64; break;
    default: return InvalidArgument("tensor has invalid dtype " + std::to_string(p.dtype()));
  }
  Shape shape(p.shape().begin(), p.shape().end());
  // The claimed shape is checked against the bytes that came before anything
  // is allocated: a few bytes on the wire must not buy gigabytes.
  const int64_t n = NumElements(shape);
  if (n < 0 || static_cast<uint64_t>(n) != p.data().size() / DTypeSize(dtype) ||
      p.data().size() % DTypeSize(dtype) != 0) {
    return InvalidArgument("tensor " + std::string(DTypeName(dtype)) + ShapeString(shape) + " does not match its " +
                           std::to_string(p.data().size()) + " bytes of data");
  }
  ASSIGN_OR_RETURN(Tensor t, Tensor::CreateUninitialized(dtype, shape));
  if (t.bytes()) std::memcpy(t.raw(), p.data().data(), t.bytes());
  return t;
}

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(s.code())), s.message());
}

Status FromGrpc(const grpc::Status& s, const std::string& context) {
  if (s.ok()) return Status::Ok();
  return Status(static_cast<Code>(static_cast<int>(s.error_code())), context + ": " + s.error_message());
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const Credentials& credentials) {
  if (!credentials.tls) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = credentials.tls->pem().ca_pem;
  o.pem_key_cert_pairs.push_back({credentials.tls->pem().key_pem, credentials.tls->pem().cert_pem});
  return grpc::SslServerCredentials(o);
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const Credentials& credentials) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Reconnect quickly after a peer restarts instead of gRPC's long default
  // backoff. GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is not a backoff but the time
  // one connection attempt (TCP and the HTTP/2 settings exchange) may take:
  // it stays at gRPC's 20 s, or a loaded machine whose peer answers in more
  // than a few hundred milliseconds never gets a connection at all.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  if (!credentials.tls) return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = credentials.tls->pem().ca_pem;
  o.pem_private_key = credentials.tls->pem().key_pem;
  o.pem_cert_chain = credentials.tls->pem().cert_pem;
  // A task's certificate names no host (its address changes with every
  // restart) but the job's task name, which only the job's CA signs.
  args.SetSslTargetNameOverride(pki::kTaskServerName);
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(o), args);
}

std::unique_ptr<grpc::ClientContext> Context(std::chrono::milliseconds timeout, const Credentials& credentials) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  Attach(*ctx, credentials);
  return ctx;
}

Status CallWithRetry(const std::string& address, const RetryPolicy& policy, const std::function<Status()>& call) {
  auto backoff = policy.initial_backoff;
  const auto start = std::chrono::steady_clock::now();
  const bool timed = policy.total_timeout.count() > 0;
  Status last;
  int attempt = 0;
  while (true) {
    ++attempt;
    last = call();
    if (last.ok() || last.code() != Code::kUnavailable) return last;
    const auto elapsed = std::chrono::steady_clock::now() - start;
    if (timed ? elapsed + backoff >= policy.total_timeout : attempt >= policy.max_attempts) break;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(
        policy.max_backoff,
        std::chrono::milliseconds(static_cast<int64_t>(static_cast<double>(backoff.count()) * policy.multiplier)));
  }
  return Unavailable(address + " unreachable after " + std::to_string(attempt) + " attempts: " + last.message());
}

StatusOr<std::unique_ptr<Server>> StartServer(const std::string& address, const std::vector<grpc::Service*>& services,
                                              int* bound_port, const Credentials& credentials) {
  std::unique_ptr<Server> s(new Server());
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // gRPC's sync server starts a polling thread whenever a call leaves fewer
  // than MIN_POLLERS idle, and ends one that finds MAX_POLLERS idle when its
  // call returns (gRPC's defaults: 1 and 2). A worker's closures run for a
  // while, up to three at a time (two running, one sent ahead), so a small
  // MAX_POLLERS ends the threads that the next closures start again: with
  // 4, a steps/exec-1 job started a thread every ninth closure or so
  // (`perf stat -e task:task_newtask`: 289 threads in 2,000 steps against
  // 73). Idle threads cost a stack and nothing else; the threads a server
  // keeps are bounded by the most calls it ever ran at once, plus 2.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 2);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 16);
  int port = 0;
  if (address.rfind("fd:", 0) == 0) {
    char* end = nullptr;
    const long fd = std::strtol(address.c_str() + 3, &end, 10);
    int listening = 0;
    socklen_t len = sizeof listening;
    sockaddr_storage ss{};
    socklen_t ss_len = sizeof ss;
    if (address.size() == 3 || *end != '\0' || fd < 0 || fd > INT32_MAX ||
        getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening ||
        getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&ss), &ss_len) != 0) {
      return InvalidArgument("server address \"" + address + "\" is not a listening socket");
    }
    s->listen_fd_ = static_cast<int>(fd);
    port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                    : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    s->acceptor_ = builder.experimental().AddExternalConnectionAcceptor(
        grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, ServerCredentials(credentials));
  } else {
    builder.AddListeningPort(address, ServerCredentials(credentials), &port);
  }
  for (grpc::Service* svc : services) builder.RegisterService(svc);
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || port == 0) return Unavailable("cannot listen on " + address);
  if (s->acceptor_) {
    if (pipe2(s->wake_, O_CLOEXEC) != 0) return Internal(std::string("pipe: ") + std::strerror(errno));
    s->accepting_ = std::thread([raw = s.get()] { raw->AcceptLoop(); });
  }
  if (bound_port) *bound_port = port;
  return s;
}

void Server::AcceptLoop() {
  while (true) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents != 0) return;
    // Non-blocking, as gRPC's own accepted sockets are.
    const int c = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c < 0) {
      // Out of descriptors: let some close instead of spinning.
      if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters params;
    params.listener_fd = listen_fd_;
    params.fd = c;  // gRPC owns it from here
    acceptor_->HandleNewConnection(&params);
  }
}

void Server::StopAccepting() {
  if (accepting_.joinable()) {
    const char byte = 0;
    (void)!write(wake_[1], &byte, 1);
    accepting_.join();
  }
}

void Server::Shutdown(std::chrono::system_clock::time_point deadline) {
  // No connection is handed to a server that is shutting down.
  StopAccepting();
  server_->Shutdown(deadline);
}

Server::~Server() {
  StopAccepting();
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }
  for (int fd : {wake_[0], wake_[1], listen_fd_}) {
    if (fd >= 0) close(fd);
  }
}

uint64_t NewIncarnation() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return v;
}

}  // namespace tfjob::rpc
