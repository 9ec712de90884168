// The parameter-server strategy's cluster as the chief's role hands it over
// (services/programs/fit_ps.cc claims it): the tasks' addresses, clients to
// every PS, the claim that fenced off earlier chiefs, and the coordinator's
// options. parameter_server.h trains on it.
//
// Ownership: a plain value; the clients are shared, out/signals/metrics
// borrowed (they outlive the strategy). Thread-safety: a value. Failure: none
// here.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "common/signals.h"
#include "services/coordinator/coordinator.h"
#include "services/monitoring/runtime_metrics.h"
#include "services/ps/ps_client.h"
#include "services/rpc/auth.h"

namespace tfjob::strategy {

// The chief's claim on the parameter servers (fencing off earlier chiefs).
struct PsClaim {
  uint64_t generation = 0;
  uint32_t closure_namespace = 0;
  uint64_t previous = 0;  // the generation fenced off; 0 for the job's first chief
};

// The cluster it trains on, already claimed.
struct PsCluster {
  std::vector<std::string> ps_addresses;               // by PS index
  std::vector<std::string> worker_addresses;           // by worker index
  std::vector<std::shared_ptr<ps::PsClient>> clients;  // by PS index, patient for ps_timeout
  PsClaim claim;
  coordinator::Options coordinator;  // with the claim's generation and namespace
  rpc::Credentials credentials;      // the job's task token
  std::chrono::milliseconds ps_timeout{30000};
  std::ostream* out = nullptr;                         // progress lines (required)
  SignalWatcher* signals = nullptr;                    // a stop drains and checkpoints; may be null
  runtime_metrics::RuntimeMetrics* metrics = nullptr;  // may be null
};

}  // namespace tfjob::strategy
