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
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/mutex.h"
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

// With credentials.tls, the channel is mutual TLS with the job's
// certificate, and the server must present one from the job's CA.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const Credentials& credentials = {});
// A stub to one task whose channel is made again after a call on it failed
// UNAVAILABLE, at most once per min_interval (a second). Why: gRPC's DNS
// resolver backs off after a name did not resolve (1 s, growing 1.6x up to
// 120 s) and resolves a name again at most every 30 s, while a task's name
// only resolves once its pod runs, to a new address whenever the pod is
// replaced: on two nodes a chief that started before its parameter
// server's name existed waited 41 s on one channel for a server that had
// been up for 40. A new channel resolves at once.
// A call that ran out of time while its channel was not connected (still
// connecting: the name resolved to the address of a pod whose node is gone,
// whose connection attempts hang rather than fail) renews it too, at most
// once per 5 x min_interval, so a connection that is merely slow is not cut
// short again and again.
// Thread-safe. A stub from Get stays valid while the caller holds it (keep
// it for the life of an asynchronous call).
template <typename Service>
class RenewingStub {
 public:
  using Stub = typename Service::Stub;
  RenewingStub(std::string address, Credentials credentials,
               std::chrono::milliseconds min_interval = std::chrono::seconds(1))
      : address_(std::move(address)), credentials_(std::move(credentials)), min_interval_(min_interval) {
    Renew(std::chrono::steady_clock::now());
  }

  std::shared_ptr<Stub> Get() const TFJOB_EXCLUDES(mu_) {
    MutexLock g(mu_);
    return stub_;
  }
  // `status` is what a call on `used` (from Get) returned. True when the
  // call ran out of time on a channel that was not connected then: it most
  // likely never reached the task (an idempotent call may be retried).
  bool Observe(const std::shared_ptr<Stub>& used, const grpc::Status& status) TFJOB_EXCLUDES(mu_) {
    const bool unavailable = status.error_code() == grpc::StatusCode::UNAVAILABLE;
    if (!unavailable && status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) return false;
    const auto now = std::chrono::steady_clock::now();
    MutexLock g(mu_);
    if (used != stub_) return false;  // renewed already
    const bool unconnected = !unavailable && channel_->GetState(false) != GRPC_CHANNEL_READY;
    if (unavailable ? now - renewed_ >= min_interval_ : unconnected && now - renewed_ >= 5 * min_interval_) {
      Renew(now);
    }
    return unconnected;
  }
  const std::string& address() const { return address_; }

 private:
  // With mu_ held, or from the constructor.
  void Renew(std::chrono::steady_clock::time_point now) TFJOB_NO_THREAD_SAFETY_ANALYSIS {
    channel_ = MakeChannel(address_, credentials_);
    stub_ = Service::NewStub(channel_);
    renewed_ = now;
  }

  const std::string address_;
  const Credentials credentials_;
  const std::chrono::milliseconds min_interval_;
  mutable Mutex mu_;
  std::shared_ptr<grpc::Channel> channel_ TFJOB_GUARDED_BY(mu_);
  std::shared_ptr<Stub> stub_ TFJOB_GUARDED_BY(mu_);
  // Made with the first channel: a renewal waits min_interval from it too.
  std::chrono::steady_clock::time_point renewed_ TFJOB_GUARDED_BY(mu_);
};

// Insecure without credentials.tls; with it, TLS that requires and checks a
// client certificate from the job's CA.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const Credentials& credentials);
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

// A running gRPC server. Either gRPC bound its port itself, or it serves on
// a listening socket this process was handed (services/base/ports.h: what
// `tfjob-runtime local` and `tfjob run` give each task): then a thread here
// accepts the connections and hands each to gRPC, which serves it as one of
// its own. Ownership: owns the grpc::Server and that socket; destroying it
// stops accepting, shuts the server down at once and closes the socket.
// Thread-safety: Shutdown and Wait as grpc::Server's.
class Server {
 public:
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  // Stops accepting; in-flight calls get until `deadline`, then are cancelled.
  void Shutdown(std::chrono::system_clock::time_point deadline);
  void Wait() { server_->Wait(); }

 private:
  friend StatusOr<std::unique_ptr<Server>> StartServer(const std::string&, const std::vector<grpc::Service*>&, int*,
                                                       const Credentials&);
  Server() = default;
  void AcceptLoop();
  void StopAccepting();

  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: writing to it ends AcceptLoop
  std::thread accepting_;
};

// Starts a server on `address`: "HOST:PORT" binds it ("127.0.0.1:0" picks a
// free port), "fd:N" serves on the listening socket N (taking ownership of
// it). Returns the server and sets *bound_port. UNAVAILABLE when it cannot
// listen; INVALID_ARGUMENT when N is not a listening socket. With
// credentials.tls every connection must be mutual TLS (ServerCredentials).
StatusOr<std::unique_ptr<Server>> StartServer(const std::string& address, const std::vector<grpc::Service*>& services,
                                              int* bound_port, const Credentials& credentials = {});

// Random, non-zero: a process's incarnation id.
uint64_t NewIncarnation();

}  // namespace tfjob::rpc
