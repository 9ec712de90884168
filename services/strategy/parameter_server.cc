#include "services/strategy/parameter_server.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <ostream>
#include <thread>

#include "common/json_reader.h"
#include "services/checkpoint/manager.h"
#include "services/strategy/checkpoints.h"
#include "services/strategy/registry.h"
#include "services/strategy/ps_common.h"
#include "services/strategy/stats.h"
#include "services/model/text.h"
#include "services/strategy/variable_store.h"

namespace tfjob::strategy {
namespace {

using namespace ps_detail;  // NOLINT: the strategy's own shared pieces
using Clock = std::chrono::steady_clock;

class PsStrategy final : public Strategy {
 public:
  PsStrategy(const model::JobConfig& job, const FitOptions& o, PsCluster ctx, std::vector<std::string> names,
             std::vector<bool> trainable, std::vector<Tensor> init, Placement placement)
      : job_(job),
        o_(o),
        ctx_(std::move(ctx)),
        out_(*ctx_.out),
        claim_(ctx_.claim),
        clients_(ctx_.clients),
        store_(std::move(placement), clients_),
        names_(std::move(names)),
        trainable_(std::move(trainable)),
        init_(std::move(init)),
        coord_(ctx_.worker_addresses, ctx_.coordinator),
        mgr_(o_.checkpoints.dir, static_cast<int>(o_.checkpoints.keep), o_.checkpoints.ignore_damaged),
        incarnations_(clients_.size(), 0) {
    // One quick look each: Recover polls with these until a lost PS is back.
    for (size_t i = 0; i < ctx_.ps_addresses.size(); ++i) {
      ps::ClientOptions o;
      o.timeout = std::chrono::milliseconds(2000);
      o.retry.max_attempts = 1;
      o.credentials = ctx_.credentials;
      probes_.push_back(std::make_shared<ps::PsClient>(ctx_.ps_addresses[i], o));
    }
  }

  std::string_view name() const override { return "parameter_server"; }
  int64_t min_chunk_steps() const override { return o_.steps_per_execution; }
  int64_t num_replicas_in_sync() const override { return 1; }  // asynchronous: every closure applies alone

  Status Start(TrainState& st) override {
    RETURN_IF_ERROR(Claim());
    out_ << "fit: " << names_.size() << " variables (" << ParameterCount() << " parameters) on " << clients_.size()
         << " parameter servers, " << ctx_.worker_addresses.size() << " workers, partitioner "
         << PartitionerString(o_.partitioner) << std::endl;
    // A restarted chief continues from the latest checkpoint; a first start
    // writes the step-0 checkpoint so that any later PS loss has one to use.
    if (o_.checkpoints.enabled()) {
      ASSIGN_OR_RETURN(bool restored, Restore(st));
      if (restored) {
        restored_.push_back(st.step);
      } else {
        RETURN_IF_ERROR(SaveCheckpoint(st, false));
        if (ctx_.metrics) ctx_.metrics->RecordCheckpoint(st.step);
      }
    }
    // Workers get the job as JSON, so they need no copy of the file.
    ASSIGN_OR_RETURN(nlohmann::json doc, ReadJsonFile(job_.source));
    nlohmann::json dargs{{"config", doc},
                         {"keras_model", nullptr},
                         {"source", job_.source},
                         {"data_dir", o_.data_dir},
                         {"partitioner", PartitionerString(o_.partitioner)},
                         {"num_ps", static_cast<int64_t>(clients_.size())},
                         {"num_workers", static_cast<int64_t>(ctx_.worker_addresses.size())},
                         {"threads", o_.threads},
                         {"prefetch", o_.ps_prefetch},
                         {"closures_per_worker", ctx_.coordinator.inflight_per_worker},
                         {"pull_rows", o_.ps_pull_rows},
                         {"device", std::string(DeviceChoiceName(o_.device))}};
    // A TextVectorization adapted here: the workers read only their shard.
    dargs["text"] = model::AdaptedTextJson(job_.model);
    // Each layer's dtype policy, --mixed-precision's included.
    nlohmann::json policies = nlohmann::json::array();
    for (const model::LayerSpec& l : job_.model.layers) policies.push_back(std::string(PolicyName(l.precision)));
    dargs["layer_policies"] = std::move(policies);
    if (!o_.keras_model.empty()) {
      ASSIGN_OR_RETURN(dargs["keras_model"], ReadJsonFile(o_.keras_model));
      dargs["keras_model_source"] = o_.keras_model;
    }
    return coord_.CreatePerWorkerDataset(kTrainDataset, dargs, kTrainDataset);
  }

  void Ahead(int64_t next_end) override { next_end_ = next_end; }

  Status Run(TrainState& st, int64_t end) override {
    chunk_started_ = Clock::now();
    const int64_t spe = o_.steps_per_execution;
    auto schedule = [&](int64_t steps) { return coord_.Schedule(kTrainClosure, {{"steps", steps}}); };
    // This chunk's closures: those the last Run started ahead for it, then
    // the rest.
    std::vector<coordinator::RemoteValue> values;
    int64_t s = st.step;
    if (ahead_step_ == st.step) {
      for (auto& [steps, v] : ahead_) {
        values.push_back(std::move(v));
        s += steps;
      }
    }
    ahead_.clear();
    for (; s < end; s += spe) values.push_back(schedule(std::min(spe, end - s)));
    // The next chunk's first closures go on the queue behind these, so the
    // workers start them as this chunk's last ones end, instead of idling
    // while the chief collects this chunk and prints its progress.
    std::vector<std::pair<int64_t, coordinator::RemoteValue>> next;
    const size_t slots = ctx_.worker_addresses.size() *
                         static_cast<size_t>(ctx_.coordinator.inflight_per_worker + ctx_.coordinator.queued_per_worker);
    for (int64_t a = end; a < next_end_ && next.size() < slots; a += spe) {
      next.emplace_back(std::min(spe, next_end_ - a), schedule(std::min(spe, next_end_ - a)));
    }
    next_end_ = 0;
    Status joined = coord_.Join(values);
    if (joined.ok()) {
      ahead_ = std::move(next);
      ahead_step_ = end;
    } else {
      // Join ended every closure: those started ahead count like the rest.
      for (auto& n : next) values.push_back(std::move(n.second));
    }
    BatchStats stats;
    int64_t steps = 0, examples = 0;
    for (auto& v : values) {
      auto r = v.Fetch();
      if (!r.ok()) continue;
      auto s = BatchStats::FromJson(r->json);
      if (s.ok()) stats.Merge(*s);
      steps += r->json["steps"].get<int64_t>();
      examples += r->json["examples"].get<int64_t>();
      pulled_bytes_ += r->json.value("pulled_bytes", int64_t{0});
      if (r->json.contains("loss_scale")) {
        skipped_steps_ += r->json.value("skipped_steps", int64_t{0});
        loss_scale_ = r->json["loss_scale"].get<double>();
      }
      if (auto t = r->json.find("step_seconds"); t != r->json.end()) {
        worker_time_.Add(*t);
        worker_time_steps_ += r->json["steps"].get<int64_t>();
      }
    }
    if (!joined.ok()) {
      reached_ = st.step + steps;
      if (Stopping()) {
        // Drained by a signal: the closures that completed are whole in the
        // PS state and nothing else is, so they count (the loop checkpoints
        // this exact step before the task exits).
        st.partial.Merge(stats);
        st.partial_steps += steps;
        st.examples += examples;
        st.step += steps;
      }
      return joined;
    }
    st.partial.Merge(stats);
    st.partial_steps += steps;
    st.examples += examples;
    st.step = end;
    return Status::Ok();
  }

  Status Recover(const Status& cause, TrainState& st) override { return Recover(cause, st, ++recoveries_); }

  Status Checkpoint(const TrainState& st, bool final) override {
    reached_ = st.step;
    RETURN_IF_ERROR(SaveCheckpoint(st, final));
    recoveries_ = 0;
    return Status::Ok();
  }

  // The trained variables, re-read from the final checkpoint if a PS was
  // lost after it was written.
  StatusOr<std::vector<Tensor>> Values() override {
    auto v = store_.Pull(names_);
    if (v.ok() || !o_.checkpoints.enabled()) return v;
    TrainState st;
    RETURN_IF_ERROR(Recover(v.status(), st, 1));
    return store_.Pull(names_);
  }

  nlohmann::json SummaryJson() const override {
    const auto s = coord_.stats();
    nlohmann::json j = {
        {"strategy", "parameter_server"},
        {"num_ps", clients_.size()},
        {"num_workers", ctx_.worker_addresses.size()},
        {"steps_per_execution", o_.steps_per_execution},
        {"partitioner", PartitionerString(o_.partitioner)},
        {"ps_prefetch", o_.ps_prefetch},
        {"ps_closures_per_worker", ctx_.coordinator.inflight_per_worker},
        {"ps_pull", o_.ps_pull_rows ? "rows" : "full"},
        {"ps_applied_updates", AppliedUpdates()},
        {"ps_pulled_bytes", pulled_bytes_},
        {"worker_step_seconds",
         [&] {
           nlohmann::json t = worker_time_.ToJson();
           t["steps"] = worker_time_steps_;
           return t;
         }()},
        {"closures",
         {{"scheduled", s.scheduled},
          {"completed", s.completed},
          {"retried", s.retried},
          {"worker_failures", s.worker_failures}}},
        {"recovery",
         {{"ps_restarts", ps_restarts_}, {"restored_steps", restored_}, {"checkpoints_written", checkpoints_}}}};
    if (loss_scale_) {
      j["loss_scale"] = *loss_scale_;
      j["skipped_steps"] = skipped_steps_;
    }
    return j;
  }

 private:
  static constexpr int kMaxRecoveries = 10;  // in a row, without a checkpoint in between

  // Updates the PS tasks applied, summed (-1 when one cannot say): with no
  // PS restarted, exactly steps x shards when every step landed once.
  int64_t AppliedUpdates() const {
    int64_t n = 0;
    for (const auto& c : clients_) {
      auto s = c->GetStatus();
      if (!s.ok()) return -1;
      n += s->applied_updates;
    }
    return n;
  }

  int64_t ParameterCount() const {
    int64_t n = 0;
    for (const Tensor& t : init_) n += t.size();
    return n;
  }

  // Makes this chief the only one whose closures the PS tasks apply (again,
  // for a PS that restarted and forgot), and creates the variables where
  // they are missing (a no-op where they exist).
  Status Claim() {
    for (size_t i = 0; i < clients_.size(); ++i) {
      ASSIGN_OR_RETURN(ps::FenceResult f, clients_[i]->Fence(claim_.generation, claim_.closure_namespace));
      (void)f;
    }
    if (claim_.previous != 0 && !announced_fence_) {
      announced_fence_ = true;
      out_ << "fit: fenced off the previous chief (generation " << claim_.previous << "); this chief is generation "
           << claim_.generation << std::endl;
    }
    // Non-trainable state (moving statistics) gets no optimizer: only deltas reach it.
    for (size_t i = 0; i < names_.size(); ++i) {
      RETURN_IF_ERROR(store_.Create(names_[i], init_[i], trainable_[i] ? std::optional(job_.optimizer) : std::nullopt));
    }
    for (size_t i = 0; i < clients_.size(); ++i) {
      ASSIGN_OR_RETURN(ps::PsStatus s, clients_[i]->GetStatus());
      incarnations_[i] = s.incarnation;
    }
    return Status::Ok();
  }

  Status SaveCheckpoint(const TrainState& st, bool final) {
    ASSIGN_OR_RETURN(std::string dir, mgr_.Prepare(st.step));
    std::vector<std::string> files;
    int64_t bytes = 0;
    for (size_t i = 0; i < clients_.size(); ++i) {
      // Each PS writes ps-<i>.ckpt into its own --checkpoint-dir, the same
      // directory as this one (a shared volume).
      files.push_back("ps-" + std::to_string(i) + ".ckpt");
      ASSIGN_OR_RETURN(int64_t b, clients_[i]->Save(st.step, claim_.generation));
      bytes += b;
    }
    // A PS that restarted during the save wrote its empty table: never commit that.
    ASSIGN_OR_RETURN(std::vector<size_t> restarted, Restarted());
    if (!restarted.empty()) {
      return Aborted("checkpoint at step " + std::to_string(st.step) + ": parameter server " +
                     std::to_string(restarted[0]) + " restarted while it was written");
    }
    nlohmann::json state = st.ToJson();
    state["num_ps"] = clients_.size();
    state["partitioner"] = PartitionerString(o_.partitioner);
    RETURN_IF_ERROR(mgr_.Commit(st.step, final, state, files));
    ++checkpoints_;
    out_ << "fit: checkpoint " << dir << " (step " << st.step << (final ? ", final" : "") << ", " << bytes << " bytes)"
         << std::endl;
    return Status::Ok();
  }

  // True when a checkpoint was found and every PS now holds it.
  StatusOr<bool> Restore(TrainState& st) {
    ASSIGN_OR_RETURN(std::optional<checkpoint::Committed> c, mgr_.Latest(&out_));
    if (!c) return false;
    if (c->files.size() != clients_.size() || c->state.value("num_ps", int64_t{0}) == 0) {
      return FailedPrecondition(c->dir + " holds " +
                                (c->state.value("num_ps", int64_t{0}) == 0
                                     ? std::string("a synchronous strategy's variables")
                                     : std::to_string(c->files.size()) + " parameter servers' variables") +
                                "; this cluster has " + std::to_string(clients_.size()) + " parameter servers");
    }
    for (size_t i = 0; i < clients_.size(); ++i) {
      if (c->files[i] != c->dir + "/ps-" + std::to_string(i) + ".ckpt") {
        return DataLoss(c->dir + ": file " + std::to_string(i) + " is " + c->files[i] + ", not ps-" +
                        std::to_string(i) + ".ckpt");
      }
      RETURN_IF_ERROR(clients_[i]->Restore(c->step, claim_.generation).status());
    }
    ASSIGN_OR_RETURN(st, TrainState::FromJson(c->state));
    out_ << "fit: restored checkpoint " << c->dir << " at step " << st.step << std::endl;
    return true;
  }

  // Indices of the PS tasks whose incarnation changed since Claim.
  StatusOr<std::vector<size_t>> Restarted() {
    std::vector<size_t> out;
    for (size_t i = 0; i < clients_.size(); ++i) {
      ASSIGN_OR_RETURN(ps::PsStatus s, clients_[i]->GetStatus());
      if (s.incarnation != incarnations_[i]) out.push_back(i);
    }
    return out;
  }

  bool Stopping() const { return ctx_.signals && ctx_.signals->stop(); }

  // After a failure: which PS tasks restarted (empty when every one answers
  // as the same process). A PS that does not answer is waited for, said so
  // once, for at most ctx.ps_timeout; then it is UNAVAILABLE naming it.
  StatusOr<std::vector<size_t>> AwaitParameterServers() {
    const auto since = Clock::now();
    std::vector<bool> reported(probes_.size(), false);
    while (true) {
      if (Stopping()) return Cancelled("stopped by a signal");
      std::vector<size_t> restarted, silent;
      for (size_t i = 0; i < probes_.size(); ++i) {
        auto s = probes_[i]->GetStatus();
        if (!s.ok()) {
          silent.push_back(i);
        } else if (s->incarnation != incarnations_[i]) {
          restarted.push_back(i);
        }
      }
      if (silent.empty()) return restarted;
      const double waited = std::chrono::duration<double>(Clock::now() - since).count();
      const double limit = std::chrono::duration<double>(ctx_.ps_timeout).count();
      for (size_t i : silent) {
        if (reported[i]) continue;
        reported[i] = true;
        out_ << "fit: parameter server " << i << " (" << ctx_.ps_addresses[i] << ") is not answering; waiting up to "
             << limit << " s for it to come back" << std::endl;
      }
      if (waited >= limit) {
        const size_t i = silent[0];
        return Unavailable("parameter server " + std::to_string(i) + " (" + ctx_.ps_addresses[i] +
                           ") lost: no answer for " + std::to_string(static_cast<int64_t>(limit)) +
                           " s (TFJOB_PS_TIMEOUT_SECONDS)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  // `cause` stopped training with reached_ steps done. A restarted PS is
  // recovered from; anything else is the job's error.
  Status Recover(const Status& cause, TrainState& st, int attempt) {
    ASSIGN_OR_RETURN(std::vector<size_t> restarted, AwaitParameterServers());
    if (restarted.empty()) return cause;
    const std::string which = "parameter server " + std::to_string(restarted[0]);
    if (!o_.checkpoints.enabled()) {
      return FailedPrecondition(which + " restarted and lost its variables; run fit with --checkpoint-dir to recover");
    }
    if (attempt > kMaxRecoveries) {
      return Aborted(which + " keeps restarting: gave up after " + std::to_string(kMaxRecoveries) +
                     " recoveries (last: " + cause.message() + ")");
    }
    ps_restarts_ += static_cast<int64_t>(restarted.size());
    out_ << "fit: " << which
         << " restarted (new incarnation): restoring every parameter server from the latest checkpoint" << std::endl;
    RETURN_IF_ERROR(Claim());
    ASSIGN_OR_RETURN(bool restored, Restore(st));
    if (!restored) return DataLoss("no checkpoint to restore " + which + " from in " + mgr_.dir());
    restored_.push_back(st.step);
    // From the start of the chunk that failed (a few closures' time before
    // the loss was seen) to now: how long training stood still.
    char took[32];
    std::snprintf(took, sizeof took, "%.1f", std::chrono::duration<double>(Clock::now() - chunk_started_).count());
    out_ << "fit: resumed at step " << st.step << " (lost " << std::max<int64_t>(0, reached_ - st.step) << " steps); "
         << which << " stopped training for " << took << " s" << std::endl;
    return Status::Ok();
  }

  const model::JobConfig job_;
  const FitOptions o_;
  const PsCluster ctx_;
  std::ostream& out_;
  const PsClaim claim_;
  std::vector<std::shared_ptr<ps::PsClient>> clients_;  // patient for ctx.ps_timeout
  std::vector<std::shared_ptr<ps::PsClient>> probes_;   // one try, 2 s
  VariableStore store_;
  const std::vector<std::string> names_;
  const std::vector<bool> trainable_;
  const std::vector<Tensor> init_;
  coordinator::ClusterCoordinator coord_;
  checkpoint::Manager mgr_;
  std::vector<uint64_t> incarnations_;

  bool announced_fence_ = false;
  Clock::time_point chunk_started_ = Clock::now();  // of the last Run
  int recoveries_ = 0;
  int64_t reached_ = 0;
  // Ahead: the next chunk's end, from the loop (0: none); the closures
  // started for the chunk from ahead_step_, with their steps.
  int64_t next_end_ = 0;
  int64_t ahead_step_ = -1;
  std::vector<std::pair<int64_t, coordinator::RemoteValue>> ahead_;
  int64_t ps_restarts_ = 0;
  int64_t checkpoints_ = 0;
  int64_t pulled_bytes_ = 0;  // by the workers, for the closures that completed
  // float16 layers: the steps whose gradients overflowed (not pushed), and
  // the scale the last completed closure left on its worker.
  int64_t skipped_steps_ = 0;
  std::optional<double> loss_scale_;
  PsStepSeconds worker_time_;  // the workers' closures that completed, summed
  int64_t worker_time_steps_ = 0;
  std::vector<int64_t> restored_;
};

}  // namespace

int PsClosuresPerWorker(int64_t steps_per_execution, size_t workers) {
  const size_t in_cluster = steps_per_execution == 1 ? 3 : 2;
  return static_cast<int>(std::max<size_t>(1, in_cluster / std::max<size_t>(1, workers)));
}

StatusOr<std::unique_ptr<Strategy>> MakeParameterServerStrategy(const model::JobConfig& job, const FitOptions& options,
                                                                std::vector<Tensor> initial_values, PsCluster cluster,
                                                                const model::Model& m) {
  if (cluster.out == nullptr) return InvalidArgument("parameter-server strategy: no output stream");
  // The parameter servers apply updates shard by shard; a norm constraint
  // spans a variable's shards, so none is applied there yet.
  for (const auto& v : m.variables()) {
    if (v.constraint.kind != model::Constraint::Kind::kNone) {
      return InvalidArgument("variable " + v.name +
                             ": weight constraints are not applied by the parameter-server strategy yet (use a "
                             "synchronous strategy, or remove the constraint)");
    }
  }
  ASSIGN_OR_RETURN(Placement placement,
                   PlaceModel(m, static_cast<int64_t>(cluster.clients.size()), options.partitioner));
  std::vector<bool> trainable;
  for (const auto& v : m.variables()) trainable.push_back(v.trainable);
  std::vector<Tensor> init =
      initial_values.empty() ? m.InitialValues(static_cast<uint64_t>(job.seed)) : std::move(initial_values);
  return std::unique_ptr<Strategy>(std::make_unique<PsStrategy>(
      job, options, std::move(cluster), VariableNames(m), std::move(trainable), std::move(init), std::move(placement)));
}

namespace {

// The registry's entry (registry.cc): the chief claims its cluster through
// the role's context, after every input check, and hands the closures'
// deadline, attempts and concurrency to the coordinator.
StatusOr<std::unique_ptr<Strategy>> BuildParameterServer(const StrategyArgs& a) {
  if (!a.context.claim_ps_cluster) {
    return InvalidArgument("parameter_server: needs a cluster with \"ps\" tasks");
  }
  ASSIGN_OR_RETURN(PsCluster c, a.context.claim_ps_cluster());
  const FitOptions& o = a.options;
  c.coordinator.rpc_timeout = o.closure_timeout;
  c.coordinator.max_attempts = o.closure_max_attempts;
  c.coordinator.inflight_per_worker = o.ps_closures_per_worker > 0
                                          ? o.ps_closures_per_worker
                                          : PsClosuresPerWorker(o.steps_per_execution, c.worker_addresses.size());
  return MakeParameterServerStrategy(a.job, o, a.initial_values, std::move(c), a.model);
}

}  // namespace

StrategyEntry ParameterServerEntry() {
  return {.name = "parameter_server",
          .topology = Topology::kParameterServers,
          .placement = DevicePlacement::kOnWorkers,
          .replicas_in_process = false,
          .make = BuildParameterServer};
}

}  // namespace tfjob::strategy
