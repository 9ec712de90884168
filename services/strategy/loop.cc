#include "services/strategy/loop.h"

#include <chrono>
#include <optional>
#include <ostream>

namespace tfjob::strategy {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int64_t ChunkEnd(int64_t step, int64_t total, const LoopOptions& o) {
  int64_t end = std::min(total, (step / o.steps_per_epoch + 1) * o.steps_per_epoch);
  const auto& c = o.checkpoints;
  if (c.enabled() && c.every_steps > 0) {
    end = std::min(end, (step / c.every_steps + 1) * c.every_steps);
  } else if (c.enabled() && c.every_seconds > 0) {
    // Short chunks, so that a time-based checkpoint is not a whole epoch late.
    end = std::min(end, step + std::max<int64_t>(o.min_chunk_steps, o.steps_per_epoch / 10));
  }
  return end;
}

}  // namespace

int64_t StepsPerEpoch(const model::JobConfig& job, int64_t train_examples) {
  return job.steps_per_epoch > 0 ? job.steps_per_epoch : (train_examples + job.batch_size - 1) / job.batch_size;
}

StatusOr<FitSummary> RunTrainingLoop(Strategy& strategy, const LoopOptions& o) {
  if (o.steps_per_epoch < 1) return InvalidArgument("training loop: no steps per epoch");
  TrainState st;
  RETURN_IF_ERROR(strategy.Start(st));
  const int64_t total = o.epochs * o.steps_per_epoch;
  std::ostream* out = strategy.is_chief() ? o.out : nullptr;
  int64_t announced = 0;
  std::optional<Clock::time_point> chained;  // the last Run's end, when Ahead was said for this chunk
  auto last_ckpt = Clock::now();
  auto stopping = [&] { return o.stop && o.stop->load(); };
  // A signal: keep what was trained, so a restarted task resumes here.
  auto stop = [&]() -> Status {
    std::string saved;
    if (o.checkpoints.enabled() && strategy.is_chief()) {
      Status c = strategy.Checkpoint(st, st.step == total);
      saved = c.ok() ? ", checkpoint written" : ", checkpoint failed: " + c.message();
      if (c.ok() && o.metrics) o.metrics->RecordCheckpoint(st.step);
    }
    if (o.out) *o.out << "fit: stopped by a signal at step " << st.step << saved << std::endl;
    return Cancelled("stopped by a signal at step " + std::to_string(st.step));
  };
  while (st.step < total) {
    if (stopping()) return stop();
    const int64_t epoch = st.step / o.steps_per_epoch + 1;
    if (out && announced != epoch) {
      *out << "Epoch " << epoch << "/" << o.epochs;
      if (st.step % o.steps_per_epoch != 0) *out << " (resumed at step " << st.step % o.steps_per_epoch << ")";
      *out << std::endl;
    }
    announced = epoch;
    const int64_t end = ChunkEnd(st.step, total, o);
    // Without checkpoints nothing needs the state exactly at `end`.
    const bool ahead = !o.checkpoints.enabled() && end < total;
    if (ahead) strategy.Ahead(ChunkEnd(end, total, o));
    const int64_t steps0 = st.step, examples0 = st.examples;
    // A chunk that follows the last at once is timed from its end: work
    // started ahead runs while this loop reports, so that time is training.
    const auto t0 = chained.value_or(Clock::now());
    chained.reset();
    if (Status s = strategy.Run(st, end); !s.ok()) {
      if (stopping()) return stop();
      RETURN_IF_ERROR(strategy.Recover(s, st));
      continue;
    }
    const auto t1 = Clock::now();
    if (ahead) chained = t1;
    const double seconds = std::chrono::duration<double>(t1 - t0).count();
    st.partial_seconds += seconds;
    st.train_seconds += seconds;
    const NamedValues now = st.partial.Values(o.metric_names);
    if (o.metrics && strategy.is_chief()) {
      o.metrics->RecordTraining(st.step - steps0, st.examples - examples0, seconds, now[0].second);
    }
    const bool epoch_end = st.step % o.steps_per_epoch == 0;
    if (out) {
      const int64_t in_epoch = epoch_end ? o.steps_per_epoch : st.step % o.steps_per_epoch;
      *out << FormatProgress(in_epoch, o.steps_per_epoch, st.partial_seconds, now) << std::endl;
    }
    if (epoch_end) {
      st.history.push_back({epoch, st.partial_steps, st.partial_seconds, now});
      st.partial = {};
      st.partial_steps = 0;
      st.partial_seconds = 0;
    }
    if (!o.checkpoints.enabled()) continue;
    const auto& c = o.checkpoints;
    const bool due = st.step == total || (c.every_steps > 0 && st.step % c.every_steps == 0) ||
                     (c.every_seconds > 0 && Since(last_ckpt) >= c.every_seconds);
    if (!due) continue;
    if (Status s = strategy.Checkpoint(st, st.step == total); !s.ok()) {
      RETURN_IF_ERROR(strategy.Recover(s, st));
      continue;
    }
    if (o.metrics && strategy.is_chief()) o.metrics->RecordCheckpoint(st.step);
    last_ckpt = Clock::now();
  }
  if (stopping()) return stop();
  RETURN_IF_ERROR(strategy.Finish(st));
  FitSummary summary;
  summary.history = st.history;
  summary.steps = st.step;
  summary.examples = st.examples;
  summary.train_seconds = st.train_seconds;
  return summary;
}

StatusOr<std::pair<int64_t, NamedValues>> Evaluate(model::Model& m, const model::JobConfig& job, const Examples& eval,
                                                   const std::vector<Tensor>& values, Device device) {
  ASSIGN_OR_RETURN(auto it, EvalPipeline(eval, job.batch_size).MakeIterator());
  BatchStats stats;
  stats.metrics.resize(job.metrics.size());
  int64_t steps = 0;
  if (!device.is_cpu()) {
    std::vector<Tensor> on;
    for (const Tensor& v : values) {
      ASSIGN_OR_RETURN(Tensor d, v.ToDevice(device));
      on.push_back(std::move(d));
    }
    ASSIGN_OR_RETURN(Tensor sums,
                     Tensor::Create(DType::kFloat32, {model::Model::StatsSize(job.metrics.size())}, device));
    while (true) {
      ASSIGN_OR_RETURN(std::optional<data::Element> e, it->Next());
      if (!e) break;
      ASSIGN_OR_RETURN(Tensor x, m.PlaceFeatures((*e)[0], device));
      ASSIGN_OR_RETURN(Tensor targets, m.Targets((*e)[1]));
      ASSIGN_OR_RETURN(Tensor t, targets.ToDevice(device));
      RETURN_IF_ERROR(m.EvaluateOnDevice(on, x, t, job.metrics, sums));
      ++steps;
    }
    ASSIGN_OR_RETURN(Tensor h, sums.ToDevice(Device::Cpu()));
    const float* f = h.data<float>();
    stats.loss = {f[0], f[1]};
    for (size_t k = 0; k < stats.metrics.size(); ++k) stats.metrics[k] = {f[2 + 2 * k], f[3 + 2 * k]};
    return std::make_pair(steps, stats.Values(job.metric_names));
  }
  while (true) {
    ASSIGN_OR_RETURN(std::optional<data::Element> e, it->Next());
    if (!e) break;
    ASSIGN_OR_RETURN(model::Model::Output o, m.Evaluate(values, (*e)[0], (*e)[1]));
    RETURN_IF_ERROR(RecordBatch(o, (*e)[1], job.metrics, stats));
    ++steps;
  }
  return std::make_pair(steps, stats.Values(job.metric_names));
}

}  // namespace tfjob::strategy
