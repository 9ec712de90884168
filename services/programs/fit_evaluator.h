// fit's side-car evaluator (fit_evaluator.cc): TF_CONFIG task type
// "evaluator". Thread-safety: runs on the calling thread. Failure: the
// process's exit code (2 for bad input, 1 when a checkpoint cannot be
// evaluated).
#pragma once

#include "services/programs/fit_flags.h"
#include "services/programs/program.h"

namespace tfjob::programs::fit {

// The side-car evaluator (fit_evaluator.cc).
int RunEvaluator(const Parsed& p, const EvaluatorContext& ctx);

}  // namespace tfjob::programs::fit
