// The PS's data plane (wire.h): CreateVariable, Pull and Push over a plain
// TCP connection, tensors sent from the variables' memory and received into
// per-connection staging tensors that are kept between requests.
#include <algorithm>
#include <cstring>

#include "common/mutex.h"
#include "services/ps/ps_service.h"
#include "services/tensor/eigen.h"
#include "services/tensor/ops.h"

namespace tfjob::ps {
namespace {

using wire::Clock;

uint64_t DedupKey(uint64_t closure_id, uint32_t sequence) {
  // splitmix-style mix: distinct (id, sequence) pairs collide with negligible probability.
  uint64_t z = closure_id * 0x9e3779b97f4a7c15ULL + sequence + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Closure ids carry the coordinator's incarnation in their high half.
constexpr uint64_t kCoordinatorMask = 0xffffffff00000000ULL;
// A refused request's payload up to this size is read and dropped, so the
// connection stays usable; a larger one closes the connection instead.
constexpr uint64_t kMaxDiscardBytes = 64u << 20;
// Bytes received per read while a staging tensor still has to grow: what
// is allocated stays within twice what has arrived.
constexpr uint64_t kGrowChunkBytes = 4u << 20;
// A push whose updates together carry at least this much is applied on
// several threads, one shard each; below it, handing off costs more.
constexpr uint64_t kParallelApplyBytes = 256u << 10;
// The smallest piece of one dense update worth a thread of its own.
constexpr int64_t kMinPieceElems = 256 << 10;
constexpr auto kHelloTimeout = std::chrono::seconds(10);

// Rows of `value` for a sparse update, validated against the shard.
Status CheckRows(const Tensor& var, const std::vector<int64_t>& rows, DType dtype, const Shape& shape,
                 const std::string& name) {
  if (var.rank() < 1) return InvalidArgument("\"" + name + "\": sparse update on a scalar");
  Shape want = var.shape();
  want[0] = static_cast<int64_t>(rows.size());
  if (dtype != var.dtype() || shape != want) {
    return InvalidArgument("\"" + name + "\": sparse update " + std::string(DTypeName(dtype)) + ShapeString(shape) +
                           " should be " + std::string(DTypeName(var.dtype())) + ShapeString(want));
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= var.dim(0)) {
      return InvalidArgument("\"" + name + "\": row " + std::to_string(rows[i]) + " outside [0, " +
                             std::to_string(var.dim(0)) + ")");
    }
  }
  return Status::Ok();
}

const char* OpName(uint32_t op) {
  switch (static_cast<wire::Op>(op)) {
    case wire::Op::kCreateVariable: return "CreateVariable";
    case wire::Op::kPull: return "Pull";
    case wire::Op::kPush: return "Push";
    case wire::Op::kPushPull: return "PushPull";
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

}  // namespace

struct ParameterServerService::Call {
  const net::Fd& fd;
  const std::string& peer;
  Staging& staging;
  wire::Frame frame;
  std::string meta;
  Clock::time_point deadline;
  uint64_t received = 0;  // payload bytes read so far
  uint64_t sent = 0;      // response bytes
};

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
    wire::Frame ok{wire::kResponseMagic, 0, 0, 0, 0};
    iovec iov{&ok, sizeof ok};
    if (!wire::SendAll(fd, {&iov, 1}, hello_deadline, peer).ok()) return;
  }

  Staging staging;
  while (!stopping.load()) {
    busy.store(false);
    Call c{fd, peer, staging, {}, {}, {}};
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
    Status s;
    switch (static_cast<wire::Op>(c.frame.kind)) {
      case wire::Op::kCreateVariable: s = HandleCreate(c); break;
      case wire::Op::kPull: s = HandlePull(c); break;
      case wire::Op::kPush: s = HandlePush(c); break;
      case wire::Op::kPushPull: s = HandlePushPull(c); break;
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
  const uint64_t left = c.frame.payload_bytes - c.received;
  if (left > kMaxDiscardBytes) return Aborted("refused request's payload is too large to skip");
  RETURN_IF_ERROR(wire::Discard(c.fd, left, c.deadline, c.peer));
  c.received += left;
  return Status::Ok();
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
    const Status s = wire::RecvAll(c.fd, into.raw() + static_cast<size_t>(offset + got) * elem,
                                   static_cast<size_t>(want) * elem, c.deadline, c.peer, &arrived);
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
  const std::string meta = resp.SerializeAsString();
  wire::Frame f{wire::kResponseMagic, 0, static_cast<uint32_t>(meta.size()), 0, 0};
  iovec iov[2] = {{&f, sizeof f}, {const_cast<char*>(meta.data()), meta.size()}};
  c.sent += sizeof f + meta.size();
  return wire::SendAll(c.fd, iov, c.deadline, c.peer);
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
    meta = resp.SerializeAsString();
    f.meta_bytes = static_cast<uint32_t>(meta.size());
    iovec iov[3] = {
        {&f, sizeof f}, {meta.data(), meta.size()}, {c.staging.gathered.raw(), static_cast<size_t>(f.payload_bytes)}};
    c.sent += sizeof f + meta.size() + f.payload_bytes;
    return wire::SendAll(c.fd, iov, c.deadline, c.peer);
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
  for (size_t i = 0; i < shards.size(); ++i) {
    ReaderLock g(shards[i]->mu);
    if (shards[i]->value.bytes() != bytes[i]) return Internal("Pull: a variable changed size while it was sent");
    iovec iov[3] = {{&f, sizeof f}, {const_cast<char*>(meta.data()), meta.size()}, {shards[i]->value.raw(), bytes[i]}};
    std::span<iovec> send(iov, 3);
    if (i > 0) send = send.subspan(2);  // the frame and meta went with the first tensor
    RETURN_IF_ERROR(wire::SendAll(c.fd, send, c.deadline, c.peer));
  }
  if (shards.empty()) {
    iovec iov[2] = {{&f, sizeof f}, {const_cast<char*>(meta.data()), meta.size()}};
    RETURN_IF_ERROR(wire::SendAll(c.fd, iov, c.deadline, c.peer));
  }
  c.sent += sizeof f + meta.size() + f.payload_bytes;
  return Status::Ok();
}

Status ParameterServerService::ApplyDense(Shard& s, int kind, const Tensor& value, bool split) {
  const int64_t n = s.value.size();
  const int64_t pieces = split ? std::min<int64_t>(apply_pool_.threads() + 1, n / kMinPieceElems) : 1;
  if (pieces <= 1) {
    switch (kind) {
      case proto::Update::APPLY_GRADIENT: return s.optimizer->ApplyDense(s.value, value, s.slots);
      case proto::Update::ASSIGN_ADD:
        if (s.value.dtype() == DType::kFloat32) {
          AsArray(s.value) += AsArray(value);
        } else {
          int64_t* v = s.value.data<int64_t>();
          const int64_t* d = value.data<int64_t>();
          for (int64_t j = 0; j < n; ++j) v[j] += d[j];
        }
        return Status::Ok();
      default: std::memcpy(s.value.raw(), value.raw(), s.value.bytes()); return Status::Ok();
    }
  }
  // Flat views of the variable, the update and the slots; piece k is
  // elements [n*k/pieces, n*(k+1)/pieces) of each. The caller holds the
  // shard's write lock for all of them.
  ASSIGN_OR_RETURN(const Tensor var, s.value.Reshape({-1}));
  ASSIGN_OR_RETURN(const Tensor upd, value.Reshape({-1}));
  std::vector<Tensor> slots;
  for (const Tensor& t : s.slots.slots) {
    ASSIGN_OR_RETURN(Tensor flat, t.Reshape({-1}));
    slots.push_back(std::move(flat));
  }
  // Piece boundaries fall on 64-byte addresses of the variable, so Eigen's
  // vectorised loops split each piece exactly where one pass over the whole
  // would (scalar and vector code may round differently): bit-identical.
  const uintptr_t elem = DTypeSize(s.value.dtype()), per_line = 64 / elem;
  const uintptr_t base = reinterpret_cast<uintptr_t>(s.value.raw()) / elem;
  std::vector<int64_t> bounds{0};
  for (int64_t k = 1; k < pieces; ++k) {
    const uintptr_t at = base + static_cast<uintptr_t>(n * k / pieces);
    bounds.push_back(
        std::clamp<int64_t>(static_cast<int64_t>((at + per_line - 1) / per_line * per_line - base), bounds.back(), n));
  }
  bounds.push_back(n);
  std::vector<Status> results(static_cast<size_t>(pieces));
  apply_pool_.Run(static_cast<size_t>(pieces), [&](size_t k) TFJOB_REQUIRES(s.mu) {
    const int64_t a = bounds[k], b = bounds[k + 1];
    Tensor v = *var.Rows(a, b);
    const Tensor u = *upd.Rows(a, b);
    switch (kind) {
      case proto::Update::APPLY_GRADIENT: {
        model::SlotState part;
        part.iterations = s.slots.iterations;
        for (const Tensor& t : slots) part.slots.push_back(*t.Rows(a, b));
        results[k] = s.optimizer->ApplyDense(v, u, part);
        break;
      }
      case proto::Update::ASSIGN_ADD:
        if (v.dtype() == DType::kFloat32) {
          AsArray(v) += AsArray(u);
        } else {
          int64_t* x = v.data<int64_t>();
          const int64_t* d = u.data<int64_t>();
          for (int64_t j = 0; j < v.size(); ++j) x[j] += d[j];
        }
        break;
      default: std::memcpy(v.raw(), u.raw(), v.bytes());
    }
  });
  for (const Status& st : results) RETURN_IF_ERROR(st);
  if (kind == proto::Update::APPLY_GRADIENT) s.slots.iterations += 1;  // once, as one pass would
  return Status::Ok();
}

Status ParameterServerService::CheckPushFence(uint64_t generation, uint64_t closure_id) const {
  const uint64_t fence = fence_.load();
  if (fence == 0) return Status::Ok();
  const bool fenced =
      generation != 0 ? generation != fence : (closure_id & kCoordinatorMask) != (fence & kCoordinatorMask);
  if (!fenced) return Status::Ok();
  return FailedPrecondition("Push: closure " + std::to_string(closure_id) + " comes from chief generation " +
                            std::to_string(generation) + ", which has been fenced off (generation " +
                            std::to_string(fence) + " holds this parameter server)");
}

// Everything about an update that is known before its payload is read.
struct ParameterServerService::PushUpdate {
  std::shared_ptr<Shard> shard;
  const proto::Update* update;
  wire::Described d;
  Tensor rows;  // int64 [k] for a sparse update
  Tensor value;
};

Status ParameterServerService::PreparePush(const proto::PushRequest& req, std::vector<PushUpdate>& prepared,
                                           uint64_t& total) {
  prepared.reserve(static_cast<size_t>(req.updates_size()));
  total = 0;
  for (const proto::Update& u : req.updates()) {
    auto shard = Find(u.name());
    if (!shard) return NotFound("Push: no variable \"" + u.name() + "\" on this parameter server");
    auto d = wire::Describe(u.value(), options_.max_tensor_bytes);
    if (!d.ok()) return d.status().WithContext("Push \"" + u.name() + "\"");
    if (d->bytes > options_.max_request_bytes - std::min(total, options_.max_request_bytes)) {
      return InvalidArgument("Push: the updates claim more than the limit of " +
                             std::to_string(options_.max_request_bytes) + " bytes per request");
    }
    total += d->bytes;
    PushUpdate p{shard, &u, std::move(d).value(), {}, {}};
    if (u.rows_size() > 0) {
      p.rows = Tensor::Zeros(DType::kInt64, {u.rows_size()});
      std::copy(u.rows().begin(), u.rows().end(), p.rows.data<int64_t>());
    }
    Status bad;
    {
      ReaderLock g(shard->mu);
      if (u.rows_size() > 0) {
        const std::vector<int64_t> rows(u.rows().begin(), u.rows().end());
        bad = CheckRows(shard->value, rows, p.d.dtype, p.d.shape, u.name()).WithContext("Push");
      } else if (p.d.dtype != shard->value.dtype() || p.d.shape != shard->value.shape()) {
        bad = InvalidArgument("Push \"" + u.name() + "\": update " + std::string(DTypeName(p.d.dtype)) +
                              ShapeString(p.d.shape) + " does not match variable " + shard->value.DebugString());
      }
      if (bad.ok() && u.kind() == proto::Update::APPLY_GRADIENT && !shard->optimizer) {
        bad = FailedPrecondition("Push \"" + u.name() + "\": variable has no optimizer to apply gradients with");
      }
    }
    // Returned with no lock held: the caller answers over the network.
    if (!bad.ok()) return bad;
    if (u.kind() != proto::Update::APPLY_GRADIENT && u.kind() != proto::Update::ASSIGN_ADD &&
        u.kind() != proto::Update::ASSIGN) {
      return InvalidArgument("Push \"" + u.name() + "\": unknown update kind " + std::to_string(u.kind()));
    }
    prepared.push_back(std::move(p));
  }
  return Status::Ok();
}

Status ParameterServerService::ApplyPushUpdate(Shard& s, const PushUpdate& p, bool split) {
  if (p.update->rows_size() == 0) return ApplyDense(s, p.update->kind(), p.value, split);
  switch (p.update->kind()) {
    case proto::Update::APPLY_GRADIENT: return s.optimizer->ApplySparse(s.value, p.rows, p.value, s.slots);
    case proto::Update::ASSIGN_ADD: return ops::ScatterAdd(s.value, p.rows, p.value);
    default: {  // ASSIGN
      const int64_t row = s.value.dim(0) ? s.value.size() / s.value.dim(0) : 0;
      const size_t rb = static_cast<size_t>(row) * DTypeSize(s.value.dtype());
      const int64_t* r = p.rows.data<int64_t>();
      for (int64_t j = 0; j < p.rows.size(); ++j) std::memcpy(s.value.raw() + r[j] * rb, p.value.raw() + j * rb, rb);
      return Status::Ok();
    }
  }
}

Status ParameterServerService::ReceivePush(Call& c, const proto::PushRequest& req, int* duplicates_out,
                                           Status* refused) {
  // Checked now, so a fenced push's payload is skipped unread, and again
  // under fence_mu_ when it is applied.
  if (Status f = CheckPushFence(req.coordinator_incarnation(), req.closure_id()); !f.ok()) {
    *refused = f;
    return Status::Ok();
  }
  // Everything is checked before a byte of payload is read, and the payload
  // is read whole before anything is applied: a bad request, or one whose
  // connection breaks, changes nothing.
  std::vector<PushUpdate> prepared;
  uint64_t total = 0;
  if (Status bad = PreparePush(req, prepared, total); !bad.ok()) {
    *refused = bad;
    return Status::Ok();
  }
  if (total != c.frame.payload_bytes) {
    *refused = InvalidArgument("Push: the updates' tensors need " + std::to_string(total) +
                               " bytes, the request carries " + std::to_string(c.frame.payload_bytes));
    return Status::Ok();
  }
  int64_t f32_at = 0, i64_at = 0;
  for (PushUpdate& p : prepared) {
    const bool i64 = p.d.dtype == DType::kInt64;
    int64_t& at = i64 ? i64_at : f32_at;
    ASSIGN_OR_RETURN(p.value, ReceiveInto(c, i64 ? c.staging.i64 : c.staging.f32, p.d.dtype, at, p.d.shape));
    at += p.value.size();
  }

  const bool dedup = req.closure_id() != 0;
  const uint64_t key = DedupKey(req.closure_id(), req.sequence());
  std::atomic<int> duplicates{0};
  std::vector<Status> results(prepared.size());
  // A push of one big dense update is applied in pieces on the pool: every
  // update kind is element-wise (an optimizer's step depends on its
  // iteration count, which every piece shares), so the pieces give exactly
  // what one pass gives. A push of several updates runs them side by side.
  const bool split = prepared.size() == 1 && total >= kParallelApplyBytes;
  auto apply = [&](size_t i) {
    PushUpdate& p = prepared[i];
    Shard& s = *p.shard;
    WriterLock g(s.mu);
    if (dedup && !Remember(s, key)) {
      duplicates.fetch_add(1);
      return;
    }
    const Status st = ApplyPushUpdate(s, p, split);
    results[i] = st;
    if (st.ok()) applied_.fetch_add(1, std::memory_order_relaxed);
  };
  {
    // A Fence waits for this apply to end; a push that a Fence overtook
    // while its payload arrived is refused here.
    ReaderLock fence_lock(fence_mu_);
    if (Status f = CheckPushFence(req.coordinator_incarnation(), req.closure_id()); !f.ok()) {
      *refused = f;
      return Status::Ok();
    }
    if (prepared.size() > 1 && total >= kParallelApplyBytes) {
      apply_pool_.Run(prepared.size(), apply);
    } else {
      for (size_t i = 0; i < prepared.size(); ++i) apply(i);
    }
  }
  for (const Status& st : results) {
    if (!st.ok()) {
      *refused = st;
      return Status::Ok();
    }
  }
  *duplicates_out = duplicates.load();
  return Status::Ok();
}

Status ParameterServerService::HandlePush(Call& c) {
  proto::PushRequest req;
  if (!req.ParseFromString(c.meta)) return Refuse(c, InvalidArgument("Push: malformed request"));
  int duplicates = 0;
  Status refused;
  RETURN_IF_ERROR(ReceivePush(c, req, &duplicates, &refused));
  if (!refused.ok()) return Refuse(c, refused);
  proto::PushResponse resp;
  resp.set_duplicates(duplicates);
  const std::string meta = resp.SerializeAsString();
  wire::Frame f{wire::kResponseMagic, 0, static_cast<uint32_t>(meta.size()), 0, 0};
  iovec iov[2] = {{&f, sizeof f}, {const_cast<char*>(meta.data()), meta.size()}};
  c.sent += sizeof f + meta.size();
  return wire::SendAll(c.fd, iov, c.deadline, c.peer);
}

Status ParameterServerService::HandlePushPull(Call& c) {
  proto::PushPullRequest req;
  if (!req.ParseFromString(c.meta)) return Refuse(c, InvalidArgument("PushPull: malformed request"));
  if (req.pull().rows_size() > 0) return Refuse(c, InvalidArgument("PushPull: row pulls go in a Pull of their own"));
  // The pull's variables are looked up before the push is applied, so a
  // pull that would be refused refuses the whole request, with nothing
  // changed.
  auto found = FindAll(req.pull().names());
  if (!found.ok()) return Refuse(c, found.status().WithContext("PushPull"));
  int duplicates = 0;
  Status refused;
  RETURN_IF_ERROR(ReceivePush(c, req.push(), &duplicates, &refused));
  if (!refused.ok()) return Refuse(c, refused);
  proto::PushPullResponse resp;
  resp.mutable_push()->set_duplicates(duplicates);
  return SendValues(c, *found, resp.mutable_pull()->mutable_values(), resp);
}

}  // namespace tfjob::ps
