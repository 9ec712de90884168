#include "services/strategy/fit.h"

#include <chrono>
#include <ostream>

#include "services/checkpoint/manager.h"
#include "services/model/keras_weights.h"
#include "services/model/text.h"
#include "services/model/tfjs_export.h"
#include "services/tensor/backend.h"
#include "services/tensor/gemm.h"

namespace tfjob::strategy {

StatusOr<FitSummary> FitAndEvaluate(Strategy& strategy, const model::JobConfig& job, const JobData& data,
                                    const LoopOptions& loop, std::ostream* out) {
  // Errors from training name what failed themselves (a peer, a checkpoint,
  // a data field); the job file is added only to evaluation's.
  ASSIGN_OR_RETURN(FitSummary s, RunTrainingLoop(strategy, loop));
  StatusOr<FitSummary> summary = std::move(s);
  summary->name = job.name;
  if (data.eval && strategy.is_chief()) {
    ASSIGN_OR_RETURN(auto m, model::Model::Create(job.model, job.loss));
    ASSIGN_OR_RETURN(std::vector<Tensor> values, strategy.Values());
    const auto t0 = std::chrono::steady_clock::now();
    auto r = Evaluate(*m, job, *data.eval, values, strategy.eval_device());
    if (!r.ok()) return r.status().WithContext("evaluation").WithContext(job.source);
    summary->eval = r->second;
    if (out) {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      *out << "Evaluation\n" << FormatProgress(r->first, r->first, secs, *summary->eval) << std::endl;
    }
  }
  return summary;
}

namespace {

std::string DeviceLine(const Device& d) {
  device::Backend* b = device::CudaBackend();
  return b && d.is_cuda() ? b->DeviceDescription(d.index) : d.ToString();
}

}  // namespace

StatusOr<std::unique_ptr<FitRun>> FitRun::Prepare(const model::JobConfig& job, const FitOptions& options,
                                                  const FitContext& context) {
  std::unique_ptr<FitRun> run(new FitRun(job, options, context));
  ASSIGN_OR_RETURN(run->entry_,
                   StrategyRegistry::Global().Find(options.strategy.empty() ? "one_device" : options.strategy));
  RETURN_IF_ERROR(run->Load());
  return run;
}

Status FitRun::Load() {
  std::ostream* out = ctx_.out;
  auto with_source = [&](Status s) { return s.WithContext(job_.source); };
  auto m = model::Model::Create(job_.model, job_.loss);
  if (!m.ok()) return with_source(m.status());
  model_ = std::move(m).value();
  const bool computes_here = entry_.placement != DevicePlacement::kOnWorkers;
  if (const Precision prec = model_->compute_precision(); out && computes_here && prec != Precision::kFloat32) {
    *out << "fit: mixed precision: layers compute in " << PrecisionName(prec)
         << (prec == Precision::kBfloat16 ? std::string(" (") + GemmLibrary() + ")"
                                          : std::string(" (emulated: float16's numerics on float32 units)"))
         << "; variables stay float32" << std::endl;
  }
  if (!o_.initial_weights.empty()) {
    auto v = model::ImportTfjs(*model_, o_.initial_weights);
    if (!v.ok()) return v.status().WithContext("flag --initial-weights");
    initial_values_ = std::move(v).value();
  }
  // Only the process that writes checkpoints needs to write there.
  collective::Group* group = ctx_.group;
  if (o_.checkpoints.enabled() && (!group || group->rank() == 0)) {
    RETURN_IF_ERROR(checkpoint::CheckWritable(o_.checkpoints.dir));
  }
  ASSIGN_OR_RETURN(devices_, PlanDevices(o_.device, entry_.placement, o_.replicas, o_.replicas_given,
                                         group ? group->rank() : 0, model_->CheckDeviceSupport()));
  if (out) {
    if (!devices_.note.empty()) *out << devices_.note << std::endl;
    for (const Device& d : devices_.devices) *out << "fit: replica on " << DeviceLine(d) << std::endl;
    if (const std::string text = model::AdaptedTextLine(job_.model); !text.empty()) *out << text << std::endl;
  }
  // A group's members read a sharded source's part each (tf.data's
  // auto-sharding) when the job fixes the steps per epoch, since the parts
  // differ in length; otherwise every member reads everything and takes its
  // rows of each global batch.
  InputShard shard;
  const model::DataSourceSpec& train = job_.data.train;
  sharded_ = group && group->size() > 1 && train.kind == model::DataSourceKind::kTfRecord &&
             train.auto_shard_policy != "OFF" && job_.steps_per_epoch > 0;
  if (sharded_) shard = {group->size(), group->rank()};
  auto data = LoadJobData(job_, o_.data_dir, *model_, shard);
  if (!data.ok()) return with_source(data.status());
  data_ = std::move(data).value();
  if (sharded_ && out) {
    *out << "fit: " << train.field << ": auto_shard_policy " << train.auto_shard_policy << ", this worker reads shard "
         << shard.index << " of " << shard.num_shards << " (" << data_.train.size() << " examples)" << std::endl;
  }
  // Adapted state (Normalization) is part of the initial values a strategy
  // hands out, and of what the chief exports.
  return model_->Adapt(data_.train.features).WithContext(train.field).WithContext(job_.source);
}

StatusOr<FitSummary> FitRun::Train(nlohmann::json* strategy_json) {
  const StrategyArgs args{.job = job_,
                          .options = o_,
                          .context = ctx_,
                          .devices = devices_,
                          .train = data_.train,
                          .sharded_input = sharded_,
                          .model = *model_,
                          .initial_values = initial_values_};
  auto made = entry_.make(args);
  if (!made.ok()) return made.status().WithContext(job_.source);
  std::unique_ptr<Strategy> strategy = std::move(made).value();
  LoopOptions lo;
  lo.epochs = job_.epochs;
  lo.steps_per_epoch = StepsPerEpoch(job_, data_.train.size());
  lo.checkpoints = o_.checkpoints;
  lo.min_chunk_steps = strategy->min_chunk_steps();
  lo.metric_names = job_.metric_names;
  lo.out = ctx_.out;
  lo.metrics = ctx_.metrics;
  lo.stop = ctx_.stop;
  auto summary = FitAndEvaluate(*strategy, job_, data_, lo, ctx_.out);
  // Only a finished run is summarised: a strategy's summary may ask its
  // cluster (the PS strategy asks every PS), which a stopped or failed run
  // may no longer have, and a stop must not wait on it.
  if (summary.ok() && strategy_json) *strategy_json = strategy->SummaryJson();
  if (summary.ok() && (!o_.export_weights.empty() || ctx_.after_fit) && strategy->is_chief()) {
    ASSIGN_OR_RETURN(std::vector<Tensor> values, strategy->Values());
    if (!o_.export_weights.empty()) {
      RETURN_IF_ERROR(model::ExportKerasWeights(*model_, values, o_.export_weights));
      if (ctx_.out) *ctx_.out << "fit: wrote Keras weights to " << o_.export_weights << std::endl;
    }
    if (ctx_.after_fit) RETURN_IF_ERROR(ctx_.after_fit(*model_, values, data_));
  }
  return summary;
}

StatusOr<FitSummary> Fit(const model::JobConfig& job, const FitOptions& options, const FitContext& context,
                         nlohmann::json* strategy_json) {
  ASSIGN_OR_RETURN(std::unique_ptr<FitRun> run, FitRun::Prepare(job, options, context));
  return run->Train(strategy_json);
}

}  // namespace tfjob::strategy
