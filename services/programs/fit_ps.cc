// fit's chief under ParameterServerStrategy: the cluster claimed through the
// chief's context. The strategy itself is built from the registry like every
// other (services/strategy/parameter_server.h); the workers' side is
// services/strategy/ps_closures.h.
#include "services/programs/fit_ps.h"

namespace tfjob::programs::fit {

StatusOr<strategy::PsCluster> ClaimPsCluster(const ChiefContext& ctx) {
  // Waits for every PS (connect_timeout), fencing off any previous chief.
  ASSIGN_OR_RETURN(Claim claim, ctx.ClaimCluster());
  strategy::PsCluster c;
  ASSIGN_OR_RETURN(c.coordinator, ctx.CoordinatorOptions());
  // From here on a PS that does not answer is lost after ps_timeout.
  c.clients = ctx.PsClients(ctx.ps_timeout);
  c.ps_addresses = ctx.ps_addresses;
  c.worker_addresses = ctx.worker_addresses;
  c.claim = {claim.generation, claim.closure_namespace, claim.previous};
  c.credentials = ctx.credentials;
  c.ps_timeout = ctx.ps_timeout;
  c.out = ctx.out;
  c.signals = ctx.signals;
  c.metrics = ctx.metrics;
  return c;
}

}  // namespace tfjob::programs::fit
