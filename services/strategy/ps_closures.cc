#include "services/strategy/ps_closures.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <future>
#include <memory>
#include <optional>

#include "common/mutex.h"
#include "services/model/text.h"
#include "services/model/keras_model.h"
#include "services/strategy/devices.h"
#include "services/strategy/input.h"
#include "services/strategy/loss_scale.h"
#include "services/strategy/ps_common.h"
#include "services/strategy/variable_store.h"
#include "services/tensor/threads.h"

namespace tfjob::strategy {
namespace {

using namespace ps_detail;  // NOLINT: the strategy's own shared pieces

std::shared_future<Status> Ready(Status s) {
  std::promise<Status> done;
  done.set_value(std::move(s));
  return done.get_future().share();
}

// A step's gradients waiting to be pushed with the next pull (with
// prefetching), or alone at the closure's end.
struct PendingPush {
  uint64_t closure_id = 0;
  uint64_t generation = 0;
  uint32_t sequence = 0;
  std::vector<VariableStore::Grad> grads;
};

// An exchange with the PS tasks (`push`, if any, and a pull of `items`)
// started now (its requests sent) and finished by whoever first waits on
// the future: the closure's own thread, after computing. No thread of the
// worker's sits between the closure and the PS, so a step hands off to no
// one (on two vCPUs that halt when idle, each wake-up of a thread on the
// other one costs tens of microseconds).
std::shared_future<Status> Later(const std::shared_ptr<VariableStore>& store, const std::optional<PendingPush>& push,
                                 std::vector<VariableStore::Item>& items) {
  auto started = push ? store->Start(push->closure_id, push->sequence, push->grads, push->generation, items)
                      : store->Start(0, 0, {}, 0, items);
  if (!started.ok()) return Ready(started.status());
  return std::async(std::launch::deferred,
                    [store, p = std::move(started).value()]() mutable { return store->Finish(std::move(p)).status(); })
      .share();
}

// One training step's inputs: its batch, and the variable values pulled for
// it (with a row plan, the table holds only the batch's rows).
struct Step {
  data::Element batch;
  Tensor x;                   // features as the model sees them
  std::vector<int64_t> rows;  // the table rows the batch uses, ascending
  int64_t pulled_bytes = 0;   // what the pull moves
  std::shared_ptr<std::vector<Tensor>> values;
  // Shared: when the pull went with the last step's push, the closure
  // waits on it for that push too. Deferred (Later) when prefetching.
  std::shared_future<Status> pulled;
};

// What a worker keeps between closures: the job and the store of its
// variables (set by the dataset function), idle models and value buffers to
// reuse, and the next step's batch and values when prefetching.
struct WorkerFitState {
  Mutex mu;
  std::optional<model::JobConfig> job TFJOB_GUARDED_BY(mu);
  std::vector<std::string> names TFJOB_GUARDED_BY(mu);  // the model's variables, in order
  std::shared_ptr<VariableStore> store TFJOB_GUARDED_BY(mu);
  std::optional<RowPlan> plan TFJOB_GUARDED_BY(mu);
  bool prefetch TFJOB_GUARDED_BY(mu) = true;
  // Where this worker computes (--device: devices.h); the variables are
  // pulled to and the gradients pushed from the host either way.
  Device device TFJOB_GUARDED_BY(mu);
  uint64_t generation TFJOB_GUARDED_BY(mu) = 0;  // bumped each time the dataset is (re)built
  std::vector<std::unique_ptr<model::Model>> idle TFJOB_GUARDED_BY(mu);
  std::vector<std::shared_ptr<std::vector<Tensor>>> free_values TFJOB_GUARDED_BY(mu);
  std::optional<Step> prefetched TFJOB_GUARDED_BY(mu);
  uint64_t prefetched_generation TFJOB_GUARDED_BY(mu) = 0;
  // float16 layers: the worker's loss scale, shared by its closures.
  std::shared_ptr<SharedLossScale> loss_scale TFJOB_GUARDED_BY(mu);
};

// Takes the next batch, renumbers its ids for a row plan, and pulls the
// values it needs: now, or (`split`) started now and finished when the step
// waits for them. With `split`, a `push` waiting goes first in the same
// exchange (taken from `push`: its outcome is then the step's `pulled`
// too); it is left there when the step fails before its pull starts.
StatusOr<Step> PrepareStep(worker::ClosureContext& ctx, WorkerFitState& state, const std::optional<RowPlan>& plan,
                           const std::vector<std::string>& names, const std::shared_ptr<VariableStore>& store,
                           bool split, std::optional<PendingPush>& push) {
  ASSIGN_OR_RETURN(std::optional<data::Element> e, ctx.Next(kTrainDataset));
  if (!e) return OutOfRange("fit: training dataset ended");
  Step step;
  step.batch = std::move(*e);
  step.x = step.batch[0];
  if (plan) {
    const Tensor& x = step.batch[0];
    if (x.dtype() != DType::kInt64) return InvalidArgument("layer \"" + plan->layer + "\": expects int64 ids");
    const int64_t rows = x.dim(0);
    if (x.size() != rows * plan->width) return Internal("fit: features do not match the row plan's input width");
    const int64_t* in = x.data<int64_t>();
    step.rows.clear();
    for (int64_t b = 0; b < rows; ++b) {
      for (int64_t j = 0; j < plan->id_count; ++j) {
        const int64_t i = b * plan->width + plan->id_offset + j;
        if (in[i] < 0 || in[i] >= plan->input_dim) {
          return InvalidArgument("layer \"" + plan->layer + "\": id " + std::to_string(in[i]) + " at position " +
                                 std::to_string(b * plan->id_count + j) + " is outside [0, " +
                                 std::to_string(plan->input_dim) + ")");
        }
        step.rows.push_back(in[i]);
      }
    }
    std::sort(step.rows.begin(), step.rows.end());
    step.rows.erase(std::unique(step.rows.begin(), step.rows.end()), step.rows.end());
    if (static_cast<int64_t>(step.rows.size()) > plan->capacity) {
      return Internal("fit: a batch uses " + std::to_string(step.rows.size()) + " rows, more than " +
                      std::to_string(plan->capacity));
    }
    // The ids renumbered to the compact table's rows; the rest of the input as it is.
    ASSIGN_OR_RETURN(step.x, Tensor::CreateUninitialized(DType::kInt64, x.shape()));
    int64_t* out = step.x.data<int64_t>();
    std::copy_n(in, x.size(), out);
    for (int64_t b = 0; b < rows; ++b) {
      for (int64_t j = 0; j < plan->id_count; ++j) {
        const int64_t i = b * plan->width + plan->id_offset + j;
        out[i] = std::lower_bound(step.rows.begin(), step.rows.end(), in[i]) - step.rows.begin();
      }
    }
  }
  {
    MutexLock l(state.mu);
    if (!state.free_values.empty()) {
      step.values = std::move(state.free_values.back());
      state.free_values.pop_back();
    }
  }
  if (!step.values) step.values = std::make_shared<std::vector<Tensor>>(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    ASSIGN_OR_RETURN(const PlacedVariable* v, store->placement().Find(names[i]));
    const int64_t elems =
        plan && i == plan->var ? static_cast<int64_t>(step.rows.size()) * v->shape[1] : NumElements(v->shape);
    step.pulled_bytes += elems * static_cast<int64_t>(DTypeSize(v->dtype));
  }
  // The pull's destinations: the batch's rows land in the top of the
  // compact table (Start and Fetch take views of them).
  std::vector<VariableStore::Item> items;
  Tensor table_rows;
  for (size_t i = 0; i < names.size(); ++i) {
    Tensor& value = (*step.values)[i];
    if (plan && i == plan->var) {
      if (value.rank() != 2 || value.dim(0) != plan->capacity) {
        ASSIGN_OR_RETURN(const PlacedVariable* v, store->placement().Find(names[i]));
        ASSIGN_OR_RETURN(value, Tensor::CreateUninitialized(v->dtype, {plan->capacity, v->shape[1]}));
      }
      table_rows = *value.Rows(0, static_cast<int64_t>(step.rows.size()));
      items.push_back({names[i], step.rows, &table_rows});
    } else {
      items.push_back({names[i], std::nullopt, &value});
    }
  }
  if (!split) {
    step.pulled = Ready(store->Fetch(items));
    return step;
  }
  step.pulled = Later(store, push, items);
  push.reset();  // sent with this pull (or failed with it: the step's error)
  return step;
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

// What the closures of a new dataset would otherwise make on their first
// steps, made while the dataset is: a model each, buffers for the values
// of the steps in flight, and data-plane connections (with their
// shared-memory regions) to every PS for the exchanges those steps start.
struct Warmed {
  std::vector<std::unique_ptr<model::Model>> models;
  std::vector<std::shared_ptr<std::vector<Tensor>>> values;
};

// A closure's model: with a row plan, the compact table.
StatusOr<std::unique_ptr<model::Model>> WorkerModel(const model::JobConfig& job, const std::optional<RowPlan>& plan) {
  model::ModelSpec spec = job.model;
  if (plan) spec.layers[plan->layer_index].input_dim = plan->capacity;
  return model::Model::Create(spec, job.loss);
}

// A model and value buffers for each of the `closures` the coordinator runs
// at once on this worker (the dataset's closures_per_worker:
// coordinator::Options::inflight_per_worker; one more sent ahead waits for
// its turn, and takes a running one's model and buffers when it ends): each
// has a step computing and the next one's exchange started, and the last
// to end leaves one pulled ahead. Best effort: what cannot be made now (a
// PS not up yet) the closures make themselves, and meet its error there.
Warmed WarmUp(const model::JobConfig& job, const std::optional<RowPlan>& plan, const std::vector<std::string>& names,
              const Placement& placement, const std::vector<std::shared_ptr<ps::PsClient>>& ps, bool prefetch,
              int closures) {
  Warmed w;
  for (int i = 0; i < closures; ++i) {
    auto m = WorkerModel(job, plan);
    if (!m.ok()) return w;
    w.models.push_back(std::move(m).value());
  }
  // Without prefetching a closure holds one step's values at a time.
  const int buffers = prefetch ? 2 * closures + 1 : closures;
  for (int i = 0; i < buffers; ++i) {
    auto values = std::make_shared<std::vector<Tensor>>();
    for (size_t k = 0; k < names.size(); ++k) {
      auto v = placement.Find(names[k]);
      if (!v.ok()) return w;
      std::vector<int64_t> shape = (*v)->shape;
      if (plan && k == plan->var) shape[0] = plan->capacity;
      auto t = Tensor::Create((*v)->dtype, shape);
      if (!t.ok()) return w;
      values->push_back(std::move(t).value());
    }
    w.values.push_back(std::move(values));
  }
  // Briefly: a PS that does not answer now must not hold up the dataset.
  for (const auto& client : ps) (void)client->Open(2 * closures, std::chrono::seconds(1));
  return w;
}

// The training dataset function: the job (with its model, or Keras JSON
// beside it), the variables' placement and this worker's shard of the
// input; what the closures keep starts again for the new dataset.
StatusOr<data::Dataset> BuildTrainDataset(WorkerFitState& state, const worker::WorkerEnv& env,
                                          const nlohmann::json& a) {
  std::optional<model::ModelSpec> keras;
  if (a.contains("keras_model") && !a["keras_model"].is_null()) {
    ASSIGN_OR_RETURN(keras, model::ParseKerasModel(a["keras_model"], a.value("keras_model_source", "keras model")));
  }
  ASSIGN_OR_RETURN(model::JobConfig job,
                   model::ParseJobConfig(a.at("config"), a.at("source").get<std::string>(), keras ? &*keras : nullptr));
  if (a.contains("text")) RETURN_IF_ERROR(model::ApplyAdaptedText(a["text"], job.model));
  if (a.contains("layer_policies")) {
    const nlohmann::json& policies = a["layer_policies"];
    if (!policies.is_array() || policies.size() != job.model.layers.size()) {
      return InvalidArgument("layer_policies: one per layer expected, got " + policies.dump());
    }
    for (size_t l = 0; l < policies.size(); ++l) {
      if (!policies[l].is_string()) return InvalidArgument("layer_policies: " + policies[l].dump() + " is not a name");
      ASSIGN_OR_RETURN(job.model.layers[l].precision, ParsePrecision(policies[l].get<std::string>()));
    }
    for (const model::LayerSpec& l : job.model.layers) {
      RETURN_IF_ERROR(CpuPathFor(l.precision).WithContext("layer \"" + l.name + "\""));
    }
  }
  SetComputeThreads(static_cast<int>(a.value("threads", int64_t{1})));
  ASSIGN_OR_RETURN(Partitioner part, ParsePartitioner(a.at("partitioner").get<std::string>()));
  ASSIGN_OR_RETURN(auto m, model::Model::Create(job.model, job.loss));
  ASSIGN_OR_RETURN(Placement placement, PlaceModel(*m, a.at("num_ps").get<int64_t>(), part));
  // Each worker reads its shard of a multi-file source (auto_shard_policy).
  const InputShard shard{a.value("num_workers", int64_t{1}), env.worker_index};
  ASSIGN_OR_RETURN(Examples ex, LoadExamples(job.data.train, a.at("data_dir").get<std::string>(), *m, shard));
  std::optional<RowPlan> plan = PlanRows(job, *m, a.value("pull_rows", true));
  ASSIGN_OR_RETURN(DeviceChoice choice, ParseDeviceChoice(a.value("device", std::string("auto"))));
  ASSIGN_OR_RETURN(DevicePlan devices, PlanDevices(choice, DevicePlacement::kByRank, 1, false,
                                                   static_cast<int>(env.worker_index), m->CheckDeviceSupport()));
  // Each worker shuffles its own way, as per-worker datasets do in TF.
  job.seed += 7919 * (env.worker_index + 1);
  // Batches are made by the closure that takes them, not ahead on a thread:
  // the worker's other closure keeps the cores busy meanwhile, and a
  // prefetch thread would be one more hand-off a step (and a thread
  // started each epoch under Repeat).
  data::Dataset ds = TrainingPipeline(ex, job, false).Repeat();
  auto store = std::make_shared<VariableStore>(std::move(placement), env.ps);
  std::vector<std::string> names = VariableNames(*m);
  const bool prefetch = a.value("prefetch", true);
  // What a chief of an older build does not send: its number then.
  const int closures = static_cast<int>(std::clamp<int64_t>(a.value("closures_per_worker", int64_t{2}), 1, 64));
  Warmed warmed = WarmUp(job, plan, names, store->placement(), env.ps, prefetch, closures);
  std::shared_ptr<SharedLossScale> loss_scale;
  if (m->compute_precision() == Precision::kFloat16) {
    loss_scale = std::make_shared<SharedLossScale>(DynamicLossScale::OptionsOf(job.optimizer));
  }
  MutexLock l(state.mu);
  state.loss_scale = std::move(loss_scale);
  state.job = job;
  state.names = std::move(names);
  state.store = std::move(store);
  state.plan = plan;
  state.prefetch = prefetch;
  state.device = devices.devices.empty() ? Device::Cpu() : devices.devices[0];
  ++state.generation;
  state.idle = std::move(warmed.models);
  state.free_values = std::move(warmed.values);
  state.prefetched.reset();
  return ds;
}

// One run of the training closure: a few steps (pull, compute, push) of
// this worker's dataset, with the worker's state taken at the start and
// its model and the step pulled ahead given back at the end.
class TrainClosure {
 public:
  TrainClosure(WorkerFitState& state, worker::ClosureContext& ctx) : state_(state), ctx_(ctx) {}

  StatusOr<worker::ClosureResult> Run(const nlohmann::json& a) {
    Stopwatch closure;
    RETURN_IF_ERROR(TakeState());
    RETURN_IF_ERROR(Prepare());
    const int64_t steps = a.value("steps", int64_t{1});
    Status ran = RunSteps(steps);
    if (ran.ok() && prefetch_ && !cur_) PullAheadWithLastPush();
    FlushPush();
    Status failed = WaitForPushes(ran);
    if (failed.ok() && !device_.is_cpu()) failed = ReadDeviceStats();
    GiveBack(failed.ok());
    RETURN_IF_ERROR(failed);
    nlohmann::json result = StatsToJson(stats_, steps, examples_);
    result["pulled_bytes"] = pulled_bytes_;
    if (loss_scale_) {
      result["skipped_steps"] = skipped_steps_;
      result["loss_scale"] = loss_scale_->scale();
    }
    closure.Lap(time_.closure);
    result["step_seconds"] = time_.ToJson();
    return worker::ClosureResult{result, {}};
  }

 private:
  // What this closure needs of the worker's state, an idle model, and the
  // step another closure pulled ahead if it is of this dataset.
  Status TakeState() TFJOB_EXCLUDES(state_.mu) {
    MutexLock l(state_.mu);
    if (!state_.job) return FailedPrecondition("fit: this worker has no training dataset yet");
    job_ = *state_.job;
    names_ = state_.names;
    plan_ = state_.plan;
    store_ = state_.store;
    prefetch_ = state_.prefetch;
    device_ = state_.device;
    generation_ = state_.generation;
    loss_scale_ = state_.loss_scale;
    if (!state_.idle.empty()) {
      m_ = std::move(state_.idle.back());
      state_.idle.pop_back();
    }
    if (state_.prefetched && state_.prefetched_generation == generation_) cur_ = std::move(state_.prefetched);
    state_.prefetched.reset();
    return Status::Ok();
  }

  // A model when no idle one was left, and the closure's loss and metric
  // sums (on a GPU they accumulate there).
  Status Prepare() {
    if (!m_) {
      ASSIGN_OR_RETURN(m_, WorkerModel(job_, plan_));
    }
    stats_.metrics.resize(job_.metrics.size());
    if (!device_.is_cpu()) {
      ASSIGN_OR_RETURN(device_stats_,
                       Tensor::Create(DType::kFloat32, {model::Model::StatsSize(job_.metrics.size())}, device_));
    }
    return Status::Ok();
  }

  // The first error stops the closure.
  Status RunSteps(int64_t steps) {
    Status failed;
    Stopwatch w;
    for (int64_t s = 0; s < steps && failed.ok(); ++s) {
      if (!cur_) {
        auto prepared = PrepareStep(ctx_, state_, plan_, names_, store_, prefetch_, pending_);
        if (!prepared.ok()) return prepared.status();
        cur_ = std::move(prepared).value();
      }
      w.Lap(time_.input);
      if (Status pulled = cur_->pulled.get(); !pulled.ok()) return pulled;
      w.Lap(time_.pull_wait);
      // Prefetch: the next step's batch and values come in while this one
      // computes; after the last step, the next closure's come with its
      // push (PullAheadWithLastPush).
      std::optional<Step> next;
      Status next_status;
      if (prefetch_ && s + 1 < steps) {
        // The previous step's push goes with this pull, in one exchange.
        const bool pushing = pending_.has_value();
        auto prepared = PrepareStep(ctx_, state_, plan_, names_, store_, prefetch_, pending_);
        if (prepared.ok()) {
          next = std::move(prepared).value();
          if (pushing && !pending_) pushes_.push_back(next->pulled);
        } else {
          next_status = prepared.status();
        }
        FlushPush();  // when the pull did not take it
      }
      w.Lap(time_.input);
      if (loss_scale_) m_->set_loss_scale(loss_scale_->scale());
      auto out = device_.is_cpu()
                     ? m_->ComputeGradients(*cur_->values, cur_->x, cur_->batch[1])
                     : ComputeOnDevice(*m_, job_, device_, *cur_->values, cur_->x, cur_->batch[1], device_stats_);
      if (!out.ok()) {
        Recycle(*cur_);
        cur_ = std::move(next);
        return out.status();
      }
      w.Lap(time_.compute);
      // float16: a step whose gradients overflowed pushes nothing, and
      // halves the worker's scale (Keras' LossScaleOptimizer).
      bool finite = true;
      if (loss_scale_) {
        finite = model::AllFinite(out->grads);
        loss_scale_->Update(finite);
        if (!finite) ++skipped_steps_;
      }
      failed = finite ? Push(*out, static_cast<uint32_t>(s)) : Status::Ok();
      w.Lap(time_.push);
      if (failed.ok() && device_.is_cpu()) failed = RecordBatch(*out, cur_->batch[1], job_.metrics, stats_);
      examples_ += cur_->batch[0].dim(0);
      pulled_bytes_ += cur_->pulled_bytes;
      Recycle(*cur_);
      cur_ = std::move(next);
      if (failed.ok()) failed = next_status;
      w.Lap(time_.record);
    }
    return failed;
  }

  // Pushes the current step's gradients. When prefetching, they wait
  // for the next step's pull to go with it (FlushPush sends them alone);
  // WaitForPushes has the outcome.
  Status Push(model::Model::Output& out, uint32_t sequence) {
    std::vector<VariableStore::Grad> grads;
    for (size_t i = 0; i < names_.size(); ++i) grads.push_back({names_[i], std::move(out.grads[i])});
    if (plan_ && grads[plan_->var].grad.sparse) {
      // Back from the compact table's rows to the real table's.
      model::Gradient& g = grads[plan_->var].grad;
      Tensor global = Tensor::Zeros(DType::kInt64, g.indices.shape());
      const int64_t* local = g.indices.data<int64_t>();
      for (int64_t i = 0; i < g.indices.size(); ++i)
        global.data<int64_t>()[i] = cur_->rows[static_cast<size_t>(local[i])];
      g.indices = global;
    }
    if (!prefetch_) return store_->PushGradients(ctx_.closure_id(), sequence, grads, ctx_.generation()).status();
    FlushPush();  // never two waiting: the order of pushes is kept
    pending_ = PendingPush{ctx_.closure_id(), ctx_.generation(), sequence, std::move(grads)};
    return Status::Ok();
  }

  // The next closure's first step, pulled with this closure's last push in
  // one exchange: the closure waits for that push anyway, so the pull costs
  // no wait of its own, and the next closure starts from values that have
  // every update of this one. Left to FlushPush when the step cannot be
  // prepared; the next closure then meets the error itself.
  void PullAheadWithLastPush() {
    const bool pushing = pending_.has_value();
    auto prepared = PrepareStep(ctx_, state_, plan_, names_, store_, prefetch_, pending_);
    if (!prepared.ok()) return;
    cur_ = std::move(prepared).value();
    if (pushing && !pending_) pushes_.push_back(cur_->pulled);
  }

  // Starts the push waiting, if any, on its own.
  void FlushPush() {
    if (!pending_) return;
    std::vector<VariableStore::Item> nothing;
    pushes_.push_back(Later(store_, pending_, nothing));
    pending_.reset();
  }

  // Every push in flight must have landed before the closure says it is
  // done, so a worker killed at any point loses no update (the re-run
  // closure re-sends them, and the PS applies each once).
  Status WaitForPushes(Status s) {
    Stopwatch w;
    for (auto& f : pushes_) {
      Status p = f.get();
      if (s.ok()) s = p;
    }
    w.Lap(time_.push_wait);
    return s;
  }

  Status ReadDeviceStats() {
    ASSIGN_OR_RETURN(Tensor sums, device_stats_.ToDevice(Device::Cpu()));
    const float* f = sums.data<float>();
    stats_.loss = {f[0], f[1]};
    for (size_t k = 0; k < stats_.metrics.size(); ++k) stats_.metrics[k] = {f[2 + 2 * k], f[3 + 2 * k]};
    if (!std::isfinite(f[0])) return InvalidArgument("loss is " + std::to_string(f[0]) + " (diverged)");
    return Status::Ok();
  }

  // A step's value buffers, for the next step of the same dataset.
  void Recycle(Step& step) TFJOB_EXCLUDES(state_.mu) {
    if (!step.values) return;
    MutexLock l(state_.mu);
    if (state_.generation == generation_) state_.free_values.push_back(std::move(step.values));
  }

  void GiveBack(bool ok) TFJOB_EXCLUDES(state_.mu) {
    MutexLock l(state_.mu);
    // A model (and what was pulled ahead) of an older dataset is dropped:
    // its table may have another shape.
    if (state_.generation == generation_) state_.idle.push_back(std::move(m_));
    // What was pulled ahead is the next closure's first step.
    if (cur_ && ok && state_.generation == generation_) {
      state_.prefetched = std::move(cur_);
      state_.prefetched_generation = generation_;
    }
  }

  WorkerFitState& state_;
  worker::ClosureContext& ctx_;
  // Taken from state_ by TakeState.
  model::JobConfig job_;
  std::vector<std::string> names_;
  std::optional<RowPlan> plan_;
  std::shared_ptr<VariableStore> store_;
  bool prefetch_ = true;
  Device device_;
  uint64_t generation_ = 0;
  std::unique_ptr<model::Model> m_;
  std::optional<Step> cur_;  // the step to compute next
  // The closure's progress.
  BatchStats stats_;
  Tensor device_stats_;
  int64_t examples_ = 0;
  int64_t pulled_bytes_ = 0;
  std::shared_ptr<SharedLossScale> loss_scale_;  // float16 layers only
  int64_t skipped_steps_ = 0;
  std::optional<PendingPush> pending_;  // when prefetching: see Push
  std::vector<std::shared_future<Status>> pushes_;
  PsStepSeconds time_;
};

}  // namespace

Status RegisterParameterServerClosures(worker::Registry& r) {
  auto state = std::make_shared<WorkerFitState>();
  RETURN_IF_ERROR(r.AddDataset(kTrainDataset, [state](const worker::WorkerEnv& env, const nlohmann::json& a) {
    return BuildTrainDataset(*state, env, a);
  }));
  return r.AddClosure(kTrainClosure,
                      [state](worker::ClosureContext& ctx, const nlohmann::json& a, const std::vector<Tensor>&)
                          -> StatusOr<worker::ClosureResult> { return TrainClosure(*state, ctx).Run(a); });
}

}  // namespace tfjob::strategy
