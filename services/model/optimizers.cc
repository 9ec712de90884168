#include "services/model/optimizers.h"

#include <cmath>
#include <map>

#include <Eigen/Core>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "services/tensor/backend.h"
#include "services/tensor/threads.h"

namespace tfjob::model {

using Arr = Eigen::Map<Eigen::ArrayXf>;
using CArr = Eigen::Map<const Eigen::ArrayXf>;

std::string_view OptimizerName(OptimizerType t) {
  switch (t) {
    case OptimizerType::kSGD: return "SGD";
    case OptimizerType::kAdagrad: return "Adagrad";
    case OptimizerType::kRMSprop: return "RMSprop";
    case OptimizerType::kAdam: return "Adam";
  }
  return "unknown";
}

namespace {

// Slots must be the ones CreateSlots made for this variable: the update writes
// them element for element alongside the variable.
Status CheckSlots(std::string_view name, size_t want, const SlotState& st, const Tensor& var) {
  if (st.slots.size() != want) return InvalidArgument(std::string(name) + ": slot state mismatch");
  for (const Tensor& s : st.slots) {
    if (s.dtype() != DType::kFloat32 || s.shape() != var.shape()) {
      return InvalidArgument(std::string(name) + ": slot " + s.DebugString() + " does not match variable " +
                             var.DebugString());
    }
  }
  return Status::Ok();
}

device::OptimizerStep DeviceStep(const OptimizerSpec& s, float alpha) {
  device::OptimizerStep d;
  switch (s.type) {
    case OptimizerType::kSGD: d.rule = device::OptimizerStep::Rule::kSgd; break;
    case OptimizerType::kAdagrad: d.rule = device::OptimizerStep::Rule::kAdagrad; break;
    case OptimizerType::kRMSprop: d.rule = device::OptimizerStep::Rule::kRmsprop; break;
    case OptimizerType::kAdam: d.rule = device::OptimizerStep::Rule::kAdam; break;
  }
  d.learning_rate = static_cast<float>(s.learning_rate);
  d.momentum = static_cast<float>(s.momentum);
  d.nesterov = s.nesterov;
  d.rho = static_cast<float>(s.rho);
  d.centered = s.centered;
  d.beta_1 = static_cast<float>(s.beta_1);
  d.beta_2 = static_cast<float>(s.beta_2);
  d.amsgrad = s.amsgrad;
  d.epsilon = static_cast<float>(s.epsilon);
  d.alpha = alpha;
  return d;
}

}  // namespace

Optimizer::Optimizer(OptimizerSpec spec, bool split_dense) : spec_(spec), split_dense_(split_dense) {}

std::string_view Optimizer::name() const { return OptimizerName(spec_.type); }

std::vector<std::string> Optimizer::SlotNames() const {
  switch (spec_.type) {
    case OptimizerType::kSGD:
      if (spec_.momentum > 0) return {"momentum"};
      return {};
    case OptimizerType::kAdagrad: return {"accumulator"};
    case OptimizerType::kRMSprop: {
      std::vector<std::string> s{"velocity"};
      if (spec_.momentum > 0) s.push_back("momentum");
      if (spec_.centered) s.push_back("average_gradient");
      return s;
    }
    case OptimizerType::kAdam:
      if (spec_.amsgrad) return {"momentum", "velocity", "velocity_hat"};
      return {"momentum", "velocity"};
  }
  return {};
}

SlotState Optimizer::CreateSlots(const Tensor& var) const {
  SlotState s;
  for (size_t i = 0; i < SlotNames().size(); ++i) s.slots.push_back(Tensor::Zeros(DType::kFloat32, var.shape()));
  if (spec_.type == OptimizerType::kAdagrad) {
    Arr(s.slots[0].data<float>(), s.slots[0].size()).setConstant(static_cast<float>(spec_.initial_accumulator_value));
  }
  return s;
}

float Optimizer::StepAlpha(int64_t t) const {
  if (spec_.type != OptimizerType::kAdam) return static_cast<float>(spec_.learning_rate);
  const double b1p = std::pow(spec_.beta_1, static_cast<double>(t));
  const double b2p = std::pow(spec_.beta_2, static_cast<double>(t));
  return static_cast<float>(spec_.learning_rate * std::sqrt(1.0 - b2p) / (1.0 - b1p));
}

void Optimizer::UpdateRange(Tensor& var, int64_t off, const float* gp, int64_t n, SlotState& st, float alpha) const {
  Arr w(var.data<float>() + off, n);
  CArr g(gp, n);
  auto slot = [&](size_t i) { return Arr(st.slots[i].data<float>() + off, n); };
  const float lr = static_cast<float>(spec_.learning_rate);
  const float eps = static_cast<float>(spec_.epsilon);
  switch (spec_.type) {
    case OptimizerType::kSGD: {
      if (spec_.momentum <= 0) {
        w -= lr * g;
        break;
      }
      const float mu = static_cast<float>(spec_.momentum);
      Arr m = slot(0);
      m = mu * m - lr * g;
      if (spec_.nesterov)
        w += mu * m - lr * g;
      else
        w += m;
      break;
    }
    case OptimizerType::kAdagrad: {
      Arr a = slot(0);
      a += g.square();
      w -= lr * g / (a + eps).sqrt();
      break;
    }
    case OptimizerType::kRMSprop: {
      const float rho = static_cast<float>(spec_.rho);
      Arr v = slot(0);
      v = rho * v + (1.f - rho) * g.square();
      Eigen::ArrayXf inc;
      if (spec_.centered) {
        Arr mg = slot(spec_.momentum > 0 ? 2 : 1);
        mg = rho * mg + (1.f - rho) * g;
        inc = lr * g / (v - mg.square() + eps).sqrt();
      } else {
        inc = lr * g / (v + eps).sqrt();
      }
      if (spec_.momentum > 0) {
        Arr m = slot(1);
        m = static_cast<float>(spec_.momentum) * m + inc;
        w -= m;
      } else {
        w -= inc;
      }
      break;
    }
    case OptimizerType::kAdam: {
      const float b1 = static_cast<float>(spec_.beta_1), b2 = static_cast<float>(spec_.beta_2);
      // The update is memory-bound: its expressions run a block at a time,
      // so the moments are read from memory once, not twice.
      constexpr int64_t kBlock = 2048;
      for (int64_t at = 0; at < n; at += kBlock) {
        const int64_t len = std::min(kBlock, n - at);
        auto block = [&](size_t i) { return Arr(st.slots[i].data<float>() + off + at, len); };
        Arr wb(var.data<float>() + off + at, len), mb = block(0), vb = block(1);
        CArr gb(gp + at, len);
        mb += (gb - mb) * (1.f - b1);
        vb += (gb.square() - vb) * (1.f - b2);
        if (spec_.amsgrad) {
          Arr vh = block(2);
          vh = vh.max(vb);
          wb -= alpha * mb / (vh.sqrt() + eps);
        } else {
          wb -= alpha * mb / (vb.sqrt() + eps);
        }
      }
      break;
    }
  }
}

Status Optimizer::ApplyDense(Tensor& var, const Tensor& grad, SlotState& st) const {
  if (var.dtype() != DType::kFloat32 || grad.dtype() != DType::kFloat32 || var.shape() != grad.shape()) {
    return InvalidArgument(std::string(name()) + ": gradient " + grad.DebugString() + " does not match variable " +
                           var.DebugString());
  }
  RETURN_IF_ERROR(CheckSlots(name(), SlotNames().size(), st, var));
  if (!var.on_cpu() || !grad.on_cpu()) {
    RETURN_IF_ERROR(CheckDevice(var, {&grad}, st));
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(var.device()));
    RETURN_IF_ERROR(b->ApplyDense(DeviceStep(spec_, StepAlpha(st.iterations + 1)), var, grad, st.slots));
    st.iterations += 1;
    return Status::Ok();
  }
  st.iterations += 1;
  const float alpha = StepAlpha(st.iterations);
  const float* g = grad.data<float>();
  const int64_t n = var.size();
  // A large update is memory-bound, and one thread reading a gradient
  // every compute thread helped write was slower at two threads than at
  // one (docs/performance.md): each thread updates a contiguous share. The
  // shares are whole blocks of kSplit elements, so every element is
  // computed by the same code path at any thread count (the same bits).
#ifdef _OPENMP
  constexpr int64_t kSplit = 2048, kParallel = 1 << 16;
  const int threads = ComputeThreads();
  if (split_dense_ && threads > 1 && n >= kParallel && !omp_in_parallel()) {
    const int64_t blocks = (n + kSplit - 1) / kSplit;
#pragma omp parallel num_threads(threads)
    {
      const int64_t i = omp_get_thread_num(), k = omp_get_num_threads();
      const int64_t begin = std::min(n, blocks * i / k * kSplit), end = std::min(n, blocks * (i + 1) / k * kSplit);
      if (end > begin) UpdateRange(var, begin, g + begin, end - begin, st, alpha);
    }
    return Status::Ok();
  }
#endif
  UpdateRange(var, 0, g, n, st, alpha);
  return Status::Ok();
}

Status Optimizer::CheckDevice(const Tensor& var, std::initializer_list<const Tensor*> others,
                              const SlotState& st) const {
  for (const Tensor* t : others) RETURN_IF_ERROR(device::CheckSameDevice(name(), {&var, t}));
  for (const Tensor& s : st.slots) RETURN_IF_ERROR(device::CheckSameDevice(name(), {&var, &s}));
  return Status::Ok();
}

Status Optimizer::ApplyMaskedRows(Tensor& var, const Tensor& grad, const Tensor& mask, SlotState& st) const {
  if (var.on_cpu()) return InvalidArgument(std::string(name()) + ": masked rows are for device variables");
  if (var.dtype() != DType::kFloat32 || grad.shape() != var.shape() || var.rank() < 1 ||
      mask.shape() != Shape{var.dim(0)} || mask.dtype() != DType::kFloat32) {
    return InvalidArgument(std::string(name()) + ": gradient " + grad.DebugString() + " and mask " +
                           mask.DebugString() + " do not match variable " + var.DebugString());
  }
  RETURN_IF_ERROR(CheckSlots(name(), SlotNames().size(), st, var));
  RETURN_IF_ERROR(CheckDevice(var, {&grad, &mask}, st));
  ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(var.device()));
  RETURN_IF_ERROR(b->ApplyMaskedRows(DeviceStep(spec_, StepAlpha(st.iterations + 1)), var, grad, mask, st.slots));
  st.iterations += 1;
  return Status::Ok();
}

Status Optimizer::ApplySparse(Tensor& var, const Tensor& indices, const Tensor& values, SlotState& st) const {
  if (var.dtype() != DType::kFloat32 || var.rank() < 1) return InvalidArgument(std::string(name()) + ": bad variable");
  if (indices.dtype() != DType::kInt64 || indices.rank() != 1) {
    return InvalidArgument(std::string(name()) + ": sparse indices must be int64 [k], got " + indices.DebugString());
  }
  Shape want = var.shape();
  want[0] = indices.dim(0);
  if (values.dtype() != DType::kFloat32 || values.shape() != want) {
    return InvalidArgument(std::string(name()) + ": sparse values " + values.DebugString() + " should be float32" +
                           ShapeString(want));
  }
  RETURN_IF_ERROR(CheckSlots(name(), SlotNames().size(), st, var));
  if (!var.on_cpu() || !indices.on_cpu() || !values.on_cpu()) {
    RETURN_IF_ERROR(CheckDevice(var, {&indices, &values}, st));
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(var.device()));
    RETURN_IF_ERROR(b->ApplyRows(DeviceStep(spec_, StepAlpha(st.iterations + 1)), var, indices, values, st.slots));
    st.iterations += 1;
    return Status::Ok();
  }
  const int64_t rows = var.dim(0), row = rows ? var.size() / rows : 0;
  const int64_t* ids = indices.data<int64_t>();
  for (int64_t i = 0; i < indices.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= rows) {
      return InvalidArgument(std::string(name()) + ": row " + std::to_string(ids[i]) + " outside [0, " +
                             std::to_string(rows) + ")");
    }
  }
  // Repeated rows are summed first, as Keras deduplicates IndexedSlices, so a
  // row's rule runs once per step whatever the caller sent.
  bool distinct = true;
  for (int64_t i = 1; i < indices.size() && distinct; ++i) distinct = ids[i] > ids[i - 1];
  if (!distinct) {
    std::map<int64_t, Eigen::ArrayXf> merged;
    for (int64_t i = 0; i < indices.size(); ++i) {
      auto [it, fresh] = merged.try_emplace(ids[i], Eigen::ArrayXf::Zero(row));
      it->second += CArr(values.data<float>() + i * row, row);
    }
    Tensor mi = Tensor::Zeros(DType::kInt64, {static_cast<int64_t>(merged.size())});
    Shape vs = want;
    vs[0] = mi.dim(0);
    Tensor mv = Tensor::Zeros(DType::kFloat32, vs);
    int64_t k = 0;
    for (const auto& [id, sum] : merged) {
      mi.data<int64_t>()[k] = id;
      Arr(mv.data<float>() + k * row, row) = sum;
      ++k;
    }
    return ApplySparse(var, mi, mv, st);
  }
  st.iterations += 1;
  const float alpha = StepAlpha(st.iterations);
  for (int64_t i = 0; i < indices.size(); ++i) {
    UpdateRange(var, ids[i] * row, values.data<float>() + i * row, row, st, alpha);
  }
  return Status::Ok();
}

Status Optimizer::Apply(Tensor& var, const Gradient& g, SlotState& st) const {
  if (g.delta) return AddDelta(var, g.dense);
  return g.sparse ? ApplySparse(var, g.indices, g.values, st) : ApplyDense(var, g.dense, st);
}

Status AddDelta(Tensor& var, const Tensor& delta) {
  if (var.dtype() != DType::kFloat32 || delta.dtype() != DType::kFloat32 || var.shape() != delta.shape()) {
    return InvalidArgument("delta " + delta.DebugString() + " does not match variable " + var.DebugString());
  }
  if (!var.on_cpu() || !delta.on_cpu()) {
    RETURN_IF_ERROR(device::CheckSameDevice("delta", {&var, &delta}));
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(var.device()));
    return b->BinaryOp(device::Binary::kAdd, var, delta, var);
  }
  Arr(var.data<float>(), var.size()) += CArr(delta.data<float>(), delta.size());
  return Status::Ok();
}

}  // namespace tfjob::model
