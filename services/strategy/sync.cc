#include "services/strategy/sync.h"

#include <chrono>
#include <cmath>
#include <functional>
#include <ostream>

#include "services/checkpoint/manager.h"
#include "services/collective/local.h"
#include "services/collective/nccl.h"
#include "services/model/optimizers.h"
#include "services/strategy/checkpoints.h"
#include "services/strategy/replica_pool.h"
#include "services/tensor/backend.h"
#include "services/tensor/ops.h"

namespace tfjob::strategy {
namespace {

using collective::ReduceOp;
using Clock = std::chrono::steady_clock;

// A replica's gradient in a form replicas can add up: dense, plus, for a
// variable with sparse gradients, the rows it touched (1) or not (0).
struct Reducible {
  Tensor dense;
  Tensor mask;  // float32 [rows]; only for sparse variables
};

// Host copies of tensors (device ones downloaded; host ones shared).
StatusOr<std::vector<Tensor>> ToHost(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) {
    ASSIGN_OR_RETURN(Tensor h, t.ToDevice(Device::Cpu()));
    out.push_back(std::move(h));
  }
  return out;
}

// A collective over device tensors through a communicator that works on the
// host (the ring, the in-process group): copy out, run, copy back.
Status Staged(std::span<Tensor* const> tensors, const std::function<Status(std::span<Tensor* const>)>& op) {
  bool device = false;
  for (Tensor* t : tensors) device = device || !t->on_cpu();
  if (!device) return op(tensors);
  std::vector<Tensor> host;
  host.reserve(tensors.size());
  for (Tensor* t : tensors) {
    ASSIGN_OR_RETURN(Tensor h, t->ToDevice(Device::Cpu()));
    // A private copy: the download of a host tensor is the tensor itself.
    host.push_back(t->on_cpu() ? h.Clone() : std::move(h));
  }
  std::vector<Tensor*> p;
  for (Tensor& h : host) p.push_back(&h);
  RETURN_IF_ERROR(op(p));
  for (size_t i = 0; i < tensors.size(); ++i) {
    Tensor* t = tensors[i];
    if (t->on_cpu()) {
      *t = host[i];
      continue;
    }
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(t->device()));
    RETURN_IF_ERROR(b->Upload(host[i], *t));
  }
  return Status::Ok();
}

StatusOr<Tensor> Filled(Shape shape, Device d, float value) {
  ASSIGN_OR_RETURN(Tensor t, Tensor::Create(DType::kFloat32, std::move(shape), d));
  if (value != 0.f) {
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(d));
    RETURN_IF_ERROR(b->Fill(t, value));
  }
  return t;
}

class SyncStrategy final : public Strategy {
 public:
  SyncStrategy(const model::JobConfig& job, Examples train, SyncOptions o)
      : job_(job),
        o_(std::move(o)),
        input_(std::move(train), job, LocalRows(job, o_), o_.sharded_input && o_.group ? 0x5eed0000u + o_.group->rank() : 0),
        optimizer_(job.optimizer) {}

  // This member's rows of each global batch when it reads only its shard.
  static int64_t LocalRows(const model::JobConfig& job, const SyncOptions& o) {
    if (!o.sharded_input || !o.group) return 0;
    const int64_t n = o.group->size(), r = o.group->rank();
    return std::max<int64_t>(job.batch_size * (r + 1) / n - job.batch_size * r / n, 1);
  }

  Status Init() {
    const int local = o_.kind == StrategyKind::kMirrored || o_.kind == StrategyKind::kCentralStorage ? o_.replicas : 1;
    local_replicas_ = local;
    if (!o_.devices.empty() && static_cast<int>(o_.devices.size()) != local) {
      return InvalidArgument("strategy: " + std::to_string(o_.devices.size()) + " devices for " + std::to_string(local) +
                             " local replicas");
    }
    devices_ = o_.devices.empty() ? std::vector<Device>(static_cast<size_t>(local), Device::Cpu()) : o_.devices;
    on_device_ = !devices_[0].is_cpu();
    if (o_.group) first_replica_ = o_.group->rank() * local;
    for (int i = 0; i < local; ++i) {
      ASSIGN_OR_RETURN(auto m, model::Model::Create(job_.model, job_.loss));
      models_.push_back(std::move(m));
    }
    // Adapted state (Normalization) comes from the whole training set, so
    // every process starts from the same values.
    RETURN_IF_ERROR(models_[0]->Adapt(input_.examples().features).WithContext(job_.data.train.field));
    for (const auto& v : models_[0]->variables()) {
      names_.push_back(v.name);
      trainable_.push_back(v.trainable);
    }
    const int copies = o_.kind == StrategyKind::kMirrored ? local : 1;
    const std::vector<Tensor> init = models_[0]->InitialValues(static_cast<uint64_t>(job_.seed));
    for (int c = 0; c < copies; ++c) {
      std::vector<Tensor> values;
      std::vector<model::SlotState> slots;
      for (size_t v = 0; v < init.size(); ++v) {
        values.push_back(init[v].Clone());
        // Non-trainable state has no optimizer slots.
        slots.push_back(trainable_[v] ? optimizer_.CreateSlots(init[v]) : model::SlotState{});
      }
      copies_.push_back(std::move(values));
      slot_copies_.push_back(std::move(slots));
    }
    outputs_.resize(static_cast<size_t>(local));
    pool_ = std::make_unique<ReplicaPool>(local);
    if (o_.kind == StrategyKind::kMirrored && local > 1) local_group_ = std::make_unique<collective::LocalGroup>(local, o_.collective);
    if (o_.checkpoints.enabled()) mgr_.emplace(o_.checkpoints.dir, static_cast<int>(o_.checkpoints.keep), o_.checkpoints.ignore_damaged);
    // Which variables get sparse gradients decides what every replica sends,
    // so it is known before any replica has rows to compute: probe one row.
    if (num_replicas_in_sync() > 1) {
      ASSIGN_OR_RETURN(data::Element probe, input_.Get(0));
      ASSIGN_OR_RETURN(Tensor x1, probe[0].Rows(0, 1));
      ASSIGN_OR_RETURN(Tensor y1, probe[1].Rows(0, 1));
      ASSIGN_OR_RETURN(model::Model::Output out, models_[0]->ComputeGradients(copies_[0], x1, y1));
      for (const auto& g : out.grads) sparse_.push_back(g.sparse);
    }
    if (on_device_) {
      RETURN_IF_ERROR(models_[0]->CheckDeviceSupport());
      for (size_t c = 0; c < copies_.size(); ++c) {
        const Device d = CopyDevice(c);
        for (Tensor& t : copies_[c]) {
          ASSIGN_OR_RETURN(t, t.ToDevice(d));
        }
        for (auto& st : slot_copies_[c]) {
          for (Tensor& t : st.slots) {
            ASSIGN_OR_RETURN(t, t.ToDevice(d));
          }
        }
      }
      for (int i = 0; i < local; ++i) {
        ASSIGN_OR_RETURN(Tensor st, Filled({model::Model::StatsSize(job_.metrics.size())}, devices_[i], 0.f));
        chunk_stats_.push_back(std::move(st));
      }
      if (o_.group) {
        ASSIGN_OR_RETURN(step_stats_, Filled({model::Model::StatsSize(job_.metrics.size())}, devices_[0], 0.f));
      }
      // Mirrored replicas on several GPUs reduce with NCCL where it serves,
      // in place on the GPUs; otherwise through host memory.
      if (local_group_ && collective::NcclAvailable().ok()) {
        std::vector<int> ids;
        for (const Device& d : devices_) ids.push_back(d.index);
        auto g = collective::MakeNcclLocalGroup(ids, o_.collective);
        if (g.ok()) {
          nccl_local_ = std::move(g).value();
        } else {
          Log("fit: mirrored replicas reduce through host memory: " + g.status().message());
        }
      }
    }
    return Status::Ok();
  }

  StrategyKind kind() const override { return o_.kind; }
  int64_t num_replicas_in_sync() const override {
    return static_cast<int64_t>(local_replicas_) * (o_.group ? o_.group->size() : 1);
  }
  bool is_chief() const override { return !o_.group || o_.group->rank() == 0; }

  Status Start(TrainState& st) override {
    if (mgr_) {
      ASSIGN_OR_RETURN(std::optional<checkpoint::Committed> c, mgr_->Latest(o_.log));
      if (c) {
        if (on_device_) {
          ASSIGN_OR_RETURN(auto host, HostState());
          RETURN_IF_ERROR(ReadVariables(*c, names_, host.first, host.second));
          RETURN_IF_ERROR(SetState(host.first, host.second));
        } else {
          for (size_t k = 0; k < copies_.size(); ++k) {
            RETURN_IF_ERROR(ReadVariables(*c, names_, copies_[k], slot_copies_[k]));
          }
        }
        ASSIGN_OR_RETURN(st, TrainState::FromJson(c->state));
        restored_final_ = c->final;
        joined_at_ = st.step;
        Log("fit: restored checkpoint " + c->dir + " at step " + std::to_string(st.step));
      }
    }
    // A finished run needs no group: it only has to be evaluated.
    if (o_.group && !restored_final_) return FormAndSync(st);
    return Status::Ok();
  }

  Status Run(TrainState& st, int64_t end) override {
    if (o_.group && !formed_) RETURN_IF_ERROR(FormAndSync(st));
    Status s;
    while (s.ok() && st.step < end) {
      if (o_.stop && o_.stop->load()) {
        s = Cancelled("stopped by a signal");
        break;
      }
      s = Step(st);
    }
    if (!on_device_) return s;
    // The chunk's loss and metrics, accumulated on the device: the one
    // place a chunk waits for it.
    Status r = ResolveStats(st);
    return s.ok() ? r : s;
  }

  Status Recover(const Status& cause, TrainState& st) override {
    if (!o_.group || !collective::IsRecoverable(cause)) return cause;
    Log("fit: " + cause.message() + "; forming the group again");
    return FormAndSync(st);
  }

  Status Checkpoint(const TrainState& st, bool final) override {
    if (!mgr_ || !is_chief()) return Status::Ok();
    nlohmann::json state = st.ToJson();
    state["strategy"] = StrategyName(o_.kind);
    state["num_replicas_in_sync"] = num_replicas_in_sync();
    ASSIGN_OR_RETURN(auto host, HostState());
    ASSIGN_OR_RETURN(int64_t bytes, WriteVariables(*mgr_, st.step, final, state, names_, host.first, host.second));
    ++checkpoints_;
    Log("fit: checkpoint " + mgr_->dir() + "/ckpt-" + std::to_string(st.step) + " (step " + std::to_string(st.step) +
        (final ? ", final" : "") + ", " + std::to_string(bytes) + " bytes)");
    return Status::Ok();
  }

  Status Finish(TrainState& st) override {
    if (!o_.group || !formed_) return Status::Ok();
    // Nobody leaves before everyone has the last step: a member lost on the
    // way rejoins and gets it.
    while (true) {
      Status s = o_.group->comm()->Barrier();
      if (s.ok()) return s;
      RETURN_IF_ERROR(Recover(s, st));
    }
  }

  StatusOr<std::vector<Tensor>> Values() override { return ToHost(copies_[0]); }
  Device eval_device() const override { return devices_[0]; }

  nlohmann::json SummaryJson() const override {
    nlohmann::json j{{"strategy", StrategyName(o_.kind)}, {"num_replicas_in_sync", num_replicas_in_sync()}};
    nlohmann::json devs = nlohmann::json::array();
    for (const Device& d : devices_) devs.push_back(d.ToString());
    j["devices"] = devs;
    if (o_.kind == StrategyKind::kMirrored || o_.kind == StrategyKind::kCentralStorage) j["replicas"] = local_replicas_;
    if (o_.group) {
      j["communication"] = using_nccl_ ? "nccl" : "ring";
      j["num_workers"] = o_.group->size();
      j["rank"] = o_.group->rank();
      j["recovery"] = {{"regroups", regroups_},
                       {"generation", o_.group->comm() ? o_.group->comm()->generation() : 0},
                       {"steps_computed", computed_},
                       {"steps_adopted", adopted_steps_},
                       {"joined_at_step", joined_at_},
                       {"lost_steps", lost_steps_}};
    } else if (o_.kind == StrategyKind::kMirrored && local_replicas_ > 1) {
      j["communication"] = nccl_local_.empty() ? "local" : "nccl";
    }
    if (mgr_) j["checkpoints_written"] = checkpoints_;
    // Where this process's step time went (seconds over the run). Mirrored
    // replicas reduce inside "compute"; only multi-worker mirrored has a
    // separate all-reduce. On a device these are host times (queueing the
    // work); the device's own time shows where the host waits for it: at
    // an all-reduce and at the end of a chunk.
    j["step_seconds"] = {{"input", time_.input}, {"compute", time_.compute}, {"all_reduce", time_.all_reduce},
                         {"apply", time_.apply}, {"steps", computed_}};
    return j;
  }

 private:
  struct Output {
    Status status;
    BatchStats stats;
    std::vector<model::Gradient> raw;  // one replica in all: applied as computed
    std::vector<Reducible> grads;      // several: scaled, dense, reducible
  };

  void Log(const std::string& line) const {
    if (o_.log) *o_.log << line << std::endl;
  }

  // Where copy c of the variables lives: each mirrored replica's own
  // device; the one copy of the other strategies on the first.
  Device CopyDevice(size_t c) const { return copies_.size() == 1 ? devices_[0] : devices_[c]; }

  // Values and optimizer state of copy 0, on the host.
  StatusOr<std::pair<std::vector<Tensor>, std::vector<model::SlotState>>> HostState() {
    ASSIGN_OR_RETURN(std::vector<Tensor> values, ToHost(copies_[0]));
    std::vector<model::SlotState> slots;
    for (const model::SlotState& s : slot_copies_[0]) {
      model::SlotState h;
      h.iterations = s.iterations;
      ASSIGN_OR_RETURN(h.slots, ToHost(s.slots));
      slots.push_back(std::move(h));
    }
    return std::make_pair(std::move(values), std::move(slots));
  }

  // Host values and state into every copy, on its device.
  Status SetState(const std::vector<Tensor>& values, const std::vector<model::SlotState>& slots) {
    for (size_t c = 0; c < copies_.size(); ++c) {
      const Device d = CopyDevice(c);
      for (size_t v = 0; v < values.size(); ++v) {
        ASSIGN_OR_RETURN(copies_[c][v], values[v].ToDevice(d));
        slot_copies_[c][v].iterations = slots[v].iterations;
        for (size_t k = 0; k < slots[v].slots.size(); ++k) {
          ASSIGN_OR_RETURN(slot_copies_[c][v].slots[k], slots[v].slots[k].ToDevice(d));
        }
      }
    }
    return Status::Ok();
  }

  // Folds the device's loss and metric sums into the host's progress and
  // starts new sums. A loss that is not finite stops training, as on the
  // host, one chunk later.
  Status ResolveStats(TrainState& st) {
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

  // The variables replica i computes with, on its device.
  StatusOr<std::vector<Tensor>> ReplicaValues(int i) {
    std::vector<Tensor>& values = ValuesOf(i);
    if (values.empty() || values[0].device() == devices_[static_cast<size_t>(i)]) return values;
    std::vector<Tensor> out;
    for (const Tensor& t : values) {
      ASSIGN_OR_RETURN(Tensor d, t.ToDevice(devices_[static_cast<size_t>(i)]));
      out.push_back(std::move(d));
    }
    return out;
  }

  // Replica i's part of one step on its device.
  Status DeviceReplicaStep(int i, const Tensor& x, const Tensor& y, int64_t batch, int64_t replicas) {
    Output& o = outputs_[static_cast<size_t>(i)];
    o.stats = NewStats();
    const Device dev = devices_[static_cast<size_t>(i)];
    model::Model& m = *models_[static_cast<size_t>(i)];
    // Multi-worker members reduce the step's sums with the gradients.
    Tensor& stats = o_.group && replicas > 1 ? step_stats_ : chunk_stats_[static_cast<size_t>(i)];
    Tensor xs = x, ys = y;
    int64_t begin = 0, end = batch;
    if (replicas > 1) {
      const int64_t g = first_replica_ + i;
      begin = batch * g / replicas;
      end = batch * (g + 1) / replicas;
      if (end > begin) {
        ASSIGN_OR_RETURN(xs, x.Rows(begin, end));
        ASSIGN_OR_RETURN(ys, y.Rows(begin, end));
      }
    }
    std::vector<model::Gradient> grads;
    if (end > begin) {
      ASSIGN_OR_RETURN(Tensor xd, m.PlaceFeatures(xs, dev));
      ASSIGN_OR_RETURN(Tensor targets, m.Targets(ys));
      ASSIGN_OR_RETURN(Tensor td, targets.ToDevice(dev));
      ASSIGN_OR_RETURN(std::vector<Tensor> values, ReplicaValues(i));
      ASSIGN_OR_RETURN(grads, m.ComputeGradientsOnDevice(values, xd, td, job_.metrics, stats));
    }
    if (replicas == 1) {
      o.raw = std::move(grads);
      return Status::Ok();
    }
    if (end > begin) {
      ASSIGN_OR_RETURN(o.grads, ToReducible(grads, static_cast<float>(end - begin) / static_cast<float>(batch), dev));
    } else {
      ASSIGN_OR_RETURN(o.grads, ZeroGradients(dev));
    }
    if (local_group_) {
      std::vector<Tensor*> p = Pointers(o.grads);
      if (!nccl_local_.empty()) {
        RETURN_IF_ERROR(nccl_local_[static_cast<size_t>(i)]->AllReduce(p, ReduceOp::kSum));
      } else {
        collective::Communicator* c = local_group_->member(i);
        RETURN_IF_ERROR(Staged(p, [c](std::span<Tensor* const> t) { return c->AllReduce(t, ReduceOp::kSum); }));
      }
      RETURN_IF_ERROR(ApplyReduced(ValuesOf(i), SlotsOf(i), o.grads));
    }
    return Status::Ok();
  }

  BatchStats NewStats() const {
    BatchStats s;
    s.metrics.resize(job_.metrics.size());
    return s;
  }

  std::vector<Tensor>& ValuesOf(int replica) { return copies_[copies_.size() == 1 ? 0 : static_cast<size_t>(replica)]; }
  std::vector<model::SlotState>& SlotsOf(int replica) {
    return slot_copies_[slot_copies_.size() == 1 ? 0 : static_cast<size_t>(replica)];
  }

  static std::vector<Tensor*> Pointers(std::vector<Reducible>& grads) {
    std::vector<Tensor*> p;
    for (auto& g : grads) {
      p.push_back(&g.dense);
      if (g.mask.size() > 0) p.push_back(&g.mask);
    }
    return p;
  }

  StatusOr<std::vector<Reducible>> ToReducible(std::vector<model::Gradient>& grads, float scale,
                                               Device dev = Device::Cpu()) const {
    std::vector<Reducible> out;
    for (size_t v = 0; v < grads.size(); ++v) {
      const model::Gradient& g = grads[v];
      if (g.sparse != sparse_[v]) return Internal("gradient of \"" + names_[v] + "\" changed between dense and sparse");
      Reducible r;
      if (!g.sparse) {
        ASSIGN_OR_RETURN(r.dense, ops::Scale(g.dense, scale));
      } else {
        ASSIGN_OR_RETURN(r.dense, Tensor::Create(DType::kFloat32, copies_[0][v].shape(), dev));
        ASSIGN_OR_RETURN(Tensor scaled, ops::Scale(g.values, scale));
        RETURN_IF_ERROR(ops::ScatterAdd(r.dense, g.indices, scaled));
        ASSIGN_OR_RETURN(r.mask, Tensor::Create(DType::kFloat32, {copies_[0][v].dim(0)}, dev));
        if (dev.is_cpu()) {
          for (int64_t id : g.indices.flat<int64_t>()) r.mask.data<float>()[id] = 1;
        } else {
          // The indices are distinct: adding ones marks each row once.
          ASSIGN_OR_RETURN(Tensor ones, Filled({g.indices.size()}, dev, 1.f));
          RETURN_IF_ERROR(ops::ScatterAdd(r.mask, g.indices, ones));
        }
      }
      out.push_back(std::move(r));
    }
    return out;
  }

  StatusOr<std::vector<Reducible>> ZeroGradients(Device dev = Device::Cpu()) const {
    std::vector<Reducible> out;
    for (size_t v = 0; v < copies_[0].size(); ++v) {
      Reducible r;
      ASSIGN_OR_RETURN(r.dense, Tensor::Create(DType::kFloat32, copies_[0][v].shape(), dev));
      if (sparse_[v]) {
        ASSIGN_OR_RETURN(r.mask, Tensor::Create(DType::kFloat32, {copies_[0][v].dim(0)}, dev));
      }
      out.push_back(std::move(r));
    }
    return out;
  }

  Status ApplyReduced(std::vector<Tensor>& values, std::vector<model::SlotState>& slots, const std::vector<Reducible>& g) {
    for (size_t v = 0; v < values.size(); ++v) {
      if (!trainable_[v]) {
        // The replicas' deltas, weighted by their rows: their mean.
        RETURN_IF_ERROR(model::AddDelta(values[v], g[v].dense));
        continue;
      }
      if (!sparse_[v]) {
        RETURN_IF_ERROR(optimizer_.ApplyDense(values[v], g[v].dense, slots[v]));
        continue;
      }
      if (!values[v].on_cpu()) {
        RETURN_IF_ERROR(optimizer_.ApplyMaskedRows(values[v], g[v].dense, g[v].mask, slots[v]));
        continue;
      }
      std::vector<int64_t> rows;
      const float* mask = g[v].mask.data<float>();
      for (int64_t r = 0; r < g[v].mask.size(); ++r) {
        if (mask[r] > 0) rows.push_back(r);
      }
      if (rows.empty()) continue;
      ASSIGN_OR_RETURN(Tensor indices, Tensor::FromVector({static_cast<int64_t>(rows.size())}, rows));
      ASSIGN_OR_RETURN(Tensor updates, ops::Gather(g[v].dense, indices));
      RETURN_IF_ERROR(optimizer_.ApplySparse(values[v], indices, updates, slots[v]));
    }
    return Status::Ok();
  }

  // Replica i's part of one step.
  Status ReplicaStep(int i, const Tensor& x, const Tensor& y, int64_t batch, int64_t replicas) {
    if (on_device_) return DeviceReplicaStep(i, x, y, batch, replicas);
    Output& o = outputs_[static_cast<size_t>(i)];
    o.stats = NewStats();
    if (replicas == 1) {
      ASSIGN_OR_RETURN(model::Model::Output out, models_[static_cast<size_t>(i)]->ComputeGradients(ValuesOf(i), x, y));
      RETURN_IF_ERROR(RecordBatch(out, y, job_.metrics, o.stats));
      o.raw = std::move(out.grads);
      return Status::Ok();
    }
    const int64_t g = first_replica_ + i;
    int64_t begin = batch * g / replicas, end = batch * (g + 1) / replicas;
    if (o_.sharded_input) {
      // The batch is this member's part already (one replica per member).
      begin = 0;
      end = x.dim(0);
      batch = job_.batch_size;
    }
    if (end > begin) {
      ASSIGN_OR_RETURN(Tensor xs, x.Rows(begin, end));
      ASSIGN_OR_RETURN(Tensor ys, y.Rows(begin, end));
      ASSIGN_OR_RETURN(model::Model::Output out, models_[static_cast<size_t>(i)]->ComputeGradients(ValuesOf(i), xs, ys));
      RETURN_IF_ERROR(RecordBatch(out, ys, job_.metrics, o.stats));
      ASSIGN_OR_RETURN(o.grads, ToReducible(out.grads, static_cast<float>(end - begin) / static_cast<float>(batch)));
    } else {
      ASSIGN_OR_RETURN(o.grads, ZeroGradients());
    }
    if (local_group_) {
      // Mirrored: every replica reduces with the others, then updates its
      // own copy with the same sum.
      std::vector<Tensor*> p = Pointers(o.grads);
      RETURN_IF_ERROR(local_group_->member(i)->AllReduce(p, ReduceOp::kSum));
      RETURN_IF_ERROR(ApplyReduced(ValuesOf(i), SlotsOf(i), o.grads));
    }
    return Status::Ok();
  }

  Status Step(TrainState& st) {
    auto t0 = Clock::now();
    auto lap = [&t0](double& into) {
      const auto now = Clock::now();
      into += std::chrono::duration<double>(now - t0).count();
      t0 = now;
    };
    auto batch = input_.Get(st.step);
    lap(time_.input);
    if (!batch.ok()) return FailGroup(batch.status());
    const Tensor& x = (*batch)[0];
    const Tensor& y = (*batch)[1];
    const int64_t b = x.dim(0);
    int64_t examples = b;
    const int64_t replicas = num_replicas_in_sync();
    pool_->Run([&](int i) {
      Status s = ReplicaStep(i, x, y, b, replicas);
      // A replica that cannot go on must not leave the others waiting.
      if (!s.ok() && local_group_) local_group_->Abort(s);
      if (!s.ok()) {
        for (auto& c : nccl_local_) c->Abort(s);
      }
      outputs_[static_cast<size_t>(i)].status = s;
    });
    lap(time_.compute);
    for (const Output& o : outputs_) {
      if (!o.status.ok()) return FailGroup(o.status);
    }
    BatchStats stats = NewStats();
    for (const Output& o : outputs_) stats.Merge(o.stats);
    if (replicas == 1) {
      std::vector<Tensor>& values = ValuesOf(0);
      for (size_t v = 0; v < values.size(); ++v) {
        RETURN_IF_ERROR(optimizer_.Apply(values[v], outputs_[0].raw[v], SlotsOf(0)[v]));
      }
    } else if (o_.kind == StrategyKind::kCentralStorage) {
      std::vector<Reducible>& sum = outputs_[0].grads;
      for (size_t i = 1; i < outputs_.size(); ++i) {
        for (size_t v = 0; v < sum.size(); ++v) {
          // A replica on another device sends its gradient to the one copy.
          ASSIGN_OR_RETURN(Tensor dense, outputs_[i].grads[v].dense.ToDevice(sum[v].dense.device()));
          ASSIGN_OR_RETURN(sum[v].dense, ops::Add(sum[v].dense, dense));
          if (sum[v].mask.size() > 0) {
            ASSIGN_OR_RETURN(Tensor mask, outputs_[i].grads[v].mask.ToDevice(sum[v].mask.device()));
            ASSIGN_OR_RETURN(sum[v].mask, ops::Add(sum[v].mask, mask));
          }
        }
      }
      RETURN_IF_ERROR(ApplyReduced(ValuesOf(0), SlotsOf(0), sum));
    } else if (o_.group && on_device_) {
      std::vector<Tensor*> p = Pointers(outputs_[0].grads);
      p.push_back(&step_stats_);
      if (nccl_) {
        RETURN_IF_ERROR(nccl_->AllReduce(p, ReduceOp::kSum));
      } else {
        collective::Communicator* c = o_.group->comm();
        RETURN_IF_ERROR(Staged(p, [c](std::span<Tensor* const> t) { return c->AllReduce(t, ReduceOp::kSum); }));
      }
      lap(time_.all_reduce);
      RETURN_IF_ERROR(ApplyReduced(ValuesOf(0), SlotsOf(0), outputs_[0].grads));
      ASSIGN_OR_RETURN(device::Backend * be, device::BackendFor(step_stats_.device()));
      RETURN_IF_ERROR(be->BinaryOp(device::Binary::kAdd, chunk_stats_[0], step_stats_, chunk_stats_[0]));
      RETURN_IF_ERROR(be->Fill(step_stats_, 0.f));
    } else if (o_.group) {
      // The step's loss and metric sums travel with the gradients, so every
      // member records the same progress.
      std::vector<float> packed{static_cast<float>(stats.loss.total), static_cast<float>(stats.loss.count),
                                static_cast<float>(b)};
      for (const auto& m : stats.metrics) {
        packed.push_back(static_cast<float>(m.total));
        packed.push_back(static_cast<float>(m.count));
      }
      ASSIGN_OR_RETURN(Tensor sums, Tensor::FromVector({static_cast<int64_t>(packed.size())}, packed));
      std::vector<Tensor*> p = Pointers(outputs_[0].grads);
      p.push_back(&sums);
      RETURN_IF_ERROR(Reducer().AllReduce(p, ReduceOp::kSum));
      lap(time_.all_reduce);
      RETURN_IF_ERROR(ApplyReduced(ValuesOf(0), SlotsOf(0), outputs_[0].grads));
      const float* f = sums.data<float>();
      stats.loss = {f[0], f[1]};
      // Every member's rows: the global batch, also when each read its own part.
      if (o_.sharded_input) examples = static_cast<int64_t>(f[2]);
      for (size_t k = 0; k < stats.metrics.size(); ++k) stats.metrics[k] = {f[3 + 2 * k], f[4 + 2 * k]};
    }
    lap(time_.apply);
    st.Record(stats, 1, examples);
    ++computed_;
    return Status::Ok();
  }

  // An error of this member's own (its input, its compute): the group stops
  // with it rather than waiting for this member to come back.
  Status FailGroup(const Status& s) {
    if (o_.group && o_.group->comm() && !collective::IsRecoverable(s)) {
      o_.group->comm()->Abort(Status(s.code(), o_.group->self().name + ": " + s.message()));
    }
    return s;
  }

  // What all-reduces the gradients: NCCL when asked for, else the ring.
  collective::Communicator& Reducer() { return nccl_ ? *nccl_ : *o_.group->comm(); }

  // Forms the group (again) and takes the newest member's state.
  Status FormAndSync(TrainState& st) {
    while (true) {
      const int64_t before = st.step;
      nccl_.reset();
      ASSIGN_OR_RETURN(collective::Group::Formation f, o_.group->Form(st.step));
      Status s = SyncFrom(f.source_rank, st);
      bool nccl = o_.communication == collective::Implementation::kNccl;
      if (s.ok() && o_.communication == collective::Implementation::kAuto) {
        // AUTO: NCCL when every member trains on a GPU and can join NCCL;
        // every member votes (a member on the CPU votes no), so they all
        // pick the same.
        Tensor vote = Tensor::Scalar(on_device_ && collective::NcclAvailable().ok() ? 1.f : 0.f);
        s = o_.group->comm()->AllReduce(vote, ReduceOp::kSum);
        nccl = s.ok() && vote.data<float>()[0] == static_cast<float>(o_.group->size());
      }
      using_nccl_ = false;
      if (s.ok() && nccl) {
        // A new generation needs a new NCCL communicator; its id travels
        // over the ring just formed.
        auto n = collective::MakeNcclCommunicator(*o_.group->comm(), on_device_ ? devices_[0].index : -1, o_.collective);
        if (n.ok()) {
          nccl_ = std::move(n).value();
          using_nccl_ = true;
        } else {
          s = n.status();
        }
      }
      if (s.ok()) {
        if (formed_) ++regroups_;
        if (!formed_ && f.source_rank != o_.group->rank()) joined_at_ = st.step;
        if (st.step < before) lost_steps_ += before - st.step;
        // A member whose last all-reduce failed after another member's
        // completed takes that step from it rather than computing it again.
        if (formed_ && st.step > before) adopted_steps_ += st.step - before;
        formed_ = true;
        const collective::Peer& src = o_.group->members()[static_cast<size_t>(f.source_rank)];
        Log("fit: group generation " + std::to_string(f.generation) + " of " + std::to_string(o_.group->size()) +
            " members formed at step " + std::to_string(st.step) + " (state from " + src.name +
            (before != st.step ? ", this member was at step " + std::to_string(before) : "") + ")");
        return s;
      }
      if (!collective::IsRecoverable(s)) return s;
      Log("fit: sending the state failed (" + s.message() + "); forming the group again");
    }
  }

  Status SyncFrom(int source, TrainState& st) {
    collective::Communicator& comm = *o_.group->comm();
    std::string bytes;
    if (comm.rank() == source) {
      nlohmann::json j{{"state", st.ToJson()}, {"iterations", nlohmann::json::array()}};
      for (const auto& s : SlotsOf(0)) j["iterations"].push_back(s.iterations);
      bytes = j.dump();
    }
    RETURN_IF_ERROR(comm.BroadcastBytes(bytes, source));
    std::vector<Tensor*> tensors;
    for (auto& v : ValuesOf(0)) tensors.push_back(&v);
    for (auto& s : SlotsOf(0)) {
      for (auto& t : s.slots) tensors.push_back(&t);
    }
    RETURN_IF_ERROR(Staged(tensors, [&comm, source](std::span<Tensor* const> t) { return comm.Broadcast(t, source); }));
    if (comm.rank() == source) return Status::Ok();
    const nlohmann::json j = nlohmann::json::parse(bytes, nullptr, false);
    if (j.is_discarded() || !j.contains("state") || !j.contains("iterations") ||
        j["iterations"].size() != SlotsOf(0).size()) {
      return DataLoss("collective: malformed training state from rank " + std::to_string(source));
    }
    ASSIGN_OR_RETURN(st, TrainState::FromJson(j["state"]));
    for (size_t v = 0; v < SlotsOf(0).size(); ++v) SlotsOf(0)[v].iterations = j["iterations"][v].get<int64_t>();
    return Status::Ok();
  }

  const model::JobConfig job_;
  const SyncOptions o_;
  std::vector<Device> devices_;  // per local replica
  bool on_device_ = false;
  std::vector<Tensor> chunk_stats_;  // per local replica, on its device: loss and metric sums of the chunk
  Tensor step_stats_;                // multi-worker on a device: this step's sums, all-reduced
  GlobalBatches input_;
  model::Optimizer optimizer_;
  int local_replicas_ = 1;
  int64_t first_replica_ = 0;
  std::vector<std::unique_ptr<model::Model>> models_;
  std::vector<std::string> names_;
  std::vector<std::vector<Tensor>> copies_;                  // one, or one per mirrored replica
  std::vector<std::vector<model::SlotState>> slot_copies_;   // parallel to copies_
  std::vector<bool> sparse_;                                  // per variable
  std::vector<bool> trainable_;                               // per variable
  std::vector<Output> outputs_;                               // per local replica
  std::unique_ptr<ReplicaPool> pool_;
  std::unique_ptr<collective::LocalGroup> local_group_;
  std::unique_ptr<collective::Communicator> nccl_;
  std::vector<std::unique_ptr<collective::Communicator>> nccl_local_;  // mirrored over GPUs
  std::optional<checkpoint::Manager> mgr_;

  struct {
    double input = 0, compute = 0, all_reduce = 0, apply = 0;
  } time_;
  bool formed_ = false;
  bool using_nccl_ = false;
  bool restored_final_ = false;
  int64_t regroups_ = 0;
  int64_t computed_ = 0;
  int64_t joined_at_ = 0;
  int64_t lost_steps_ = 0;
  int64_t adopted_steps_ = 0;
  int64_t checkpoints_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<Strategy>> MakeSyncStrategy(const model::JobConfig& job, Examples train, SyncOptions options) {
  switch (options.kind) {
    case StrategyKind::kOneDevice:
      options.replicas = 1;
      break;
    case StrategyKind::kMirrored:
    case StrategyKind::kCentralStorage:
      if (options.replicas < 1 || options.replicas > 256) {
        return InvalidArgument("flag --replicas: must be in 1..256, got " + std::to_string(options.replicas));
      }
      break;
    case StrategyKind::kMultiWorkerMirrored:
      if (!options.group) return InvalidArgument("multi_worker_mirrored needs a collective group");
      options.replicas = 1;
      break;
    case StrategyKind::kParameterServer:
      return InvalidArgument("parameter_server is not a synchronous strategy");
  }
  auto s = std::make_unique<SyncStrategy>(job, std::move(train), std::move(options));
  RETURN_IF_ERROR(s->Init());
  return std::unique_ptr<Strategy>(std::move(s));
}

}  // namespace tfjob::strategy
