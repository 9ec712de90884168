#include "services/strategy/variable_store.h"

#include <algorithm>
#include <cstring>

#include "services/tensor/ops.h"

namespace tfjob::strategy {
namespace {

int64_t RowElems(const Shape& s) {
  int64_t n = 1;
  for (size_t i = 1; i < s.size(); ++i) n *= s[i];
  return n;
}

// `t` when it already is dtype[shape], else a new tensor of that shape (its
// contents are about to be overwritten by a pull).
StatusOr<Tensor> Reuse(const Tensor& t, DType dtype, const Shape& shape) {
  if (t.dtype() == dtype && t.shape() == shape) return t;
  return Tensor::CreateUninitialized(dtype, shape);
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
    // A view of the rows: the data plane sends them from here.
    Tensor part = v->shape.empty() ? initial : *initial.Rows(s.row_begin, s.row_end);
    RETURN_IF_ERROR(ps_[s.ps]->CreateVariable(s.name, part, optimizer).status());
  }
  return Status::Ok();
}

StatusOr<std::vector<Tensor>> VariableStore::Pull(const std::vector<std::string>& names) {
  std::vector<Tensor> out(names.size());
  std::vector<Item> items;
  for (size_t i = 0; i < names.size(); ++i) items.push_back({names[i], std::nullopt, &out[i]});
  RETURN_IF_ERROR(Fetch(items));
  return out;
}

Status VariableStore::PlanFetch(std::vector<Item>& items, std::map<int64_t, FetchPlan>& by_ps) {
  for (Item& item : items) {
    ASSIGN_OR_RETURN(const PlacedVariable* v, placement_.Find(item.name));
    for (const auto& s : v->shards) {
      if (s.ps >= static_cast<int64_t>(ps_.size()))
        return FailedPrecondition("no client for ps " + std::to_string(s.ps));
    }
    if (!item.rows) {
      ASSIGN_OR_RETURN(*item.out, Reuse(*item.out, v->dtype, v->shape));
      for (const auto& s : v->shards) {
        FetchPlan& p = by_ps[s.ps];
        p.names.push_back(s.name);
        p.into.push_back(v->sharded() ? *item.out->Rows(s.row_begin, s.row_end) : *item.out);
      }
      continue;
    }
    if (v->shape.empty()) return InvalidArgument("Fetch \"" + item.name + "\": a scalar has no rows");
    const std::vector<int64_t>& ids = *item.rows;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= v->shape[0] || (i > 0 && ids[i] <= ids[i - 1])) {
        return InvalidArgument("Fetch \"" + item.name + "\": row ids must be ascending, distinct and in [0, " +
                               std::to_string(v->shape[0]) + "); got " + std::to_string(ids[i]) + " at " +
                               std::to_string(i));
      }
    }
    Shape shape = v->shape;
    shape[0] = static_cast<int64_t>(ids.size());
    ASSIGN_OR_RETURN(*item.out, Reuse(*item.out, v->dtype, shape));
    // Sorted ids: each shard's rows are one contiguous block of the output.
    size_t at = 0;
    for (const auto& s : v->shards) {
      const size_t begin = at;
      while (at < ids.size() && ids[at] < s.row_end) ++at;
      if (at == begin) continue;
      RowPull r{s.name, {}, *item.out->Rows(static_cast<int64_t>(begin), static_cast<int64_t>(at))};
      for (size_t i = begin; i < at; ++i) r.local.push_back(ids[i] - s.row_begin);
      by_ps[s.ps].rows.push_back(std::move(r));
    }
  }
  return Status::Ok();
}

Status VariableStore::Fetch(std::vector<Item>& items) {
  ASSIGN_OR_RETURN(std::unique_ptr<Pending> p, Start(0, 0, {}, 0, items));
  return Finish(std::move(p)).status();
}

StatusOr<Tensor> VariableStore::Lookup(const std::string& name, const std::vector<int64_t>& ids) {
  ASSIGN_OR_RETURN(const PlacedVariable* v, placement_.Find(name));
  if (v->shape.empty()) return InvalidArgument("Lookup \"" + name + "\": a scalar has no rows");
  for (int64_t id : ids) {
    if (id < 0 || id >= v->shape[0]) {
      return InvalidArgument("Lookup \"" + name + "\": id " + std::to_string(id) + " outside [0, " +
                             std::to_string(v->shape[0]) + ")");
    }
  }
  // Each distinct row once, then spread to the positions that asked for it.
  std::vector<int64_t> uniq = ids;
  std::sort(uniq.begin(), uniq.end());
  uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
  Tensor rows;
  std::vector<Item> items{{name, uniq, &rows}};
  RETURN_IF_ERROR(Fetch(items));
  Shape out_shape = v->shape;
  out_shape[0] = static_cast<int64_t>(ids.size());
  ASSIGN_OR_RETURN(Tensor out, Tensor::CreateUninitialized(v->dtype, out_shape));
  const size_t row_bytes = static_cast<size_t>(RowElems(v->shape)) * DTypeSize(v->dtype);
  for (size_t i = 0; i < ids.size(); ++i) {
    const size_t k = static_cast<size_t>(std::lower_bound(uniq.begin(), uniq.end(), ids[i]) - uniq.begin());
    std::memcpy(out.raw() + i * row_bytes, rows.raw() + k * row_bytes, row_bytes);
  }
  return out;
}

Status VariableStore::PlanPush(const std::vector<Grad>& grads, std::map<int64_t, std::vector<ps::Update>>& by_ps) {
  for (const Grad& g : grads) {
    ASSIGN_OR_RETURN(const PlacedVariable* v, placement_.Find(g.name));
    for (const auto& s : v->shards) {
      if (s.ps >= static_cast<int64_t>(ps_.size()))
        return FailedPrecondition("no client for ps " + std::to_string(s.ps));
    }
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
      Tensor values;
      // Rows that are already contiguous in the gradient (ascending ids, as
      // the Embedding layer produces) are sent from there, not copied.
      if (src.back() - src.front() + 1 == static_cast<int64_t>(src.size())) {
        values = *g.grad.values.Rows(src.front(), src.back() + 1);
      } else {
        values = Tensor::Zeros(DType::kFloat32, vs);
        for (size_t j = 0; j < src.size(); ++j) {
          std::memcpy(values.data<float>() + j * row, g.grad.values.data<float>() + src[j] * row, row * sizeof(float));
        }
      }
      by_ps[s.ps].push_back({s.name, ps::Update::Kind::kApplyGradient, values,
                             *Tensor::FromVector({static_cast<int64_t>(local.size())}, local)});
    }
  }
  return Status::Ok();
}

StatusOr<int> VariableStore::PushGradients(uint64_t closure_id, uint32_t sequence, const std::vector<Grad>& grads,
                                           uint64_t generation) {
  std::vector<Item> nothing;  // with no pull, one Push per PS
  return PushAndFetch(closure_id, sequence, grads, generation, nothing);
}

StatusOr<int> VariableStore::PushAndFetch(uint64_t closure_id, uint32_t sequence, const std::vector<Grad>& grads,
                                          uint64_t generation, std::vector<Item>& items) {
  ASSIGN_OR_RETURN(std::unique_ptr<Pending> p, Start(closure_id, sequence, grads, generation, items));
  return Finish(std::move(p));
}

Status VariableStore::StartRowPulls(int64_t ps, FetchPlan& plan,
                                    std::vector<std::unique_ptr<ps::PsClient::Pending>>& started) {
  for (RowPull& r : plan.rows) {
    ASSIGN_OR_RETURN(std::unique_ptr<ps::PsClient::Pending> one, ps_[ps]->StartPullRowsInto(r.shard, r.local, r.into));
    started.push_back(std::move(one));
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<VariableStore::Pending>> VariableStore::Start(uint64_t closure_id, uint32_t sequence,
                                                                       const std::vector<Grad>& grads,
                                                                       uint64_t generation, std::vector<Item>& items) {
  auto p = std::make_unique<Pending>();
  std::map<int64_t, std::vector<ps::Update>> pushes;
  RETURN_IF_ERROR(PlanPush(grads, pushes));
  RETURN_IF_ERROR(PlanFetch(items, p->pulls));
  std::vector<int64_t> which;
  for (const auto& [ps, _] : pushes) which.push_back(ps);
  for (const auto& [ps, _] : p->pulls) {
    if (!pushes.count(ps)) which.push_back(ps);
  }
  // Every PS gets its request before any answer is read: the PS tasks
  // work in parallel.
  for (int64_t ps : which) {
    auto push = pushes.find(ps);
    auto pull = p->pulls.find(ps);
    const bool whole = pull != p->pulls.end() && !pull->second.names.empty();
    Pending::Call& call = p->calls.emplace_back();
    call.ps = ps;
    if (push != pushes.end()) {
      call.pushes = true;
      // This PS's push and whole-value pull in one exchange.
      if (whole) {
        ASSIGN_OR_RETURN(call.exchange, ps_[ps]->StartPushPullInto(closure_id, sequence, push->second, generation,
                                                                   pull->second.names, pull->second.into));
      } else {
        ASSIGN_OR_RETURN(call.exchange, ps_[ps]->StartPush(closure_id, sequence, push->second, generation));
      }
      continue;
    }
    if (whole) {
      ASSIGN_OR_RETURN(call.exchange, ps_[ps]->StartPullInto(pull->second.names, pull->second.into));
    }
    RETURN_IF_ERROR(StartRowPulls(ps, pull->second, call.rows));
  }
  return p;
}

StatusOr<int> VariableStore::Finish(std::unique_ptr<Pending> p) {
  int total = 0;
  Status first;
  for (Pending::Call& call : p->calls) {
    if (!call.exchange) continue;
    auto d = ps_[call.ps]->Finish(std::move(call.exchange));
    if (!d.ok()) {
      if (first.ok()) first = d.status();
      continue;
    }
    total += *d;
    // Row pulls after the push, so they see it too.
    auto pull = p->pulls.find(call.ps);
    if (call.pushes && pull != p->pulls.end() && first.ok()) first = StartRowPulls(call.ps, pull->second, call.rows);
  }
  for (Pending::Call& call : p->calls) {
    for (auto& rows : call.rows) {
      Status s = ps_[call.ps]->Finish(std::move(rows)).status();
      if (first.ok()) first = s;
    }
  }
  RETURN_IF_ERROR(first);
  return total;
}

StatusOr<int> VariableStore::AssignAdd(uint64_t closure_id, uint32_t sequence, const std::string& name,
                                       const Tensor& delta, uint64_t generation) {
  ASSIGN_OR_RETURN(const PlacedVariable* v, placement_.Find(name));
  if (v->sharded()) return Unimplemented("AssignAdd on sharded variable \"" + name + "\"");
  return ps_[v->shards[0].ps]->Push(closure_id, sequence,
                                    {{v->shards[0].name, ps::Update::Kind::kAssignAdd, delta, {}}}, generation);
}

}  // namespace tfjob::strategy
