// The worker role: serves RunClosure for closures registered by name, against
// per-worker resources (dataset iterators) the coordinator asks it to build.
// This is the C++ counterpart of a TF worker running tf.functions that the
// ClusterCoordinator schedules.
//
// Ownership: WorkerServer owns the gRPC server and service; the Registry is
// borrowed and must outlive it. Thread-safety: closures run concurrently (one
// per in-flight RPC); ClosureContext::Next serialises access to a resource.
// Failure: an unknown closure or dataset, or a closure's own error, comes back
// in the response's error fields; the RPC itself fails only when the worker
// cannot serve (shutting down).
//
// Chief generations: every request carries its chief's generation; the
// worker remembers the newest and refuses the closures, datasets and
// shutdowns of older ones (FAILED_PRECONDITION), so a replaced chief's work
// stops at the worker as well as at the PS. Exit: Shutdown (the chief's word
// that training is complete) ends Wait with completed() true; a signal's
// RequestShutdown with completed() false.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mutex.h"
#include "common/status.h"
#include "proto/worker.grpc.pb.h"
#include "services/data/dataset.h"
#include "services/monitoring/runtime_metrics.h"
#include "services/ps/ps_client.h"
#include "services/tensor/tensor.h"

namespace tfjob::worker {

struct ClosureResult {
  nlohmann::json json;
  std::vector<Tensor> tensors;
};

struct WorkerEnv {
  int64_t worker_index = 0;
  std::vector<std::string> ps_addresses;  // by PS task index
  // How this worker calls the PS tasks; its credentials are also what this
  // worker's own service requires of its callers (one token per job).
  ps::ClientOptions ps_options;
  // Closures executed and their time go here when set (borrowed; must
  // outlive the server).
  runtime_metrics::RuntimeMetrics* metrics = nullptr;
  // Clients for every PS task, by index: the ones the closures get
  // (ClosureContext::ps), so a dataset function can prepare what they will
  // need of the PS tasks. Made by the worker from ps_addresses and
  // ps_options when it starts; what a caller sets here is replaced.
  std::vector<std::shared_ptr<ps::PsClient>> ps = {};
};

class WorkerState;

class ClosureContext {
 public:
  ClosureContext(uint64_t closure_id, uint64_t generation, WorkerState& state)
      : closure_id_(closure_id), generation_(generation), state_(state) {}
  uint64_t closure_id() const { return closure_id_; }
  // The generation of the chief that scheduled this closure: what its
  // pushes carry (ps::PsClient::Push), so a replaced chief's are fenced off.
  uint64_t generation() const { return generation_; }
  int64_t worker_index() const;
  // Clients for every PS task, by index.
  const std::vector<std::shared_ptr<ps::PsClient>>& ps() const;
  // The next element of a per-worker dataset; std::nullopt at its end.
  StatusOr<std::optional<data::Element>> Next(const std::string& resource);

 private:
  uint64_t closure_id_;
  uint64_t generation_;
  WorkerState& state_;
};

using ClosureFn = std::function<StatusOr<ClosureResult>(ClosureContext&, const nlohmann::json& args,
                                                        const std::vector<Tensor>& tensors)>;
using DatasetFn = std::function<StatusOr<data::Dataset>(const WorkerEnv&, const nlohmann::json& args)>;

// Named closures and dataset functions. Programs register theirs at start-up,
// before any server starts; lookups afterwards are read-only.
class Registry {
 public:
  Status AddClosure(const std::string& name, ClosureFn fn);
  Status AddDataset(const std::string& name, DatasetFn fn);
  const ClosureFn* FindClosure(const std::string& name) const;
  const DatasetFn* FindDataset(const std::string& name) const;

 private:
  std::map<std::string, ClosureFn> closures_;
  std::map<std::string, DatasetFn> datasets_;
};

class WorkerState {
 public:
  WorkerState(WorkerEnv env);
  const WorkerEnv& env() const { return env_; }
  const std::vector<std::shared_ptr<ps::PsClient>>& ps() const { return env_.ps; }
  void SetResource(const std::string& name, std::unique_ptr<data::Iterator> it);
  StatusOr<std::optional<data::Element>> Next(const std::string& name);
  std::vector<std::string> ResourceNames();

 private:
  struct Resource {
    Mutex mu;
    std::unique_ptr<data::Iterator> it TFJOB_GUARDED_BY(mu);
  };
  WorkerEnv env_;
  Mutex mu_;
  std::map<std::string, std::shared_ptr<Resource>> resources_ TFJOB_GUARDED_BY(mu_);
};

class WorkerService final : public proto::Worker::Service {
 public:
  WorkerService(const Registry& registry, WorkerEnv env);
  uint64_t incarnation() const { return incarnation_; }
  void WaitForShutdown();
  void RequestShutdown();
  // True once a chief's Shutdown RPC said training is complete.
  bool completed() const { return completed_.load(); }
  // The newest chief generation seen (0: none yet).
  uint64_t generation() const { return generation_.load(); }

  grpc::Status CreateResources(grpc::ServerContext*, const proto::CreateResourcesRequest*,
                               proto::CreateResourcesResponse*) override;
  grpc::Status RunClosure(grpc::ServerContext*, const proto::RunClosureRequest*, proto::RunClosureResponse*) override;
  grpc::Status GetStatus(grpc::ServerContext*, const proto::WorkerStatusRequest*,
                         proto::WorkerStatusResponse*) override;
  grpc::Status Shutdown(grpc::ServerContext*, const proto::WorkerShutdownRequest*,
                        proto::WorkerShutdownResponse*) override;

 private:
  const Registry& registry_;
  WorkerState state_;
  // Remembers `generation` when it is the newest yet; FAILED_PRECONDITION
  // when it is older than one already seen (0 always passes).
  Status Admit(uint64_t generation, const char* what);

  // Waits until fewer than `max_running` closures run (0: no limit), no
  // waiting closure has a smaller id, and the closure it was sent behind
  // (`behind`, 0: none) has arrived or kPredecessorWait has passed: closures
  // start in the order the chief scheduled them, whatever order their calls
  // arrive in. Then counts this one as running; false, and nothing counted,
  // when the call is cancelled first (the chief aborted, or the server is
  // stopping), so a closure still waiting when its chief gives up never
  // starts.
  bool TakeTurn(grpc::ServerContext* call, uint32_t max_running, uint64_t closure_id, uint64_t behind);
  void EndTurn();

  const uint64_t incarnation_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> completed_{false};
  std::atomic<int64_t> closures_run_{0};
  Mutex turn_mu_;
  CondVar turn_cv_;
  int64_t running_ TFJOB_GUARDED_BY(turn_mu_) = 0;
  // Closures waiting for their turn: (closure id, arrival), first in line first.
  std::set<std::pair<uint64_t, uint64_t>> waiting_ TFJOB_GUARDED_BY(turn_mu_);
  uint64_t arrivals_ TFJOB_GUARDED_BY(turn_mu_) = 0;
  // The ids of the last closures that arrived, for `behind` in TakeTurn.
  std::deque<uint64_t> arrived_ TFJOB_GUARDED_BY(turn_mu_);
  Mutex shutdown_mu_;
  CondVar shutdown_cv_;
  bool shutdown_ TFJOB_GUARDED_BY(shutdown_mu_) = false;
};

class WorkerServer {
 public:
  static StatusOr<std::unique_ptr<WorkerServer>> Start(const std::string& address, const Registry& registry,
                                                       WorkerEnv env);
  ~WorkerServer();
  int port() const { return port_; }
  WorkerService& service() { return *service_; }
  void Wait();  // until a Shutdown RPC
  // Stops serving. In-flight calls get `grace` to finish, then are cancelled
  // (a grace of 0 behaves like a crash, for tests).
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(500));

 private:
  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<rpc::Server> server_;
  int port_ = 0;
};

}  // namespace tfjob::worker
