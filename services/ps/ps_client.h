// A client for one parameter server. Every call has a deadline; UNAVAILABLE
// (the PS is not up yet, or restarting) is retried with exponential backoff,
// and the final error names the address. Other codes return at once.
// Thread-safety: a PsClient may be shared by threads (gRPC stubs are).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "proto/ps.grpc.pb.h"
#include "services/model/spec.h"
#include "services/rpc/rpc.h"
#include "services/tensor/tensor.h"

namespace tfjob::ps {

struct ClientOptions {
  std::chrono::milliseconds timeout{30000};
  rpc::RetryPolicy retry;
  rpc::Credentials credentials;  // the job's task token
};

struct Update {
  enum class Kind { kApplyGradient, kAssignAdd, kAssign };
  std::string name;
  Kind kind = Kind::kApplyGradient;
  Tensor value;
  std::optional<Tensor> rows;  // int64 [k]: a sparse (row) update
};

struct PsStatus {
  uint64_t incarnation = 0;
  std::vector<std::string> variables;
  int64_t applied_updates = 0;
};

class PsClient {
 public:
  explicit PsClient(std::string address, ClientOptions options = {});

  const std::string& address() const { return address_; }

  // Returns true when created, false when it already existed identically.
  StatusOr<bool> CreateVariable(const std::string& name, const Tensor& initial,
                                const std::optional<model::OptimizerSpec>& optimizer);
  StatusOr<std::vector<Tensor>> Pull(const std::vector<std::string>& names);
  StatusOr<Tensor> PullRows(const std::string& name, const std::vector<int64_t>& rows);
  // Returns how many updates were skipped as already applied.
  StatusOr<int> Push(uint64_t closure_id, uint32_t sequence, const std::vector<Update>& updates);
  // Checkpoints at `step` in the PS's own checkpoint directory; returns the
  // bytes of tensors saved / the variables restored.
  StatusOr<int64_t> Save(int64_t step);
  StatusOr<int> Restore(int64_t step);
  StatusOr<PsStatus> GetStatus();
  // Makes `coordinator_incarnation` the only coordinator whose closures may
  // push here; returns the one fenced off (0 when none).
  StatusOr<uint64_t> Fence(uint64_t coordinator_incarnation);
  Status Shutdown();

 private:
  template <typename Req, typename Resp, typename Fn>
  Status Call(const char* what, const Req& req, Resp* resp, Fn fn);

  std::string address_;
  ClientOptions options_;
  std::unique_ptr<proto::ParameterServer::Stub> stub_;
};

}  // namespace tfjob::ps
