// The parameter server: holds variable shards with their optimizer slots and
// applies pushed updates. Asynchronous (each push applies on arrival), safe
// under many concurrent workers (a reader-writer lock per shard, a shared
// lock on the shard table), and exactly-once per (closure id, sequence,
// shard): a closure re-run after a worker failure carries the same id, and
// the shard skips what it already applied. The memory of applied ids is a
// bounded window per shard (oldest forgotten first), far larger than any
// in-flight window.
//
// Two planes on one port (the task's TF_CONFIG address): tensors move on the
// data plane (wire.h: CreateVariable, Pull, Push; sent from the variable's
// memory, received into a reused staging buffer per connection), control
// calls on gRPC (Save, Restore, GetStatus, Fence, Shutdown). A push is
// received whole before any of it is applied, so a connection that breaks
// mid-push changes nothing; the updates of one push to different shards are
// applied in parallel.
//
// Fencing: after Fence(g), pushes that come from any chief generation other
// than g (known by the push's coordinator_incarnation, else the high half of
// its closure id) are FAILED_PRECONDITION, so a dead chief's closures still
// running on workers cannot change variables a new chief has restored. Fence
// waits for pushes being applied, so none of the old chief's lands after it
// returns. Generations only grow; the Save, Restore and Shutdown of an older
// chief are refused too. Restore forgets the applied closure ids and the
// applied-update count along with the values it replaces.
//
// Exit: Shutdown (the chief's word that training is complete) ends Wait with
// completed() true; RequestShutdown (a signal) ends it with completed() false.
//
// Ownership: PsServer owns the listening socket, the gRPC server, the
// service and one thread per connection. Thread-safety: all handlers may run
// concurrently. Failure: bad requests (unknown variable, wrong dtype or
// shape, bad rows, a tensor claiming more bytes than the request carries or
// than max_tensor_bytes allows) are INVALID_ARGUMENT / NOT_FOUND, are refused
// before anything of the claimed size is allocated, and change nothing; the
// server keeps serving.
#pragma once

#include <atomic>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "common/mutex.h"
#include "proto/ps.grpc.pb.h"
#include "services/net/net.h"
#include "services/monitoring/runtime_metrics.h"
#include "services/rpc/auth.h"
#include "services/model/optimizers.h"
#include "services/ps/apply_pool.h"
#include "services/ps/rw_lock.h"
#include "services/ps/shm.h"
#include "services/ps/wire.h"
#include "services/rpc/auth.h"
#include "services/tensor/tensor.h"

namespace tfjob::ps {

struct PsOptions {
  size_t dedup_window = 1 << 16;  // applied (closure, sequence) ids remembered per shard
  // Where Save and Restore read and write: <checkpoint_dir>/ckpt-<step>/<checkpoint_file>.
  // Empty: this PS cannot checkpoint (FAILED_PRECONDITION).
  std::string checkpoint_dir;
  std::string checkpoint_file = "ps-0.ckpt";
  // Every RPC and every data-plane connection must carry this token
  // (rpc/auth.h); none when empty.
  rpc::Credentials credentials;
  // Bytes and latency per call go here when set (borrowed; must outlive the service).
  runtime_metrics::RuntimeMetrics* metrics = nullptr;
  // The most one tensor, and one data-plane request, may carry. A request
  // claiming more is INVALID_ARGUMENT before anything is read or allocated.
  uint64_t max_tensor_bytes = uint64_t{16} << 30;
  uint64_t max_request_bytes = uint64_t{16} << 30;
  // How long a data-plane request's meta and payload may take to arrive.
  std::chrono::milliseconds request_timeout{300000};
  // Threads applying one push's updates to different shards (0: up to 4,
  // no more than the machine's cores).
  int apply_threads = 0;
};

class ParameterServerService final : public proto::ParameterServer::Service {
 public:
  explicit ParameterServerService(PsOptions options = {});

  uint64_t incarnation() const { return incarnation_; }
  const PsOptions& options() const { return options_; }
  // Blocks until a Shutdown RPC arrives (or RequestShutdown is called).
  void WaitForShutdown();
  void RequestShutdown();
  // True once a chief's Shutdown RPC said training is complete.
  bool completed() const { return completed_.load(); }

  grpc::Status Save(grpc::ServerContext*, const proto::SaveRequest*, proto::SaveResponse*) override;
  grpc::Status Restore(grpc::ServerContext*, const proto::RestoreRequest*, proto::RestoreResponse*) override;
  grpc::Status GetStatus(grpc::ServerContext*, const proto::StatusRequest*, proto::StatusResponse*) override;
  grpc::Status Fence(grpc::ServerContext*, const proto::FenceRequest*, proto::FenceResponse*) override;
  grpc::Status Shutdown(grpc::ServerContext*, const proto::ShutdownRequest*, proto::ShutdownResponse*) override;

  // Serves one data-plane connection (its hello not yet read) until the
  // peer closes it, it fails, or `stopping` is set between requests. Does
  // not close `fd`.
  void ServeData(const net::Fd& fd, const std::string& peer, const std::atomic<bool>& stopping,
                 std::atomic<bool>& busy);

 private:
  struct Shard {
    // Readers: pulls and saves; writers: updates and restores. Lock order:
    // taken after table_mu_ and after fence_mu_, never before them.
    RwLock mu;
    Tensor value TFJOB_GUARDED_BY(mu);
    std::optional<model::Optimizer> optimizer TFJOB_GUARDED_BY(mu);
    model::SlotState slots TFJOB_GUARDED_BY(mu);
    std::unordered_set<uint64_t> seen TFJOB_GUARDED_BY(mu);  // hashed (closure id, sequence)
    std::deque<uint64_t> seen_order TFJOB_GUARDED_BY(mu);
  };
  // Per data-plane connection: where pushed tensors are received, kept
  // between requests so big buffers are not allocated and page-faulted on
  // every call. Grown only as bytes arrive.
  struct Staging {
    Tensor f32;
    Tensor i64;
    Tensor gathered;  // rows picked for a row pull
  };
  struct Call;  // one data-plane request being served (data_call.h)

  std::shared_ptr<Shard> Find(const std::string& name);
  // <checkpoint_dir>/ckpt-<step>/<checkpoint_file>, or why there is none.
  StatusOr<std::string> CheckpointPath(int64_t step) const;
  // Returns false when this id was already applied (and records it otherwise).
  bool Remember(Shard& s, uint64_t key) TFJOB_REQUIRES(s.mu);
  // FAILED_PRECONDITION when `generation` (non-zero) is older than the
  // fence: `what` comes from a chief a newer one replaced.
  Status CheckGeneration(uint64_t generation, const char* what) const;
  // Why a push from `generation` (or, when 0, closure `closure_id`) may not
  // be applied now; OK when it may.
  Status CheckPushFence(uint64_t generation, uint64_t closure_id) const;

  // Data plane (ps_data.cc, pushes in ps_push.cc). Each answers the
  // request; a non-OK return means the connection cannot go on (I/O
  // failed, or a refused request's payload is too large to skip).
  Status HandleCreate(Call& c);
  Status HandlePull(Call& c);
  Status HandlePush(Call& c);
  Status HandlePushPull(Call& c);
  // The push of a Push or PushPull request: checked, its payload received
  // and applied. Sets `*refused` (nothing applied, the payload not all read)
  // when the request is to be refused with that reason; otherwise
  // `*duplicates` counts the updates skipped as already applied. A non-OK
  // return: the connection cannot go on.
  Status ReceivePush(Call& c, const proto::PushRequest& req, int* duplicates, Status* refused);
  // Maps the region an AttachShm request names, for this connection's
  // payloads from now on (replacing any earlier one).
  Status HandleAttachShm(Call& c, std::unique_ptr<shm::Region>& region);
  // `n` bytes of the request's payload, from the socket or the region.
  Status ReadPayload(Call& c, std::byte* into, size_t n, size_t* arrived);
  // Sends the response `f` with `meta` and `payload`: the payload into the
  // connection's region when it has one the payload fits, else inline.
  Status Answer(Call& c, wire::Frame f, const std::string& meta, std::span<const iovec> payload);
  // Whole values of `names`: their shards, or why the pull is refused.
  StatusOr<std::vector<std::shared_ptr<Shard>>> FindAll(const google::protobuf::RepeatedPtrField<std::string>& names);
  // Answers with `resp` as meta, after adding each shard's header to
  // `values` (a field of `resp`), and the shards' values as payload, each
  // sent from the variable's memory under its read lock.
  Status SendValues(Call& c, const std::vector<std::shared_ptr<Shard>>& shards,
                    google::protobuf::RepeatedPtrField<proto::Tensor>* values,
                    const google::protobuf::MessageLite& resp);
  struct PushUpdate;  // one update of a push, checked, and then its payload
  // HandlePush's checks, before any payload is read: every update of `req`
  // names a variable it fits and a known kind, and the updates' tensors stay
  // within the request limit. Fills `prepared` (payloads not yet received)
  // and `total` (the payload bytes they need); a non-OK return is the reason
  // to refuse the request, with nothing changed.
  Status PreparePush(const proto::PushRequest& req, std::vector<PushUpdate>& prepared, uint64_t& total);
  // Applies one received update to `s` (its shard), whose write lock the
  // caller holds; `split` as for ApplyDense.
  Status ApplyPushUpdate(Shard& s, const PushUpdate& p, bool split) TFJOB_REQUIRES(s.mu);
  // Refuses the request in `c` with `why`, skipping its payload when it is
  // small enough to read past, so the connection stays usable.
  Status Refuse(Call& c, const Status& why);
  // Applies a dense update (an Update::Kind) to `s`, whose write lock the
  // caller holds; with `split`, a big one in pieces on the apply pool.
  Status ApplyDense(Shard& s, int kind, const Tensor& value, bool split) TFJOB_REQUIRES(s.mu);
  // Receives `bytes` of payload into staging tensor `into` at element
  // `offset`, growing it as bytes arrive; returns the view [offset, +n).
  StatusOr<Tensor> ReceiveInto(Call& c, Tensor& into, DType dtype, int64_t offset, const Shape& shape);
  // The next tensor of a request whose payload is in the shared region, read
  // where it lies (the client writes the region again only after it has the
  // answer); nullopt when it is not aligned for its type, to be copied.
  StatusOr<std::optional<Tensor>> ViewPayload(Call& c, DType dtype, const Shape& shape);

  const PsOptions options_;
  const uint64_t incarnation_;
  ApplyPool apply_pool_;
  SharedMutex table_mu_;  // before any Shard::mu
  std::map<std::string, std::shared_ptr<Shard>> shards_ TFJOB_GUARDED_BY(table_mu_);
  std::atomic<int64_t> applied_{0};
  // Guards fence_ and closure_namespace_ against pushes being applied: a
  // push holds it shared from its last fence check to the end of its apply,
  // Fence holds it exclusively. Taken before the shards' mu.
  SharedMutex fence_mu_;
  std::atomic<uint64_t> fence_{0};                              // the chief generation allowed to push (0: any)
  uint32_t closure_namespace_ TFJOB_GUARDED_BY(fence_mu_) = 0;  // kept from the first Fence that proposed one
  std::atomic<bool> completed_{false};

  Mutex shutdown_mu_;
  CondVar shutdown_cv_;
  bool shutdown_ TFJOB_GUARDED_BY(shutdown_mu_) = false;
};

// A running PS: one listening socket whose connections go to gRPC (HTTP/2)
// or to the data plane (wire::kHelloMagic) by their first bytes.
class PsServer {
 public:
  // `address` is host:port; host "", "*", "::", "[::]" or "0.0.0.0" listens
  // on every interface (dual-stack where the host has IPv6). Port 0 picks a
  // free port (port() tells which).
  static StatusOr<std::unique_ptr<PsServer>> Start(const std::string& address, PsOptions options = {});
  // Serves on a socket that already listens (one a launcher bound and
  // handed down, so no port is picked and then raced for). Takes it over.
  static StatusOr<std::unique_ptr<PsServer>> Start(net::Listener listener, PsOptions options = {});
  ~PsServer();
  int port() const { return port_; }
  ParameterServerService& service() { return *service_; }
  // Blocks until a Shutdown RPC, then stops the server.
  void Wait();
  // Stops serving. In-flight calls get `grace` to finish, then are cancelled
  // (a grace of 0 behaves like a crash, for tests).
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(500));

 private:
  struct Connection {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
    std::atomic<bool> busy{false};
    bool to_grpc = false;  // handed to gRPC, which owns the descriptor now
  };
  PsServer() = default;
  void AcceptLoop();
  void Serve(Connection* c, std::string peer);
  // Joins and closes finished connections (under mu_).
  void Reap() TFJOB_REQUIRES(mu_);

  std::unique_ptr<ParameterServerService> service_;
  std::unique_ptr<grpc::Server> server_;
  // With TLS, gRPC's connections go through this (gRPC runs their TLS).
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> grpc_tls_;
  std::shared_ptr<const tls::Config> tls_;  // null: plain TCP
  int listener_fd_ = -1;                    // its number, for gRPC's acceptor
  net::Fd listener_;
  net::Fd wake_;  // eventfd: wakes the acceptor to stop
  int port_ = 0;
  std::thread acceptor_;
  std::atomic<bool> stopping_{false};
  Mutex mu_;  // guards connections_, grpc_open_
  std::list<Connection> connections_ TFJOB_GUARDED_BY(mu_);
  bool grpc_open_ TFJOB_GUARDED_BY(mu_) = true;
  bool stopped_ TFJOB_GUARDED_BY(mu_) = false;
};

proto::Optimizer OptimizerToProto(const model::OptimizerSpec& spec);
model::OptimizerSpec OptimizerFromProto(const proto::Optimizer& p);

}  // namespace tfjob::ps
