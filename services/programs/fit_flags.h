// fit's command line (fit_flags.cc): the flags, parsed once into a typed
// struct (the job, and FitOptions, which reaches the strategies and the loop
// without copies), the usage text, the checks that need only the flags, and
// the summary file.
// Thread-safety: plain values and free functions. Failure: Status values,
// INVALID_ARGUMENT naming the flag.
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

// --export-tfjs and --predict-out: what the chief does with the trained
// model, checked before training (a model TF.js cannot express is bad
// input); an empty function when neither flag is given. It refers to `p`
// and `out`, which must outlive it.
StatusOr<strategy::AfterFitFn> AfterFit(const Parsed& p, std::ostream& out);

// The --summary-json document: the run's figures, the strategy's own, the
// flags that shaped it.
nlohmann::json SummaryJson(const strategy::FitSummary& s, const nlohmann::json& strategy_json, const Parsed& p);

}  // namespace tfjob::programs::fit
