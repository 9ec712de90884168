// A program is what the chief runs, TensorFlow-style: the same binary serves
// every role, so each program also registers the closures and dataset
// functions its workers must serve. Built in: counter, fit. C++ users add
// their own and call runtime::RunMain with them (examples/custom_loop).
//
// Thread-safety: RegisterWorker runs once per worker process before serving;
// the registered functions then run concurrently. Failure: RunChief returns a
// process exit code: 0 success, 2 bad input, 1 any other failure.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "common/signals.h"
#include "common/status.h"
#include "services/base/ports.h"
#include "services/collective/ring.h"
#include "services/coordinator/coordinator.h"
#include "services/metrics/runtime_metrics.h"
#include "services/ps/ps_client.h"
#include "services/worker/worker.h"

namespace tfjob::programs {

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
  // Set by SIGTERM/SIGINT: stop at the next boundary, checkpoint, exit 0
  // (borrowed; nullptr: never).
  SignalWatcher* signals = nullptr;

  // A client for PS `i` that is patient for connect_timeout.
  std::shared_ptr<ps::PsClient> PsClientFor(size_t i) const;
  std::vector<std::shared_ptr<ps::PsClient>> PsClients() const;
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
  virtual int RunSingleProcess(const std::vector<std::string>&, std::ostream&, std::ostream&, SignalWatcher*) { return 2; }
};

using ProgramList = std::vector<std::shared_ptr<Program>>;

// counter and fit.
ProgramList BuiltinPrograms();

int ExitCodeFor(const Status& s);
// Prints "tfjob-runtime: error: ..." and returns the exit code for `s`.
int ReportError(const Status& s, std::ostream& err);

}  // namespace tfjob::programs
