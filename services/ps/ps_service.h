// The parameter server: holds variable shards with their optimizer slots and
// applies pushed updates. Asynchronous (each push applies on arrival), safe
// under many concurrent workers (a mutex per shard, a shared lock on the
// shard table), and exactly-once per (closure id, sequence, shard): a closure
// re-run after a worker failure carries the same id, and the shard skips
// what it already applied. The memory of applied ids is a bounded window per
// shard (oldest forgotten first), far larger than any in-flight window.
//
// Fencing: after Fence(c), pushes that come from any coordinator other than
// c (known by the push's coordinator_incarnation, else the high half of its
// closure id) are FAILED_PRECONDITION, so a dead chief's closures still
// running on workers cannot change variables a new chief has restored.
//
// Ownership: PsServer owns the gRPC server and the service. Thread-safety:
// all RPC handlers may run concurrently. Failure: bad requests (unknown
// variable, wrong dtype or shape, bad rows) are INVALID_ARGUMENT / NOT_FOUND
// and change nothing; the server keeps serving.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_set>

#include "proto/ps.grpc.pb.h"
#include "services/metrics/runtime_metrics.h"
#include "services/rpc/auth.h"
#include "services/rpc/rpc.h"
#include "services/model/optimizers.h"
#include "services/tensor/tensor.h"

namespace tfjob::ps {

struct PsOptions {
  size_t dedup_window = 1 << 16;  // applied (closure, sequence) ids remembered per shard
  // Where Save and Restore read and write: <checkpoint_dir>/ckpt-<step>/<checkpoint_file>.
  // Empty: this PS cannot checkpoint (FAILED_PRECONDITION).
  std::string checkpoint_dir;
  std::string checkpoint_file = "ps-0.ckpt";
  // Every RPC must carry this token (rpc/auth.h); none when empty.
  rpc::Credentials credentials;
  // Bytes and latency per RPC go here when set (borrowed; must outlive the service).
  runtime_metrics::RuntimeMetrics* metrics = nullptr;
};

class ParameterServerService final : public proto::ParameterServer::Service {
 public:
  explicit ParameterServerService(PsOptions options = {});

  uint64_t incarnation() const { return incarnation_; }
  // Blocks until a Shutdown RPC arrives (or RequestShutdown is called).
  void WaitForShutdown();
  void RequestShutdown();

  grpc::Status CreateVariable(grpc::ServerContext*, const proto::CreateVariableRequest*,
                              proto::CreateVariableResponse*) override;
  grpc::Status Pull(grpc::ServerContext*, const proto::PullRequest*, proto::PullResponse*) override;
  grpc::Status Push(grpc::ServerContext*, const proto::PushRequest*, proto::PushResponse*) override;
  grpc::Status Save(grpc::ServerContext*, const proto::SaveRequest*, proto::SaveResponse*) override;
  grpc::Status Restore(grpc::ServerContext*, const proto::RestoreRequest*, proto::RestoreResponse*) override;
  grpc::Status GetStatus(grpc::ServerContext*, const proto::StatusRequest*, proto::StatusResponse*) override;
  grpc::Status Fence(grpc::ServerContext*, const proto::FenceRequest*, proto::FenceResponse*) override;
  grpc::Status Shutdown(grpc::ServerContext*, const proto::ShutdownRequest*, proto::ShutdownResponse*) override;

 private:
  struct Shard {
    std::mutex mu;
    Tensor value;
    std::optional<model::Optimizer> optimizer;
    model::SlotState slots;
    std::unordered_set<uint64_t> seen;  // hashed (closure id, sequence)
    std::deque<uint64_t> seen_order;
  };

  std::shared_ptr<Shard> Find(const std::string& name);
  // <checkpoint_dir>/ckpt-<step>/<checkpoint_file>, or why there is none.
  StatusOr<std::string> CheckpointPath(int64_t step) const;
  // Returns false when this id was already applied (and records it otherwise).
  bool Remember(Shard& s, uint64_t key);

  const PsOptions options_;
  const uint64_t incarnation_;
  std::shared_mutex table_mu_;
  std::map<std::string, std::shared_ptr<Shard>> shards_;
  std::atomic<int64_t> applied_{0};
  std::atomic<uint64_t> fence_{0};  // the coordinator allowed to push (0: any)

  std::mutex shutdown_mu_;
  std::condition_variable shutdown_cv_;
  bool shutdown_ = false;
};

// A running PS: gRPC server + service.
class PsServer {
 public:
  static StatusOr<std::unique_ptr<PsServer>> Start(const std::string& address, PsOptions options = {});
  ~PsServer();
  int port() const { return port_; }
  ParameterServerService& service() { return *service_; }
  // Blocks until a Shutdown RPC, then stops the server.
  void Wait();
  // Stops serving. In-flight calls get `grace` to finish, then are cancelled
  // (a grace of 0 behaves like a crash, for tests).
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(500));

 private:
  std::unique_ptr<ParameterServerService> service_;
  std::unique_ptr<rpc::Server> server_;
  int port_ = 0;
};

proto::Optimizer OptimizerToProto(const model::OptimizerSpec& spec);
model::OptimizerSpec OptimizerFromProto(const proto::Optimizer& p);

}  // namespace tfjob::ps
