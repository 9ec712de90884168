// fit under ParameterServerStrategy (async): variables live on PS tasks,
// each scheduled closure runs steps_per_execution steps on one worker (pull,
// gradients, push with the closure id), and the chief merges the closures'
// loss and metrics. The training loop itself is services/strategy/loop.h;
// this is the Strategy it drives, and the workers' side.
//
// How the chief survives the loss of any task:
//  - a worker: the coordinator re-queues its closures (exactly once per shard);
//  - a parameter server: its restart (new incarnation) fails the closures
//    that touch it; Join reports that, and the chief claims the PS again,
//    restores every PS from the latest good checkpoint and carries on;
//  - the chief: the restarted chief fences the previous one off (a newer
//    generation), restores the latest checkpoint and continues to the
//    requested length; the PS tasks and workers it finds kept running.
// A PS that stops answering is waited for at most ctx.ps_timeout, saying
// which; then the chief restores it or fails naming it.
// The loop's chunks end at checkpoint boundaries and each is joined before a
// checkpoint, so a checkpoint is a consistent cut at a known step and at
// most one checkpoint interval of progress is ever lost.
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <ostream>
#include <thread>

#include "common/json_reader.h"
#include "services/checkpoint/manager.h"
#include "services/coordinator/coordinator.h"
#include "services/model/keras_model.h"
#include "services/programs/fit_internal.h"
#include "services/strategy/devices.h"
#include "services/strategy/checkpoints.h"
#include "services/strategy/stats.h"
#include "services/tensor/threads.h"

namespace tfjob::programs::fit {
namespace {

constexpr const char* kTrainDataset = "fit/train";
constexpr const char* kTrainClosure = "fit/train_steps";

StatusOr<strategy::Placement> PlaceModel(const model::Model& m, int64_t num_ps, const strategy::Partitioner& part) {
  strategy::Placement placement(num_ps, part);
  for (const auto& v : m.variables()) RETURN_IF_ERROR(placement.Add(v.name, v.shape).status());
  return placement;
}

std::vector<std::string> VariableNames(const model::Model& m) {
  std::vector<std::string> names;
  for (const auto& v : m.variables()) names.push_back(v.name);
  return names;
}

nlohmann::json StatsToJson(const strategy::BatchStats& s, int64_t steps, int64_t examples) {
  nlohmann::json j = s.ToJson();
  j["steps"] = steps;
  j["examples"] = examples;
  return j;
}

using Clock = std::chrono::steady_clock;

StatusOr<coordinator::Options> CoordinatorOptions(const Parsed& p, const ChiefContext& ctx) {
  ASSIGN_OR_RETURN(coordinator::Options o, ctx.CoordinatorOptions());
  o.rpc_timeout = p.closure_timeout;
  o.max_attempts = p.closure_max_attempts;
  return o;
}

class PsStrategy final : public strategy::Strategy {
 public:
  PsStrategy(const Parsed& p, const ChiefContext& ctx, const programs::Claim& claim, const coordinator::Options& options,
             std::vector<std::shared_ptr<ps::PsClient>> clients, strategy::Placement placement,
             std::vector<std::string> names, std::vector<bool> trainable, std::vector<Tensor> init)
      : p_(p),
        ctx_(ctx),
        out_(*ctx.out),
        claim_(claim),
        clients_(std::move(clients)),
        store_(std::move(placement), clients_),
        names_(std::move(names)),
        trainable_(std::move(trainable)),
        init_(std::move(init)),
        coord_(ctx.worker_addresses, options),
        mgr_(p.checkpoints.dir, static_cast<int>(p.checkpoints.keep), p.checkpoints.ignore_damaged),
        incarnations_(clients_.size(), 0) {
    // One quick look each: Recover polls with these until a lost PS is back.
    for (size_t i = 0; i < ctx.ps_addresses.size(); ++i) {
      ps::ClientOptions o;
      o.timeout = std::chrono::milliseconds(2000);
      o.retry.max_attempts = 1;
      o.credentials = ctx.credentials;
      probes_.push_back(std::make_shared<ps::PsClient>(ctx.ps_addresses[i], o));
    }
  }

  strategy::StrategyKind kind() const override { return strategy::StrategyKind::kParameterServer; }
  int64_t num_replicas_in_sync() const override { return 1; }  // asynchronous: every closure applies alone

  Status Start(strategy::TrainState& st) override {
    RETURN_IF_ERROR(Claim());
    out_ << "fit: " << names_.size() << " variables (" << ParameterCount() << " parameters) on " << clients_.size()
         << " parameter servers, " << ctx_.worker_addresses.size() << " workers, partitioner "
         << strategy::PartitionerString(p_.partitioner) << std::endl;
    // A restarted chief continues from the latest checkpoint; a first start
    // writes the step-0 checkpoint so that any later PS loss has one to use.
    if (p_.checkpoints.enabled()) {
      ASSIGN_OR_RETURN(bool restored, Restore(st));
      if (restored) {
        restored_.push_back(st.step);
      } else {
        RETURN_IF_ERROR(SaveCheckpoint(st, false));
        if (ctx_.metrics) ctx_.metrics->RecordCheckpoint(st.step);
      }
    }
    // Workers get the job as JSON, so they need no copy of the file.
    ASSIGN_OR_RETURN(nlohmann::json doc, ReadJsonFile(p_.job.source));
    nlohmann::json dargs{{"config", doc},
                         {"keras_model", nullptr},
                         {"source", p_.job.source},
                         {"data_dir", p_.flags.Get("data-dir")},
                         {"partitioner", strategy::PartitionerString(p_.partitioner)},
                         {"num_ps", static_cast<int64_t>(clients_.size())},
                         {"num_workers", static_cast<int64_t>(ctx_.worker_addresses.size())},
                         {"threads", *p_.flags.GetInt("threads")},
                         {"prefetch", p_.ps_prefetch},
                         {"pull_rows", p_.ps_pull_rows},
                         {"device", p_.flags.Get("device")}};
    if (p_.flags.Has("keras-model")) {
      ASSIGN_OR_RETURN(dargs["keras_model"], ReadJsonFile(p_.flags.Get("keras-model")));
      dargs["keras_model_source"] = p_.flags.Get("keras-model");
    }
    return coord_.CreatePerWorkerDataset(kTrainDataset, dargs, kTrainDataset);
  }

  Status Run(strategy::TrainState& st, int64_t end) override {
    chunk_started_ = Clock::now();
    const int64_t spe = p_.steps_per_execution;
    std::vector<coordinator::RemoteValue> values;
    for (int64_t s = st.step; s < end; s += spe) {
      values.push_back(coord_.Schedule(kTrainClosure, {{"steps", std::min(spe, end - s)}}));
    }
    Status joined = coord_.Join();
    strategy::BatchStats stats;
    int64_t steps = 0, examples = 0;
    for (auto& v : values) {
      auto r = v.Fetch();
      if (!r.ok()) continue;
      auto s = strategy::BatchStats::FromJson(r->json);
      if (s.ok()) stats.Merge(*s);
      steps += r->json["steps"].get<int64_t>();
      examples += r->json["examples"].get<int64_t>();
      pulled_bytes_ += r->json.value("pulled_bytes", int64_t{0});
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

  Status Recover(const Status& cause, strategy::TrainState& st) override { return Recover(cause, st, ++recoveries_); }

  Status Checkpoint(const strategy::TrainState& st, bool final) override {
    reached_ = st.step;
    RETURN_IF_ERROR(SaveCheckpoint(st, final));
    recoveries_ = 0;
    return Status::Ok();
  }

  // The trained variables, re-read from the final checkpoint if a PS was
  // lost after it was written.
  StatusOr<std::vector<Tensor>> Values() override {
    auto v = store_.Pull(names_);
    if (v.ok() || !p_.checkpoints.enabled()) return v;
    strategy::TrainState st;
    RETURN_IF_ERROR(Recover(v.status(), st, 1));
    return store_.Pull(names_);
  }

  nlohmann::json SummaryJson() const override {
    const auto s = coord_.stats();
    return {{"strategy", "parameter_server"},
            {"num_ps", clients_.size()},
            {"num_workers", ctx_.worker_addresses.size()},
            {"steps_per_execution", p_.steps_per_execution},
            {"partitioner", strategy::PartitionerString(p_.partitioner)},
            {"ps_prefetch", p_.ps_prefetch},
            {"ps_pull", p_.ps_pull_rows ? "rows" : "full"},
            {"ps_applied_updates", AppliedUpdates()},
            {"ps_pulled_bytes", pulled_bytes_},
            {"closures",
             {{"scheduled", s.scheduled}, {"completed", s.completed}, {"retried", s.retried}, {"worker_failures", s.worker_failures}}},
            {"recovery", {{"ps_restarts", ps_restarts_}, {"restored_steps", restored_}, {"checkpoints_written", checkpoints_}}}};
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
      RETURN_IF_ERROR(store_.Create(names_[i], init_[i],
                                    trainable_[i] ? std::optional(p_.job.optimizer) : std::nullopt));
    }
    for (size_t i = 0; i < clients_.size(); ++i) {
      ASSIGN_OR_RETURN(ps::PsStatus s, clients_[i]->GetStatus());
      incarnations_[i] = s.incarnation;
    }
    return Status::Ok();
  }

  Status SaveCheckpoint(const strategy::TrainState& st, bool final) {
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
    state["partitioner"] = strategy::PartitionerString(p_.partitioner);
    RETURN_IF_ERROR(mgr_.Commit(st.step, final, state, files));
    ++checkpoints_;
    out_ << "fit: checkpoint " << dir << " (step " << st.step << (final ? ", final" : "") << ", " << bytes << " bytes)"
         << std::endl;
    return Status::Ok();
  }

  // True when a checkpoint was found and every PS now holds it.
  StatusOr<bool> Restore(strategy::TrainState& st) {
    ASSIGN_OR_RETURN(std::optional<checkpoint::Committed> c, mgr_.Latest(&out_));
    if (!c) return false;
    if (c->files.size() != clients_.size() || c->state.value("num_ps", int64_t{0}) == 0) {
      return FailedPrecondition(c->dir + " holds " +
                                (c->state.value("num_ps", int64_t{0}) == 0 ? std::string("a synchronous strategy's variables")
                                                                            : std::to_string(c->files.size()) +
                                                                                  " parameter servers' variables") +
                                "; this cluster has " + std::to_string(clients_.size()) + " parameter servers");
    }
    for (size_t i = 0; i < clients_.size(); ++i) {
      if (c->files[i] != c->dir + "/ps-" + std::to_string(i) + ".ckpt") {
        return DataLoss(c->dir + ": file " + std::to_string(i) + " is " + c->files[i] + ", not ps-" + std::to_string(i) + ".ckpt");
      }
      RETURN_IF_ERROR(clients_[i]->Restore(c->step, claim_.generation).status());
    }
    ASSIGN_OR_RETURN(st, strategy::TrainState::FromJson(c->state));
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
        return Unavailable("parameter server " + std::to_string(i) + " (" + ctx_.ps_addresses[i] + ") lost: no answer for " +
                           std::to_string(static_cast<int64_t>(limit)) + " s (TFJOB_PS_TIMEOUT_SECONDS)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  // `cause` stopped training with reached_ steps done. A restarted PS is
  // recovered from; anything else is the job's error.
  Status Recover(const Status& cause, strategy::TrainState& st, int attempt) {
    ASSIGN_OR_RETURN(std::vector<size_t> restarted, AwaitParameterServers());
    if (restarted.empty()) return cause;
    const std::string which = "parameter server " + std::to_string(restarted[0]);
    if (!p_.checkpoints.enabled()) {
      return FailedPrecondition(which + " restarted and lost its variables; run fit with --checkpoint-dir to recover");
    }
    if (attempt > kMaxRecoveries) {
      return Aborted(which + " keeps restarting: gave up after " + std::to_string(kMaxRecoveries) + " recoveries (last: " +
                     cause.message() + ")");
    }
    ps_restarts_ += static_cast<int64_t>(restarted.size());
    out_ << "fit: " << which << " restarted (new incarnation): restoring every parameter server from the latest checkpoint"
         << std::endl;
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

  const Parsed& p_;
  const ChiefContext& ctx_;
  std::ostream& out_;
  const programs::Claim claim_;
  std::vector<std::shared_ptr<ps::PsClient>> clients_;  // patient for ctx.ps_timeout
  std::vector<std::shared_ptr<ps::PsClient>> probes_;   // one try, 2 s
  strategy::VariableStore store_;
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
  int64_t ps_restarts_ = 0;
  int64_t checkpoints_ = 0;
  int64_t pulled_bytes_ = 0;  // by the workers, for the closures that completed
  std::vector<int64_t> restored_;
};

// The worker's network thread: pulls and pushes run on it one after another,
// in the order they were asked for, while the closure computes. The order is
// what bounds staleness: the pull for step s+1 is queued after the push of
// step s-1, so step s+1 sees every update of this worker but the last one.
class IoQueue {
 public:
  IoQueue() : thread_([this] { Loop(); }) {}
  // Runs what is still queued, then stops.
  ~IoQueue() {
    {
      std::lock_guard g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  std::future<Status> Run(std::function<Status()> fn) {
    std::packaged_task<Status()> task(std::move(fn));
    std::future<Status> f = task.get_future();
    {
      std::lock_guard g(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_all();
    return f;
  }

 private:
  void Loop() {
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      std::packaged_task<Status()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<Status()>> tasks_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the rest exists
};

// Row pulls for a model whose first layer is an Embedding: each step pulls
// only the rows its batch uses. The worker computes with a copy of the model
// whose table has `capacity` rows (the most one batch can use): the batch's
// distinct ids, ascending, become rows 0..u-1, the ids are renumbered to
// match, and the gradient's rows are renumbered back before the push.
struct RowPlan {
  size_t var = 0;         // the table's index among the model's variables
  std::string name;       // the table variable
  std::string layer;      // the Embedding layer
  int64_t input_dim = 0;  // rows of the real table
  int64_t capacity = 0;   // rows of the worker's compact table
};

// The plan for `job` when row pulls are on and pay: nullopt for models
// without a first-layer Embedding, or whose table is no bigger than a batch.
std::optional<RowPlan> PlanRows(const model::JobConfig& job, const model::Model& m, bool pull_rows) {
  if (!pull_rows || job.model.layers.empty() || job.model.layers[0].type != model::LayerType::kEmbedding) return std::nullopt;
  const model::LayerSpec& e = job.model.layers[0];
  const int64_t bag = job.model.input_shape.empty() ? 1 : NumElements(job.model.input_shape);
  const int64_t capacity = job.batch_size * bag;
  if (capacity <= 0 || capacity >= e.input_dim || m.variables().empty()) return std::nullopt;
  return RowPlan{0, m.variables()[0].name, e.name, e.input_dim, capacity};
}

// One training step's inputs: its batch, and the variable values pulled for
// it (with a row plan, the table holds only the batch's rows).
struct Step {
  data::Element batch;
  Tensor x;                                 // features as the model sees them
  std::vector<int64_t> rows;                // the table rows the batch uses, ascending
  int64_t pulled_bytes = 0;                 // what the pull moves
  std::shared_ptr<std::vector<Tensor>> values;
  std::future<Status> pulled;
};

// What a worker keeps between closures: the job and its placement (set by
// the dataset function), idle models and value buffers to reuse, the network
// thread, and the next step's batch and values when prefetching.
struct WorkerFitState {
  std::mutex mu;
  std::optional<model::JobConfig> job;
  std::vector<std::string> names;  // the model's variables, in order
  std::optional<strategy::Placement> placement;
  std::shared_ptr<strategy::VariableStore> store;
  std::optional<RowPlan> plan;
  bool prefetch = true;
  // Where this worker computes (--device: devices.h); the variables are
  // pulled to and the gradients pushed from the host either way.
  Device device;
  uint64_t generation = 0;  // bumped each time the dataset is (re)built
  std::vector<std::unique_ptr<model::Model>> idle;
  std::vector<std::shared_ptr<std::vector<Tensor>>> free_values;
  std::optional<Step> prefetched;
  uint64_t prefetched_generation = 0;
  std::unique_ptr<IoQueue> io;  // last: destroyed first, finishing what uses the rest
};

// Takes the next batch, renumbers its ids for a row plan, and pulls (now,
// or on the network thread when `io` is given) the values it needs.
StatusOr<Step> PrepareStep(worker::ClosureContext& ctx, WorkerFitState& state, const std::optional<RowPlan>& plan,
                           const std::vector<std::string>& names, const std::shared_ptr<strategy::VariableStore>& store,
                           IoQueue* io) {
  ASSIGN_OR_RETURN(std::optional<data::Element> e, ctx.Next(kTrainDataset));
  if (!e) return OutOfRange("fit: training dataset ended");
  Step step;
  step.batch = std::move(*e);
  step.x = step.batch[0];
  if (plan) {
    const Tensor& ids = step.batch[0];
    if (ids.dtype() != DType::kInt64) return InvalidArgument("layer \"" + plan->layer + "\": expects int64 ids");
    const int64_t* id = ids.data<int64_t>();
    for (int64_t i = 0; i < ids.size(); ++i) {
      if (id[i] < 0 || id[i] >= plan->input_dim) {
        return InvalidArgument("layer \"" + plan->layer + "\": id " + std::to_string(id[i]) + " at position " +
                               std::to_string(i) + " is outside [0, " + std::to_string(plan->input_dim) + ")");
      }
    }
    step.rows.assign(id, id + ids.size());
    std::sort(step.rows.begin(), step.rows.end());
    step.rows.erase(std::unique(step.rows.begin(), step.rows.end()), step.rows.end());
    if (static_cast<int64_t>(step.rows.size()) > plan->capacity) {
      return Internal("fit: a batch uses " + std::to_string(step.rows.size()) + " rows, more than " +
                      std::to_string(plan->capacity));
    }
    ASSIGN_OR_RETURN(step.x, Tensor::CreateUninitialized(DType::kInt64, ids.shape()));
    int64_t* out = step.x.data<int64_t>();
    for (int64_t i = 0; i < ids.size(); ++i) {
      out[i] = std::lower_bound(step.rows.begin(), step.rows.end(), id[i]) - step.rows.begin();
    }
  }
  {
    std::lock_guard g(state.mu);
    if (!state.free_values.empty()) {
      step.values = std::move(state.free_values.back());
      state.free_values.pop_back();
    }
  }
  if (!step.values) step.values = std::make_shared<std::vector<Tensor>>(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    ASSIGN_OR_RETURN(const strategy::PlacedVariable* v, store->placement().Find(names[i]));
    const int64_t elems = plan && i == plan->var ? static_cast<int64_t>(step.rows.size()) * v->shape[1] : NumElements(v->shape);
    step.pulled_bytes += elems * static_cast<int64_t>(DTypeSize(v->dtype));
  }
  auto pull = [store, names, plan, values = step.values, rows = step.rows]() -> Status {
    std::vector<strategy::VariableStore::Item> items;
    Tensor table_rows;
    for (size_t i = 0; i < names.size(); ++i) {
      if (plan && i == plan->var) {
        // The batch's rows land in the top of the compact table.
        Tensor& table = (*values)[i];
        if (table.rank() != 2 || table.dim(0) != plan->capacity) {
          ASSIGN_OR_RETURN(const strategy::PlacedVariable* v, store->placement().Find(names[i]));
          ASSIGN_OR_RETURN(table, Tensor::CreateUninitialized(v->dtype, {plan->capacity, v->shape[1]}));
        }
        table_rows = *table.Rows(0, static_cast<int64_t>(rows.size()));
        items.push_back({names[i], rows, &table_rows});
      } else {
        items.push_back({names[i], std::nullopt, &(*values)[i]});
      }
    }
    return store->Fetch(items);
  };
  if (io) {
    step.pulled = io->Run(std::move(pull));
  } else {
    std::promise<Status> done;
    done.set_value(pull());
    step.pulled = done.get_future();
  }
  return step;
}

}  // namespace

StatusOr<std::unique_ptr<strategy::Strategy>> MakePsStrategy(const Parsed& p, const ChiefContext& ctx,
                                                             const model::Model& m, int64_t) {
  // Waits for every PS (connect_timeout), fencing off any previous chief.
  ASSIGN_OR_RETURN(Claim claim, ctx.ClaimCluster());
  ASSIGN_OR_RETURN(coordinator::Options options, CoordinatorOptions(p, ctx));
  // From here on a PS that does not answer is lost after ps_timeout.
  std::vector<std::shared_ptr<ps::PsClient>> clients = ctx.PsClients(ctx.ps_timeout);
  ASSIGN_OR_RETURN(strategy::Placement placement, PlaceModel(m, static_cast<int64_t>(clients.size()), p.partitioner));
  std::vector<bool> trainable;
  for (const auto& v : m.variables()) trainable.push_back(v.trainable);
  return std::unique_ptr<strategy::Strategy>(
      std::make_unique<PsStrategy>(p, ctx, claim, options, std::move(clients), std::move(placement), VariableNames(m),
                                   std::move(trainable), m.InitialValues(static_cast<uint64_t>(p.job.seed))));
}

// One step's gradients computed on `device`: the pulled values and the
// batch go up, the loss and metric sums stay in `stats` there, and the
// gradients come back to the host to be pushed.
StatusOr<model::Model::Output> ComputeOnDevice(model::Model& m, const model::JobConfig& job, Device device,
                                               const std::vector<Tensor>& values, const Tensor& x, const Tensor& y,
                                               Tensor& stats) {
  std::vector<Tensor> on;
  for (const Tensor& v : values) {
    ASSIGN_OR_RETURN(Tensor d, v.ToDevice(device));
    on.push_back(std::move(d));
  }
  ASSIGN_OR_RETURN(Tensor xd, m.PlaceFeatures(x, device));
  ASSIGN_OR_RETURN(Tensor targets, m.Targets(y));
  ASSIGN_OR_RETURN(Tensor td, targets.ToDevice(device));
  ASSIGN_OR_RETURN(std::vector<model::Gradient> grads, m.ComputeGradientsOnDevice(on, xd, td, job.metrics, stats));
  model::Model::Output out;
  for (model::Gradient& g : grads) {
    if (g.sparse) {
      ASSIGN_OR_RETURN(g.indices, g.indices.ToDevice(Device::Cpu()));
      ASSIGN_OR_RETURN(g.values, g.values.ToDevice(Device::Cpu()));
    } else {
      ASSIGN_OR_RETURN(g.dense, g.dense.ToDevice(Device::Cpu()));
    }
  }
  out.grads = std::move(grads);
  return out;
}

Status RegisterPsWorker(worker::Registry& r) {
  auto state = std::make_shared<WorkerFitState>();
  RETURN_IF_ERROR(r.AddDataset(kTrainDataset, [state](const worker::WorkerEnv& env,
                                                      const nlohmann::json& a) -> StatusOr<data::Dataset> {
    // The model comes with the job, or as Keras JSON beside it.
    std::optional<model::ModelSpec> keras;
    if (a.contains("keras_model") && !a["keras_model"].is_null()) {
      ASSIGN_OR_RETURN(keras, model::ParseKerasModel(a["keras_model"], a.value("keras_model_source", "keras model")));
    }
    ASSIGN_OR_RETURN(model::JobConfig job, model::ParseJobConfig(a.at("config"), a.at("source").get<std::string>(),
                                                                 keras ? &*keras : nullptr));
    SetComputeThreads(static_cast<int>(a.value("threads", int64_t{1})));
    ASSIGN_OR_RETURN(strategy::Partitioner part, strategy::ParsePartitioner(a.at("partitioner").get<std::string>()));
    ASSIGN_OR_RETURN(auto m, model::Model::Create(job.model, job.loss));
    ASSIGN_OR_RETURN(strategy::Placement placement, PlaceModel(*m, a.at("num_ps").get<int64_t>(), part));
    // Each worker reads its shard of a multi-file source (auto_shard_policy).
    const strategy::InputShard shard{a.value("num_workers", int64_t{1}), env.worker_index};
    ASSIGN_OR_RETURN(strategy::Examples ex,
                     strategy::LoadExamples(job.data.train, a.at("data_dir").get<std::string>(), *m, shard));
    std::optional<RowPlan> plan = PlanRows(job, *m, a.value("pull_rows", true));
    ASSIGN_OR_RETURN(strategy::DeviceChoice choice, strategy::ParseDeviceChoice(a.value("device", std::string("auto"))));
    ASSIGN_OR_RETURN(strategy::DevicePlan devices,
                     strategy::PlanDevices(choice, strategy::StrategyKind::kParameterServer, 1, false,
                                           static_cast<int>(env.worker_index), m->CheckDeviceSupport()));
    // Each worker shuffles its own way, as per-worker datasets do in TF.
    job.seed += 7919 * (env.worker_index + 1);
    data::Dataset ds = strategy::TrainingPipeline(ex, job).Repeat();
    std::lock_guard g(state->mu);
    state->job = job;
    state->names = VariableNames(*m);
    state->placement = std::move(placement);
    state->store.reset();  // made by the next closure, which has the PS clients
    state->plan = plan;
    state->prefetch = a.value("prefetch", true);
    state->device = devices.devices.empty() ? Device::Cpu() : devices.devices[0];
    ++state->generation;
    state->idle.clear();
    state->free_values.clear();
    state->prefetched.reset();
    if (!state->io) state->io = std::make_unique<IoQueue>();
    return ds;
  }));
  return r.AddClosure(kTrainClosure, [state](worker::ClosureContext& ctx, const nlohmann::json& a,
                                             const std::vector<Tensor>&) -> StatusOr<worker::ClosureResult> {
    std::unique_ptr<model::Model> m;
    model::JobConfig job;
    std::vector<std::string> names;
    std::optional<RowPlan> plan;
    std::shared_ptr<strategy::VariableStore> store;
    std::optional<Step> cur;
    bool prefetch;
    Device device;
    uint64_t generation;
    IoQueue* io;
    {
      std::lock_guard g(state->mu);
      if (!state->job) return FailedPrecondition("fit: this worker has no training dataset yet");
      job = *state->job;
      names = state->names;
      plan = state->plan;
      if (!state->store) state->store = std::make_shared<strategy::VariableStore>(*state->placement, ctx.ps());
      store = state->store;
      prefetch = state->prefetch;
      device = state->device;
      generation = state->generation;
      io = prefetch ? state->io.get() : nullptr;
      if (!state->idle.empty()) {
        m = std::move(state->idle.back());
        state->idle.pop_back();
      }
      // The step another closure pulled ahead, if it is of this dataset.
      if (state->prefetched && state->prefetched_generation == generation) cur = std::move(state->prefetched);
      state->prefetched.reset();
    }
    if (!m) {
      // With a row plan the worker's model has the compact table.
      model::ModelSpec spec = job.model;
      if (plan) spec.layers[0].input_dim = plan->capacity;
      ASSIGN_OR_RETURN(m, model::Model::Create(spec, job.loss));
    }
    strategy::BatchStats stats;
    stats.metrics.resize(job.metrics.size());
    // On a GPU the closure's loss and metric sums accumulate there.
    Tensor device_stats;
    if (!device.is_cpu()) {
      ASSIGN_OR_RETURN(device_stats,
                       Tensor::Create(DType::kFloat32, {model::Model::StatsSize(job.metrics.size())}, device));
    }
    const int64_t steps = a.value("steps", int64_t{1});
    int64_t examples = 0, pulled_bytes = 0;
    // Pushes in flight; every one must have landed before the closure says
    // it is done, so a worker killed at any point loses no update (the
    // re-run closure re-sends them, and the PS applies each once).
    std::vector<std::future<Status>> pushes;
    auto finish = [&](Status s) -> Status {
      for (auto& f : pushes) {
        Status p = f.get();
        if (s.ok()) s = p;
      }
      return s;
    };
    auto recycle = [&](Step& step) {
      if (!step.values) return;
      std::lock_guard g(state->mu);
      if (state->generation == generation) state->free_values.push_back(std::move(step.values));
    };
    Status failed;
    for (int64_t s = 0; s < steps && failed.ok(); ++s) {
      if (!cur) {
        auto prepared = PrepareStep(ctx, *state, plan, names, store, io);
        if (!prepared.ok()) {
          failed = prepared.status();
          break;
        }
        cur = std::move(prepared).value();
      }
      if (Status pulled = cur->pulled.get(); !pulled.ok()) {
        failed = pulled;
        break;
      }
      // Prefetch: the next step's batch and values (the next closure's, after
      // the last step) come in while this one computes.
      std::optional<Step> next;
      Status next_status;
      if (prefetch) {
        auto prepared = PrepareStep(ctx, *state, plan, names, store, io);
        if (prepared.ok()) {
          next = std::move(prepared).value();
        } else {
          next_status = prepared.status();
        }
      }
      auto out = device.is_cpu() ? m->ComputeGradients(*cur->values, cur->x, cur->batch[1])
                                 : ComputeOnDevice(*m, job, device, *cur->values, cur->x, cur->batch[1], device_stats);
      if (!out.ok()) {
        failed = out.status();
        recycle(*cur);
        cur = std::move(next);
        break;
      }
      std::vector<strategy::VariableStore::Grad> grads;
      for (size_t i = 0; i < names.size(); ++i) grads.push_back({names[i], std::move(out->grads[i])});
      if (plan && grads[plan->var].grad.sparse) {
        // Back from the compact table's rows to the real table's.
        model::Gradient& g = grads[plan->var].grad;
        Tensor global = Tensor::Zeros(DType::kInt64, g.indices.shape());
        const int64_t* local = g.indices.data<int64_t>();
        for (int64_t i = 0; i < g.indices.size(); ++i) global.data<int64_t>()[i] = cur->rows[static_cast<size_t>(local[i])];
        g.indices = global;
      }
      const uint32_t sequence = static_cast<uint32_t>(s);
      if (io) {
        pushes.push_back(io->Run([store, id = ctx.closure_id(), generation = ctx.generation(), sequence,
                                  grads = std::move(grads)]() -> Status {
          return store->PushGradients(id, sequence, grads, generation).status();
        }));
      } else {
        failed = store->PushGradients(ctx.closure_id(), sequence, grads, ctx.generation()).status();
      }
      if (failed.ok() && device.is_cpu()) failed = strategy::RecordBatch(*out, cur->batch[1], job.metrics, stats);
      examples += cur->batch[0].dim(0);
      pulled_bytes += cur->pulled_bytes;
      recycle(*cur);
      cur = std::move(next);
      if (failed.ok()) failed = next_status;
    }
    failed = finish(failed);
    if (failed.ok() && !device.is_cpu()) {
      auto sums = device_stats.ToDevice(Device::Cpu());
      if (sums.ok()) {
        const float* f = sums->data<float>();
        stats.loss = {f[0], f[1]};
        for (size_t k = 0; k < stats.metrics.size(); ++k) stats.metrics[k] = {f[2 + 2 * k], f[3 + 2 * k]};
        if (!std::isfinite(f[0])) failed = InvalidArgument("loss is " + std::to_string(f[0]) + " (diverged)");
      } else {
        failed = sums.status();
      }
    }
    {
      std::lock_guard g(state->mu);
      // A model (and what was pulled ahead) of an older dataset is dropped:
      // its table may have another shape.
      if (state->generation == generation) state->idle.push_back(std::move(m));
      // What was pulled ahead is the next closure's first step.
      if (cur && failed.ok() && state->generation == generation) {
        state->prefetched = std::move(cur);
        state->prefetched_generation = generation;
      }
    }
    RETURN_IF_ERROR(failed);
    nlohmann::json result = StatsToJson(stats, steps, examples);
    result["pulled_bytes"] = pulled_bytes;
    return worker::ClosureResult{result, {}};
  });
}

}  // namespace tfjob::programs::fit
