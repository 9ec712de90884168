#include "services/strategy/sync_step.h"

#include <cmath>
#include <ostream>

#include "services/collective/nccl.h"
#include "services/model/constraints.h"
#include "services/tensor/backend.h"
#include "services/tensor/eigen.h"
#include "services/tensor/ops.h"

namespace tfjob::strategy {

using collective::ReduceOp;

KindTraits TraitsOf(StrategyKind kind) {
  switch (kind) {
    case StrategyKind::kOneDevice: return {.synchronous = true, .placement = DevicePlacement::kOneDevice};
    case StrategyKind::kMirrored:
      return {.synchronous = true,
              .replicas_in_process = true,
              .copy_per_replica = true,
              .placement = DevicePlacement::kPerGpu};
    case StrategyKind::kCentralStorage:
      return {.synchronous = true,
              .replicas_in_process = true,
              .sum_to_one_copy = true,
              .placement = DevicePlacement::kPerGpu};
    case StrategyKind::kMultiWorkerMirrored:
      return {.synchronous = true, .in_group = true, .placement = DevicePlacement::kByRank};
    case StrategyKind::kParameterServer: break;
  }
  return {};
}

SyncStep::SyncStep(const model::JobConfig& job, const SyncOptions& o)
    : job_(job),
      traits_(TraitsOf(o.kind)),
      in_group_(o.group != nullptr),
      sharded_input_(o.sharded_input),
      collective_(o.collective),
      log_(o.log),
      optimizer_(job.optimizer, /*split_dense=*/true) {
  local_replicas_ = traits_.replicas_in_process ? o.replicas : 1;
  replicas_in_sync_ = static_cast<int64_t>(local_replicas_) * (o.group ? o.group->size() : 1);
  if (o.group) first_replica_ = o.group->rank() * local_replicas_;
  if (replicas_in_sync_ == 1) {
    reduction_ = Reduction::kNone;
  } else if (traits_.sum_to_one_copy) {
    reduction_ = Reduction::kSumToOneCopy;
  } else if (in_group_) {
    reduction_ = Reduction::kAcrossGroup;
  } else {
    reduction_ = Reduction::kInReplicas;
  }
}

StatusOr<std::unique_ptr<SyncStep>> SyncStep::Create(const model::JobConfig& job, const SyncOptions& o,
                                                     GlobalBatches& input) {
  std::unique_ptr<SyncStep> s(new SyncStep(job, o));
  const int local = s->local_replicas_;
  if (!o.devices.empty() && static_cast<int>(o.devices.size()) != local) {
    return InvalidArgument("strategy: " + std::to_string(o.devices.size()) + " devices for " + std::to_string(local) +
                           " local replicas");
  }
  s->devices_ = o.devices.empty() ? std::vector<Device>(static_cast<size_t>(local), Device::Cpu()) : o.devices;
  s->on_device_ = !s->devices_[0].is_cpu();
  RETURN_IF_ERROR(s->CreateModels(input));
  RETURN_IF_ERROR(s->CreateVariables(o.initial_values));
  s->outputs_.resize(static_cast<size_t>(local));
  s->pool_ = std::make_unique<ReplicaPool>(local);
  if (s->traits_.copy_per_replica && local > 1) {
    s->local_group_ = std::make_unique<collective::LocalGroup>(local, s->collective_);
  }
  RETURN_IF_ERROR(s->ProbeSparse(input));
  if (s->on_device_) RETURN_IF_ERROR(s->MoveToDevices());
  if (s->models_[0]->compute_precision() == Precision::kFloat16)
    s->loss_scale_.emplace(DynamicLossScale::OptionsOf(job.optimizer));
  return s;
}

Status SyncStep::CreateModels(GlobalBatches& input) {
  for (int i = 0; i < local_replicas_; ++i) {
    ASSIGN_OR_RETURN(auto m, model::Model::Create(job_.model, job_.loss));
    models_.push_back(std::move(m));
  }
  // Adapted state (Normalization) comes from the whole training set, so
  // every process starts from the same values.
  return models_[0]->Adapt(input.examples().features).WithContext(job_.data.train.field);
}

Status SyncStep::CreateVariables(const std::vector<Tensor>& given) {
  const std::vector<Tensor> init = given.empty() ? models_[0]->InitialValues(static_cast<uint64_t>(job_.seed)) : given;
  const auto& model_vars = models_[0]->variables();
  if (init.size() != model_vars.size()) {
    return InvalidArgument("strategy: " + std::to_string(init.size()) + " initial values for " +
                           std::to_string(model_vars.size()) + " variables");
  }
  for (size_t v = 0; v < init.size(); ++v) {
    if (init[v].shape() != model_vars[v].shape || init[v].dtype() != DType::kFloat32) {
      return InvalidArgument("strategy: the initial value of " + model_vars[v].name + " is " + init[v].DebugString() +
                             ", the variable is float32" + ShapeString(model_vars[v].shape));
    }
  }
  for (size_t v = 0; v < init.size(); ++v) {
    vars_.push_back({.name = model_vars[v].name,
                     .shape = init[v].shape(),
                     .trainable = model_vars[v].trainable,
                     .constraint = model_vars[v].constraint});
  }
  const int copies = traits_.copy_per_replica ? local_replicas_ : 1;
  for (int c = 0; c < copies; ++c) {
    VariableCopy copy;
    // Each mirrored replica's own device; the one copy on the first.
    copy.device = devices_[static_cast<size_t>(c)];
    for (size_t v = 0; v < init.size(); ++v) {
      copy.values.push_back(init[v].Clone());
      // Non-trainable state has no optimizer slots.
      copy.slots.push_back(vars_[v].trainable ? optimizer_.CreateSlots(init[v]) : model::SlotState{});
    }
    copies_.push_back(std::move(copy));
  }
  return Status::Ok();
}

Status SyncStep::ProbeSparse(GlobalBatches& input) {
  // Which variables get sparse gradients decides what every replica sends,
  // so it is known before any replica has rows to compute: probe one row.
  if (replicas_in_sync_ <= 1) return Status::Ok();
  ASSIGN_OR_RETURN(data::Element probe, input.Get(0));
  ASSIGN_OR_RETURN(Tensor x1, probe[0].Rows(0, 1));
  ASSIGN_OR_RETURN(Tensor y1, probe[1].Rows(0, 1));
  ASSIGN_OR_RETURN(model::Model::Output out, models_[0]->ComputeGradients(copies_[0].values, x1, y1));
  if (out.grads.size() != vars_.size()) {
    return Internal("strategy: " + std::to_string(out.grads.size()) + " gradients for " + std::to_string(vars_.size()) +
                    " variables");
  }
  for (size_t v = 0; v < vars_.size(); ++v) vars_[v].sparse = out.grads[v].sparse;
  return Status::Ok();
}

Status SyncStep::MoveToDevices() {
  RETURN_IF_ERROR(models_[0]->CheckDeviceSupport());
  for (VariableCopy& copy : copies_) {
    for (Tensor& t : copy.values) {
      ASSIGN_OR_RETURN(t, t.ToDevice(copy.device));
    }
    for (model::SlotState& st : copy.slots) {
      for (Tensor& t : st.slots) {
        ASSIGN_OR_RETURN(t, t.ToDevice(copy.device));
      }
    }
  }
  const Shape stats_shape{model::Model::StatsSize(job_.metrics.size())};
  for (const Device& d : devices_) {
    ASSIGN_OR_RETURN(Tensor st, Tensor::Create(DType::kFloat32, stats_shape, d));
    chunk_stats_.push_back(std::move(st));
  }
  if (in_group_) {
    ASSIGN_OR_RETURN(step_stats_, Tensor::Create(DType::kFloat32, stats_shape, devices_[0]));
  }
  JoinNcclLocal();
  return Status::Ok();
}

void SyncStep::JoinNcclLocal() {
  // Mirrored replicas on several GPUs reduce with NCCL where it serves, in
  // place on the GPUs; otherwise through host memory.
  if (!local_group_ || !collective::NcclAvailable().ok()) return;
  std::vector<int> ids;
  for (const Device& d : devices_) ids.push_back(d.index);
  auto g = collective::MakeNcclLocalGroup(ids, collective_);
  if (g.ok()) {
    nccl_local_ = std::move(g).value();
  } else if (log_) {
    *log_ << "fit: mirrored replicas reduce through host memory: " + g.status().message() << std::endl;
  }
}

std::string_view SyncStep::in_process_communication() const {
  if (!local_group_) return "";
  return nccl_local_.empty() ? "local" : "nccl";
}

SyncStep::ReplicaRows SyncStep::RowsOf(int i, int64_t batch) const {
  const int64_t g = first_replica_ + i;
  return {.begin = batch * g / replicas_in_sync_, .end = batch * (g + 1) / replicas_in_sync_, .batch = batch};
}

VariableCopy& SyncStep::CopyOf(int replica) { return copies_[copies_.size() == 1 ? 0 : static_cast<size_t>(replica)]; }

BatchStats SyncStep::NewStats() const {
  BatchStats s;
  s.metrics.resize(job_.metrics.size());
  return s;
}

StatusOr<std::vector<Tensor>> SyncStep::ReplicaValues(int i) {
  const std::vector<Tensor>& values = CopyOf(i).values;
  const Device dev = devices_[static_cast<size_t>(i)];
  if (values.empty() || values[0].device() == dev) return values;
  std::vector<Tensor> out;
  for (const Tensor& t : values) {
    ASSIGN_OR_RETURN(Tensor d, t.ToDevice(dev));
    out.push_back(std::move(d));
  }
  return out;
}

Status SyncStep::ComputeReplicas(const Tensor& x, const Tensor& y) {
  pool_->Run([&](int i) {
    Status s = ReplicaStep(i, x, y);
    // A replica that cannot go on must not leave the others waiting.
    if (!s.ok() && local_group_) local_group_->Abort(s);
    if (!s.ok()) {
      for (auto& c : nccl_local_) c->Abort(s);
    }
    outputs_[static_cast<size_t>(i)].status = s;
  });
  for (const ReplicaOutput& o : outputs_) {
    if (!o.status.ok()) return o.status;
  }
  return Status::Ok();
}

Status SyncStep::ReplicaStep(int i, const Tensor& x, const Tensor& y) {
  if (on_device_) return DeviceReplicaStep(i, x, y);
  ReplicaOutput& o = outputs_[static_cast<size_t>(i)];
  o.stats = NewStats();
  model::Model& m = *models_[static_cast<size_t>(i)];
  m.set_loss_scale(loss_scale_ ? loss_scale_->scale() : 1.f);
  const std::vector<Tensor>& values = CopyOf(i).values;
  if (reduction_ == Reduction::kNone) {
    ASSIGN_OR_RETURN(model::Model::Output out, m.ComputeGradients(values, x, y));
    RETURN_IF_ERROR(RecordBatch(out, y, job_.metrics, o.stats));
    o.raw = std::move(out.grads);
    return Status::Ok();
  }
  // A member reading its own shard has its part of the batch already (one
  // replica per member).
  const ReplicaRows r =
      sharded_input_ ? ReplicaRows{.begin = 0, .end = x.dim(0), .batch = job_.batch_size} : RowsOf(i, x.dim(0));
  if (r.end > r.begin) {
    ASSIGN_OR_RETURN(Tensor xs, x.Rows(r.begin, r.end));
    ASSIGN_OR_RETURN(Tensor ys, y.Rows(r.begin, r.end));
    ASSIGN_OR_RETURN(model::Model::Output out, m.ComputeGradients(values, xs, ys));
    RETURN_IF_ERROR(RecordBatch(out, ys, job_.metrics, o.stats));
    ASSIGN_OR_RETURN(o.grads, ToReducible(out.grads, vars_, ReplicaShare(r.end - r.begin, r.batch), Device::Cpu()));
  } else {
    ASSIGN_OR_RETURN(o.grads, ZeroGradients(vars_, Device::Cpu()));
  }
  return ReduceInProcess(i, o.grads);
}

Status SyncStep::DeviceReplicaStep(int i, const Tensor& x, const Tensor& y) {
  ReplicaOutput& o = outputs_[static_cast<size_t>(i)];
  o.stats = NewStats();
  const Device dev = devices_[static_cast<size_t>(i)];
  model::Model& m = *models_[static_cast<size_t>(i)];
  // Members of a group reduce the step's sums with the gradients.
  Tensor& stats = in_group_ && replicas_in_sync_ > 1 ? step_stats_ : chunk_stats_[static_cast<size_t>(i)];
  Tensor xs = x, ys = y;
  ReplicaRows r{.begin = 0, .end = x.dim(0), .batch = x.dim(0)};
  if (reduction_ != Reduction::kNone) {
    r = RowsOf(i, x.dim(0));
    if (r.end > r.begin) {
      ASSIGN_OR_RETURN(xs, x.Rows(r.begin, r.end));
      ASSIGN_OR_RETURN(ys, y.Rows(r.begin, r.end));
    }
  }
  std::vector<model::Gradient> grads;
  if (r.end > r.begin) {
    ASSIGN_OR_RETURN(Tensor xd, m.PlaceFeatures(xs, dev));
    ASSIGN_OR_RETURN(Tensor targets, m.Targets(ys));
    ASSIGN_OR_RETURN(Tensor td, targets.ToDevice(dev));
    ASSIGN_OR_RETURN(std::vector<Tensor> values, ReplicaValues(i));
    ASSIGN_OR_RETURN(grads, m.ComputeGradientsOnDevice(values, xd, td, job_.metrics, stats));
  }
  if (reduction_ == Reduction::kNone) {
    o.raw = std::move(grads);
    return Status::Ok();
  }
  if (r.end > r.begin) {
    ASSIGN_OR_RETURN(o.grads, ToReducible(grads, vars_, ReplicaShare(r.end - r.begin, r.batch), dev));
  } else {
    ASSIGN_OR_RETURN(o.grads, ZeroGradients(vars_, dev));
  }
  return ReduceInProcess(i, o.grads);
}

Status SyncStep::ReduceInProcess(int i, ReplicaGradients& grads) {
  // Mirrored: every replica reduces with the others, then updates its own
  // copy with the same sum.
  if (!local_group_) return Status::Ok();
  std::vector<Tensor*> p = ReductionTensors(grads);
  if (!nccl_local_.empty()) {
    RETURN_IF_ERROR(nccl_local_[static_cast<size_t>(i)]->AllReduce(p, ReduceOp::kSum));
  } else {
    collective::Communicator* c = local_group_->member(i);
    RETURN_IF_ERROR(Staged(p, [c](std::span<Tensor* const> t) { return c->AllReduce(t, ReduceOp::kSum); }));
  }
  return ApplyReduced(CopyOf(i), grads, outputs_[static_cast<size_t>(i)].finite);
}

Status SyncStep::ApplyReduced(VariableCopy& copy, const ReplicaGradients& g, bool& finite) {
  finite = true;
  if (loss_scale_) {
    for (size_t v = 0; v < g.size() && finite; ++v) {
      if (vars_[v].trainable && g[v].dense.on_cpu()) finite = AsArray(g[v].dense).isFinite().all();
    }
  }
  for (size_t v = 0; v < copy.values.size(); ++v) {
    Tensor& value = copy.values[v];
    if (!vars_[v].trainable) {
      // The replicas' deltas, weighted by their rows: their mean.
      RETURN_IF_ERROR(model::AddDelta(value, g[v].dense));
      continue;
    }
    if (!finite) continue;  // a skipped step: moving statistics still move, as in Keras
    if (!vars_[v].sparse) {
      RETURN_IF_ERROR(optimizer_.ApplyDense(value, g[v].dense, copy.slots[v]));
      RETURN_IF_ERROR(model::ApplyConstraint(vars_[v].constraint, value));
      continue;
    }
    if (!value.on_cpu()) {
      RETURN_IF_ERROR(optimizer_.ApplyMaskedRows(value, g[v].dense, g[v].mask, copy.slots[v]));
      continue;
    }
    const std::vector<int64_t> rows = TouchedRows(g[v].mask);
    if (rows.empty()) continue;
    ASSIGN_OR_RETURN(Tensor indices, Tensor::FromVector({static_cast<int64_t>(rows.size())}, rows));
    ASSIGN_OR_RETURN(Tensor updates, ops::Gather(g[v].dense, indices));
    RETURN_IF_ERROR(optimizer_.ApplySparse(value, indices, updates, copy.slots[v]));
    RETURN_IF_ERROR(model::ApplyConstraint(vars_[v].constraint, value));
  }
  return Status::Ok();
}

StatusOr<StepProgress> SyncStep::ReduceAndApply(int64_t batch_rows, const GroupReducer& group, Stopwatch& w,
                                                StepSeconds& t) {
  StepProgress p{.stats = NewStats(), .examples = batch_rows};
  for (const ReplicaOutput& o : outputs_) p.stats.Merge(o.stats);
  switch (reduction_) {
    case Reduction::kNone: RETURN_IF_ERROR(ApplyAsComputed()); break;
    case Reduction::kInReplicas: break;  // every replica has applied the sum to its own copy
    case Reduction::kSumToOneCopy: RETURN_IF_ERROR(SumAndApply()); break;
    case Reduction::kAcrossGroup:
      if (!on_device_) {
        ASSIGN_OR_RETURN(p, AllReduceOnHost(std::move(p), group, w, t));
        break;
      }
      RETURN_IF_ERROR(AllReduceOnDevice(group, w, t));
      break;
  }
  // Every replica decided alike on the same reduced gradients.
  if (loss_scale_) loss_scale_->Update(outputs_[0].finite);
  return p;
}

Status SyncStep::ApplyAsComputed() {
  VariableCopy& copy = copies_[0];
  outputs_[0].finite = !loss_scale_ || model::AllFinite(outputs_[0].raw);
  for (size_t v = 0; v < copy.values.size(); ++v) {
    if (!outputs_[0].finite && vars_[v].trainable) continue;  // Keras skips the step
    RETURN_IF_ERROR(optimizer_.Apply(copy.values[v], outputs_[0].raw[v], copy.slots[v]));
    if (vars_[v].trainable) RETURN_IF_ERROR(model::ApplyConstraint(vars_[v].constraint, copy.values[v]));
  }
  return Status::Ok();
}

Status SyncStep::SumAndApply() {
  std::vector<ReplicaGradients> per_replica;
  per_replica.reserve(outputs_.size());
  for (ReplicaOutput& o : outputs_) per_replica.push_back(std::move(o.grads));
  ASSIGN_OR_RETURN(ReplicaGradients sum, SumInReplicaOrder(per_replica));
  return ApplyReduced(copies_[0], sum, outputs_[0].finite);
}

Status SyncStep::AllReduceOnDevice(const GroupReducer& group, Stopwatch& w, StepSeconds& t) {
  std::vector<Tensor*> p = ReductionTensors(outputs_[0].grads);
  p.push_back(&step_stats_);
  if (group.nccl) {
    RETURN_IF_ERROR(group.comm->AllReduce(p, ReduceOp::kSum));
  } else {
    collective::Communicator* c = group.comm;
    RETURN_IF_ERROR(Staged(p, [c](std::span<Tensor* const> ts) { return c->AllReduce(ts, ReduceOp::kSum); }));
  }
  w.Lap(t.all_reduce);
  RETURN_IF_ERROR(ApplyReduced(copies_[0], outputs_[0].grads, outputs_[0].finite));
  ASSIGN_OR_RETURN(device::Backend * be, device::BackendFor(step_stats_.device()));
  RETURN_IF_ERROR(be->BinaryOp(device::Binary::kAdd, chunk_stats_[0], step_stats_, chunk_stats_[0]));
  return be->Fill(step_stats_, 0.f);
}

StatusOr<StepProgress> SyncStep::AllReduceOnHost(StepProgress p, const GroupReducer& group, Stopwatch& w,
                                                 StepSeconds& t) {
  // The step's loss and metric sums travel with the gradients, so every
  // member records the same progress.
  ASSIGN_OR_RETURN(Tensor sums, PackStepSums(p.stats, p.examples));
  std::vector<Tensor*> ptrs = ReductionTensors(outputs_[0].grads);
  ptrs.push_back(&sums);
  RETURN_IF_ERROR(group.comm->AllReduce(ptrs, ReduceOp::kSum));
  w.Lap(t.all_reduce);
  RETURN_IF_ERROR(ApplyReduced(copies_[0], outputs_[0].grads, outputs_[0].finite));
  ASSIGN_OR_RETURN(StepSums reduced, UnpackStepSums(sums, job_.metrics.size()));
  p.stats = std::move(reduced.stats);
  // Every member's rows: the global batch, also when each read its own part.
  if (sharded_input_) p.examples = reduced.rows;
  return p;
}

Status SyncStep::ResolveStats(TrainState& st) {
  for (Tensor& dev : chunk_stats_) {
    ASSIGN_OR_RETURN(Tensor h, dev.ToDevice(Device::Cpu()));
    const float* f = h.data<float>();
    if (!std::isfinite(f[0])) return InvalidArgument("loss is " + std::to_string(f[0]) + " (diverged)");
    st.partial.loss.total += f[0];
    st.partial.loss.count += f[1];
    st.partial.metrics.resize(job_.metrics.size());
    for (size_t k = 0; k < job_.metrics.size(); ++k) {
      st.partial.metrics[k].total += f[2 + 2 * k];
      st.partial.metrics[k].count += f[3 + 2 * k];
    }
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(dev.device()));
    RETURN_IF_ERROR(b->Fill(dev, 0.f));
  }
  return Status::Ok();
}

Status SyncStep::AssignAll(const VariableCopy& host) {
  for (VariableCopy& copy : copies_) RETURN_IF_ERROR(Assign(host, copy));
  return Status::Ok();
}

}  // namespace tfjob::strategy
