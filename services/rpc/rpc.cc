#include "services/rpc/rpc.h"

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
  if (n < 0 || static_cast<uint64_t>(n) != p.data().size() / DTypeSize(dtype) || p.data().size() % DTypeSize(dtype) != 0) {
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

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
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
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
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
    backoff = std::min(policy.max_backoff,
                       std::chrono::milliseconds(static_cast<int64_t>(static_cast<double>(backoff.count()) * policy.multiplier)));
  }
  return Unavailable(address + " unreachable after " + std::to_string(attempt) + " attempts: " + last.message());
}

StatusOr<std::unique_ptr<grpc::Server>> StartServer(const std::string& address,
                                                    const std::vector<grpc::Service*>& services, int* bound_port) {
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  int port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  for (grpc::Service* s : services) builder.RegisterService(s);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) return Unavailable("cannot listen on " + address);
  if (bound_port) *bound_port = port;
  return server;
}

uint64_t NewIncarnation() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return v;
}

}  // namespace tfjob::rpc
