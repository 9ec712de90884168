#include "services/strategy/sync.h"

#include <algorithm>
#include <optional>
#include <ostream>

#include "services/checkpoint/manager.h"
#include "services/strategy/checkpoints.h"
#include "services/strategy/group_recovery.h"
#include "services/strategy/registry.h"
#include "services/strategy/sync_step.h"
#include "services/strategy/sync_variables.h"

// The strategy's life around its steps: input, checkpoints, the group and the
// summary. The step itself is sync_step.*, the gradient reduction
// gradient_reduction.*, the group's recovery group_recovery.*.

namespace tfjob::strategy {
namespace {

class SyncStrategy final : public Strategy {
 public:
  SyncStrategy(const model::JobConfig& job, Examples train, SyncOptions o)
      : job_(job),
        o_(std::move(o)),
        input_(std::move(train), job, LocalRows(job, o_),
               o_.sharded_input && o_.group ? 0x5eed0000u + o_.group->rank() : 0, OnDevices(o_)) {}

  static bool OnDevices(const SyncOptions& o) {
    return std::any_of(o.devices.begin(), o.devices.end(), [](const Device& d) { return !d.is_cpu(); });
  }

  // This member's rows of each global batch when it reads only its shard.
  static int64_t LocalRows(const model::JobConfig& job, const SyncOptions& o) {
    if (!o.sharded_input || !o.group) return 0;
    const int64_t n = o.group->size(), r = o.group->rank();
    return std::max<int64_t>(job.batch_size * (r + 1) / n - job.batch_size * r / n, 1);
  }

  Status Init() {
    ASSIGN_OR_RETURN(step_, SyncStep::Create(job_, o_, input_));
    if (o_.checkpoints.enabled())
      mgr_.emplace(o_.checkpoints.dir, static_cast<int>(o_.checkpoints.keep), o_.checkpoints.ignore_damaged);
    if (o_.group) {
      GroupRecovery::Options g;
      g.group = o_.group;
      g.communication = o_.communication;
      g.collective = o_.collective;
      g.device = step_->devices()[0];
      g.log = o_.log;
      recovery_.emplace(std::move(g));
    }
    return Status::Ok();
  }

  std::string_view name() const override { return StrategyName(o_.kind); }
  int64_t num_replicas_in_sync() const override { return step_->replicas_in_sync(); }
  bool is_chief() const override { return !o_.group || o_.group->rank() == 0; }

  Status Start(TrainState& st) override {
    if (mgr_) {
      ASSIGN_OR_RETURN(std::optional<checkpoint::Committed> c, mgr_->Latest(o_.log));
      if (c) {
        RETURN_IF_ERROR(Restore(*c));
        ASSIGN_OR_RETURN(st, TrainState::FromJson(c->state));
        restored_final_ = c->final;
        if (recovery_) recovery_->RestoredAt(st.step);
        Log("fit: restored checkpoint " + c->dir + " at step " + std::to_string(st.step));
      }
    }
    // A finished run needs no group: it only has to be evaluated.
    if (recovery_ && !restored_final_) return recovery_->Form(st, Primary());
    return Status::Ok();
  }

  Status Run(TrainState& st, int64_t end) override {
    if (recovery_ && !recovery_->formed()) RETURN_IF_ERROR(recovery_->Form(st, Primary()));
    Status s;
    while (s.ok() && st.step < end) {
      if (o_.stop && o_.stop->load()) {
        s = Cancelled("stopped by a signal");
        break;
      }
      s = Step(st);
    }
    if (!step_->on_device()) return s;
    // The chunk's loss and metrics, accumulated on the device: the one
    // place a chunk waits for it.
    Status r = step_->ResolveStats(st);
    return s.ok() ? r : s;
  }

  Status Recover(const Status& cause, TrainState& st) override {
    if (!recovery_) return cause;
    return recovery_->Recover(cause, st, Primary());
  }

  Status Checkpoint(const TrainState& st, bool final) override {
    if (!mgr_ || !is_chief()) return Status::Ok();
    nlohmann::json state = st.ToJson();
    state["strategy"] = StrategyName(o_.kind);
    state["num_replicas_in_sync"] = num_replicas_in_sync();
    ASSIGN_OR_RETURN(VariableCopy host, ToHost(Primary()));
    ASSIGN_OR_RETURN(int64_t bytes, WriteVariables(*mgr_, st.step, final, state, VariableNames(step_->variables()),
                                                   host.values, host.slots));
    ++checkpoints_;
    Log("fit: checkpoint " + mgr_->dir() + "/ckpt-" + std::to_string(st.step) + " (step " + std::to_string(st.step) +
        (final ? ", final" : "") + ", " + std::to_string(bytes) + " bytes)");
    return Status::Ok();
  }

  Status Finish(TrainState& st) override {
    if (!recovery_) return Status::Ok();
    return recovery_->Finish(st, Primary());
  }

  StatusOr<std::vector<Tensor>> Values() override { return ToHost(Primary().values); }
  Device eval_device() const override { return step_->devices()[0]; }

  nlohmann::json SummaryJson() const override {
    nlohmann::json j{{"strategy", StrategyName(o_.kind)}, {"num_replicas_in_sync", num_replicas_in_sync()}};
    nlohmann::json devs = nlohmann::json::array();
    for (const Device& d : step_->devices()) devs.push_back(d.ToString());
    j["devices"] = devs;
    if (step_->traits().replicas_in_process) j["replicas"] = step_->local_replicas();
    if (recovery_) {
      recovery_->AddSummary(j, computed_);
    } else if (!step_->in_process_communication().empty()) {
      j["communication"] = step_->in_process_communication();
    }
    if (mgr_) j["checkpoints_written"] = checkpoints_;
    if (const DynamicLossScale* ls = step_->loss_scale()) {
      j["loss_scale"] = ls->scale();
      j["skipped_steps"] = ls->skipped_steps();
    }
    // Where this process's step time went (seconds over the run). Mirrored
    // replicas reduce inside "compute"; only multi-worker mirrored has a
    // separate all-reduce. On a device these are host times (queueing the
    // work); the device's own time shows where the host waits for it: at
    // an all-reduce and at the end of a chunk.
    j["step_seconds"] = {{"input", time_.input},
                         {"compute", time_.compute},
                         {"all_reduce", time_.all_reduce},
                         {"apply", time_.apply},
                         {"steps", computed_}};
    // Inside "compute", per layer call, of the first replica: on the CPU
    // only (on a device the host merely queues the work).
    if (!step_->on_device()) {
      nlohmann::json layers = nlohmann::json::array();
      for (const auto& t : step_->first_model().LayerTimes()) {
        layers.push_back(
            {{"name", t.name}, {"type", t.type}, {"forward", t.forward}, {"backward", t.backward}, {"steps", t.steps}});
        if (!t.fused_into.empty()) layers.back()["fused_into"] = t.fused_into;
        if (!t.cpu_kernel.empty()) layers.back()["cpu_kernel"] = t.cpu_kernel;
      }
      j["layer_seconds"] = std::move(layers);
    }
    return j;
  }

 private:
  void Log(const std::string& line) const {
    if (o_.log) *o_.log << line << std::endl;
  }

  // The copy checkpoints, the group's state broadcast and Values() use.
  VariableCopy& Primary() { return step_->copies()[0]; }

  // The newest checkpoint's values and optimizer state into every copy.
  Status Restore(const checkpoint::Committed& c) {
    const std::vector<std::string> names = VariableNames(step_->variables());
    if (!step_->on_device()) {
      for (VariableCopy& copy : step_->copies()) RETURN_IF_ERROR(ReadVariables(c, names, copy.values, copy.slots));
      return Status::Ok();
    }
    ASSIGN_OR_RETURN(VariableCopy host, ToHost(Primary()));
    RETURN_IF_ERROR(ReadVariables(c, names, host.values, host.slots));
    return step_->AssignAll(host);
  }

  Status Step(TrainState& st) {
    Stopwatch w;
    auto batch = input_.Get(st.step);
    w.Lap(time_.input);
    if (!batch.ok()) return FailGroup(batch.status());
    const Tensor& x = (*batch)[0];
    const Tensor& y = (*batch)[1];
    Status s = step_->ComputeReplicas(x, y);
    w.Lap(time_.compute);
    if (!s.ok()) return FailGroup(s);
    const GroupReducer reducer = recovery_ ? recovery_->reducer() : GroupReducer{};
    ASSIGN_OR_RETURN(StepProgress p, step_->ReduceAndApply(x.dim(0), reducer, w, time_));
    w.Lap(time_.apply);
    st.Record(p.stats, 1, p.examples);
    ++computed_;
    return Status::Ok();
  }

  Status FailGroup(const Status& s) { return recovery_ ? recovery_->FailGroup(s) : s; }

  const model::JobConfig job_;
  const SyncOptions o_;
  GlobalBatches input_;
  std::unique_ptr<SyncStep> step_;
  std::optional<GroupRecovery> recovery_;  // multi_worker_mirrored
  std::optional<checkpoint::Manager> mgr_;
  StepSeconds time_;
  bool restored_final_ = false;
  int64_t computed_ = 0;
  int64_t checkpoints_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<Strategy>> MakeSyncStrategy(const model::JobConfig& job, Examples train, SyncOptions options) {
  const KindTraits traits = TraitsOf(options.kind);
  if (!traits.synchronous)
    return InvalidArgument(std::string(StrategyName(options.kind)) + " is not a synchronous strategy");
  if (traits.in_group && !options.group) {
    return InvalidArgument(std::string(StrategyName(options.kind)) + " needs a collective group");
  }
  if (!traits.replicas_in_process) {
    options.replicas = 1;
  } else if (options.replicas < 1 || options.replicas > 256) {
    return InvalidArgument("flag --replicas: must be in 1..256, got " + std::to_string(options.replicas));
  }
  auto s = std::make_unique<SyncStrategy>(job, std::move(train), std::move(options));
  RETURN_IF_ERROR(s->Init());
  return std::unique_ptr<Strategy>(std::move(s));
}

namespace {

// The registry's entries (registry.cc): the one place fit's options become
// SyncOptions.
StatusOr<std::unique_ptr<Strategy>> BuildSync(StrategyKind kind, const StrategyArgs& a) {
  SyncOptions o;
  o.kind = kind;
  o.replicas = a.devices.replicas;
  o.devices = a.devices.devices;
  o.group = a.context.group;
  o.communication = a.options.communication;
  o.collective = a.options.collective;
  o.checkpoints = a.options.checkpoints;
  o.log = a.context.out;
  o.stop = a.context.stop;
  o.sharded_input = a.sharded_input;
  o.initial_values = a.initial_values;
  return MakeSyncStrategy(a.job, a.train, std::move(o));
}

}  // namespace

StrategyEntry SyncEntry(StrategyKind kind) {
  const KindTraits t = TraitsOf(kind);
  return {.name = std::string(StrategyName(kind)),
          .topology = t.in_group ? Topology::kGroup : Topology::kOneProcess,
          .placement = t.placement,
          .replicas_in_process = t.replicas_in_process,
          .make = [kind](const StrategyArgs& a) { return BuildSync(kind, a); }};
}

}  // namespace tfjob::strategy
