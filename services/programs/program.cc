#include "services/programs/program.h"

#include <algorithm>
#include <ostream>

#include "services/programs/programs.h"
#include "common/mutex.h"
#include "contract/exit_codes.h"

namespace tfjob::programs {

std::shared_ptr<ps::PsClient> ChiefContext::PsClientFor(size_t i,
                                                        std::optional<std::chrono::milliseconds> patience) const {
  ps::ClientOptions o;
  o.retry.total_timeout = patience.value_or(connect_timeout);
  o.credentials = credentials;
  return std::make_shared<ps::PsClient>(ps_addresses[i], o);
}

std::vector<std::shared_ptr<ps::PsClient>> ChiefContext::PsClients(
    std::optional<std::chrono::milliseconds> patience) const {
  std::vector<std::shared_ptr<ps::PsClient>> out;
  for (size_t i = 0; i < ps_addresses.size(); ++i) out.push_back(PsClientFor(i, patience));
  return out;
}

StatusOr<uint64_t> ChooseGeneration(uint64_t newest, uint64_t pod_created_ms) {
  if (pod_created_ms == 0) return coordinator::NewGeneration(newest);
  const uint64_t first = pod_created_ms << kPodGenerationBits;
  const uint64_t end = (pod_created_ms + 1) << kPodGenerationBits;
  const uint64_t g = std::max(first, newest + 1);
  if (g >= end) {
    // A PS already follows a chief of a pod the operator created later: this
    // pod was replaced (its node lost, its container started again by its
    // kubelet before it heard), and the replacement must keep the cluster.
    return FailedPrecondition("a newer chief holds the parameter servers: generation " + std::to_string(newest) +
                              " is of a pod created at " + std::to_string(newest >> kPodGenerationBits) +
                              " ms, after this chief's pod (" + std::to_string(pod_created_ms) +
                              " ms); this pod was replaced, so it claims nothing");
  }
  return g;
}

StatusOr<Claim> ChiefContext::ClaimCluster() const {
  MutexLock g(claim_state->mu);
  if (claim_state->claim) return *claim_state->claim;
  // Patient: the PS tasks may still be starting.
  const auto clients = PsClients();
  uint64_t newest = 0;
  for (const auto& c : clients) {
    ASSIGN_OR_RETURN(ps::PsStatus s, c->GetStatus());
    newest = std::max(newest, s.fence);
  }
  Claim claim;
  ASSIGN_OR_RETURN(claim.generation, ChooseGeneration(newest, pod_created_ms));
  // A proposal; the PS tasks keep the first one they were given, so a
  // restarted chief adopts its predecessor's.
  uint32_t proposal = 0;
  while (proposal == 0) proposal = static_cast<uint32_t>(rpc::NewIncarnation());
  for (size_t i = 0; i < clients.size(); ++i) {
    auto fenced =
        clients[i]->Fence(claim.generation, claim.closure_namespace != 0 ? claim.closure_namespace : proposal);
    if (!fenced.ok()) return fenced.status().WithContext("claiming parameter server " + std::to_string(i));
    claim.previous = std::max(claim.previous, fenced->previous);
    if (claim.closure_namespace == 0) claim.closure_namespace = fenced->closure_namespace;
  }
  if (claim.closure_namespace == 0) claim.closure_namespace = proposal;
  claim_state->claim = claim;
  return claim;
}

uint64_t ChiefContext::claimed_generation() const {
  MutexLock g(claim_state->mu);
  return claim_state->claim ? claim_state->claim->generation : 0;
}

StatusOr<coordinator::Options> ChiefContext::CoordinatorOptions() const {
  ASSIGN_OR_RETURN(Claim claim, ClaimCluster());
  coordinator::Options o = coordinator_options;
  o.generation = claim.generation;
  o.closure_namespace = claim.closure_namespace;
  if (signals) o.stop = &signals->stop();
  return o;
}

int Program::RunCollective(const std::vector<std::string>&, const CollectiveContext& ctx) {
  return ReportError(InvalidArgument("TF_CONFIG: program \"" + name() +
                                     "\" needs parameter servers, but the cluster has no \"ps\" tasks"),
                     *ctx.err);
}

int Program::RunEvaluator(const std::vector<std::string>&, const EvaluatorContext& ctx) {
  return ReportError(InvalidArgument("TF_CONFIG: program \"" + name() + "\" has no evaluator role"), *ctx.err);
}

ProgramList BuiltinPrograms() { return {MakeCounter(), MakeFit()}; }

int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case Code::kOk: return contract::kExitSuccess;
    case Code::kInvalidArgument:
    case Code::kNotFound:
    case Code::kDataLoss:
    case Code::kOutOfRange:
    case Code::kFailedPrecondition:
    case Code::kAlreadyExists: return contract::kExitBadInput;
    default: return contract::kExitFailure;
  }
}

namespace {

// One line, whatever the message echoes: values are cut where they are
// quoted (Elide), and this bounds what is left.
void PrintError(const Status& s, std::ostream& err) {
  err << "tfjob-runtime: error: " << Elide(s.message(), 2000) << std::endl;
}

}  // namespace

int ReportError(const Status& s, std::ostream& err) {
  PrintError(s, err);
  return ExitCodeFor(s);
}

int ReportRuntimeError(const Status& s, std::ostream& err) {
  PrintError(s, err);
  return s.code() == Code::kInvalidArgument ? contract::kExitBadInput : contract::kExitFailure;
}

int ReportRunEnd(const Status& s, const SignalWatcher* signals, std::ostream& out, std::ostream& err) {
  if (s.ok()) return contract::kExitSuccess;
  if (signals && signals->stop()) {
    out << "stopped by a signal before training was complete: exiting " << contract::kExitStopped << " (retryable)"
        << std::endl;
    return contract::kExitStopped;
  }
  return ReportRuntimeError(s, err);
}

}  // namespace tfjob::programs
