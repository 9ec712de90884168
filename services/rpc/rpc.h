// What every gRPC client and server of the runtime shares: tensors to and
// from protos, Status to and from grpc::Status (codes map one to one), and
// channels and servers without gRPC's 4 MiB message limit.
//
// Thread-safety: free functions, reentrant. Failure: TensorFromProto
// validates dtype, shape and byte count and returns INVALID_ARGUMENT naming
// what is wrong; nothing here throws.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "common/status.h"
#include "services/rpc/auth.h"
#include "proto/tensor.pb.h"
#include "services/tensor/tensor.h"

namespace tfjob::rpc {

// Large enough for any one tensor the runtime sends (1 GiB).
inline constexpr int kMaxMessageBytes = 1 << 30;

void TensorToProto(const Tensor& t, proto::Tensor* out);
StatusOr<Tensor> TensorFromProto(const proto::Tensor& p);

grpc::Status ToGrpc(const Status& s);
Status FromGrpc(const grpc::Status& s, const std::string& context);

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);
// A ClientContext with a deadline `timeout` from now, carrying the task
// token of `credentials` (auth.h).
std::unique_ptr<grpc::ClientContext> Context(std::chrono::milliseconds timeout, const Credentials& credentials);

struct RetryPolicy {
  int max_attempts = 8;
  // When > 0, retries go on until this much time has passed instead of
  // stopping after max_attempts (a peer that is still starting up).
  std::chrono::milliseconds total_timeout{0};
  std::chrono::milliseconds initial_backoff{50};
  std::chrono::milliseconds max_backoff{2000};
  double multiplier = 2.0;
};

// Runs `call` until it succeeds, fails with a non-retryable code, or the
// attempts run out. UNAVAILABLE is retryable (the peer is not up yet, or
// restarting); every other code is final. The final error names `address`.
Status CallWithRetry(const std::string& address, const RetryPolicy& policy, const std::function<Status()>& call);

// Binds a server on `address` ("127.0.0.1:0" picks a free port). Returns the
// server and sets *bound_port.
StatusOr<std::unique_ptr<grpc::Server>> StartServer(const std::string& address,
                                                    const std::vector<grpc::Service*>& services, int* bound_port);

// Random, non-zero: a process's incarnation id.
uint64_t NewIncarnation();

}  // namespace tfjob::rpc
