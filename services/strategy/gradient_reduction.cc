#include "services/strategy/gradient_reduction.h"

#include "services/tensor/backend.h"
#include "services/tensor/ops.h"

namespace tfjob::strategy {
namespace {

StatusOr<Tensor> Ones(int64_t n, Device d) {
  ASSIGN_OR_RETURN(Tensor t, Tensor::Create(DType::kFloat32, {n}, d));
  ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(d));
  RETURN_IF_ERROR(b->Fill(t, 1.f));
  return t;
}

StatusOr<ReducibleGradient> SparseToReducible(const model::Gradient& g, const VariableInfo& var, float scale,
                                              Device device) {
  ReducibleGradient r;
  ASSIGN_OR_RETURN(r.dense, Tensor::Create(DType::kFloat32, var.shape, device));
  ASSIGN_OR_RETURN(Tensor scaled, ops::Scale(g.values, scale));
  RETURN_IF_ERROR(ops::ScatterAdd(r.dense, g.indices, scaled));
  ASSIGN_OR_RETURN(r.mask, Tensor::Create(DType::kFloat32, {var.shape.at(0)}, device));
  if (device.is_cpu()) {
    for (int64_t id : g.indices.flat<int64_t>()) r.mask.data<float>()[id] = 1;
  } else {
    // The indices are distinct: adding ones marks each row once.
    ASSIGN_OR_RETURN(Tensor ones, Ones(g.indices.size(), device));
    RETURN_IF_ERROR(ops::ScatterAdd(r.mask, g.indices, ones));
  }
  return r;
}

}  // namespace

float ReplicaShare(int64_t rows, int64_t batch) { return static_cast<float>(rows) / static_cast<float>(batch); }

StatusOr<ReplicaGradients> ToReducible(std::span<const model::Gradient> grads, std::span<const VariableInfo> vars,
                                       float scale, Device device) {
  if (grads.size() != vars.size()) {
    return InvalidArgument("gradients: " + std::to_string(grads.size()) + " for " + std::to_string(vars.size()) +
                           " variables");
  }
  ReplicaGradients out;
  out.reserve(grads.size());
  for (size_t v = 0; v < grads.size(); ++v) {
    const model::Gradient& g = grads[v];
    if (g.sparse != vars[v].sparse) {
      return Internal("gradient of \"" + vars[v].name + "\" changed between dense and sparse");
    }
    if (g.sparse) {
      ASSIGN_OR_RETURN(ReducibleGradient r, SparseToReducible(g, vars[v], scale, device));
      out.push_back(std::move(r));
      continue;
    }
    ReducibleGradient r;
    ASSIGN_OR_RETURN(r.dense, ops::Scale(g.dense, scale));
    out.push_back(std::move(r));
  }
  return out;
}

StatusOr<ReplicaGradients> ZeroGradients(std::span<const VariableInfo> vars, Device device) {
  ReplicaGradients out;
  out.reserve(vars.size());
  for (const VariableInfo& var : vars) {
    ReducibleGradient r;
    ASSIGN_OR_RETURN(r.dense, Tensor::Create(DType::kFloat32, var.shape, device));
    if (var.sparse) {
      ASSIGN_OR_RETURN(r.mask, Tensor::Create(DType::kFloat32, {var.shape.at(0)}, device));
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<Tensor*> ReductionTensors(ReplicaGradients& grads) {
  std::vector<Tensor*> p;
  for (ReducibleGradient& g : grads) {
    p.push_back(&g.dense);
    if (g.mask.size() > 0) p.push_back(&g.mask);
  }
  return p;
}

StatusOr<ReplicaGradients> SumInReplicaOrder(std::span<const ReplicaGradients> per_replica) {
  if (per_replica.empty()) return InvalidArgument("gradients: no replica to sum");
  ReplicaGradients sum = per_replica[0];
  for (size_t i = 1; i < per_replica.size(); ++i) {
    const ReplicaGradients& add = per_replica[i];
    if (add.size() != sum.size()) {
      return InvalidArgument("gradients: replica " + std::to_string(i) + " has " + std::to_string(add.size()) +
                             " variables, replica 0 has " + std::to_string(sum.size()));
    }
    for (size_t v = 0; v < sum.size(); ++v) {
      // A replica on another device sends its gradient to the one copy.
      ASSIGN_OR_RETURN(Tensor dense, add[v].dense.ToDevice(sum[v].dense.device()));
      ASSIGN_OR_RETURN(sum[v].dense, ops::Add(sum[v].dense, dense));
      if (sum[v].mask.size() > 0) {
        ASSIGN_OR_RETURN(Tensor mask, add[v].mask.ToDevice(sum[v].mask.device()));
        ASSIGN_OR_RETURN(sum[v].mask, ops::Add(sum[v].mask, mask));
      }
    }
  }
  return sum;
}

std::vector<int64_t> TouchedRows(const Tensor& mask) {
  std::vector<int64_t> rows;
  const float* m = mask.data<float>();
  for (int64_t r = 0; r < mask.size(); ++r) {
    if (m[r] > 0) rows.push_back(r);
  }
  return rows;
}

StatusOr<Tensor> PackStepSums(const BatchStats& stats, int64_t rows) {
  std::vector<float> packed{static_cast<float>(stats.loss.total), static_cast<float>(stats.loss.count),
                            static_cast<float>(rows)};
  for (const model::MetricState& m : stats.metrics) {
    packed.push_back(static_cast<float>(m.total));
    packed.push_back(static_cast<float>(m.count));
  }
  return Tensor::FromVector({static_cast<int64_t>(packed.size())}, packed);
}

StatusOr<StepSums> UnpackStepSums(const Tensor& sums, size_t metrics) {
  const int64_t want = 3 + 2 * static_cast<int64_t>(metrics);
  if (sums.dtype() != DType::kFloat32 || sums.size() != want) {
    return InvalidArgument("step sums: " + std::to_string(sums.size()) + " values for " + std::to_string(metrics) +
                           " metrics");
  }
  const float* f = sums.data<float>();
  StepSums out;
  out.stats.loss = {f[0], f[1]};
  out.rows = static_cast<int64_t>(f[2]);
  out.stats.metrics.resize(metrics);
  for (size_t k = 0; k < metrics; ++k) out.stats.metrics[k] = {f[3 + 2 * k], f[4 + 2 * k]};
  return out;
}

}  // namespace tfjob::strategy
