#include "services/strategy/variable_store.h"

#include <cstring>

#include "services/tensor/ops.h"

namespace tfjob::strategy {
namespace {

int64_t RowElems(const Shape& s) {
  int64_t n = 1;
  for (size_t i = 1; i < s.size(); ++i) n *= s[i];
  return n;
}

}  // namespace

VariableStore::VariableStore(Placement placement, std::vector<std::shared_ptr<ps::PsClient>> ps)
    : placement_(std::move(placement)), ps_(std::move(ps)) {}

Status VariableStore::Create(const std::string& name, const Tensor& initial,
                             const std::optional<model::OptimizerSpec>& optimizer) {
  ASSIGN_OR_RETURN(const PlacedVariable* v, placement_.Find(name));
  if (initial.shape() != v->shape || initial.dtype() != v->dtype) {
    return InvalidArgument("variable \"" + name + "\": initial value " + initial.DebugString() + " does not match " +
                           std::string(DTypeName(v->dtype)) + ShapeString(v->shape));
  }
  for (const ShardInfo& s : v->shards) {
    if (s.ps >= static_cast<int64_t>(ps_.size())) return FailedPrecondition("no client for ps " + std::to_string(s.ps));
    Tensor part = v->shape.empty() ? initial : *initial.Rows(s.row_begin, s.row_end);
    RETURN_IF_ERROR(ps_[s.ps]->CreateVariable(s.name, part.Clone(), optimizer).status());
  }
  return Status::Ok();
}

StatusOr<std::vector<Tensor>> VariableStore::Pull(const std::vector<std::string>& names) {
  // Group shard names by PS so each PS gets one RPC.
  std::map<int64_t, std::vector<std::string>> by_ps;
  std::vector<const PlacedVariable*> vars;
  for (const auto& n : names) {
    ASSIGN_OR_RETURN(const PlacedVariable* v, placement_.Find(n));
    vars.push_back(v);
    for (const auto& s : v->shards) by_ps[s.ps].push_back(s.name);
  }
  std::map<std::string, Tensor> got;
  for (auto& [ps, shard_names] : by_ps) {
    ASSIGN_OR_RETURN(std::vector<Tensor> values, ps_[ps]->Pull(shard_names));
    for (size_t i = 0; i < shard_names.size(); ++i) got[shard_names[i]] = std::move(values[i]);
  }
  std::vector<Tensor> out;
  for (const PlacedVariable* v : vars) {
    if (!v->sharded()) {
      out.push_back(got[v->shards[0].name]);
      continue;
    }
    std::vector<Tensor> parts;
    for (const auto& s : v->shards) parts.push_back(got[s.name]);
    ASSIGN_OR_RETURN(Tensor full, ops::Concat(parts));
    out.push_back(std::move(full));
  }
  return out;
}

StatusOr<Tensor> VariableStore::Lookup(const std::string& name, const std::vector<int64_t>& ids) {
  ASSIGN_OR_RETURN(const PlacedVariable* v, placement_.Find(name));
  if (v->shape.empty()) return InvalidArgument("Lookup \"" + name + "\": a scalar has no rows");
  const int64_t rows = v->shape[0];
  // Per shard: which output positions it serves and the local row ids.
  std::vector<std::vector<size_t>> positions(v->shards.size());
  std::vector<std::vector<int64_t>> local(v->shards.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= rows) {
      return InvalidArgument("Lookup \"" + name + "\": id " + std::to_string(ids[i]) + " outside [0, " +
                             std::to_string(rows) + ")");
    }
    for (size_t s = 0; s < v->shards.size(); ++s) {
      if (ids[i] < v->shards[s].row_end) {
        positions[s].push_back(i);
        local[s].push_back(ids[i] - v->shards[s].row_begin);
        break;
      }
    }
  }
  Shape out_shape = v->shape;
  out_shape[0] = static_cast<int64_t>(ids.size());
  ASSIGN_OR_RETURN(Tensor out, Tensor::Create(v->dtype, out_shape));
  const size_t row_bytes = static_cast<size_t>(RowElems(v->shape)) * DTypeSize(v->dtype);
  for (size_t s = 0; s < v->shards.size(); ++s) {
    if (local[s].empty()) continue;
    ASSIGN_OR_RETURN(Tensor part, ps_[v->shards[s].ps]->PullRows(v->shards[s].name, local[s]));
    for (size_t k = 0; k < positions[s].size(); ++k) {
      std::memcpy(out.raw() + positions[s][k] * row_bytes, part.raw() + k * row_bytes, row_bytes);
    }
  }
  return out;
}

StatusOr<int> VariableStore::PushGradients(uint64_t closure_id, uint32_t sequence, const std::vector<Grad>& grads) {
  std::map<int64_t, std::vector<ps::Update>> by_ps;
  for (const Grad& g : grads) {
    ASSIGN_OR_RETURN(const PlacedVariable* v, placement_.Find(g.name));
    if (!g.grad.sparse) {
      if (g.grad.dense.shape() != v->shape) {
        return InvalidArgument("gradient for \"" + g.name + "\" is " + g.grad.dense.DebugString() + ", variable is " +
                               ShapeString(v->shape));
      }
      // A delta (non-trainable state) is added as is; the rest goes through
      // the shard's optimizer.
      const auto kind = g.grad.delta ? ps::Update::Kind::kAssignAdd : ps::Update::Kind::kApplyGradient;
      for (const auto& s : v->shards) {
        Tensor part = v->sharded() ? *g.grad.dense.Rows(s.row_begin, s.row_end) : g.grad.dense;
        by_ps[s.ps].push_back({s.name, kind, part, std::nullopt});
      }
      continue;
    }
    // Sparse: route each row to its shard, with shard-local row ids.
    const int64_t* ids = g.grad.indices.data<int64_t>();
    const int64_t k = g.grad.indices.size();
    const int64_t row = RowElems(v->shape);
    for (const auto& s : v->shards) {
      std::vector<int64_t> local;
      std::vector<int64_t> src;
      for (int64_t i = 0; i < k; ++i) {
        if (ids[i] >= s.row_begin && ids[i] < s.row_end) {
          local.push_back(ids[i] - s.row_begin);
          src.push_back(i);
        }
      }
      if (local.empty()) continue;
      Shape vs = v->shape;
      vs[0] = static_cast<int64_t>(local.size());
      Tensor values = Tensor::Zeros(DType::kFloat32, vs);
      for (size_t j = 0; j < src.size(); ++j) {
        std::memcpy(values.data<float>() + j * row, g.grad.values.data<float>() + src[j] * row, row * sizeof(float));
      }
      by_ps[s.ps].push_back({s.name, ps::Update::Kind::kApplyGradient, values,
                             *Tensor::FromVector({static_cast<int64_t>(local.size())}, local)});
    }
  }
  int duplicates = 0;
  for (auto& [ps, updates] : by_ps) {
    ASSIGN_OR_RETURN(int d, ps_[ps]->Push(closure_id, sequence, updates));
    duplicates += d;
  }
  return duplicates;
}

StatusOr<int> VariableStore::AssignAdd(uint64_t closure_id, uint32_t sequence, const std::string& name, const Tensor& delta) {
  ASSIGN_OR_RETURN(const PlacedVariable* v, placement_.Find(name));
  if (v->sharded()) return Unimplemented("AssignAdd on sharded variable \"" + name + "\"");
  return ps_[v->shards[0].ps]->Push(closure_id, sequence, {{v->shards[0].name, ps::Update::Kind::kAssignAdd, delta, {}}});
}

}  // namespace tfjob::strategy
