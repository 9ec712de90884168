// The PS's data plane, pushes (wire.h: Push and PushPull): every update
// checked before a byte of payload is read, the payload received whole, then
// applied once per (closure id, sequence, shard) under the fence.
#include <algorithm>
#include <cstring>

#include "common/mutex.h"
#include "services/ps/data_call.h"
#include "services/ps/ps_service.h"
#include "services/tensor/eigen.h"
#include "services/tensor/ops.h"

namespace tfjob::ps {
namespace {

uint64_t DedupKey(uint64_t closure_id, uint32_t sequence) {
  // splitmix-style mix: distinct (id, sequence) pairs collide with negligible probability.
  uint64_t z = closure_id * 0x9e3779b97f4a7c15ULL + sequence + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Closure ids carry the coordinator's incarnation in their high half.
constexpr uint64_t kCoordinatorMask = 0xffffffff00000000ULL;
// A push whose updates together carry at least this much is applied on
// several threads, one shard each; below it, handing off costs more.
constexpr uint64_t kParallelApplyBytes = 256u << 10;
// The smallest piece of one dense update worth a thread of its own.
constexpr int64_t kMinPieceElems = 256 << 10;

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

}  // namespace

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
    if (c.shm_payload) {
      ASSIGN_OR_RETURN(std::optional<Tensor> in_place, ViewPayload(c, p.d.dtype, p.d.shape));
      if (in_place) {
        p.value = std::move(*in_place);
        continue;
      }
    }
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
  // Side by side only when the updates besides the largest are worth a
  // hand-off: one thread applies the largest whoever takes it, so the pool
  // can save at most the others' time, and waking its threads costs a
  // context switch each (tens of microseconds on a VM whose idle CPU halts).
  uint64_t largest = 0;
  for (const PushUpdate& p : prepared) largest = std::max<uint64_t>(largest, p.value.bytes());
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
    if (prepared.size() > 1 && total - largest >= kParallelApplyBytes) {
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
  return Answer(c, wire::Frame{wire::kResponseMagic, 0, 0, 0, 0}, resp.SerializeAsString(), {});
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
