#include "services/strategy/sync.h"

#include <chrono>
#include <ostream>

#include "services/checkpoint/manager.h"
#include "services/collective/local.h"
#include "services/collective/nccl.h"
#include "services/model/optimizers.h"
#include "services/strategy/checkpoints.h"
#include "services/strategy/replica_pool.h"
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
    if (o_.checkpoints.enabled()) mgr_.emplace(o_.checkpoints.dir, static_cast<int>(o_.checkpoints.keep));
    // Which variables get sparse gradients decides what every replica sends,
    // so it is known before any replica has rows to compute: probe one row.
    if (num_replicas_in_sync() > 1) {
      ASSIGN_OR_RETURN(data::Element probe, input_.Get(0));
      ASSIGN_OR_RETURN(Tensor x1, probe[0].Rows(0, 1));
      ASSIGN_OR_RETURN(Tensor y1, probe[1].Rows(0, 1));
      ASSIGN_OR_RETURN(model::Model::Output out, models_[0]->ComputeGradients(copies_[0], x1, y1));
      for (const auto& g : out.grads) sparse_.push_back(g.sparse);
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
        for (size_t k = 0; k < copies_.size(); ++k) {
          RETURN_IF_ERROR(ReadVariables(*c, names_, copies_[k], slot_copies_[k]));
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
    while (st.step < end) {
      if (o_.stop && o_.stop->load()) return Cancelled("stopped by a signal");
      RETURN_IF_ERROR(Step(st));
    }
    return Status::Ok();
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
    ASSIGN_OR_RETURN(int64_t bytes, WriteVariables(*mgr_, st.step, final, state, names_, copies_[0], slot_copies_[0]));
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

  StatusOr<std::vector<Tensor>> Values() override { return copies_[0]; }

  nlohmann::json SummaryJson() const override {
    nlohmann::json j{{"strategy", StrategyName(o_.kind)}, {"num_replicas_in_sync", num_replicas_in_sync()}};
    if (o_.kind == StrategyKind::kMirrored || o_.kind == StrategyKind::kCentralStorage) j["replicas"] = local_replicas_;
    if (o_.group) {
      j["communication"] = o_.communication == collective::Implementation::kNccl ? "nccl" : "ring";
      j["num_workers"] = o_.group->size();
      j["rank"] = o_.group->rank();
      j["recovery"] = {{"regroups", regroups_},
                       {"generation", o_.group->comm() ? o_.group->comm()->generation() : 0},
                       {"steps_computed", computed_},
                       {"steps_adopted", adopted_steps_},
                       {"joined_at_step", joined_at_},
                       {"lost_steps", lost_steps_}};
    } else if (o_.kind == StrategyKind::kMirrored && local_replicas_ > 1) {
      j["communication"] = "local";
    }
    if (mgr_) j["checkpoints_written"] = checkpoints_;
    // Where this process's step time went (seconds over the run). Mirrored
    // replicas reduce inside "compute"; only multi-worker mirrored has a
    // separate all-reduce.
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

  StatusOr<std::vector<Reducible>> ToReducible(std::vector<model::Gradient>& grads, float scale) const {
    std::vector<Reducible> out;
    for (size_t v = 0; v < grads.size(); ++v) {
      const model::Gradient& g = grads[v];
      if (g.sparse != sparse_[v]) return Internal("gradient of \"" + names_[v] + "\" changed between dense and sparse");
      Reducible r;
      if (!g.sparse) {
        ASSIGN_OR_RETURN(r.dense, ops::Scale(g.dense, scale));
      } else {
        r.dense = Tensor::Zeros(DType::kFloat32, copies_[0][v].shape());
        ASSIGN_OR_RETURN(Tensor scaled, ops::Scale(g.values, scale));
        RETURN_IF_ERROR(ops::ScatterAdd(r.dense, g.indices, scaled));
        r.mask = Tensor::Zeros(DType::kFloat32, {copies_[0][v].dim(0)});
        for (int64_t id : g.indices.flat<int64_t>()) r.mask.data<float>()[id] = 1;
      }
      out.push_back(std::move(r));
    }
    return out;
  }

  std::vector<Reducible> ZeroGradients() const {
    std::vector<Reducible> out;
    for (size_t v = 0; v < copies_[0].size(); ++v) {
      Reducible r{Tensor::Zeros(DType::kFloat32, copies_[0][v].shape()), Tensor()};
      if (sparse_[v]) r.mask = Tensor::Zeros(DType::kFloat32, {copies_[0][v].dim(0)});
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
      o.grads = ZeroGradients();
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
          ASSIGN_OR_RETURN(sum[v].dense, ops::Add(sum[v].dense, outputs_[i].grads[v].dense));
          if (sum[v].mask.size() > 0) {
            ASSIGN_OR_RETURN(sum[v].mask, ops::Add(sum[v].mask, outputs_[i].grads[v].mask));
          }
        }
      }
      RETURN_IF_ERROR(ApplyReduced(ValuesOf(0), SlotsOf(0), sum));
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
      if (s.ok() && o_.communication == collective::Implementation::kNccl) {
        // A new generation needs a new NCCL communicator; its id travels
        // over the ring just formed.
        auto n = collective::MakeNcclCommunicator(*o_.group->comm(), -1, o_.collective);
        if (n.ok()) {
          nccl_ = std::move(n).value();
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
    RETURN_IF_ERROR(comm.Broadcast(tensors, source));
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
  std::optional<checkpoint::Manager> mgr_;

  struct {
    double input = 0, compute = 0, all_reduce = 0, apply = 0;
  } time_;
  bool formed_ = false;
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
