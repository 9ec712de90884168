// fit's chief under ParameterServerStrategy (fit_ps.cc): the cluster
// claimed through the chief's context. The strategy itself is built from the
// registry like every other (services/strategy/parameter_server.h).
// Thread-safety: called once by the chief. Failure: the claim's errors
// (UNAVAILABLE when a PS never answers, FAILED_PRECONDITION when a newer
// chief holds the cluster).
#pragma once

#include "common/status.h"
#include "services/programs/program.h"
#include "services/strategy/ps_cluster.h"

namespace tfjob::programs::fit {

// The parameter-server strategy's cluster (services/strategy/ps_cluster.h)
// from the chief's context: claims it (waiting for every PS, fencing off an
// earlier chief). The strategy calls it through FitContext::claim_ps_cluster
// once every input check has passed.
StatusOr<strategy::PsCluster> ClaimPsCluster(const ChiefContext& ctx);

}  // namespace tfjob::programs::fit
