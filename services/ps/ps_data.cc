// The PS's data plane (wire.h): the connection (hello, frames, shared
// memory), CreateVariable and Pull, tensors sent from the variables' memory
// and received into per-connection staging tensors that are kept between
// requests. Pushes are in ps_push.cc.
#include <algorithm>
#include <cstring>

#include "common/mutex.h"
#include "services/ps/data_call.h"
#include "services/ps/ps_service.h"
#include "services/ps/shm.h"
#include "services/tensor/eigen.h"
#include "services/tensor/ops.h"

namespace tfjob::ps {
namespace {

using wire::Clock;

// A refused request's payload up to this size is read and dropped, so the
// connection stays usable; a larger one closes the connection instead.
constexpr uint64_t kMaxDiscardBytes = 64u << 20;
// Bytes received per read while a staging tensor still has to grow: what
// is allocated stays within twice what has arrived.
constexpr uint64_t kGrowChunkBytes = 4u << 20;
constexpr auto kHelloTimeout = std::chrono::seconds(10);

const char* OpName(uint32_t op) {
  switch (static_cast<wire::Op>(op)) {
    case wire::Op::kCreateVariable: return "CreateVariable";
    case wire::Op::kPull: return "Pull";
    case wire::Op::kPush: return "Push";
    case wire::Op::kPushPull: return "PushPull";
    case wire::Op::kAttachShm: return "AttachShm";
  }
  return "Unknown";
}

// A tensor of `dtype` with room for at least `elems` elements, reusing
// `t` when it is big enough (contents kept up to `keep` elements).
StatusOr<Tensor> Reserve(Tensor t, DType dtype, int64_t elems, int64_t keep) {
  if (t.dtype() == dtype && t.size() >= elems) return t;
  const int64_t cap = std::max<int64_t>({elems, t.dtype() == dtype ? 2 * t.size() : 0, 1024});
  ASSIGN_OR_RETURN(Tensor grown, Tensor::CreateUninitialized(dtype, {cap}));
  if (t.dtype() == dtype && keep > 0) std::memcpy(grown.raw(), t.raw(), static_cast<size_t>(keep) * DTypeSize(dtype));
  return grown;
}

// A request's next `n` bytes of tensors are within its payload.
Status CheckPayloadLeft(const wire::Frame& f, uint64_t received, uint64_t n) {
  if (n <= f.payload_bytes - received) return Status::Ok();
  return InvalidArgument("the request's tensors need more than its payload of " + std::to_string(f.payload_bytes) +
                         " bytes");
}

}  // namespace

void ParameterServerService::ServeData(const net::Fd& fd, const std::string& peer, const std::atomic<bool>& stopping,
                                       std::atomic<bool>& busy) {
  // The hello: version and the job's token, before anything else.
  const auto hello_deadline = Clock::now() + kHelloTimeout;
  wire::Frame f;
  if (!wire::RecvFrame(fd, &f, hello_deadline, peer).ok() || f.magic != wire::kHelloMagic) return;
  if (f.kind != wire::kVersion) {
    (void)wire::SendError(
        fd,
        FailedPrecondition("data plane version " + std::to_string(f.kind) +
                           " is not the version this parameter server speaks (" + std::to_string(wire::kVersion) + ")"),
        hello_deadline, peer);
    return;
  }
  if (f.meta_bytes > wire::kMaxTokenBytes || f.payload_bytes != 0) {
    (void)wire::SendError(fd, InvalidArgument("malformed data-plane hello"), hello_deadline, peer);
    return;
  }
  std::string token(f.meta_bytes, '\0');
  if (!wire::RecvAll(fd, token.data(), token.size(), hello_deadline, peer).ok()) return;
  if (options_.credentials.enabled() && !rpc::TokenMatches(token, options_.credentials.token)) {
    (void)wire::SendError(fd, Status(Code::kUnauthenticated, "missing or wrong task token (x-tfjob-token)"),
                          hello_deadline, peer);
    return;
  }
  {
    // Over TLS every byte goes through the session: no shared memory.
    const std::string key = (f.reserved & wire::kHelloAsksHostKey) && !fd.tls() ? shm::HostKey() : "";
    wire::Frame ok{wire::kResponseMagic, 0, static_cast<uint32_t>(key.size()), 0, 0};
    iovec iov[2] = {{&ok, sizeof ok}, {const_cast<char*>(key.data()), key.size()}};
    if (!wire::SendAll(fd, iov, hello_deadline, peer).ok()) return;
  }

  Staging staging;
  std::unique_ptr<shm::Region> region;
  while (!stopping.load()) {
    busy.store(false);
    Call c{fd, peer, staging, {}, {}, {}};
    c.region = region.get();
    if (!wire::RecvFrame(fd, &c.frame, wire::kNoDeadline, peer).ok()) return;
    busy.store(true);
    const auto start = Clock::now();
    c.deadline = start + options_.request_timeout;
    if (c.frame.magic != wire::kRequestMagic) {
      (void)wire::SendError(fd, InvalidArgument("not a data-plane request frame"), c.deadline, peer);
      return;
    }
    if (c.frame.meta_bytes > wire::kMaxMetaBytes) {
      (void)wire::SendError(fd, InvalidArgument("request meta of " + std::to_string(c.frame.meta_bytes) + " bytes"),
                            c.deadline, peer);
      return;
    }
    c.meta.resize(c.frame.meta_bytes);
    if (!wire::RecvAll(fd, c.meta.data(), c.meta.size(), c.deadline, peer).ok()) return;
    if (c.frame.reserved & wire::kPayloadInShm) {
      if (!region || c.frame.payload_bytes > region->capacity()) {
        // Nothing of this request is left on the socket: refused, and the
        // connection goes on.
        const Status why =
            InvalidArgument(region ? "the request's payload of " + std::to_string(c.frame.payload_bytes) +
                                         " bytes is larger than the shared-memory region"
                                   : "the request's payload is in shared memory, but none is attached");
        if (!wire::SendError(fd, why, c.deadline, peer).ok()) return;
        continue;
      }
      c.shm_payload = region->payload();
    }
    Status s;
    switch (static_cast<wire::Op>(c.frame.kind)) {
      case wire::Op::kCreateVariable: s = HandleCreate(c); break;
      case wire::Op::kPull: s = HandlePull(c); break;
      case wire::Op::kPush: s = HandlePush(c); break;
      case wire::Op::kPushPull: s = HandlePushPull(c); break;
      case wire::Op::kAttachShm: s = HandleAttachShm(c, region); break;
      default: s = Refuse(c, InvalidArgument("unknown data-plane operation " + std::to_string(c.frame.kind)));
    }
    if (options_.metrics) {
      options_.metrics->RecordPsRpc(OpName(c.frame.kind), sizeof(wire::Frame) + c.meta.size() + c.received, c.sent,
                                    std::chrono::duration<double>(Clock::now() - start).count());
    }
    if (!s.ok()) {
      // The payload stopped coming: say so before hanging up.
      if (s.code() == Code::kDeadlineExceeded && c.received < c.frame.payload_bytes) {
        (void)wire::SendError(fd,
                              InvalidArgument(std::string(OpName(c.frame.kind)) + ": the request claims " +
                                              std::to_string(c.frame.payload_bytes) + " bytes of tensors; only " +
                                              std::to_string(c.received) + " arrived in time"),
                              Clock::now() + std::chrono::seconds(1), peer);
      }
      return;
    }
  }
}

Status ParameterServerService::Refuse(Call& c, const Status& why) {
  c.sent += sizeof(wire::Frame) + why.message().size();
  RETURN_IF_ERROR(wire::SendError(c.fd, why, c.deadline, c.peer));
  if (c.shm_payload) return Status::Ok();  // nothing on the socket to skip
  const uint64_t left = c.frame.payload_bytes - c.received;
  if (left > kMaxDiscardBytes) return Aborted("refused request's payload is too large to skip");
  RETURN_IF_ERROR(wire::Discard(c.fd, left, c.deadline, c.peer));
  c.received += left;
  return Status::Ok();
}

Status ParameterServerService::ReadPayload(Call& c, std::byte* into, size_t n, size_t* arrived) {
  if (!c.shm_payload) return wire::RecvAll(c.fd, into, n, c.deadline, c.peer, arrived);
  RETURN_IF_ERROR(CheckPayloadLeft(c.frame, c.received, n));
  std::memcpy(into, c.shm_payload + c.received, n);
  *arrived = n;
  return Status::Ok();
}

StatusOr<std::optional<Tensor>> ParameterServerService::ViewPayload(Call& c, DType dtype, const Shape& shape) {
  const size_t elem = DTypeSize(dtype);
  const uint64_t bytes = static_cast<uint64_t>(NumElements(shape)) * elem;
  RETURN_IF_ERROR(CheckPayloadLeft(c.frame, c.received, bytes));
  if (reinterpret_cast<uintptr_t>(c.shm_payload + c.received) % elem != 0) return std::optional<Tensor>();
  // Not owned: the region outlives the request.
  std::shared_ptr<std::byte[]> at(std::shared_ptr<std::byte[]>(), const_cast<std::byte*>(c.shm_payload));
  Tensor t = Tensor::Wrap(dtype, shape, Device::Cpu(), std::move(at), static_cast<size_t>(c.received));
  c.received += bytes;
  return std::optional<Tensor>(std::move(t));
}

Status ParameterServerService::Answer(Call& c, wire::Frame f, const std::string& meta, std::span<const iovec> payload) {
  f.meta_bytes = static_cast<uint32_t>(meta.size());
  f.payload_bytes = 0;
  for (const iovec& v : payload) f.payload_bytes += v.iov_len;
  c.sent += sizeof f + meta.size() + f.payload_bytes;
  std::vector<iovec> iov{{&f, sizeof f}, {const_cast<char*>(meta.data()), meta.size()}};
  if (c.region && f.payload_bytes > 0 && f.payload_bytes <= c.region->capacity()) {
    size_t at = 0;
    for (const iovec& v : payload) {
      std::memcpy(c.region->payload() + at, v.iov_base, v.iov_len);
      at += v.iov_len;
    }
    f.reserved |= wire::kPayloadInShm;
  } else {
    iov.insert(iov.end(), payload.begin(), payload.end());
  }
  return wire::SendAll(c.fd, iov, c.deadline, c.peer);
}

Status ParameterServerService::HandleAttachShm(Call& c, std::unique_ptr<shm::Region>& region) {
  proto::AttachShmRequest req;
  if (!req.ParseFromString(c.meta)) return Refuse(c, InvalidArgument("AttachShm: malformed request"));
  if (c.frame.payload_bytes != 0) return Refuse(c, InvalidArgument("AttachShm: the request carries no tensors"));
  if (c.fd.tls()) return Refuse(c, FailedPrecondition("AttachShm: no shared memory on a TLS connection"));
  auto opened = shm::Region::Open(req.name(), req.bytes(), req.nonce());
  if (!opened.ok()) return Refuse(c, opened.status().WithContext("AttachShm"));
  region = std::move(opened).value();
  return Answer(c, wire::Frame{wire::kResponseMagic, 0, 0, 0, 0}, proto::AttachShmResponse().SerializeAsString(), {});
}

StatusOr<Tensor> ParameterServerService::ReceiveInto(Call& c, Tensor& into, DType dtype, int64_t offset,
                                                     const Shape& shape) {
  const int64_t n = NumElements(shape);
  const size_t elem = DTypeSize(dtype);
  int64_t got = 0;
  while (got < n) {
    // Room for everything when the staging tensor already has it; else grow
    // by what the next read can bring, never by what the header claims.
    int64_t want = n - got;
    if (into.dtype() != dtype || into.size() < offset + n) {
      want = std::min<int64_t>(want, static_cast<int64_t>(kGrowChunkBytes / elem));
      ASSIGN_OR_RETURN(into, Reserve(std::move(into), dtype, offset + got + want, offset + got));
    }
    size_t arrived = 0;
    const Status s = ReadPayload(c, into.raw() + static_cast<size_t>(offset + got) * elem,
                                 static_cast<size_t>(want) * elem, &arrived);
    c.received += arrived;
    RETURN_IF_ERROR(s);
    got += want;
  }
  ASSIGN_OR_RETURN(Tensor rows, into.Rows(offset, offset + n));
  return rows.Reshape(shape);
}

Status ParameterServerService::HandleCreate(Call& c) {
  proto::CreateVariableRequest req;
  if (!req.ParseFromString(c.meta)) return Refuse(c, InvalidArgument("CreateVariable: malformed request"));
  if (req.name().empty()) return Refuse(c, InvalidArgument("CreateVariable: empty name"));
  auto d = wire::Describe(req.initial_value(), options_.max_tensor_bytes);
  if (!d.ok()) return Refuse(c, d.status().WithContext("CreateVariable \"" + req.name() + "\""));
  if (d->bytes != c.frame.payload_bytes) {
    return Refuse(c,
                  InvalidArgument("CreateVariable \"" + req.name() + "\": tensor " + std::string(DTypeName(d->dtype)) +
                                  ShapeString(d->shape) + " needs " + std::to_string(d->bytes) +
                                  " bytes, the request carries " + std::to_string(c.frame.payload_bytes)));
  }
  Tensor& staging = d->dtype == DType::kInt64 ? c.staging.i64 : c.staging.f32;
  ASSIGN_OR_RETURN(Tensor received, ReceiveInto(c, staging, d->dtype, 0, d->shape));
  proto::CreateVariableResponse resp;
  Status exists;
  {
    WriterLock lock(table_mu_);
    auto it = shards_.find(req.name());
    if (it != shards_.end()) {
      ReaderLock g(it->second->mu);
      if (it->second->value.shape() != d->shape || it->second->value.dtype() != d->dtype) {
        exists = AlreadyExists("variable \"" + req.name() + "\" exists as " + it->second->value.DebugString() +
                               ", not " + received.DebugString());
      }
      resp.set_created(false);
    } else {
      auto shard = std::make_shared<Shard>();
      WriterLock init(shard->mu);  // not shared yet; the lock is for the analysis
      shard->value = received.Clone();
      if (req.has_optimizer() && shard->value.dtype() == DType::kFloat32) {
        shard->optimizer.emplace(OptimizerFromProto(req.optimizer()));
        shard->slots = shard->optimizer->CreateSlots(shard->value);
      }
      shards_.emplace(req.name(), std::move(shard));
      resp.set_created(true);
    }
  }
  if (!exists.ok()) return Refuse(c, exists);
  return Answer(c, wire::Frame{wire::kResponseMagic, 0, 0, 0, 0}, resp.SerializeAsString(), {});
}

Status ParameterServerService::HandlePull(Call& c) {
  proto::PullRequest req;
  if (!req.ParseFromString(c.meta)) return Refuse(c, InvalidArgument("Pull: malformed request"));
  if (c.frame.payload_bytes != 0) return Refuse(c, InvalidArgument("Pull: a pull request carries no tensors"));
  if (req.rows_size() > 0 && req.names_size() != 1) {
    return Refuse(c, InvalidArgument("Pull: rows need exactly one variable, got " + std::to_string(req.names_size())));
  }
  auto found = FindAll(req.names());
  if (!found.ok()) return Refuse(c, found.status());
  const std::vector<std::shared_ptr<Shard>>& shards = *found;
  proto::PullResponse resp;
  wire::Frame f{wire::kResponseMagic, 0, 0, 0, 0};
  std::string meta;

  if (req.rows_size() > 0) {
    // Picked rows: gathered under the read lock into this connection's
    // reused buffer, then sent from there with the lock released.
    Shard* const s = shards[0].get();
    Status refused;
    {
      ReaderLock g(s->mu);
      // A pointer, not a reference: clang 14 loses the lock of a reference
      // to a guarded member.
      const Tensor* const v = &s->value;
      if (v->rank() < 1) {
        refused = InvalidArgument("Pull \"" + req.names(0) + "\": a scalar has no rows");
      } else {
        for (int64_t r : req.rows()) {
          if (r < 0 || r >= v->dim(0)) {
            refused = InvalidArgument("Pull \"" + req.names(0) + "\": row " + std::to_string(r) + " outside [0, " +
                                      std::to_string(v->dim(0)) + ")");
            break;
          }
        }
      }
      if (refused.ok()) {
        const int64_t row = v->dim(0) ? v->size() / v->dim(0) : 0;
        const int64_t k = req.rows_size();
        ASSIGN_OR_RETURN(c.staging.gathered, Reserve(std::move(c.staging.gathered), v->dtype(), k * row, 0));
        const size_t rb = static_cast<size_t>(row) * DTypeSize(v->dtype());
        std::byte* out = c.staging.gathered.raw();
        for (int64_t i = 0; i < k; ++i) std::memcpy(out + i * rb, v->raw() + req.rows(static_cast<int>(i)) * rb, rb);
        Shape shape = v->shape();
        shape[0] = k;
        proto::Tensor* h = resp.add_values();
        h->set_dtype(v->dtype() == DType::kInt64 ? proto::DTYPE_INT64 : proto::DTYPE_FLOAT32);
        for (int64_t d : shape) h->add_shape(d);
        f.payload_bytes = static_cast<uint64_t>(k) * rb;
      }
    }
    if (!refused.ok()) return Refuse(c, refused);
    const iovec rows{c.staging.gathered.raw(), static_cast<size_t>(f.payload_bytes)};
    return Answer(c, f, resp.SerializeAsString(), {&rows, 1});
  }

  return SendValues(c, shards, resp.mutable_values(), resp);
}

StatusOr<std::vector<std::shared_ptr<ParameterServerService::Shard>>> ParameterServerService::FindAll(
    const google::protobuf::RepeatedPtrField<std::string>& names) {
  std::vector<std::shared_ptr<Shard>> shards;
  for (const std::string& name : names) {
    auto shard = Find(name);
    if (!shard) return NotFound("Pull: no variable \"" + name + "\" on this parameter server");
    shards.push_back(std::move(shard));
  }
  return shards;
}

Status ParameterServerService::SendValues(Call& c, const std::vector<std::shared_ptr<Shard>>& shards,
                                          google::protobuf::RepeatedPtrField<proto::Tensor>* values,
                                          const google::protobuf::MessageLite& resp) {
  // Headers first, then each tensor straight from the variable's memory
  // under its read lock (shapes never change once created).
  wire::Frame f{wire::kResponseMagic, 0, 0, 0, 0};
  std::vector<size_t> bytes;
  for (auto& shard : shards) {
    ReaderLock g(shard->mu);
    wire::HeaderOf(shard->value, values->Add());
    bytes.push_back(shard->value.bytes());
    f.payload_bytes += shard->value.bytes();
  }
  const std::string meta = resp.SerializeAsString();
  f.meta_bytes = static_cast<uint32_t>(meta.size());
  if (c.region && f.payload_bytes > 0 && f.payload_bytes <= c.region->capacity()) {
    // Into the shared region, each under its read lock, then the frame.
    size_t at = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
      ReaderLock g(shards[i]->mu);
      if (shards[i]->value.bytes() != bytes[i]) return Internal("Pull: a variable changed size while it was sent");
      std::memcpy(c.region->payload() + at, shards[i]->value.raw(), bytes[i]);
      at += bytes[i];
    }
    f.reserved |= wire::kPayloadInShm;
    iovec iov[2] = {{&f, sizeof f}, {const_cast<char*>(meta.data()), meta.size()}};
    c.sent += sizeof f + meta.size() + f.payload_bytes;
    return wire::SendAll(c.fd, iov, c.deadline, c.peer);
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    iovec iov[3] = {{&f, sizeof f}, {const_cast<char*>(meta.data()), meta.size()}, {nullptr, bytes[i]}};
    std::span<iovec> send(iov, 3);
    if (i > 0) send = send.subspan(2);  // the frame and meta went with the first tensor
    {
      ReaderLock g(shards[i]->mu);
      if (shards[i]->value.bytes() != bytes[i]) return Internal("Pull: a variable changed size while it was sent");
      iov[2].iov_base = shards[i]->value.raw();
      // What the socket does not take at once is copied out and sent after
      // the lock is released: a client may read its answer only after
      // computing (PsClient::Start), and pushes must not wait for it.
      RETURN_IF_ERROR(wire::SendNow(c.fd, send, c.peer));
      if (iov[2].iov_len > 0) {
        ASSIGN_OR_RETURN(c.staging.gathered, Reserve(std::move(c.staging.gathered), DType::kFloat32,
                                                     static_cast<int64_t>((iov[2].iov_len + 3) / 4), 0));
        std::memcpy(c.staging.gathered.raw(), iov[2].iov_base, iov[2].iov_len);
        iov[2].iov_base = c.staging.gathered.raw();
      }
    }
    RETURN_IF_ERROR(wire::SendAll(c.fd, send, c.deadline, c.peer));
  }
  if (shards.empty()) {
    iovec iov[2] = {{&f, sizeof f}, {const_cast<char*>(meta.data()), meta.size()}};
    RETURN_IF_ERROR(wire::SendAll(c.fd, iov, c.deadline, c.peer));
  }
  c.sent += sizeof f + meta.size() + f.payload_bytes;
  return Status::Ok();
}

}  // namespace tfjob::ps
