// What the files of the `fit` program share: its flags, parsed once into a
// typed struct, and the pieces each role uses (fit.cc parses and runs each
// role through services/strategy/fit.h; fit_ps.cc claims the chief's
// cluster for the parameter-server strategy; fit_evaluator.cc is the
// side-car evaluator).
// Thread-safety: plain values and free functions. Failure: Status values.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/flags.h"
#include "common/status.h"
#include "services/collective/communicator.h"
#include "services/model/job_config.h"
#include "services/programs/program.h"
#include "services/strategy/fit_options.h"
#include "services/strategy/ps_cluster.h"
#include "services/strategy/registry.h"
#include "services/worker/worker.h"

namespace tfjob::programs::fit {

// fit's command line: the flags, the job they name (adapted texts, --epochs
// and --mixed-precision applied), and every option parsed once into the
// typed struct the strategies and the loop read (services/strategy/
// fit_options.h).
struct Parsed {
  Flags flags;
  model::JobConfig job;
  strategy::FitOptions options;
};

Flags FitFlags();
StatusOr<Parsed> Parse(const std::vector<std::string>& args);
std::string Usage();
Status WriteSummary(const Flags& flags, const nlohmann::json& j);

// --communication nccl: OK only for a strategy whose group of processes
// reduces (multi_worker_mirrored) where NCCL can serve (built with it, a GPU
// visible); otherwise an error saying why.
Status CheckCommunication(collective::Implementation impl, const strategy::StrategyEntry& entry);

// The parameter-server strategy's cluster (services/strategy/ps_cluster.h)
// from the chief's context: claims it (waiting for every PS, fencing off an
// earlier chief). The strategy calls it through FitContext::claim_ps_cluster
// once every input check has passed.
StatusOr<strategy::PsCluster> ClaimPsCluster(const ChiefContext& ctx);

// --export-tfjs and --predict-out: what the chief does with the trained
// model, checked before training (a model TF.js cannot express is bad
// input); an empty function when neither flag is given. It refers to `p`
// and `out`, which must outlive it.
StatusOr<strategy::AfterFitFn> AfterFit(const Parsed& p, std::ostream& out);

// The side-car evaluator (fit_evaluator.cc).
int RunEvaluator(const Parsed& p, const EvaluatorContext& ctx);

}  // namespace tfjob::programs::fit
