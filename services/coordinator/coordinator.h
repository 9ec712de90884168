// The ClusterCoordinator: TensorFlow's schedule / join / done over gRPC
// workers, better where TF is weak:
//   - several closures in flight per worker (TF allows one), and one more
//     waiting on it to start as soon as one ends;
//   - a closure whose worker fails (transport error, restart) goes back on
//     the queue and runs elsewhere; other workers carry on; when the worker
//     returns (new incarnation) its per-worker datasets are rebuilt first;
//   - the first closure error is raised once by Join(), after which no
//     closure is still running and the queued ones are cancelled.
// Closure ids are (namespace << 32 | sequence number) and survive re-runs, so
// a parameter server applies each closure's updates at most once. A chief
// that restarts with the same namespace (ps::FenceResult) and schedules the
// same closures in the same order re-issues the same ids: what its
// predecessor already applied is not applied again.
//
// Generations: every request carries the coordinator's generation (a chief
// generation, monotonic across chief restarts). Workers and parameter
// servers refuse requests of generations older than the newest they know,
// so a replaced chief's closures, datasets, updates and shutdowns are fenced
// off.
//
// Ownership: the coordinator owns its dispatcher threads (one per worker:
// it sends the worker's calls and takes their answers from the worker's own
// completion queue, so with one worker gRPC hands no answer from thread to
// thread; with several, one dispatcher may read another's answer and wake
// it) and stops them in its destructor, after the calls in flight end; RemoteValues share state with it and stay
// valid after it is gone. Thread-safety: every public method may be called
// from any thread. Failure: errors are Status values; a worker that never
// comes back stalls only the closures no other worker can take.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include <grpcpp/alarm.h>
#include <grpcpp/completion_queue.h>

#include "common/mutex.h"
#include "common/status.h"
#include "proto/worker.grpc.pb.h"
#include "services/monitoring/runtime_metrics.h"
#include "services/rpc/auth.h"
#include "services/rpc/rpc.h"
#include "services/tensor/tensor.h"

namespace tfjob::coordinator {

struct Result {
  nlohmann::json json;
  std::vector<Tensor> tensors;
};

class RemoteValue {
 public:
  RemoteValue() = default;
  bool ready() const;
  // Blocks until the closure finished, failed or was cancelled.
  Status Wait() const;
  StatusOr<Result> Fetch() const;

 private:
  friend class ClusterCoordinator;
  struct State {
    mutable Mutex mu;
    CondVar cv;
    bool done TFJOB_GUARDED_BY(mu) = false;
    Status status TFJOB_GUARDED_BY(mu);
    Result result TFJOB_GUARDED_BY(mu);
  };
  explicit RemoteValue(std::shared_ptr<State> s) : state_(std::move(s)) {}
  std::shared_ptr<State> state_;
};

struct Options {
  // The chief's generation (see above); 0: the coordinator takes
  // NewGeneration().
  uint64_t generation = 0;
  // High 32 bits of every closure id; 0: the low 32 bits of the generation.
  uint32_t closure_namespace = 0;
  // When set and it becomes true (SIGTERM), the coordinator drains: queued
  // closures are cancelled, closures in flight finish (so every closure
  // either ran whole or not at all, and a checkpoint after Join is exact),
  // and Join returns CANCELLED (borrowed; must outlive the coordinator).
  const std::atomic<bool>* stop = nullptr;
  // Closures running at once on each worker.
  int inflight_per_worker = 2;
  // Closures sent to each worker beyond those, to wait there
  // (RunClosureRequest.max_running): one starts as soon as a running one
  // ends, where it would otherwise start a round trip to the chief later.
  // They count as in flight: a stop lets them run, and a lost worker's go
  // back on the queue with the others. One is sent only when no worker
  // could start it now (every worker runs inflight_per_worker), and only
  // while the worker's last call took at most a quarter of rpc_timeout: a
  // closure's deadline counts its wait (and the round trip saved matters
  // only for short closures anyway).
  int queued_per_worker = 1;
  // Deadline of one closure's RunClosure call. A call that runs past it is
  // not a worker failure when the worker still answers its health probe:
  // the closure was slow, and goes back on the queue as another attempt.
  std::chrono::milliseconds rpc_timeout{300000};
  // A closure that failed this many times (deadline, or its worker lost)
  // fails the job with its last error instead of being re-queued forever.
  int max_attempts = 5;
  std::chrono::milliseconds probe_interval{100};
  // CreatePerWorkerDataset gives up on a worker that has not answered for
  // this long (UNAVAILABLE naming its address).
  std::chrono::milliseconds connect_timeout{300000};
  // The job's task token, sent with every call to a worker.
  rpc::Credentials credentials;
  // Closure latency, retries and worker failures go here when set
  // (borrowed; must outlive the coordinator).
  runtime_metrics::RuntimeMetrics* metrics = nullptr;
};

struct Stats {
  int64_t scheduled = 0;
  int64_t completed = 0;
  int64_t retried = 0;  // re-queued after a worker failure
  int64_t worker_failures = 0;
  int64_t failed = 0;  // closures that returned an error
  // Sent to a worker already running inflight_per_worker of them (to wait
  // there: Options::queued_per_worker).
  int64_t sent_ahead = 0;
};

// A generation newer than `newer_than` and than any earlier call's: the
// wall clock in microseconds, so a chief restarted on another machine still
// counts up (given clocks within the restart time of each other).
uint64_t NewGeneration(uint64_t newer_than = 0);

class ClusterCoordinator {
 public:
  ClusterCoordinator(std::vector<std::string> worker_addresses, Options options = {});
  ~ClusterCoordinator();
  ClusterCoordinator(const ClusterCoordinator&) = delete;
  ClusterCoordinator& operator=(const ClusterCoordinator&) = delete;

  RemoteValue Schedule(const std::string& fn, const nlohmann::json& args = nullptr,
                       const std::vector<Tensor>& tensors = {});
  // Waits for every scheduled closure; returns the first error once.
  // After Abort (or Options::stop), returns the abort's cause promptly.
  Status Join();
  // Waits for `values` only (closures of this coordinator), leaving the
  // others scheduled queued or running, so a caller keeps the next ones
  // coming while it looks at these. When one of them, or any closure,
  // fails, or a stop comes, it is Join(): every closure ends, and the
  // first error is returned once.
  Status Join(const std::vector<RemoteValue>& values);
  bool Done() const;
  // Cancels every queued closure and every call in flight; the next Join
  // returns `cause`. The coordinator takes no more work afterwards.
  void Abort(const Status& cause) { Stop(cause, /*cancel_in_flight=*/true); }

  // Builds a per-worker dataset on every worker now, and again on any worker
  // that restarts. Blocks until every worker has it.
  Status CreatePerWorkerDataset(const std::string& dataset_fn, const nlohmann::json& args, const std::string& resource);
  // Tells every worker that training is complete, so it exits (best
  // effort, short deadline).
  void ShutdownWorkers();

  Stats stats() const;
  uint64_t generation() const { return generation_; }
  int num_workers() const { return static_cast<int>(workers_.size()); }

 private:
  struct Closure {
    uint64_t id;
    proto::RunClosureRequest request;
    std::shared_ptr<RemoteValue::State> value;
    int attempts = 0;  // failed attempts so far
  };
  struct Worker {
    int index;
    std::string address;
    std::unique_ptr<rpc::RenewingStub<proto::Worker>> stub;
    // Guards the fields below and the worker's resources: it is held across
    // the CreateResources calls to the worker (CreateResourcesOn,
    // ReplayResources), so a reconnect and CreatePerWorkerDataset never build
    // one worker's datasets twice or half. Lock order: a Worker's mu before
    // the coordinator's mu_, never the reverse, and never two workers' at once.
    Mutex mu TFJOB_ACQUIRED_BEFORE(mu_);
    CondVar cv;
    bool healthy TFJOB_GUARDED_BY(mu) = false;
    bool reconnecting TFJOB_GUARDED_BY(mu) = false;
    uint64_t incarnation TFJOB_GUARDED_BY(mu) = 0;
    // The RunClosure calls this worker has outstanding, and how long its
    // last one took (Options::queued_per_worker).
    Mutex call_mu;
    int calls TFJOB_GUARDED_BY(call_mu) = 0;
    std::chrono::steady_clock::duration last_call TFJOB_GUARDED_BY(call_mu){};
    // Where the worker's calls end, read by its dispatcher thread alone.
    grpc::CompletionQueue cq;
    // Set while the dispatcher waits on `cq` with room for a running
    // closure: a closure queued then sets `kick`, which wakes it.
    bool waiting_with_room TFJOB_GUARDED_BY(call_mu) = false;
    std::unique_ptr<grpc::Alarm> kick TFJOB_GUARDED_BY(call_mu);  // set: its tag (this Worker) not taken yet
  };
  struct Call;  // one RunClosure call in flight (dispatch.cc)
  struct ResourceSpec {
    std::string dataset_fn, args_json, resource;
  };

  // A worker's dispatcher thread: sends queued closures to `w` while it has
  // room (StartCall) and finishes each as its answer comes, until the
  // coordinator stops; reconnects when the worker is lost and nothing of it
  // is in flight any more.
  void Loop(Worker& w);
  // Counts one more call to `w` when it may have one now: fewer than
  // inflight_per_worker outstanding, or fewer than that plus
  // queued_per_worker while its last call was short and every other worker
  // has inflight_per_worker outstanding (`ahead`: the call is one of those
  // queued_per_worker). EndCall uncounts it.
  bool StartCall(Worker& w, bool* ahead) TFJOB_EXCLUDES(w.call_mu, mu_);
  void EndCall(Worker& w) TFJOB_EXCLUDES(w.call_mu);
  // Wakes the dispatchers that wait with room, for a closure just queued.
  void Kick() TFJOB_EXCLUDES(mu_);
  // The steps of one closure on `w`. None is called with a lock held; those
  // that take both take w.mu before mu_.
  bool MarkedHealthy(Worker& w) TFJOB_EXCLUDES(w.mu);
  // Sends `c` to `w` (its call counted by StartCall); its answer comes on
  // w.cq. False (the closure finished as aborted, the call uncounted) after
  // an abort.
  bool Send(Worker& w, std::shared_ptr<Closure> c) TFJOB_EXCLUDES(w.mu, mu_);
  // What the answer of a call means for its closure: done, failed, or back
  // on the queue.
  void Answered(Worker& w, std::unique_ptr<Call> call) TFJOB_EXCLUDES(w.mu, mu_);
  // The call failed as a lost worker would: marks it lost unless it still
  // answers, then retries the closure or, past max_attempts, fails the job.
  void OnCallFailed(Worker& w, std::shared_ptr<Closure> c, const grpc::Status& st) TFJOB_EXCLUDES(w.mu, mu_);
  // Whether the worker answered as a new process (so its resources are gone);
  // if so, marks it for Reconnect and counts a worker failure.
  bool NoteRestart(Worker& w, const proto::RunClosureResponse& resp) TFJOB_EXCLUDES(w.mu, mu_);
  // Finishes the closure with the call's result or error.
  void Complete(Worker& w, const std::shared_ptr<Closure>& c, const grpc::Status& st,
                const proto::RunClosureResponse& resp) TFJOB_EXCLUDES(mu_);
  // Finishes the closure with `err`; the job's first error also cancels the
  // queued closures.
  void FailJob(const std::shared_ptr<Closure>& c, const Status& err) TFJOB_EXCLUDES(mu_);
  // Probes until the worker answers; rebuilds resources on a new incarnation.
  void Reconnect(Worker& w);
  // Whether the worker answers a health probe as the same process.
  bool Healthy(Worker& w);
  Status CreateResourcesOn(Worker& w, const ResourceSpec& spec) TFJOB_REQUIRES(w.mu);
  Status ReplayResources(Worker& w) TFJOB_REQUIRES(w.mu);
  // The queue's front; null when the coordinator stops or (`wait` false)
  // the queue is empty. With `wait`, blocks until either.
  std::shared_ptr<Closure> Pop(bool wait);
  // Back to the queue's front, for whichever worker has room first.
  void PutBack(std::shared_ptr<Closure> c);
  // PutBack, counted as a retry.
  void Requeue(std::shared_ptr<Closure> c);
  void Finish(const std::shared_ptr<Closure>& c, Status s, Result r);
  void CancelQueued(const Status& cause);
  // No more work: queued closures are cancelled with `cause`, and so are
  // calls in flight when `cancel_in_flight`.
  void Stop(const Status& cause, bool cancel_in_flight);
  // Drains when options_.stop says so; the cause once stopped.
  std::optional<Status> CheckStop();

  const Options options_;
  const uint64_t generation_;
  const uint64_t namespace_;  // shifted into the high half
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;

  // The queue and the job's counts. Taken after a Worker's mu, never before
  // it; no call to another process is made while it is held.
  mutable Mutex mu_;
  CondVar queue_cv_, idle_cv_;
  std::deque<std::shared_ptr<Closure>> queue_ TFJOB_GUARDED_BY(mu_);
  int64_t pending_ TFJOB_GUARDED_BY(mu_) = 0;  // scheduled and not finished
  std::optional<Status> first_error_ TFJOB_GUARDED_BY(mu_);
  std::optional<Status> aborted_ TFJOB_GUARDED_BY(mu_);             // set by Stop: no more work
  std::atomic<bool> no_more_work_{false};                           // aborted_ is set (read without mu_)
  std::set<grpc::ClientContext*> in_flight_ TFJOB_GUARDED_BY(mu_);  // RunClosure calls, cancelled by Abort
  std::atomic<bool> stopping_{false};
  uint64_t next_seq_ TFJOB_GUARDED_BY(mu_) = 1;
  Stats stats_ TFJOB_GUARDED_BY(mu_);
  std::vector<ResourceSpec> resources_ TFJOB_GUARDED_BY(mu_);
};

}  // namespace tfjob::coordinator
