// fit's command line: the flags, parsed once into Parsed (the job and the
// typed FitOptions), the usage text, and the summary file.
#include "services/programs/fit_flags.h"

#include <iostream>

#include "common/files.h"
#include "common/json_reader.h"
#include "services/collective/nccl.h"
#include "services/model/keras_model.h"
#include "services/model/text.h"
#include "services/model/tfjs_export.h"
#include "services/tensor/backend.h"
#include "services/tensor/gemm.h"
#include "services/tensor/precision.h"
#include "services/tensor/threads.h"

namespace tfjob::programs::fit {

Flags FitFlags() {
  Flags f;
  f.Value("config", "job description (JSON)", "", true)
      .Value("keras-model", "the model as Keras' model.to_json() writes it (the job then has no \"model\")")
      .Value("export-weights", "after training, write the variables as Keras 3 weights (OUT.weights.h5)")
      .Value("export-tfjs", "after training, write the model for TensorFlow.js' tf.loadLayersModel (DIR/model.json)")
      .Value("initial-weights",
             "start from the weights of a TF.js layers model (DIR/model.json: what --export-tfjs or TF.js' "
             "model.save writes), matched to the variables by name")
      .Value("predict-out",
             "after training, write the first --predict-examples eval examples and their predictions (JSON)")
      .Value("predict-examples", "how many examples --predict-out writes", "16")
      .Value("data-dir", "directory that relative data paths resolve against", ".")
      .Value("summary-json", "write the run's summary here")
      // One by default: a small model gains nothing from more, and OpenMP's
      // spinning threads slow down badly on a shared, loaded machine.
      .Value("threads", "compute threads for matrix products", "1")
      .Value("epochs", "override the job's epochs", "0")
      .Value("mixed-precision",
             "bfloat16 or float16: every layer's dtype policy becomes mixed_bfloat16 / mixed_float16 (Keras' "
             "set_global_policy; variables stay float32)")
      .Value("strategy",
             "one_device, mirrored, multi_worker_mirrored, central_storage or parameter_server "
             "(default: from the cluster)")
      .Value("replicas",
             "replicas in this process (mirrored, central_storage; default: one per GPU with a GPU, else 1)", "1")
      .Value("device", "cpu, gpu or auto (a GPU when one is visible)", "auto")
      .Value("communication", "collective implementation: ring, nccl or auto", "auto")
      .Value("collective-timeout-seconds", "a group member silent this long is declared hung", "30")
      .Value("rejoin-timeout-seconds",
             "how long a group waits for every member to (re)join "
             "(default: TFJOB_CONNECT_TIMEOUT_SECONDS, else 300)")
      .Value("bucket-bytes", "tensors smaller than this are fused into one all-reduce", "4194304")
      .Value("steps-per-execution", "training steps per scheduled closure (parameter-server mode)", "1")
      .Value("closure-timeout-seconds", "deadline of one closure on a worker (parameter-server mode)", "300")
      .Value("closure-max-attempts", "a closure that failed this many times fails the job (parameter-server mode)", "5")
      .Value("partitioner", "none, fixed:N, min:BYTES[:MAX] or max:BYTES[:MAX] (parameter-server mode)", "none")
      .Value("ps-prefetch",
             "true: workers pull the next step's variables while a step computes and push without "
             "waiting (staleness of one step); false: pull, compute, push in turn (parameter-server mode)",
             "true")
      .Value("ps-closures-per-worker",
             "closures running at once on each worker: N, or auto (3 in the whole cluster when a closure is "
             "one step, --steps-per-execution 1, 2 otherwise, spread over the workers, at least 1 each) "
             "(parameter-server mode)",
             "auto")
      .Value("ps-pull",
             "rows: with a first-layer Embedding, workers pull only the rows a batch uses; "
             "full: whole tables every step (parameter-server mode)",
             "rows")
      .Value("checkpoint-dir", "keep checkpoints here (shared by the writer and the evaluator)")
      .Value("checkpoint-every-steps",
             "checkpoint after this many training steps (0: only per --checkpoint-every-seconds)", "0")
      .Value("checkpoint-every-seconds", "checkpoint when this much time has passed since the last one (0: off)", "0")
      .Value("checkpoint-keep", "how many checkpoints to keep", "3")
      .Bool("ignore-damaged-checkpoints",
            "when every checkpoint in --checkpoint-dir is damaged, train from step 0 "
            "(default: fail, naming them)")
      .Value("eval-poll-seconds", "evaluator: how often to look for a new checkpoint", "0.5")
      .Value("eval-timeout-seconds", "evaluator: give up when no new checkpoint came for this long (0: never)", "0")
      .Value("shutdown-grace-seconds",
             "after SIGTERM/SIGINT: stop at the next step, checkpoint, exit 143; exit 143 anyway after this long",
             "25");
  return f;
}

namespace {

StatusOr<std::chrono::milliseconds> Seconds(const Flags& f, const std::string& name) {
  ASSIGN_OR_RETURN(double s, f.GetDouble(name));
  if (!(s > 0) || s > 1e6) return InvalidArgument("flag --" + name + ": must be a positive number of seconds");
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

// Where the job's layers will compute: the GPUs PlanDevices (strategy/
// devices.h) will give them, or the host. kUnknown: --device gpu with no
// GPU visible, which PlanDevices refuses itself, saying why.
enum class Compute { kHost, kGpus, kUnknown };

Compute WhereComputed(const Parsed& p) {
  const strategy::DeviceChoice choice = p.options.device;
  if (choice == strategy::DeviceChoice::kCpu) return Compute::kHost;
  device::Backend* gpu = device::CudaBackend();
  if (!gpu || gpu->DeviceCount() == 0)
    return choice == strategy::DeviceChoice::kGpu ? Compute::kUnknown : Compute::kHost;
  if (choice == strategy::DeviceChoice::kGpu) return Compute::kGpus;
  // auto stays on the host for a model the GPU cannot compute.
  auto m = model::Model::Create(p.job.model, p.job.loss);
  return m.ok() && (*m)->CheckDeviceSupport().ok() ? Compute::kGpus : Compute::kHost;
}

// What a refusal for `q` names: the flag, or the first layer computing in
// `q` (a model JSON's own policy); "" when no layer computes in `q`.
std::string PrecisionContext(const Parsed& p, Precision q) {
  for (const model::LayerSpec& l : p.job.model.layers) {
    if (l.precision != q) continue;
    if (p.flags.Has("mixed-precision")) return "flag --mixed-precision";
    return "layer \"" + l.name + "\" (dtype " + std::string(PolicyName(q)) + ")";
  }
  return "";
}

// A job whose layers compute in a precision the device it will run on has
// no path for stops here, in one line (exit 2): on a GPU its compute
// capability decides (GpuPathFor, for every visible GPU, since the
// strategies may place replicas on any), on the host its CPU (CpuPathFor).
// Asked once, here, where both the precision and the device are known; a
// float32 job never asks (nor touches the GPU driver).
Status CheckPrecisionPath(const Parsed& p) {
  if (model::LowestPrecision(p.job.model.layers) == Precision::kFloat32) return Status::Ok();
  const Compute where = WhereComputed(p);
  if (where == Compute::kUnknown) return Status::Ok();
  const int gpus = where == Compute::kGpus ? device::CudaBackend()->DeviceCount() : 0;
  for (Precision q : {Precision::kBfloat16, Precision::kFloat16}) {
    const std::string context = PrecisionContext(p, q);
    if (context.empty()) continue;
    if (where == Compute::kHost) RETURN_IF_ERROR(CpuPathFor(q).WithContext(context));
    for (int i = 0; i < gpus; ++i) RETURN_IF_ERROR(GpuPathFor(q, i).WithContext(context));
  }
  return Status::Ok();
}

// The summary JSON: the run's figures, then the strategy's own fields.
}  // namespace

nlohmann::json SummaryJson(const strategy::FitSummary& s, const nlohmann::json& strategy_json, const Parsed& p) {
  nlohmann::json j = s.ToJson();
  j.update(strategy_json);
  j["threads"] = *p.flags.GetInt("threads");
  j["cpu_matrix_products"] = GemmLibrary();  // services/tensor/gemm.h
  // The lowest precision a layer computes in (Keras' policy name).
  j["dtype_policy"] = std::string(PolicyName(model::LowestPrecision(p.job.model.layers)));
  // The model's matrix work per example (Model::Flops), for a roofline:
  // examples/s times this is the achieved rate.
  if (auto m = model::Model::Create(p.job.model, p.job.loss); m.ok()) {
    nlohmann::json layers = nlohmann::json::array();
    int64_t forward = 0, backward = 0;
    for (const auto& f : (*m)->Flops()) {
      layers.push_back({{"name", f.name}, {"type", f.type}, {"forward", f.forward}, {"backward", f.backward}});
      if (f.input_channels > 0) layers.back()["input_channels"] = f.input_channels;
      forward += f.forward;
      backward += f.backward;
    }
    j["flops_per_example"] = {{"forward", forward}, {"backward", backward}, {"layers", layers}};
  }
  return j;
}

StatusOr<strategy::AfterFitFn> AfterFit(const Parsed& p, std::ostream& out) {
  using strategy::AfterFitFn;
  if (!p.flags.Has("export-tfjs") && !p.flags.Has("predict-out")) return AfterFitFn();
  nlohmann::json topology;
  if (p.flags.Has("export-tfjs")) {
    nlohmann::json keras;
    if (p.flags.Has("keras-model")) {
      ASSIGN_OR_RETURN(keras, ReadJsonFile(p.flags.Get("keras-model")));
    }
    ASSIGN_OR_RETURN(topology, model::TfjsTopology(p.job.model, keras.is_null() ? nullptr : &keras));
  }
  ASSIGN_OR_RETURN(int64_t n, p.flags.GetInt("predict-examples"));
  if (n < 1) return InvalidArgument("flag --predict-examples: must be >= 1");
  return AfterFitFn([&p, &out, topology, n](model::Model& m, const std::vector<Tensor>& values,
                                            const strategy::JobData& data) -> Status {
    if (p.flags.Has("export-tfjs")) {
      const std::string dir = p.flags.Get("export-tfjs");
      RETURN_IF_ERROR(model::ExportTfjs(m, values, topology, dir));
      out << "fit: wrote the TF.js model to " << dir << "/model.json" << std::endl;
    }
    if (p.flags.Has("predict-out")) {
      const Tensor& x = data.eval ? data.eval->features : data.train.features;
      RETURN_IF_ERROR(model::WritePredictions(m, values, x, n, p.flags.Get("predict-out")));
      out << "fit: wrote predictions to " << p.flags.Get("predict-out") << std::endl;
    }
    return Status::Ok();
  });
}

std::string Usage() {
  return "fit --config FILE [--keras-model MODEL.json] [--data-dir DIR] [--summary-json OUT] [--threads N] [--epochs "
         "N]\n"
         "      [--mixed-precision bfloat16|float16]\n"
         "      [--export-weights OUT.weights.h5] [--export-tfjs DIR] [--initial-weights DIR]\n"
         "      [--predict-out OUT.json [--predict-examples N]]\n"
         "      [--strategy one_device|mirrored|multi_worker_mirrored|central_storage|parameter_server]\n"
         "      [--replicas N] [--device cpu|gpu|auto] [--communication ring|nccl|auto] [--collective-timeout-seconds "
         "S]\n"
         "      [--rejoin-timeout-seconds S] [--bucket-bytes B]\n"
         "      [--steps-per-execution K] [--partitioner SPEC] [--closure-timeout-seconds S] [--closure-max-attempts "
         "K]\n"
         "      [--ps-prefetch true|false] [--ps-pull rows|full] [--ps-closures-per-worker N|auto]\n"
         "      [--checkpoint-dir DIR [--checkpoint-every-steps N] [--checkpoint-every-seconds S] [--checkpoint-keep "
         "K]\n"
         "                            [--ignore-damaged-checkpoints]]\n"
         "      evaluator role: [--eval-poll-seconds S] [--eval-timeout-seconds S]\n"
         "      [--shutdown-grace-seconds S]";
}

StatusOr<Parsed> Parse(const std::vector<std::string>& args) {
  Parsed p;
  p.flags = FitFlags();
  RETURN_IF_ERROR(p.flags.Parse(args));
  strategy::FitOptions& o = p.options;
  ASSIGN_OR_RETURN(int64_t threads, p.flags.GetInt("threads"));
  if (threads < 1) return InvalidArgument("flag --threads: must be >= 1");
  o.threads = static_cast<int>(threads);
  SetComputeThreads(o.threads);
  o.data_dir = p.flags.Get("data-dir");
  if (p.flags.Has("keras-model")) o.keras_model = p.flags.Get("keras-model");
  if (p.flags.Has("export-weights")) o.export_weights = p.flags.Get("export-weights");
  if (p.flags.Has("initial-weights")) o.initial_weights = p.flags.Get("initial-weights");
  ASSIGN_OR_RETURN(int64_t epochs, p.flags.GetInt("epochs"));
  if (epochs < 0) return InvalidArgument("flag --epochs: must be >= 0");
  ASSIGN_OR_RETURN(o.steps_per_execution, p.flags.GetInt("steps-per-execution"));
  if (o.steps_per_execution < 1) return InvalidArgument("flag --steps-per-execution: must be >= 1");
  ASSIGN_OR_RETURN(o.partitioner, strategy::ParsePartitioner(p.flags.Get("partitioner")));
  const std::string prefetch = p.flags.Get("ps-prefetch"), pull = p.flags.Get("ps-pull");
  if (prefetch != "true" && prefetch != "false") {
    return InvalidArgument("flag --ps-prefetch: \"" + prefetch + "\" is not true or false");
  }
  if (pull != "rows" && pull != "full") return InvalidArgument("flag --ps-pull: \"" + pull + "\" is not rows or full");
  if (const std::string n = p.flags.Get("ps-closures-per-worker"); n != "auto") {
    ASSIGN_OR_RETURN(int64_t closures, p.flags.GetInt("ps-closures-per-worker"));
    if (closures < 1 || closures > 64)
      return InvalidArgument("flag --ps-closures-per-worker: must be auto or in 1..64");
    o.ps_closures_per_worker = static_cast<int>(closures);
  }
  o.ps_prefetch = prefetch == "true";
  o.ps_pull_rows = pull == "rows";
  ASSIGN_OR_RETURN(o.closure_timeout, Seconds(p.flags, "closure-timeout-seconds"));
  ASSIGN_OR_RETURN(int64_t attempts, p.flags.GetInt("closure-max-attempts"));
  if (attempts < 1 || attempts > 1000) return InvalidArgument("flag --closure-max-attempts: must be in 1..1000");
  o.closure_max_attempts = static_cast<int>(attempts);
  // A name the registry does not know is one line listing the ones it does.
  bool replicas_in_process = false;
  if (p.flags.Has("strategy")) {
    ASSIGN_OR_RETURN(strategy::StrategyEntry entry, strategy::StrategyRegistry::Global().Find(p.flags.Get("strategy")));
    o.strategy = entry.name;
    replicas_in_process = entry.replicas_in_process;
  }
  ASSIGN_OR_RETURN(int64_t replicas, p.flags.GetInt("replicas"));
  if (replicas < 1 || replicas > 256) return InvalidArgument("flag --replicas: must be in 1..256");
  o.replicas = static_cast<int>(replicas);
  o.replicas_given = p.flags.Has("replicas");
  ASSIGN_OR_RETURN(o.device, strategy::ParseDeviceChoice(p.flags.Get("device")));
  if (o.replicas != 1 && !replicas_in_process) {
    return InvalidArgument(
        "flag --replicas: only --strategy mirrored and central_storage run several replicas in one process");
  }
  auto comm = collective::ParseImplementation(p.flags.Get("communication"));
  if (!comm.ok()) return comm.status().WithContext("flag --communication");
  o.communication = *comm;
  ASSIGN_OR_RETURN(o.collective.timeout, Seconds(p.flags, "collective-timeout-seconds"));
  if (p.flags.Has("rejoin-timeout-seconds")) {
    ASSIGN_OR_RETURN(o.collective.rendezvous_timeout, Seconds(p.flags, "rejoin-timeout-seconds"));
    o.rejoin_timeout_given = true;
  }
  ASSIGN_OR_RETURN(int64_t bucket, p.flags.GetInt("bucket-bytes"));
  if (bucket < 0) return InvalidArgument("flag --bucket-bytes: must be >= 0");
  o.collective.bucket_bytes = static_cast<size_t>(bucket);
  strategy::CheckpointPolicy& c = o.checkpoints;
  if (p.flags.Has("checkpoint-dir")) c.dir = p.flags.Get("checkpoint-dir");
  ASSIGN_OR_RETURN(c.every_steps, p.flags.GetInt("checkpoint-every-steps"));
  ASSIGN_OR_RETURN(c.every_seconds, p.flags.GetDouble("checkpoint-every-seconds"));
  ASSIGN_OR_RETURN(c.keep, p.flags.GetInt("checkpoint-keep"));
  c.ignore_damaged = p.flags.GetBool("ignore-damaged-checkpoints");
  ASSIGN_OR_RETURN(o.eval_poll_seconds, p.flags.GetDouble("eval-poll-seconds"));
  if (c.every_steps < 0) return InvalidArgument("flag --checkpoint-every-steps: must be >= 0");
  if (c.every_seconds < 0) return InvalidArgument("flag --checkpoint-every-seconds: must be >= 0");
  if (c.keep < 1) return InvalidArgument("flag --checkpoint-keep: must be >= 1");
  if (o.eval_poll_seconds <= 0) return InvalidArgument("flag --eval-poll-seconds: must be > 0");
  ASSIGN_OR_RETURN(o.eval_timeout_seconds, p.flags.GetDouble("eval-timeout-seconds"));
  ASSIGN_OR_RETURN(o.shutdown_grace, Seconds(p.flags, "shutdown-grace-seconds"));
  if (o.eval_timeout_seconds < 0) return InvalidArgument("flag --eval-timeout-seconds: must be >= 0");
  if ((c.every_steps > 0 || c.every_seconds > 0) && !c.enabled()) {
    return InvalidArgument("flag --checkpoint-every-steps/--checkpoint-every-seconds: needs --checkpoint-dir");
  }
  if (p.flags.Has("keras-model")) {
    ASSIGN_OR_RETURN(model::ModelSpec keras, model::LoadKerasModel(p.flags.Get("keras-model")));
    ASSIGN_OR_RETURN(p.job, model::LoadJobConfig(p.flags.Get("config"), &keras));
  } else {
    ASSIGN_OR_RETURN(p.job, model::LoadJobConfig(p.flags.Get("config")));
  }
  if (epochs > 0) p.job.epochs = epochs;
  if (p.flags.Has("mixed-precision")) {
    const std::string v = p.flags.Get("mixed-precision");
    if (v != "bfloat16" && v != "float16") {
      return InvalidArgument("flag --mixed-precision: \"" + v + "\" is not bfloat16 or float16");
    }
    model::SetPrecision(p.job.model, v == "bfloat16" ? Precision::kBfloat16 : Precision::kFloat16);
  }
  RETURN_IF_ERROR(CheckPrecisionPath(p));
  // Every task that reads the job adapts a TextVectorization the same way
  // (deterministic over the whole training source); the parameter-server
  // workers, which read only their shard, get the chief's result instead.
  RETURN_IF_ERROR(strategy::AdaptText(p.job, o.data_dir).WithContext(p.job.source));
  return p;
}

Status WriteSummary(const Flags& flags, const nlohmann::json& j) {
  if (!flags.Has("summary-json")) return Status::Ok();
  return WriteFileAtomic(flags.Get("summary-json"), j.dump(2) + "\n");
}

Status CheckCommunication(collective::Implementation impl, const strategy::StrategyEntry& entry) {
  if (impl != collective::Implementation::kNccl) return Status::Ok();
  if (entry.topology != strategy::Topology::kGroup) {
    return InvalidArgument(
        "flag --communication nccl: NCCL reduces between worker processes (multi_worker_mirrored); " + entry.name +
        " reduces in this process");
  }
  return collective::NcclAvailable().WithContext("flag --communication nccl");
}

}  // namespace tfjob::programs::fit
