// fit's chief under ParameterServerStrategy: the cluster claimed through the
// chief's context and the strategy (services/strategy/parameter_server.h)
// given its part of fit's flags. The workers' side is
// services/strategy/ps_worker.h.
#include "services/programs/fit_internal.h"
#include "services/strategy/parameter_server.h"

namespace tfjob::programs::fit {

StatusOr<std::unique_ptr<strategy::Strategy>> MakePsStrategy(const Parsed& p, const ChiefContext& ctx,
                                                             const model::Model& m,
                                                             std::vector<Tensor> initial_values) {
  // Waits for every PS (connect_timeout), fencing off any previous chief.
  ASSIGN_OR_RETURN(Claim claim, ctx.ClaimCluster());
  strategy::PsCluster c;
  ASSIGN_OR_RETURN(c.coordinator, ctx.CoordinatorOptions());
  c.coordinator.rpc_timeout = p.closure_timeout;
  c.coordinator.max_attempts = p.closure_max_attempts;
  c.coordinator.inflight_per_worker =
      p.ps_closures_per_worker > 0 ? p.ps_closures_per_worker : strategy::PsClosuresPerWorker(p.steps_per_execution);
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

  strategy::PsOptions o;
  o.job = p.job;
  o.data_dir = p.flags.Get("data-dir");
  o.threads = static_cast<int>(*p.flags.GetInt("threads"));
  o.device = p.flags.Get("device");
  if (p.flags.Has("keras-model")) o.keras_model = p.flags.Get("keras-model");
  o.partitioner = p.partitioner;
  o.ps_prefetch = p.ps_prefetch;
  o.ps_pull_rows = p.ps_pull_rows;
  o.steps_per_execution = p.steps_per_execution;
  o.checkpoints = p.checkpoints;
  o.initial_values = std::move(initial_values);
  return strategy::MakeParameterServerStrategy(std::move(o), std::move(c), m);
}

}  // namespace tfjob::programs::fit
