#include "services/ps/ps_client.h"
#include "services/ps/ps_connection.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "common/mutex.h"
#include "services/net/net.h"
#include "services/ps/ps_service.h"
#include "services/ps/shm.h"

namespace tfjob::ps {

using wire::Clock;

namespace {

// A refused request is answered before its payload is read; when the PS
// closes instead of reading on, this is how long to look for its answer.
constexpr auto kAnswerAfterBrokenSend = std::chrono::seconds(1);

std::atomic<bool> g_shared_memory{true};

ClientOptions WithProcessSettings(ClientOptions o) {
  if (!g_shared_memory.load(std::memory_order_relaxed)) o.shared_memory_bytes = 0;
  return o;
}

}  // namespace

void SetSharedMemory(bool on) { g_shared_memory.store(on, std::memory_order_relaxed); }

PsClient::PsClient(std::string address, ClientOptions options)
    : address_(std::move(address)), options_(WithProcessSettings(options)), stub_(address_, options_.credentials) {}

PsClient::~PsClient() = default;

template <typename Req, typename Resp, typename Fn>
Status PsClient::Call(const char* what, const Req& req, Resp* resp, Fn fn, bool read_only) {
  const std::string context = std::string(what) + " on parameter server " + address_;
  return rpc::CallWithRetry(address_, options_.retry, [&]() {
    auto ctx = rpc::Context(options_.timeout, options_.credentials);
    const auto stub = stub_.Get();
    const grpc::Status st = (stub.get()->*fn)(ctx.get(), req, resp);
    if (stub_.Observe(stub, st) && read_only) {
      return Unavailable(context + ": not connected within " + std::to_string(options_.timeout.count()) + " ms");
    }
    return rpc::FromGrpc(st, context);
  });
}

Status PsClient::SendRequest(Connection& c, uint32_t op, const std::string& meta_bytes,
                             std::span<const Tensor> payload) {
  uint64_t payload_bytes = 0;
  for (const Tensor& t : payload) payload_bytes += t.bytes();
  wire::Frame f{wire::kRequestMagic, op, static_cast<uint32_t>(meta_bytes.size()), 0, payload_bytes};
  std::vector<iovec> iov;
  iov.reserve(2 + payload.size());
  iov.push_back({&f, sizeof f});
  iov.push_back({const_cast<char*>(meta_bytes.data()), meta_bytes.size()});
  if (c.region && payload_bytes > 0 && payload_bytes <= c.region->capacity()) {
    size_t at = 0;
    for (const Tensor& t : payload) {
      std::memcpy(c.region->payload() + at, t.raw(), t.bytes());
      at += t.bytes();
    }
    f.reserved |= wire::kPayloadInShm;
  } else {
    for (const Tensor& t : payload) iov.push_back({const_cast<std::byte*>(t.raw()), t.bytes()});
  }
  return wire::SendAll(c.fd, iov, c.deadline, address_);
}

Status PsClient::ReadResponse(std::unique_ptr<Connection> c, const Status& sent, const std::string& context,
                              const OnResponse& on_response) {
  const net::Fd& fd = c->fd;
  // Even when sending failed the PS may have answered: it refuses a bad
  // request before reading its payload, and may then close.
  wire::Frame r;
  const Status got = wire::RecvFrame(
      fd, &r, sent.ok() ? c->deadline : std::min(c->deadline, Clock::now() + kAnswerAfterBrokenSend), address_);
  if (!got.ok()) {
    const Status& why = sent.ok() ? got : sent;
    return Status(why.code(), context + ": " + why.message());
  }
  if (r.magic != wire::kResponseMagic || r.meta_bytes > wire::kMaxMetaBytes) {
    return Internal(context + ": malformed response");
  }
  std::string rmeta(r.meta_bytes, '\0');
  if (Status s = wire::RecvAll(fd, rmeta.data(), rmeta.size(), c->deadline, address_); !s.ok()) {
    return Status(s.code(), context + ": " + s.message());
  }
  if (r.kind != 0) {
    if (sent.ok() && r.payload_bytes == 0) GiveBack(std::move(c));
    return Status(static_cast<Code>(r.kind), context + ": " + rmeta);
  }
  if (!sent.ok()) return Status(sent.code(), context + ": " + sent.message());
  c->response_shm = nullptr;
  if (r.reserved & wire::kPayloadInShm) {
    if (!c->region || r.payload_bytes > c->region->capacity()) {
      return Internal(context + ": a response's payload in shared memory this connection does not have");
    }
    c->response_shm = c->region->payload();
    c->response_bytes = r.payload_bytes;
    c->response_at = 0;
  }
  Status s = on_response(*c, rmeta, r.payload_bytes);
  if (!s.ok()) return Status(s.code(), context + ": " + s.message());
  GiveBack(std::move(c));
  return Status::Ok();
}

StatusOr<std::string> PsClient::SerializeMeta(const std::string& context, const google::protobuf::MessageLite& meta) {
  std::string meta_bytes = meta.SerializeAsString();
  if (meta_bytes.size() > wire::kMaxMetaBytes) {
    return InvalidArgument(context + ": request meta of " + std::to_string(meta_bytes.size()) + " bytes is too large");
  }
  return meta_bytes;
}

Status PsClient::DataCall(const char* what, uint32_t op, const google::protobuf::MessageLite& meta,
                          std::span<const Tensor> payload, const OnResponse& on_response) {
  const std::string context = std::string(what) + " on parameter server " + address_;
  ASSIGN_OR_RETURN(std::string meta_bytes, SerializeMeta(context, meta));
  return Retried(context, op, meta_bytes, payload, on_response);
}

Status PsClient::Retried(const std::string& context, uint32_t op, const std::string& meta_bytes,
                         std::span<const Tensor> payload, const OnResponse& on_response) {
  return rpc::CallWithRetry(address_, options_.retry, [&]() -> Status {
    auto taken = TakeConnection(Clock::now() + options_.timeout);
    if (!taken.ok()) return Status(taken.status().code(), context + ": " + taken.status().message());
    std::unique_ptr<Connection> c = std::move(taken).value();
    const Status sent = SendRequest(*c, op, meta_bytes, payload);
    return ReadResponse(std::move(c), sent, context, on_response);
  });
}

PsClient::Pending::Pending() = default;
PsClient::Pending::~Pending() = default;

std::unique_ptr<PsClient::Pending> PsClient::Start(const char* what, uint32_t op, std::string meta_bytes,
                                                   std::vector<Tensor> payload, OnResponse on_response,
                                                   std::shared_ptr<int> duplicates) {
  auto p = std::make_unique<Pending>();
  p->context = std::string(what) + " on parameter server " + address_;
  p->op = op;
  p->meta_bytes = std::move(meta_bytes);
  p->payload = std::move(payload);
  p->on_response = std::move(on_response);
  p->duplicates = std::move(duplicates);
  auto taken = TakeConnection(Clock::now() + options_.timeout);
  if (!taken.ok()) return p;
  p->c = std::move(taken).value();
  p->sent = SendRequest(*p->c, p->op, p->meta_bytes, p->payload);
  return p;
}

StatusOr<int> PsClient::Finish(std::unique_ptr<Pending> p) {
  Status s = Unavailable("not started");
  if (p->c) {
    // The time to wait for the answer counts from now: the caller may
    // have worked long since Start.
    p->c->deadline = Clock::now() + options_.timeout;
    s = ReadResponse(std::move(p->c), p->sent, p->context, p->on_response);
  }
  // A broken exchange is retried whole, as DataCall would have: a push
  // sent twice is applied once.
  if (s.code() == Code::kUnavailable) s = Retried(p->context, p->op, p->meta_bytes, p->payload, p->on_response);
  RETURN_IF_ERROR(s);
  return p->duplicates ? *p->duplicates : 0;
}

Status PsClient::ReceiveTensor(Connection& c, const proto::Tensor& header, Tensor* out, Tensor* allocated) {
  ASSIGN_OR_RETURN(wire::Described d, wire::Describe(header, UINT64_MAX));
  Tensor* into = out;
  if (!into) {
    ASSIGN_OR_RETURN(*allocated, Tensor::CreateUninitialized(d.dtype, d.shape));
    into = allocated;
  } else if (into->dtype() != d.dtype || into->shape() != d.shape) {
    return InvalidArgument("the parameter server sent " + std::string(DTypeName(d.dtype)) + ShapeString(d.shape) +
                           ", the destination is " + into->DebugString());
  }
  if (!c.response_shm) return wire::RecvAll(c.fd, into->raw(), static_cast<size_t>(d.bytes), c.deadline, address_);
  if (d.bytes > c.response_bytes - c.response_at) return Internal("response tensors overrun its payload");
  std::memcpy(into->raw(), c.response_shm + c.response_at, static_cast<size_t>(d.bytes));
  c.response_at += d.bytes;
  return Status::Ok();
}

namespace {

// The bytes a response's tensors need, checked against what it carries
// before anything is allocated for them.
Status CheckPayload(const google::protobuf::RepeatedPtrField<proto::Tensor>& values, uint64_t payload_bytes) {
  uint64_t need = 0;
  for (const proto::Tensor& h : values) {
    ASSIGN_OR_RETURN(wire::Described d, wire::Describe(h, UINT64_MAX));
    need += d.bytes;
  }
  if (need != payload_bytes) {
    return Internal("response tensors need " + std::to_string(need) + " bytes, it carries " +
                    std::to_string(payload_bytes));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<bool> PsClient::CreateVariable(const std::string& name, const Tensor& initial,
                                        const std::optional<model::OptimizerSpec>& optimizer) {
  proto::CreateVariableRequest req;
  req.set_name(name);
  wire::HeaderOf(initial, req.mutable_initial_value());
  if (optimizer) *req.mutable_optimizer() = OptimizerToProto(*optimizer);
  bool created = false;
  RETURN_IF_ERROR(DataCall("CreateVariable", static_cast<uint32_t>(wire::Op::kCreateVariable), req, {&initial, 1},
                           [&](Connection&, const std::string& meta, uint64_t) -> Status {
                             proto::CreateVariableResponse resp;
                             if (!resp.ParseFromString(meta)) return Internal("malformed response");
                             created = resp.created();
                             return Status::Ok();
                           }));
  return created;
}

Status PsClient::PullInto(const std::vector<std::string>& names, std::span<Tensor> out) {
  ASSIGN_OR_RETURN(std::unique_ptr<Pending> p, StartPullInto(names, out));
  return Finish(std::move(p)).status();
}

StatusOr<std::vector<Tensor>> PsClient::Pull(const std::vector<std::string>& names) {
  proto::PullRequest req;
  for (const auto& n : names) req.add_names(n);
  std::vector<Tensor> out;
  RETURN_IF_ERROR(DataCall("Pull", static_cast<uint32_t>(wire::Op::kPull), req, {},
                           [&](Connection& c, const std::string& meta, uint64_t payload_bytes) -> Status {
                             proto::PullResponse resp;
                             if (!resp.ParseFromString(meta)) return Internal("malformed response");
                             if (resp.values_size() != static_cast<int>(names.size())) {
                               return Internal("wrong number of values");
                             }
                             RETURN_IF_ERROR(CheckPayload(resp.values(), payload_bytes));
                             out.assign(names.size(), Tensor());
                             for (int i = 0; i < resp.values_size(); ++i) {
                               RETURN_IF_ERROR(ReceiveTensor(c, resp.values(i), nullptr, &out[static_cast<size_t>(i)]));
                             }
                             return Status::Ok();
                           }));
  return out;
}

Status PsClient::PullRowsInto(const std::string& name, const std::vector<int64_t>& rows, Tensor& out) {
  ASSIGN_OR_RETURN(std::unique_ptr<Pending> p, StartPullRowsInto(name, rows, out));
  return Finish(std::move(p)).status();
}

StatusOr<Tensor> PsClient::PullRows(const std::string& name, const std::vector<int64_t>& rows) {
  proto::PullRequest req;
  req.add_names(name);
  for (int64_t r : rows) req.add_rows(r);
  Tensor out;
  RETURN_IF_ERROR(DataCall("Pull", static_cast<uint32_t>(wire::Op::kPull), req, {},
                           [&](Connection& c, const std::string& meta, uint64_t payload_bytes) -> Status {
                             proto::PullResponse resp;
                             if (!resp.ParseFromString(meta) || resp.values_size() != 1)
                               return Internal("malformed response");
                             RETURN_IF_ERROR(CheckPayload(resp.values(), payload_bytes));
                             return ReceiveTensor(c, resp.values(0), nullptr, &out);
                           }));
  return out;
}

namespace {

// The request of a Push, and its payload (the updates' tensors, in order).
Status BuildPush(uint64_t closure_id, uint32_t sequence, const std::vector<Update>& updates, uint64_t generation,
                 proto::PushRequest& req, std::vector<Tensor>& payload) {
  req.set_closure_id(closure_id);
  req.set_coordinator_incarnation(generation);
  req.set_sequence(sequence);
  payload.reserve(updates.size());
  for (const Update& u : updates) {
    proto::Update* p = req.add_updates();
    p->set_name(u.name);
    p->set_kind(u.kind == Update::Kind::kApplyGradient ? proto::Update::APPLY_GRADIENT
                : u.kind == Update::Kind::kAssignAdd   ? proto::Update::ASSIGN_ADD
                                                       : proto::Update::ASSIGN);
    wire::HeaderOf(u.value, p->mutable_value());
    if (u.rows) {
      if (u.rows->dtype() != DType::kInt64) return InvalidArgument("Push \"" + u.name + "\": rows must be int64");
      for (int64_t r : u.rows->flat<int64_t>()) p->add_rows(r);
    }
    payload.push_back(u.value);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<int> PsClient::Push(uint64_t closure_id, uint32_t sequence, const std::vector<Update>& updates,
                             uint64_t generation) {
  ASSIGN_OR_RETURN(std::unique_ptr<Pending> p, StartPush(closure_id, sequence, updates, generation));
  return Finish(std::move(p));
}

StatusOr<std::unique_ptr<PsClient::Pending>> PsClient::StartPush(uint64_t closure_id, uint32_t sequence,
                                                                 const std::vector<Update>& updates,
                                                                 uint64_t generation) {
  proto::PushRequest req;
  std::vector<Tensor> payload;
  RETURN_IF_ERROR(BuildPush(closure_id, sequence, updates, generation, req, payload));
  ASSIGN_OR_RETURN(std::string meta, SerializeMeta("Push on parameter server " + address_, req));
  auto duplicates = std::make_shared<int>(0);
  return Start(
      "Push", static_cast<uint32_t>(wire::Op::kPush), std::move(meta), std::move(payload),
      [duplicates](Connection&, const std::string& meta, uint64_t payload_bytes) -> Status {
        proto::PushResponse resp;
        if (!resp.ParseFromString(meta) || payload_bytes != 0) return Internal("malformed response");
        *duplicates = resp.duplicates();
        return Status::Ok();
      },
      duplicates);
}

PsClient::OnResponse PsClient::PullReader(size_t count, std::span<Tensor> out, std::shared_ptr<int> duplicates) {
  return [this, count, out, duplicates](Connection& c, const std::string& meta, uint64_t payload_bytes) -> Status {
    const google::protobuf::RepeatedPtrField<proto::Tensor>* values = nullptr;
    proto::PushPullResponse push_pull;
    proto::PullResponse pull;
    if (duplicates) {
      if (!push_pull.ParseFromString(meta)) return Internal("malformed response");
      values = &push_pull.pull().values();
    } else {
      if (!pull.ParseFromString(meta)) return Internal("malformed response");
      values = &pull.values();
    }
    if (values->size() != static_cast<int>(count)) return Internal("wrong number of values");
    RETURN_IF_ERROR(CheckPayload(*values, payload_bytes));
    for (int i = 0; i < values->size(); ++i) {
      RETURN_IF_ERROR(ReceiveTensor(c, values->Get(i), &out[static_cast<size_t>(i)], nullptr));
    }
    if (duplicates) *duplicates = push_pull.push().duplicates();
    return Status::Ok();
  };
}

StatusOr<int> PsClient::PushPullInto(uint64_t closure_id, uint32_t sequence, const std::vector<Update>& updates,
                                     uint64_t generation, const std::vector<std::string>& names,
                                     std::span<Tensor> out) {
  ASSIGN_OR_RETURN(std::unique_ptr<Pending> p,
                   StartPushPullInto(closure_id, sequence, updates, generation, names, out));
  return Finish(std::move(p));
}

StatusOr<std::unique_ptr<PsClient::Pending>> PsClient::StartPushPullInto(uint64_t closure_id, uint32_t sequence,
                                                                         const std::vector<Update>& updates,
                                                                         uint64_t generation,
                                                                         const std::vector<std::string>& names,
                                                                         std::span<Tensor> out) {
  if (out.size() != names.size()) {
    return InvalidArgument("PushPull: " + std::to_string(names.size()) + " names, " + std::to_string(out.size()) +
                           " destinations");
  }
  proto::PushPullRequest req;
  std::vector<Tensor> payload;
  RETURN_IF_ERROR(BuildPush(closure_id, sequence, updates, generation, *req.mutable_push(), payload));
  for (const auto& n : names) req.mutable_pull()->add_names(n);
  ASSIGN_OR_RETURN(std::string meta, SerializeMeta("PushPull on parameter server " + address_, req));
  auto duplicates = std::make_shared<int>(0);
  return Start("PushPull", static_cast<uint32_t>(wire::Op::kPushPull), std::move(meta), std::move(payload),
               PullReader(names.size(), out, duplicates), duplicates);
}

StatusOr<std::unique_ptr<PsClient::Pending>> PsClient::StartPullRowsInto(const std::string& name,
                                                                         const std::vector<int64_t>& rows,
                                                                         Tensor& out) {
  proto::PullRequest req;
  req.add_names(name);
  for (int64_t r : rows) req.add_rows(r);
  ASSIGN_OR_RETURN(std::string meta, SerializeMeta("Pull on parameter server " + address_, req));
  return Start("Pull", static_cast<uint32_t>(wire::Op::kPull), std::move(meta), {},
               PullReader(1, std::span<Tensor>(&out, 1), nullptr), nullptr);
}

StatusOr<std::unique_ptr<PsClient::Pending>> PsClient::StartPullInto(const std::vector<std::string>& names,
                                                                     std::span<Tensor> out) {
  if (out.size() != names.size()) {
    return InvalidArgument("Pull: " + std::to_string(names.size()) + " names, " + std::to_string(out.size()) +
                           " destinations");
  }
  proto::PullRequest req;
  for (const auto& n : names) req.add_names(n);
  ASSIGN_OR_RETURN(std::string meta, SerializeMeta("Pull on parameter server " + address_, req));
  return Start("Pull", static_cast<uint32_t>(wire::Op::kPull), std::move(meta), {},
               PullReader(names.size(), out, nullptr), nullptr);
}

StatusOr<int64_t> PsClient::Save(int64_t step, uint64_t generation) {
  proto::SaveRequest req;
  req.set_step(step);
  req.set_coordinator_incarnation(generation);
  proto::SaveResponse resp;
  RETURN_IF_ERROR(Call("Save", req, &resp, &proto::ParameterServer::Stub::Save));
  return resp.bytes();
}

StatusOr<int> PsClient::Restore(int64_t step, uint64_t generation) {
  proto::RestoreRequest req;
  req.set_step(step);
  req.set_coordinator_incarnation(generation);
  proto::RestoreResponse resp;
  RETURN_IF_ERROR(Call("Restore", req, &resp, &proto::ParameterServer::Stub::Restore));
  return resp.variables();
}

StatusOr<PsStatus> PsClient::GetStatus() {
  proto::StatusRequest req;
  proto::StatusResponse resp;
  RETURN_IF_ERROR(Call("GetStatus", req, &resp, &proto::ParameterServer::Stub::GetStatus, /*read_only=*/true));
  return PsStatus{
      resp.incarnation(), {resp.variables().begin(), resp.variables().end()}, resp.applied_updates(), resp.fence()};
}

StatusOr<FenceResult> PsClient::Fence(uint64_t generation, uint32_t proposed_namespace) {
  proto::FenceRequest req;
  req.set_coordinator_incarnation(generation);
  req.set_closure_namespace(proposed_namespace);
  proto::FenceResponse resp;
  RETURN_IF_ERROR(Call("Fence", req, &resp, &proto::ParameterServer::Stub::Fence));
  return FenceResult{resp.previous(), resp.closure_namespace()};
}

Status PsClient::Shutdown(uint64_t generation) {
  proto::ShutdownRequest req;
  req.set_coordinator_incarnation(generation);
  proto::ShutdownResponse resp;
  return Call("Shutdown", req, &resp, &proto::ParameterServer::Stub::Shutdown);
}

}  // namespace tfjob::ps
