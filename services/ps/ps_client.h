// A client for one parameter server. Every call has a deadline; UNAVAILABLE
// (the PS is not up yet, or restarting, or a connection broke) is retried
// with exponential backoff, and the final error names the address. Other
// codes return at once.
//
// CreateVariable, Pull and Push use the PS's data plane (wire.h): the
// tensors' own memory goes to the socket, and pulled bytes are read from the
// socket straight into the destination tensor (PullInto / PullRowsInto take
// a caller's tensor, or a view into a bigger one, so nothing is allocated).
// Data-plane connections are pooled: each call takes an idle one or opens
// one (one hello with the job's token), and puts it back when the exchange
// completed. The other calls go over gRPC.
//
// Thread-safety: a PsClient may be shared by threads; concurrent calls use
// separate connections. Ownership: owns its pooled connections.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "proto/ps.grpc.pb.h"
#include "services/model/spec.h"
#include "services/ps/wire.h"
#include "services/rpc/rpc.h"
#include "services/tensor/tensor.h"

namespace tfjob::ps {

struct ClientOptions {
  std::chrono::milliseconds timeout{30000};
  rpc::RetryPolicy retry;
  rpc::Credentials credentials;  // the job's task token
  // With a PS on the same host (and no TLS), each data-plane connection's
  // payloads go through a shared-memory region of this many bytes
  // (services/ps/shm.h); payloads larger than it go inline. 0: never.
  // SetSharedMemory(false) turns it off for every client.
  size_t shared_memory_bytes = size_t{8} << 20;
};

// Process-wide: false makes every client made afterwards send payloads
// inline (tfjob-runtime sets it from TFJOB_PS_SHM=0 at start-up). Default
// true.
void SetSharedMemory(bool on);

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
  int64_t applied_updates = 0;  // since the PS started or last restored
  uint64_t fence = 0;           // the chief generation holding it (0: none)
};

struct FenceResult {
  uint64_t previous = 0;           // the generation fenced off (0: none)
  uint32_t closure_namespace = 0;  // the job's closure-id namespace this PS keeps
};

class PsClient {
  class Connection;  // a pooled data-plane connection

 public:
  explicit PsClient(std::string address, ClientOptions options = {});
  ~PsClient();
  PsClient(const PsClient&) = delete;
  PsClient& operator=(const PsClient&) = delete;

  const std::string& address() const { return address_; }
  // How many of this client's data-plane connections so far carry their
  // payloads in shared memory.
  int shared_memory_connections() const { return shm_connections_.load(); }

  // Opens data-plane connections (each with its shared-memory region when
  // the PS is on this host) until `connections` are idle in the pool, so
  // that as many exchanges at once start without connecting first. One
  // attempt each, no retry, all `within` that time: the first error is
  // returned, and what was opened before it stays in the pool.
  Status Open(size_t connections, std::chrono::milliseconds within);

  // Returns true when created, false when it already existed identically.
  StatusOr<bool> CreateVariable(const std::string& name, const Tensor& initial,
                                const std::optional<model::OptimizerSpec>& optimizer);
  StatusOr<std::vector<Tensor>> Pull(const std::vector<std::string>& names);
  // Pulls names[i] into out[i], which must already have the variable's
  // dtype and shape (INVALID_ARGUMENT otherwise, and `out` may then hold part
  // of the values). Views (Tensor::Rows) write into the tensor they view.
  Status PullInto(const std::vector<std::string>& names, std::span<Tensor> out);
  StatusOr<Tensor> PullRows(const std::string& name, const std::vector<int64_t>& rows);
  // Rows `rows` of a variable into `out` ([rows.size(), ...row shape]).
  Status PullRowsInto(const std::string& name, const std::vector<int64_t>& rows, Tensor& out);
  // Returns how many updates were skipped as already applied. `generation`
  // is the chief's whose closure pushes (0: none; see FenceRequest).
  StatusOr<int> Push(uint64_t closure_id, uint32_t sequence, const std::vector<Update>& updates,
                     uint64_t generation = 0);
  // Push, then PullInto of `names`, in one exchange (proto/ps.proto:
  // PushPullRequest): the pull sees the push. Returns what Push returns. A
  // refused push (or pull) is the call's error, and then nothing was
  // pulled; a push applied before the pull part failed stays applied, as
  // with two calls (a retry is skipped as already applied).
  StatusOr<int> PushPullInto(uint64_t closure_id, uint32_t sequence, const std::vector<Update>& updates,
                             uint64_t generation, const std::vector<std::string>& names, std::span<Tensor> out);

  // Push, PullInto, PullRowsInto and PushPullInto in two halves, so the
  // caller works while the PS answers, with no thread of its own: Start*
  // sends the request (argument errors come back here) and returns; Finish
  // reads the answer into `out` and returns what Push / PushPullInto return
  // (0 for a pull). `out` (the tensors it spans) must stay alive and unread
  // until Finish. An exchange that broke (UNAVAILABLE) is redone whole by
  // Finish with the usual retries (a push is applied once however often it
  // is sent); dropping a Pending unfinished closes its connection. A Pending
  // holds a connection of its own: many may be open at once.
  class Pending {
   public:
    Pending();
    ~Pending();

   private:
    friend class PsClient;
    std::string context;
    uint32_t op = 0;
    std::string meta_bytes;
    std::vector<Tensor> payload;
    std::function<Status(Connection&, const std::string&, uint64_t)> on_response;
    std::shared_ptr<int> duplicates;  // a PushPull's answer
    // Null when no connection could be taken: Finish runs the whole call.
    std::unique_ptr<Connection> c;
    Status sent;
  };
  StatusOr<std::unique_ptr<Pending>> StartPush(uint64_t closure_id, uint32_t sequence,
                                               const std::vector<Update>& updates, uint64_t generation);
  StatusOr<std::unique_ptr<Pending>> StartPullInto(const std::vector<std::string>& names, std::span<Tensor> out);
  StatusOr<std::unique_ptr<Pending>> StartPullRowsInto(const std::string& name, const std::vector<int64_t>& rows,
                                                       Tensor& out);
  StatusOr<std::unique_ptr<Pending>> StartPushPullInto(uint64_t closure_id, uint32_t sequence,
                                                       const std::vector<Update>& updates, uint64_t generation,
                                                       const std::vector<std::string>& names, std::span<Tensor> out);
  StatusOr<int> Finish(std::unique_ptr<Pending> p);
  // Checkpoints at `step` in the PS's own checkpoint directory; returns the
  // bytes of tensors saved / the variables restored. A `generation` older
  // than the PS's fence is FAILED_PRECONDITION (0: not checked).
  StatusOr<int64_t> Save(int64_t step, uint64_t generation = 0);
  StatusOr<int> Restore(int64_t step, uint64_t generation = 0);
  StatusOr<PsStatus> GetStatus();
  // Makes `generation` the only chief whose closures may push here, and
  // proposes the job's closure-id namespace (proto/ps.proto: FenceRequest).
  // FAILED_PRECONDITION when a newer generation holds the PS.
  StatusOr<FenceResult> Fence(uint64_t generation, uint32_t proposed_namespace = 0);
  // The chief's word that training is complete: the PS exits 0.
  Status Shutdown(uint64_t generation = 0);

 private:
  // What a data-plane call does with an OK response: parse the meta, read
  // the payload. A non-OK return drops the connection.
  using OnResponse = std::function<Status(Connection&, const std::string& meta, uint64_t payload_bytes)>;

  // `read_only`: the call changes nothing on the server, so one that ran
  // out of time before its channel connected (RenewingStub::Observe) is
  // retried like UNAVAILABLE, on the renewed channel.
  template <typename Req, typename Resp, typename Fn>
  Status Call(const char* what, const Req& req, Resp* resp, Fn fn, bool read_only = false);
  // One data-plane exchange, retried like an RPC: `meta` then the bytes of
  // `payload` in order.
  Status DataCall(const char* what, uint32_t op, const google::protobuf::MessageLite& meta,
                  std::span<const Tensor> payload, const OnResponse& on_response);
  Status Retried(const std::string& context, uint32_t op, const std::string& meta_bytes,
                 std::span<const Tensor> payload, const OnResponse& on_response);
  static StatusOr<std::string> SerializeMeta(const std::string& context, const google::protobuf::MessageLite& meta);
  // The halves of one exchange on `c`: the request (payload in the
  // connection's region when it fits), then the answer; ReadResponse gives
  // `c` back to the pool when the exchange completed.
  Status SendRequest(Connection& c, uint32_t op, const std::string& meta_bytes, std::span<const Tensor> payload);
  Status ReadResponse(std::unique_ptr<Connection> c, const Status& sent, const std::string& context,
                      const OnResponse& on_response);
  // Sends the request now (no retry); Finish reads or redoes it.
  std::unique_ptr<Pending> Start(const char* what, uint32_t op, std::string meta_bytes, std::vector<Tensor> payload,
                                 OnResponse on_response, std::shared_ptr<int> duplicates);
  // Reads a Pull (or, with `duplicates`, a PushPull) response into `out`.
  OnResponse PullReader(size_t count, std::span<Tensor> out, std::shared_ptr<int> duplicates);
  // An idle connection of the pool, or a new one (Connect).
  StatusOr<std::unique_ptr<Connection>> TakeConnection(std::chrono::steady_clock::time_point deadline);
  // A new connection: connect, the hello with the token, and the region.
  StatusOr<std::unique_ptr<Connection>> Connect(std::chrono::steady_clock::time_point deadline);
  void GiveBack(std::unique_ptr<Connection> c);
  // Offers the PS a shared-memory region for `c` (its host key matched);
  // on a refusal the connection carries payloads inline, and so do the
  // client's later ones.
  Status AttachSharedMemory(Connection& c);
  // Reads a pulled tensor described by `header` into `out`, allocating it
  // when `out` is null.
  Status ReceiveTensor(Connection& c, const proto::Tensor& header, Tensor* out, Tensor* allocated);

  std::string address_;
  ClientOptions options_;
  rpc::RenewingStub<proto::ParameterServer> stub_;
  Mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_ TFJOB_GUARDED_BY(mu_);
  std::atomic<bool> shm_refused_{false};
  std::atomic<int> shm_connections_{0};
};

}  // namespace tfjob::ps
