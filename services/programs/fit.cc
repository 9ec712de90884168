// fit: the job description trained by Keras-style model.fit. Without
// TF_CONFIG it trains in this process (OneDeviceStrategy); as the chief of a
// cluster it trains with parameter servers (async ParameterServerStrategy):
// variables live on PS tasks, each scheduled closure runs steps_per_execution
// steps on one worker (pull, gradients, push with the closure id), and the
// chief aggregates loss and metrics per epoch, then evaluates.
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "common/files.h"
#include "services/checkpoint/checkpoint.h"
#include "services/checkpoint/manager.h"
#include "services/tensor/ops.h"
#include "common/flags.h"
#include "common/json_reader.h"
#include "services/model/job_config.h"
#include "services/programs/program.h"
#include "services/programs/programs.h"
#include "services/strategy/input.h"
#include "services/strategy/trainer.h"
#include "services/strategy/variable_store.h"
#include "services/tensor/threads.h"

namespace tfjob::programs {
namespace {

constexpr const char* kTrainDataset = "fit/train";
constexpr const char* kTrainClosure = "fit/train_steps";

using Clock = std::chrono::steady_clock;

Flags FitFlags() {
  Flags f;
  f.Value("config", "job description (JSON)", "", true)
      .Value("data-dir", "directory that relative data paths resolve against", ".")
      .Value("summary-json", "write the run's summary here")
      // One by default: a small model gains nothing from more, and OpenMP's
      // spinning threads slow down badly on a shared, loaded machine.
      .Value("threads", "compute threads for matrix products", "1")
      .Value("epochs", "override the job's epochs", "0")
      .Value("steps-per-execution", "training steps per scheduled closure (parameter-server mode)", "1")
      .Value("partitioner", "none, fixed:N, min:BYTES[:MAX] or max:BYTES[:MAX] (parameter-server mode)", "none")
      .Value("checkpoint-dir", "keep checkpoints here (parameter-server mode; shared by chief, PS and evaluator)")
      .Value("checkpoint-every-steps", "checkpoint after this many training steps (0: only per --checkpoint-every-seconds)", "0")
      .Value("checkpoint-every-seconds", "checkpoint when this much time has passed since the last one (0: off)", "0")
      .Value("checkpoint-keep", "how many checkpoints to keep", "3")
      .Value("eval-poll-seconds", "evaluator: how often to look for a new checkpoint", "0.5")
      .Value("eval-timeout-seconds", "evaluator: give up when no new checkpoint came for this long (0: never)", "0");
  return f;
}

struct CheckpointPolicy {
  std::string dir;  // "" -> no checkpoints
  int64_t every_steps = 0;
  double every_seconds = 0;
  int64_t keep = 3;
  bool enabled() const { return !dir.empty(); }
};

struct Parsed {
  Flags flags;
  model::JobConfig job;
  int64_t epochs = 0;
  int64_t steps_per_execution = 1;
  strategy::Partitioner partitioner;
  CheckpointPolicy checkpoints;
  double eval_poll_seconds = 0.5;
  double eval_timeout_seconds = 0;
};

StatusOr<Parsed> Parse(const std::vector<std::string>& args) {
  Parsed p{FitFlags(), {}, 0, 1, {}, {}, 0.5, 0};
  RETURN_IF_ERROR(p.flags.Parse(args));
  ASSIGN_OR_RETURN(int64_t threads, p.flags.GetInt("threads"));
  if (threads < 1) return InvalidArgument("flag --threads: must be >= 1");
  SetComputeThreads(static_cast<int>(threads));
  ASSIGN_OR_RETURN(p.epochs, p.flags.GetInt("epochs"));
  if (p.epochs < 0) return InvalidArgument("flag --epochs: must be >= 0");
  ASSIGN_OR_RETURN(p.steps_per_execution, p.flags.GetInt("steps-per-execution"));
  if (p.steps_per_execution < 1) return InvalidArgument("flag --steps-per-execution: must be >= 1");
  ASSIGN_OR_RETURN(p.partitioner, strategy::ParsePartitioner(p.flags.Get("partitioner")));
  CheckpointPolicy& c = p.checkpoints;
  if (p.flags.Has("checkpoint-dir")) c.dir = p.flags.Get("checkpoint-dir");
  ASSIGN_OR_RETURN(c.every_steps, p.flags.GetInt("checkpoint-every-steps"));
  ASSIGN_OR_RETURN(c.every_seconds, p.flags.GetDouble("checkpoint-every-seconds"));
  ASSIGN_OR_RETURN(c.keep, p.flags.GetInt("checkpoint-keep"));
  ASSIGN_OR_RETURN(p.eval_poll_seconds, p.flags.GetDouble("eval-poll-seconds"));
  if (c.every_steps < 0) return InvalidArgument("flag --checkpoint-every-steps: must be >= 0");
  if (c.every_seconds < 0) return InvalidArgument("flag --checkpoint-every-seconds: must be >= 0");
  if (c.keep < 1) return InvalidArgument("flag --checkpoint-keep: must be >= 1");
  if (p.eval_poll_seconds <= 0) return InvalidArgument("flag --eval-poll-seconds: must be > 0");
  ASSIGN_OR_RETURN(p.eval_timeout_seconds, p.flags.GetDouble("eval-timeout-seconds"));
  if (p.eval_timeout_seconds < 0) return InvalidArgument("flag --eval-timeout-seconds: must be >= 0");
  if ((c.every_steps > 0 || c.every_seconds > 0) && !c.enabled()) {
    return InvalidArgument("flag --checkpoint-every-steps/--checkpoint-every-seconds: needs --checkpoint-dir");
  }
  ASSIGN_OR_RETURN(p.job, model::LoadJobConfig(p.flags.Get("config")));
  if (p.epochs > 0) p.job.epochs = p.epochs;
  return p;
}

Status WriteSummary(const Flags& flags, const nlohmann::json& j) {
  if (!flags.Has("summary-json")) return Status::Ok();
  return WriteFileAtomic(flags.Get("summary-json"), j.dump(2) + "\n");
}

// What a worker keeps between closures: the job and its placement (set by
// the dataset function), and idle models to reuse.
struct WorkerFitState {
  std::mutex mu;
  std::optional<model::JobConfig> job;
  std::optional<strategy::Placement> placement;
  std::vector<std::unique_ptr<model::Model>> idle;
};

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
  nlohmann::json metrics = nlohmann::json::array();
  for (const auto& m : s.metrics) metrics.push_back({m.total, m.count});
  return {{"loss", {s.loss.total, s.loss.count}}, {"metrics", metrics}, {"steps", steps}, {"examples", examples}};
}

void MergeStats(const nlohmann::json& j, strategy::BatchStats& s) {
  s.loss.total += j["loss"][0].get<double>();
  s.loss.count += j["loss"][1].get<double>();
  const auto& m = j["metrics"];
  if (s.metrics.size() < m.size()) s.metrics.resize(m.size());
  for (size_t i = 0; i < m.size(); ++i) s.metrics[i].Merge({m[i][0].get<double>(), m[i][1].get<double>()});
}

// Evaluates `values` on the eval examples: (steps, [loss, metrics...]).
StatusOr<std::pair<int64_t, strategy::NamedValues>> Evaluate(model::Model& m, const model::JobConfig& job,
                                                             const strategy::Examples& eval,
                                                             const std::vector<Tensor>& values) {
  ASSIGN_OR_RETURN(auto it, strategy::EvalPipeline(eval, job.batch_size).MakeIterator());
  strategy::BatchStats stats;
  stats.metrics.resize(job.metrics.size());
  int64_t steps = 0;
  while (true) {
    ASSIGN_OR_RETURN(std::optional<data::Element> e, it->Next());
    if (!e) break;
    ASSIGN_OR_RETURN(model::Model::Output o, m.Evaluate(values, (*e)[0], (*e)[1]));
    RETURN_IF_ERROR(strategy::RecordBatch(o, (*e)[1], job.metrics, stats));
    ++steps;
  }
  return std::make_pair(steps, stats.Values(job.metric_names));
}

// The model's variables as a checkpoint holds them: each PS file has the
// shards that PS served; sharded variables are concatenated back.
StatusOr<std::vector<Tensor>> ValuesFromCheckpoint(const checkpoint::Committed& c, const model::Model& m,
                                                   const std::vector<std::string>& names) {
  const int64_t num_ps = c.state.value("num_ps", int64_t{0});
  ASSIGN_OR_RETURN(strategy::Partitioner part, strategy::ParsePartitioner(c.state.value("partitioner", "none")));
  if (num_ps < 1 || static_cast<int64_t>(c.files.size()) != num_ps) {
    return DataLoss(c.dir + ": has " + std::to_string(c.files.size()) + " parameter-server files for " +
                    std::to_string(num_ps) + " parameter servers");
  }
  ASSIGN_OR_RETURN(strategy::Placement placement, PlaceModel(m, num_ps, part));
  std::map<std::string, Tensor> shards;
  for (const std::string& f : c.files) {
    ASSIGN_OR_RETURN(std::vector<checkpoint::Entry> entries, checkpoint::Read(f));
    for (auto& e : entries) shards[e.name] = std::move(e.tensors.at(0));
  }
  std::vector<Tensor> out;
  for (const std::string& n : names) {
    ASSIGN_OR_RETURN(const strategy::PlacedVariable* v, placement.Find(n));
    std::vector<Tensor> parts;
    for (const auto& sh : v->shards) {
      auto it = shards.find(sh.name);
      if (it == shards.end()) return DataLoss(c.dir + ": no shard \"" + sh.name + "\"");
      if (it->second.shape() != sh.shape) return DataLoss(c.dir + ": shard \"" + sh.name + "\" has the wrong shape");
      parts.push_back(it->second);
    }
    if (parts.size() == 1) {
      out.push_back(std::move(parts[0]));
    } else {
      ASSIGN_OR_RETURN(Tensor full, ops::Concat(parts));
      out.push_back(std::move(full));
    }
  }
  return out;
}

nlohmann::json HistoryToJson(const std::vector<strategy::EpochResult>& h) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& e : h) a.push_back({{"epoch", e.epoch}, {"steps", e.steps}, {"seconds", e.seconds}, {"values", e.values}});
  return a;
}

std::vector<strategy::EpochResult> HistoryFromJson(const nlohmann::json& a) {
  std::vector<strategy::EpochResult> h;
  for (const auto& e : a) {
    h.push_back({e.at("epoch").get<int64_t>(), e.at("steps").get<int64_t>(), e.at("seconds").get<double>(),
                 e.at("values").get<strategy::NamedValues>()});
  }
  return h;
}

// The chief's side of parameter-server training, and how it survives the
// loss of any task:
//  - a worker: the coordinator re-queues its closures (exactly once per shard);
//  - a parameter server: its restart (new incarnation) fails the closures
//    that touch it; Join reports that, and the chief claims the PS again,
//    restores every PS from the latest good checkpoint and carries on;
//  - the chief: the restarted chief fences the previous one off, restores the
//    latest checkpoint and continues to the requested length.
// Training runs in chunks that end at epoch and checkpoint boundaries, each
// joined before a checkpoint, so a checkpoint is a consistent cut at a known
// step and at most one checkpoint interval of progress is ever lost.
class PsTraining {
 public:
  PsTraining(const Parsed& p, const ChiefContext& ctx, std::vector<std::shared_ptr<ps::PsClient>> clients,
             strategy::VariableStore& store, std::vector<std::string> names, std::vector<Tensor> init,
             int64_t steps_per_epoch)
      : p_(p),
        ctx_(ctx),
        out_(*ctx.out),
        clients_(std::move(clients)),
        store_(store),
        names_(std::move(names)),
        init_(std::move(init)),
        steps_per_epoch_(steps_per_epoch),
        total_(p.job.epochs * steps_per_epoch),
        coord_(ctx.worker_addresses, ctx.coordinator_options),
        mgr_(p.checkpoints.dir, static_cast<int>(p.checkpoints.keep)),
        incarnations_(clients_.size(), 0) {}

  coordinator::ClusterCoordinator& coord() { return coord_; }

  // Makes this chief the only one whose closures the PS tasks apply, and
  // creates the variables where they are missing (a no-op where they exist).
  Status Claim() {
    for (size_t i = 0; i < clients_.size(); ++i) {
      ASSIGN_OR_RETURN(uint64_t previous, clients_[i]->Fence(coord_.incarnation()));
      if (previous != 0 && previous != coord_.incarnation() && i == 0) {
        out_ << "fit: fenced off the previous chief (incarnation " << std::hex << previous << std::dec << ")" << std::endl;
      }
    }
    for (size_t i = 0; i < names_.size(); ++i) RETURN_IF_ERROR(store_.Create(names_[i], init_[i], p_.job.optimizer));
    for (size_t i = 0; i < clients_.size(); ++i) {
      ASSIGN_OR_RETURN(ps::PsStatus st, clients_[i]->GetStatus());
      incarnations_[i] = st.incarnation;
    }
    return Status::Ok();
  }

  // A restarted chief continues from the latest checkpoint; a first start
  // writes the step-0 checkpoint so that any later PS loss has one to use.
  Status Start() {
    if (!p_.checkpoints.enabled()) return Status::Ok();
    ASSIGN_OR_RETURN(bool restored, Restore());
    if (restored) return Status::Ok();
    return SaveCheckpoint();
  }

  Status Train() {
    int recoveries = 0;
    int64_t announced = 0;
    auto last_ckpt = Clock::now();
    const int64_t spe = p_.steps_per_execution;
    while (step_ < total_) {
      const int64_t epoch = step_ / steps_per_epoch_ + 1;
      if (announced != epoch) {
        out_ << "Epoch " << epoch << "/" << p_.job.epochs;
        if (step_ % steps_per_epoch_ != 0) out_ << " (resumed at step " << step_ % steps_per_epoch_ << ")";
        out_ << std::endl;
        announced = epoch;
      }
      const int64_t end = ChunkEnd();
      const auto t0 = Clock::now();
      std::vector<coordinator::RemoteValue> values;
      for (int64_t s = step_; s < end; s += spe) {
        values.push_back(coord_.Schedule(kTrainClosure, {{"steps", std::min(spe, end - s)}}));
      }
      Status joined = coord_.Join();
      strategy::BatchStats stats;
      int64_t steps = 0, examples = 0;
      for (auto& v : values) {
        auto r = v.Fetch();
        if (!r.ok()) continue;
        MergeStats(r->json, stats);
        steps += r->json["steps"].get<int64_t>();
        examples += r->json["examples"].get<int64_t>();
      }
      if (!joined.ok()) {
        RETURN_IF_ERROR(Recover(joined, step_ + steps, ++recoveries));
        continue;
      }
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      partial_.Merge(stats);
      partial_steps_ += steps;
      partial_seconds_ += seconds;
      examples_ += examples;
      train_seconds_ += seconds;
      step_ = end;
      const strategy::NamedValues now = partial_.Values(p_.job.metric_names);
      if (ctx_.metrics) {
        ctx_.metrics->RecordTraining(steps, examples, seconds, now.empty() ? std::nullopt : std::optional<double>(now[0].second));
      }
      const int64_t in_epoch = step_ % steps_per_epoch_ == 0 ? steps_per_epoch_ : step_ % steps_per_epoch_;
      out_ << strategy::FormatProgress(in_epoch, steps_per_epoch_, partial_seconds_, now) << std::endl;
      if (step_ % steps_per_epoch_ == 0) {
        history_.push_back({epoch, partial_steps_, partial_seconds_, now});
        partial_ = {};
        partial_steps_ = 0;
        partial_seconds_ = 0;
      }
      if (!p_.checkpoints.enabled()) continue;
      const auto& c = p_.checkpoints;
      const bool due = step_ == total_ || (c.every_steps > 0 && step_ % c.every_steps == 0) ||
                       (c.every_seconds > 0 && std::chrono::duration<double>(Clock::now() - last_ckpt).count() >= c.every_seconds);
      if (!due) continue;
      if (Status s = SaveCheckpoint(); !s.ok()) {
        RETURN_IF_ERROR(Recover(s, step_, ++recoveries));
        continue;
      }
      last_ckpt = Clock::now();
      recoveries = 0;
    }
    return Status::Ok();
  }

  // The trained variables, re-read from the final checkpoint if a PS was
  // lost after it was written.
  StatusOr<std::vector<Tensor>> FinalValues() {
    auto v = store_.Pull(names_);
    if (v.ok() || !p_.checkpoints.enabled()) return v;
    RETURN_IF_ERROR(Recover(v.status(), step_, 1));
    return store_.Pull(names_);
  }

  strategy::FitSummary Summary(const std::string& name) const {
    strategy::FitSummary s;
    s.name = name;
    s.history = history_;
    s.steps = step_;
    s.examples = examples_;
    s.train_seconds = train_seconds_;
    return s;
  }

  nlohmann::json RecoveryJson() const {
    return {{"ps_restarts", ps_restarts_}, {"restored_steps", restored_}, {"checkpoints_written", checkpoints_}};
  }

 private:
  static constexpr int kMaxRecoveries = 10;  // in a row, without a checkpoint in between

  int64_t ChunkEnd() const {
    int64_t end = std::min(total_, (step_ / steps_per_epoch_ + 1) * steps_per_epoch_);
    const auto& c = p_.checkpoints;
    if (c.every_steps > 0) {
      end = std::min(end, (step_ / c.every_steps + 1) * c.every_steps);
    } else if (c.every_seconds > 0) {
      // Short chunks, so that a time-based checkpoint is not a whole epoch late.
      end = std::min(end, step_ + std::max<int64_t>(p_.steps_per_execution, steps_per_epoch_ / 10));
    }
    return end;
  }

  nlohmann::json State() const {
    return {{"step", step_},
            {"num_ps", clients_.size()},
            {"partitioner", strategy::PartitionerString(p_.partitioner)},
            {"history", HistoryToJson(history_)},
            {"partial", StatsToJson(partial_, partial_steps_, 0)},
            {"partial_seconds", partial_seconds_},
            {"examples", examples_},
            {"train_seconds", train_seconds_}};
  }

  void LoadState(const nlohmann::json& j) {
    step_ = j.at("step").get<int64_t>();
    history_ = HistoryFromJson(j.at("history"));
    partial_ = {};
    MergeStats(j.at("partial"), partial_);
    partial_steps_ = j.at("partial").at("steps").get<int64_t>();
    partial_seconds_ = j.at("partial_seconds").get<double>();
    examples_ = j.at("examples").get<int64_t>();
    train_seconds_ = j.at("train_seconds").get<double>();
  }

  Status SaveCheckpoint() {
    ASSIGN_OR_RETURN(std::string dir, mgr_.Prepare(step_));
    std::vector<std::string> files;
    int64_t bytes = 0;
    for (size_t i = 0; i < clients_.size(); ++i) {
      files.push_back("ps-" + std::to_string(i) + ".ckpt");
      ASSIGN_OR_RETURN(int64_t b, clients_[i]->Save(dir + "/" + files.back()));
      bytes += b;
    }
    // A PS that restarted during the save wrote its empty table: never commit that.
    ASSIGN_OR_RETURN(std::vector<size_t> restarted, Restarted());
    if (!restarted.empty()) {
      return Aborted("checkpoint at step " + std::to_string(step_) + ": parameter server " +
                     std::to_string(restarted[0]) + " restarted while it was written");
    }
    const bool final = step_ == total_;
    RETURN_IF_ERROR(mgr_.Commit(step_, final, State(), files));
    ++checkpoints_;
    if (ctx_.metrics) ctx_.metrics->RecordCheckpoint(step_);
    out_ << "fit: checkpoint " << dir << " (step " << step_ << (final ? ", final" : "") << ", " << bytes << " bytes)" << std::endl;
    return Status::Ok();
  }

  // True when a checkpoint was found and every PS now holds it.
  StatusOr<bool> Restore() {
    ASSIGN_OR_RETURN(std::optional<checkpoint::Committed> c, mgr_.Latest(&out_));
    if (!c) return false;
    if (c->files.size() != clients_.size()) {
      return FailedPrecondition(c->dir + " holds " + std::to_string(c->files.size()) + " parameter servers' variables; this cluster has " +
                                std::to_string(clients_.size()));
    }
    for (size_t i = 0; i < clients_.size(); ++i) RETURN_IF_ERROR(clients_[i]->Restore(c->files[i]).status());
    LoadState(c->state);
    out_ << "fit: restored checkpoint " << c->dir << " at step " << step_ << std::endl;
    return true;
  }

  // Indices of the PS tasks whose incarnation changed since Claim.
  StatusOr<std::vector<size_t>> Restarted() {
    std::vector<size_t> out;
    for (size_t i = 0; i < clients_.size(); ++i) {
      ASSIGN_OR_RETURN(ps::PsStatus st, clients_[i]->GetStatus());
      if (st.incarnation != incarnations_[i]) out.push_back(i);
    }
    return out;
  }

  // `cause` stopped training with `reached` steps done. A restarted PS is
  // recovered from; anything else is the job's error.
  Status Recover(const Status& cause, int64_t reached, int attempt) {
    auto restarted = Restarted();
    if (!restarted.ok() || restarted->empty()) return cause;
    const std::string which = "parameter server " + std::to_string((*restarted)[0]);
    if (!p_.checkpoints.enabled()) {
      return FailedPrecondition(which + " restarted and lost its variables; run fit with --checkpoint-dir to recover");
    }
    if (attempt > kMaxRecoveries) {
      return Aborted(which + " keeps restarting: gave up after " + std::to_string(kMaxRecoveries) + " recoveries (last: " +
                     cause.message() + ")");
    }
    ps_restarts_ += static_cast<int64_t>(restarted->size());
    out_ << "fit: " << which << " restarted (new incarnation): restoring every parameter server from the latest checkpoint"
         << std::endl;
    RETURN_IF_ERROR(Claim());
    ASSIGN_OR_RETURN(bool restored, Restore());
    if (!restored) return DataLoss("no checkpoint to restore " + which + " from in " + mgr_.dir());
    restored_.push_back(step_);
    out_ << "fit: resumed at step " << step_ << " (lost " << std::max<int64_t>(0, reached - step_) << " steps)" << std::endl;
    return Status::Ok();
  }

  const Parsed& p_;
  const ChiefContext& ctx_;
  std::ostream& out_;
  std::vector<std::shared_ptr<ps::PsClient>> clients_;
  strategy::VariableStore& store_;
  const std::vector<std::string> names_;
  const std::vector<Tensor> init_;
  const int64_t steps_per_epoch_;
  const int64_t total_;
  coordinator::ClusterCoordinator coord_;
  checkpoint::Manager mgr_;
  std::vector<uint64_t> incarnations_;

  // Progress, as checkpoints record it.
  int64_t step_ = 0;
  std::vector<strategy::EpochResult> history_;
  strategy::BatchStats partial_;
  int64_t partial_steps_ = 0;
  double partial_seconds_ = 0;
  int64_t examples_ = 0;
  double train_seconds_ = 0;

  int64_t ps_restarts_ = 0;
  int64_t checkpoints_ = 0;
  std::vector<int64_t> restored_;
};

class Fit final : public Program {
 public:
  std::string name() const override { return "fit"; }
  std::string usage() const override {
    return "fit --config FILE [--data-dir DIR] [--summary-json OUT] [--threads N] [--epochs N]\n"
           "      [--steps-per-execution K] [--partitioner SPEC]\n"
           "      [--checkpoint-dir DIR [--checkpoint-every-steps N] [--checkpoint-every-seconds S] [--checkpoint-keep K]]\n"
           "      evaluator role: [--eval-poll-seconds S] [--eval-timeout-seconds S]";
  }

  bool HasSingleProcessMode() const override { return true; }

  int RunSingleProcess(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) override {
    auto p = Parse(args);
    if (!p.ok()) return ReportError(p.status(), err);
    if (p->checkpoints.enabled()) {
      // Said rather than ignored: the user would otherwise expect files.
      return ReportError(InvalidArgument("flag --checkpoint-dir: checkpoints are written in parameter-server mode "
                                         "(with TF_CONFIG, tfjob run or tfjob-runtime local), not by single-process fit"),
                         err);
    }
    strategy::FitOptions opt;
    opt.data_dir = p->flags.Get("data-dir");
    opt.out = &out;
    auto summary = strategy::Fit(p->job, opt);
    if (!summary.ok()) return ReportError(summary.status(), err);
    nlohmann::json j = summary->ToJson();
    j["threads"] = *p->flags.GetInt("threads");
    j["strategy"] = "one_device";
    if (Status s = WriteSummary(p->flags, j); !s.ok()) return ReportError(s, err);
    return 0;
  }

  Status RegisterWorker(worker::Registry& r) override {
    auto state = std::make_shared<WorkerFitState>();
    RETURN_IF_ERROR(r.AddDataset(kTrainDataset, [state](const worker::WorkerEnv& env,
                                                        const nlohmann::json& a) -> StatusOr<data::Dataset> {
      ASSIGN_OR_RETURN(model::JobConfig job, model::ParseJobConfig(a.at("config"), a.at("source").get<std::string>()));
      SetComputeThreads(static_cast<int>(a.value("threads", int64_t{1})));
      ASSIGN_OR_RETURN(strategy::Partitioner part, strategy::ParsePartitioner(a.at("partitioner").get<std::string>()));
      ASSIGN_OR_RETURN(auto m, model::Model::Create(job.model, job.loss));
      ASSIGN_OR_RETURN(strategy::Placement placement, PlaceModel(*m, a.at("num_ps").get<int64_t>(), part));
      ASSIGN_OR_RETURN(strategy::Examples ex,
                       strategy::LoadExamples(job.data.train, a.at("data_dir").get<std::string>(), m->input_dtype()));
      // Each worker shuffles its own way, as per-worker datasets do in TF.
      job.seed += 7919 * (env.worker_index + 1);
      data::Dataset ds = strategy::TrainingPipeline(ex, job).Repeat();
      std::lock_guard g(state->mu);
      state->job = job;
      state->placement = std::move(placement);
      state->idle.clear();
      return ds;
    }));
    return r.AddClosure(kTrainClosure, [state](worker::ClosureContext& ctx, const nlohmann::json& a,
                                               const std::vector<Tensor>&) -> StatusOr<worker::ClosureResult> {
      std::unique_ptr<model::Model> m;
      model::JobConfig job;
      std::optional<strategy::Placement> placement;
      {
        std::lock_guard g(state->mu);
        if (!state->job) return FailedPrecondition("fit: this worker has no training dataset yet");
        job = *state->job;
        placement = state->placement;
        if (!state->idle.empty()) {
          m = std::move(state->idle.back());
          state->idle.pop_back();
        }
      }
      if (!m) {
        ASSIGN_OR_RETURN(m, model::Model::Create(job.model, job.loss));
      }
      strategy::VariableStore store(*placement, ctx.ps());
      const std::vector<std::string> names = VariableNames(*m);
      strategy::BatchStats stats;
      stats.metrics.resize(job.metrics.size());
      const int64_t steps = a.value("steps", int64_t{1});
      int64_t examples = 0;
      for (int64_t s = 0; s < steps; ++s) {
        ASSIGN_OR_RETURN(std::optional<data::Element> e, ctx.Next(kTrainDataset));
        if (!e) return OutOfRange("fit: training dataset ended");
        ASSIGN_OR_RETURN(std::vector<Tensor> values, store.Pull(names));
        ASSIGN_OR_RETURN(model::Model::Output out, m->ComputeGradients(values, (*e)[0], (*e)[1]));
        std::vector<strategy::VariableStore::Grad> grads;
        for (size_t i = 0; i < names.size(); ++i) grads.push_back({names[i], std::move(out.grads[i])});
        RETURN_IF_ERROR(store.PushGradients(ctx.closure_id(), static_cast<uint32_t>(s), grads).status());
        RETURN_IF_ERROR(strategy::RecordBatch(out, (*e)[1], job.metrics, stats));
        examples += (*e)[0].dim(0);
      }
      {
        std::lock_guard g(state->mu);
        state->idle.push_back(std::move(m));
      }
      return worker::ClosureResult{StatsToJson(stats, steps, examples), {}};
    });
  }

  int RunChief(const std::vector<std::string>& args, const ChiefContext& ctx) override {
    std::ostream& out = *ctx.out;
    std::ostream& err = *ctx.err;
    auto parsed = Parse(args);
    if (!parsed.ok()) return ReportError(parsed.status(), err);
    const model::JobConfig& job = parsed->job;
    auto fail = [&](const Status& s) { return ReportError(s.WithContext(job.source), err); };

    // Everything that can be wrong with the input is checked before the
    // cluster is touched.
    auto m = model::Model::Create(job.model, job.loss);
    if (!m.ok()) return fail(m.status());
    const std::string data_dir = parsed->flags.Get("data-dir");
    auto train = strategy::LoadExamples(job.data.train, data_dir, (*m)->input_dtype());
    if (!train.ok()) return fail(train.status());
    if (Status s = strategy::CheckExamples(*train, job.data.train.field, (*m)->input_shape(), (*m)->input_dtype()); !s.ok()) {
      return fail(s);
    }
    Shape probe = (*m)->output_shape();
    probe.insert(probe.begin(), 1);
    if (Status s = model::CheckLabels((*m)->training_loss(), probe, *train->labels.Rows(0, 1)); !s.ok()) {
      return fail(s.WithContext(job.data.train.field));
    }
    std::optional<strategy::Examples> eval;
    if (job.data.eval) {
      auto e = strategy::LoadExamples(*job.data.eval, data_dir, (*m)->input_dtype());
      if (!e.ok()) return fail(e.status());
      if (Status s = strategy::CheckExamples(*e, job.data.eval->field, (*m)->input_shape(), (*m)->input_dtype()); !s.ok()) {
        return fail(s);
      }
      eval = std::move(e).value();
    }

    std::vector<std::shared_ptr<ps::PsClient>> clients = ctx.PsClients();
    auto placement = PlaceModel(**m, static_cast<int64_t>(clients.size()), parsed->partitioner);
    if (!placement.ok()) return fail(placement.status());
    strategy::VariableStore store(*placement, clients);
    const std::vector<std::string> names = VariableNames(**m);
    const std::vector<Tensor> init = (*m)->InitialValues(static_cast<uint64_t>(job.seed));
    const int64_t steps_per_epoch = job.steps_per_epoch > 0
                                        ? job.steps_per_epoch
                                        : (train->size() + job.batch_size - 1) / job.batch_size;
    PsTraining t{*parsed, ctx, clients, store, names, init, steps_per_epoch};
    if (Status s = t.Claim(); !s.ok()) return ReportError(s, err);
    out << "fit: " << names.size() << " variables (" << (*m)->ParameterCount() << " parameters) on "
        << clients.size() << " parameter servers, " << ctx.worker_addresses.size() << " workers, partitioner "
        << strategy::PartitionerString(parsed->partitioner) << std::endl;
    if (Status s = t.Start(); !s.ok()) return ReportError(s, err);

    // Workers get the job as JSON, so they need no copy of the file.
    auto doc = ReadJsonFile(job.source);
    if (!doc.ok()) return ReportError(doc.status(), err);
    nlohmann::json dargs{{"config", *doc}, {"source", job.source}, {"data_dir", data_dir},
                         {"partitioner", strategy::PartitionerString(parsed->partitioner)},
                         {"num_ps", static_cast<int64_t>(clients.size())},
                         {"threads", *parsed->flags.GetInt("threads")}};
    if (Status s = t.coord().CreatePerWorkerDataset(kTrainDataset, dargs, kTrainDataset); !s.ok()) {
      return ReportError(s, err);
    }
    if (Status s = t.Train(); !s.ok()) return ReportError(s, err);

    strategy::FitSummary summary = t.Summary(job.name);
    if (eval) {
      auto values = t.FinalValues();
      if (!values.ok()) return ReportError(values.status(), err);
      const auto t0 = Clock::now();
      auto r = Evaluate(**m, job, *eval, *values);
      if (!r.ok()) return ReportError(r.status(), err);
      summary.eval = r->second;
      out << "Evaluation\n"
          << strategy::FormatProgress(r->first, r->first, std::chrono::duration<double>(Clock::now() - t0).count(),
                                      *summary.eval)
          << std::endl;
    }
    const auto st = t.coord().stats();
    nlohmann::json j = summary.ToJson();
    j["strategy"] = "parameter_server";
    j["num_ps"] = ctx.ps_addresses.size();
    j["num_workers"] = ctx.worker_addresses.size();
    j["steps_per_execution"] = parsed->steps_per_execution;
    j["partitioner"] = strategy::PartitionerString(parsed->partitioner);
    j["closures"] = {{"scheduled", st.scheduled}, {"completed", st.completed}, {"retried", st.retried},
                     {"worker_failures", st.worker_failures}};
    j["recovery"] = t.RecoveryJson();
    if (Status s = WriteSummary(parsed->flags, j); !s.ok()) return ReportError(s, err);
    return 0;
  }

  int RunEvaluator(const std::vector<std::string>& args, const EvaluatorContext& ctx) override {
    std::ostream& out = *ctx.out;
    std::ostream& err = *ctx.err;
    auto parsed = Parse(args);
    if (!parsed.ok()) return ReportError(parsed.status(), err);
    const model::JobConfig& job = parsed->job;
    auto fail = [&](const Status& s) { return ReportError(s.WithContext(job.source), err); };
    if (!parsed->checkpoints.enabled()) {
      return ReportError(InvalidArgument("evaluator: flag --checkpoint-dir is required (it evaluates the chief's checkpoints)"), err);
    }
    if (!job.data.eval) return fail(InvalidArgument("data.eval: the evaluator needs an eval dataset"));
    auto m = model::Model::Create(job.model, job.loss);
    if (!m.ok()) return fail(m.status());
    auto eval = strategy::LoadExamples(*job.data.eval, parsed->flags.Get("data-dir"), (*m)->input_dtype());
    if (!eval.ok()) return fail(eval.status());
    if (Status s = strategy::CheckExamples(*eval, job.data.eval->field, (*m)->input_shape(), (*m)->input_dtype()); !s.ok()) {
      return fail(s);
    }
    const std::vector<std::string> names = VariableNames(**m);
    checkpoint::Manager mgr(parsed->checkpoints.dir, static_cast<int>(parsed->checkpoints.keep));
    out << "evaluator: watching " << mgr.dir() << " for checkpoints" << std::endl;
    nlohmann::json results = nlohmann::json::array();
    int64_t last = -1;
    auto last_new = Clock::now();
    std::set<std::string> reported;  // damaged checkpoints already logged
    auto TimedOut = [&](Clock::time_point since) {
      if (parsed->eval_timeout_seconds <= 0 ||
          std::chrono::duration<double>(Clock::now() - since).count() <= parsed->eval_timeout_seconds) {
        return Status::Ok();
      }
      return DeadlineExceeded("evaluator: no new checkpoint in " + mgr.dir() + " for " +
                              parsed->flags.Get("eval-timeout-seconds") + " s; the final one never came");
    };
    while (true) {
      // Verifying reads every file: only worth it when something newer is there.
      const std::optional<int64_t> newest = mgr.NewestCommittedStep();
      if (!newest || *newest <= last) {
        if (Status s = TimedOut(last_new); !s.ok()) return ReportError(s, err);
        std::this_thread::sleep_for(std::chrono::duration<double>(parsed->eval_poll_seconds));
        continue;
      }
      std::ostringstream skipped;
      auto latest = mgr.Latest(&skipped);
      {
        std::istringstream lines(skipped.str());
        for (std::string line; std::getline(lines, line);) {
          if (reported.insert(line).second) out << "evaluator: " << line << std::endl;
        }
      }
      if (!latest.ok()) return ReportError(latest.status(), err);
      if (latest->has_value() && (*latest)->step > last) {
        const checkpoint::Committed& c = **latest;
        auto values = ValuesFromCheckpoint(c, **m, names);
        if (values.ok()) {
          const auto t0 = Clock::now();
          auto r = Evaluate(**m, job, *eval, *values);
          if (!r.ok()) return ReportError(r.status(), err);
          out << "evaluator: checkpoint step " << c.step << (c.final ? " (final)" : "") << "\n"
              << strategy::FormatProgress(r->first, r->first, std::chrono::duration<double>(Clock::now() - t0).count(),
                                          r->second)
              << std::endl;
          if (ctx.metrics) ctx.metrics->RecordEvaluation(c.step, r->second);
          nlohmann::json e{{"step", c.step}, {"final", c.final}};
          for (const auto& [k, v] : r->second) e["eval_" + k] = v;
          results.push_back(e);
          if (Status s = WriteSummary(parsed->flags, {{"evaluations", results}}); !s.ok()) return ReportError(s, err);
          last = c.step;
          last_new = Clock::now();
          if (c.final) return 0;
        } else {
          // Retention may remove a checkpoint between listing and reading.
          out << "evaluator: checkpoint step " << c.step << " not evaluated: " << values.status().message() << std::endl;
        }
      }
      if (Status s = TimedOut(last_new); !s.ok()) return ReportError(s, err);
      std::this_thread::sleep_for(std::chrono::duration<double>(parsed->eval_poll_seconds));
    }
  }
};

}  // namespace

std::shared_ptr<Program> MakeFit() { return std::make_shared<Fit>(); }

}  // namespace tfjob::programs
