// A program is what the chief runs, TensorFlow-style: the same binary serves
// every role, so each program also registers the closures and dataset
// functions its workers must serve. Built in: counter, fit. C++ users add
// their own and call runtime::RunMain with them (examples/custom_loop).
//
// Thread-safety: RegisterWorker runs once per worker process before serving;
// the registered functions then run concurrently. Failure: RunChief and the
// other roles return the process's exit code, the runtime's contract
// (contract/exit_codes.h, docs/fault-tolerance.md): 0 only when training is
// complete, 143 (kExitStopped) when a signal stopped it first, 2 for bad
// input found before any work, 1 for any other failure.
#pragma once

#include <iosfwd>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/signals.h"
#include "common/status.h"
#include "services/base/ports.h"
#include "services/collective/ring.h"
#include "services/coordinator/coordinator.h"
#include "services/monitoring/runtime_metrics.h"
#include "services/ps/ps_client.h"
#include "services/worker/worker.h"

namespace tfjob::programs {

// A chief's generation in a pod the operator stamped: the pod's creation
// time in ms, shifted left by this, plus the restarts before it in that pod.
inline constexpr int kPodGenerationBits = 20;
// The latest stamp taken: shifted, 2^43 ms (the year 2248) still fits 64 bits.
inline constexpr uint64_t kMaxPodCreatedMs = (uint64_t{1} << 43) - 1;

// What a chief's claim on the cluster's parameter servers gives it.
struct Claim {
  uint64_t generation = 0;         // this chief's; newer than every earlier chief's
  uint32_t closure_namespace = 0;  // the job's closure-id namespace (kept by the PS tasks)
  uint64_t previous = 0;           // the generation fenced off (0: this is the job's first chief)
};

// The generation a chief claims when the newest a PS holds is `newest`: in
// its pod's range when the operator stamped the pod (pod_created_ms != 0;
// FAILED_PRECONDITION when `newest` is past that range, i.e. of a pod
// created later), else the wall clock (coordinator::NewGeneration).
StatusOr<uint64_t> ChooseGeneration(uint64_t newest, uint64_t pod_created_ms);

struct ChiefContext {
  std::vector<std::string> ps_addresses;      // by PS index
  std::vector<std::string> worker_addresses;  // by worker index
  coordinator::Options coordinator_options;
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
  // How long the chief waits for a PS or worker that does not answer yet
  // (pods still starting) before failing with an error naming it.
  std::chrono::milliseconds connect_timeout{300000};
  // Training progress goes here when set (borrowed from services/runtime).
  runtime_metrics::RuntimeMetrics* metrics = nullptr;
  // The job's task token: every call to a PS or worker carries it.
  rpc::Credentials credentials = {};
  // Set by SIGTERM/SIGINT: stop at the next boundary, checkpoint, exit 143
  // (borrowed; nullptr: never).
  SignalWatcher* signals = nullptr;
  // Once training runs, how long a PS may go without answering before the
  // chief gives up on it (TFJOB_PS_TIMEOUT_SECONDS).
  std::chrono::milliseconds ps_timeout{30000};
  // When the operator created this chief's pod (TFJOB_POD_CREATED_MS), 0
  // when nothing did. Set, the claimed generation lies in the pod's range
  // [ms << kPodGenerationBits, (ms + 1) << kPodGenerationBits): a later
  // restart of the same pod counts up inside it, and any process of a pod
  // created later outranks them all. Unset, the generation is the wall clock
  // in microseconds (coordinator::NewGeneration).
  uint64_t pod_created_ms = 0;

  // A client for PS `i` whose calls retry UNAVAILABLE for `patience`
  // (connect_timeout when not given).
  std::shared_ptr<ps::PsClient> PsClientFor(size_t i, std::optional<std::chrono::milliseconds> patience = {}) const;
  std::vector<std::shared_ptr<ps::PsClient>> PsClients(std::optional<std::chrono::milliseconds> patience = {}) const;

  // Claims the cluster for this chief, once (later calls return the same
  // claim): waits up to connect_timeout for every PS, then fences each with
  // a generation newer than any it knows and agrees the closure namespace.
  // FAILED_PRECONDITION when a newer chief holds a PS, or when a PS holds a
  // generation of a pod created after this chief's (this pod was replaced).
  StatusOr<Claim> ClaimCluster() const;
  // The claim's generation, 0 when nothing was claimed.
  uint64_t claimed_generation() const;
  // coordinator_options with the claim's generation and namespace, and the
  // signals' stop flag (claims first if needed).
  StatusOr<coordinator::Options> CoordinatorOptions() const;

  // Shared by copies of the context: the one claim of this chief process.
  struct ClaimState {
    Mutex mu;
    std::optional<Claim> claim TFJOB_GUARDED_BY(mu);
  };
  std::shared_ptr<ClaimState> claim_state = std::make_shared<ClaimState>();
};

// What each member of a cluster without parameter servers gets (chief and
// worker tasks only: TensorFlow's MultiWorkerMirroredStrategy). Every member
// runs the program; members[rank] is this task.
struct CollectiveContext {
  std::vector<collective::Peer> members;  // chief first, then workers by index
  int rank = 0;
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
  // How long forming the group waits for members that are not up yet.
  std::chrono::milliseconds connect_timeout{300000};
  runtime_metrics::RuntimeMetrics* metrics = nullptr;
  // The job's task token: the group's connections carry it.
  rpc::Credentials credentials = {};
  SignalWatcher* signals = nullptr;  // as ChiefContext's
  // The listening socket a launcher handed this task (services/base/ports.h),
  // at members[rank]'s port: the group serves on it instead of binding the
  // port itself. Null: the group binds it.
  std::shared_ptr<base::ListeningSocket> listener;
};

// What the side-car evaluator gets: it never joins the training cluster.
struct EvaluatorContext {
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
  // Evaluation results go here when set (borrowed from services/runtime).
  runtime_metrics::RuntimeMetrics* metrics = nullptr;
  SignalWatcher* signals = nullptr;  // as ChiefContext's
};

class Program {
 public:
  virtual ~Program() = default;
  virtual std::string name() const = 0;
  // One line for the usage text.
  virtual std::string usage() const = 0;
  virtual Status RegisterWorker(worker::Registry& registry) = 0;
  // Where this program's parameter servers keep their checkpoint files
  // (they read and write nothing outside it); "" when it has none. Bad
  // flags are INVALID_ARGUMENT.
  virtual StatusOr<std::string> CheckpointDir(const std::vector<std::string>&) const { return std::string(); }
  // The chief's side, given a running cluster.
  virtual int RunChief(const std::vector<std::string>& args, const ChiefContext& ctx) = 0;
  // Every chief and worker of a cluster without "ps" tasks runs this
  // (synchronous training across processes). Programs that need parameter
  // servers say so (exit 2).
  virtual int RunCollective(const std::vector<std::string>& args, const CollectiveContext& ctx);
  // The evaluator role (TF_CONFIG task type "evaluator"): evaluates the
  // chief's checkpoints as they appear. Programs without one say so.
  virtual int RunEvaluator(const std::vector<std::string>& args, const EvaluatorContext& ctx);
  // No TF_CONFIG: run on this machine alone. Defaults to an in-process
  // cluster of one PS and one worker (services/runtime sets that up); `fit`
  // overrides it with single-process training.
  virtual bool HasSingleProcessMode() const { return false; }
  virtual int RunSingleProcess(const std::vector<std::string>&, std::ostream&, std::ostream&, SignalWatcher*) {
    return 2;
  }
};

using ProgramList = std::vector<std::shared_ptr<Program>>;

// counter and fit.
ProgramList BuiltinPrograms();

// The exit code for an error found while checking the input, before any
// work: 2 for the codes that mean bad input, else 1.
int ExitCodeFor(const Status& s);
// Prints "tfjob-runtime: error: ..." (values in it cut to a few hundred
// bytes) and returns ExitCodeFor(s): for errors before any work.
int ReportError(const Status& s, std::ostream& err);
// The same line for an error once work has begun: 2 only for
// INVALID_ARGUMENT (input that a worker found bad: a flag it cannot honour,
// a label out of range in the data), else 1. A missing variable, a stale
// generation or a damaged checkpoint met at run time is not bad input.
int ReportRuntimeError(const Status& s, std::ostream& err);
// Exit code and line for a run that ended with `s`: kExitStopped with
// "stopped by a signal" when `signals` says one came, else
// ReportRuntimeError's.
int ReportRunEnd(const Status& s, const SignalWatcher* signals, std::ostream& out, std::ostream& err);

}  // namespace tfjob::programs
