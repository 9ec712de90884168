#include "services/coordinator/coordinator.h"

#include <algorithm>

#include "common/mutex.h"
#include "services/rpc/rpc.h"

namespace tfjob::coordinator {

uint64_t NewGeneration(uint64_t newer_than) {
  static std::atomic<uint64_t> last{0};
  const uint64_t now = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  uint64_t prev = last.load();
  uint64_t g;
  do {
    g = std::max({now, newer_than + 1, prev + 1});
  } while (!last.compare_exchange_weak(prev, g));
  return g;
}

bool RemoteValue::ready() const {
  if (!state_) return false;
  MutexLock g(state_->mu);
  return state_->done;
}

Status RemoteValue::Wait() const {
  if (!state_) return FailedPrecondition("empty RemoteValue");
  MutexLock lock(state_->mu);
  state_->cv.Wait(lock, [&]() TFJOB_REQUIRES(state_->mu) { return state_->done; });
  return state_->status;
}

StatusOr<Result> RemoteValue::Fetch() const {
  RETURN_IF_ERROR(Wait());
  MutexLock g(state_->mu);
  return state_->result;
}

ClusterCoordinator::ClusterCoordinator(std::vector<std::string> addresses, Options options)
    : options_(options),
      generation_(options.generation != 0 ? options.generation : NewGeneration()),
      namespace_(static_cast<uint64_t>(options.closure_namespace != 0 ? options.closure_namespace
                                                                      : static_cast<uint32_t>(generation_))
                 << 32) {
  for (size_t i = 0; i < addresses.size(); ++i) {
    auto w = std::make_unique<Worker>();
    w->index = static_cast<int>(i);
    w->address = addresses[i];
    w->stub = std::make_unique<rpc::RenewingStub<proto::Worker>>(addresses[i], options_.credentials);
    workers_.push_back(std::move(w));
  }
  for (auto& w : workers_) threads_.emplace_back([this, worker = w.get()] { Loop(*worker); });
}

ClusterCoordinator::~ClusterCoordinator() {
  {
    MutexLock g(mu_);
    stopping_ = true;
  }
  queue_cv_.NotifyAll();
  for (auto& w : workers_) {
    MutexLock g(w->mu);
    w->cv.NotifyAll();
  }
  for (auto& t : threads_) t.join();
  CancelQueued(Cancelled("coordinator stopped"));
}

RemoteValue ClusterCoordinator::Schedule(const std::string& fn, const nlohmann::json& args,
                                         const std::vector<Tensor>& tensors) {
  auto c = std::make_shared<Closure>();
  c->value = std::make_shared<RemoteValue::State>();
  c->request.set_function(fn);
  c->request.set_args_json(args.dump());
  c->request.set_coordinator_incarnation(generation_);
  c->request.set_max_running(static_cast<uint32_t>(std::max(1, options_.inflight_per_worker)));
  for (const Tensor& t : tensors) rpc::TensorToProto(t, c->request.add_args());
  std::optional<Status> aborted;
  {
    MutexLock g(mu_);
    // The same namespace and order give a restarted chief the same ids.
    c->id = namespace_ | (next_seq_++ & 0xffffffffULL);
    c->request.set_closure_id(c->id);
    ++pending_;
    ++stats_.scheduled;
    queue_.push_back(c);
    aborted = aborted_;
  }
  if (aborted) {
    CancelQueued(*aborted);
  } else {
    queue_cv_.NotifyOne();
    Kick();
  }
  return RemoteValue(c->value);
}

std::optional<Status> ClusterCoordinator::CheckStop() {
  if (options_.stop && options_.stop->load()) Stop(Cancelled("stopped by a signal"), /*cancel_in_flight=*/false);
  MutexLock g(mu_);
  return aborted_;
}

Status ClusterCoordinator::Join() {
  MutexLock lock(mu_);
  while (pending_ != 0) {
    if (!options_.stop) {
      idle_cv_.Wait(lock);
      continue;
    }
    idle_cv_.WaitFor(lock, std::chrono::milliseconds(100));
    if (options_.stop->load() && !aborted_) {
      lock.Unlock();
      CheckStop();
      lock.Lock();
    }
  }
  if (first_error_) {
    Status s = *first_error_;
    first_error_.reset();
    return s;
  }
  return Status::Ok();
}

Status ClusterCoordinator::Join(const std::vector<RemoteValue>& values) {
  while (true) {
    {
      MutexLock lock(mu_);
      if (first_error_ || aborted_ || (options_.stop && options_.stop->load())) break;
    }
    // The last of them not done yet is waited for on its own: closures
    // start in order, so it is about the last to end, and the chief wakes
    // once or twice a Join rather than at every closure's end. Another
    // closure's failure or a stop is seen when it ends, or within 0.1 s.
    RemoteValue::State* last = nullptr;
    bool failed = false;
    for (auto v = values.rbegin(); v != values.rend(); ++v) {
      if (!v->state_) continue;
      MutexLock g(v->state_->mu);
      if (!v->state_->done) {
        if (!last) last = v->state_.get();
      } else if (!v->state_->status.ok()) {
        failed = true;
      }
    }
    if (failed) break;
    if (!last) return Status::Ok();
    MutexLock g(last->mu);
    if (!last->done) last->cv.WaitFor(g, std::chrono::milliseconds(100));
  }
  return Join();
}

void ClusterCoordinator::Stop(const Status& cause, bool cancel_in_flight) {
  {
    MutexLock g(mu_);
    if (aborted_) return;
    aborted_ = cause;
    no_more_work_ = true;
    if (!first_error_) first_error_ = cause;
    // Cancelled under mu_: a call leaves in_flight_ (under mu_) before its
    // context is destroyed.
    if (cancel_in_flight) {
      for (grpc::ClientContext* c : in_flight_) c->TryCancel();
    }
  }
  CancelQueued(cause);
  queue_cv_.NotifyAll();
  for (auto& w : workers_) {
    MutexLock g(w->mu);
    w->cv.NotifyAll();
  }
}

bool ClusterCoordinator::Done() const {
  MutexLock g(mu_);
  return pending_ == 0;
}

Stats ClusterCoordinator::stats() const {
  MutexLock g(mu_);
  return stats_;
}

std::shared_ptr<ClusterCoordinator::Closure> ClusterCoordinator::Pop(bool wait) {
  MutexLock lock(mu_);
  if (wait) queue_cv_.Wait(lock, [&]() TFJOB_REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
  if (stopping_ || queue_.empty()) return nullptr;
  auto c = queue_.front();
  queue_.pop_front();
  return c;
}

void ClusterCoordinator::PutBack(std::shared_ptr<Closure> c) {
  {
    MutexLock g(mu_);
    queue_.push_front(std::move(c));
  }
  queue_cv_.NotifyOne();
  Kick();
}

void ClusterCoordinator::Requeue(std::shared_ptr<Closure> c) {
  {
    MutexLock g(mu_);
    ++stats_.retried;
    if (options_.metrics) options_.metrics->RecordClosureRetried();
  }
  PutBack(std::move(c));
}

void ClusterCoordinator::Finish(const std::shared_ptr<Closure>& c, Status s, Result r) {
  // Counted before the value is visible: a caller that saw its values done
  // reads stats() with every one of them in it (Join(values) then a summary).
  {
    MutexLock g(mu_);
    if (s.ok())
      ++stats_.completed;
    else if (s.code() != Code::kCancelled)
      ++stats_.failed;
  }
  {
    MutexLock g(c->value->mu);
    c->value->done = true;
    c->value->status = s;
    c->value->result = std::move(r);
  }
  c->value->cv.NotifyAll();
  // Pending drops after the value is set, so Join() finds every value done.
  bool idle = false;
  {
    MutexLock g(mu_);
    --pending_;
    idle = pending_ == 0;
  }
  if (idle) idle_cv_.NotifyAll();
}

void ClusterCoordinator::CancelQueued(const Status& cause) {
  std::deque<std::shared_ptr<Closure>> dropped;
  {
    MutexLock g(mu_);
    dropped.swap(queue_);
  }
  for (auto& c : dropped) Finish(c, Cancelled("cancelled: " + cause.message()), {});
}

Status ClusterCoordinator::CreateResourcesOn(Worker& w, const ResourceSpec& spec) {
  proto::CreateResourcesRequest req;
  req.set_dataset_fn(spec.dataset_fn);
  req.set_args_json(spec.args_json);
  req.set_resource(spec.resource);
  req.set_coordinator_incarnation(generation_);
  proto::CreateResourcesResponse resp;
  auto ctx = rpc::Context(options_.rpc_timeout, options_.credentials);
  const auto stub = w.stub->Get();
  const grpc::Status st = stub->CreateResources(ctx.get(), req, &resp);
  w.stub->Observe(stub, st);
  return rpc::FromGrpc(st, "CreateResources on worker " + w.address);
}

Status ClusterCoordinator::ReplayResources(Worker& w) {
  std::vector<ResourceSpec> specs;
  {
    MutexLock g(mu_);
    specs = resources_;
  }
  for (const auto& spec : specs) RETURN_IF_ERROR(CreateResourcesOn(w, spec));
  return Status::Ok();
}

Status ClusterCoordinator::CreatePerWorkerDataset(const std::string& dataset_fn, const nlohmann::json& args,
                                                  const std::string& resource) {
  ResourceSpec spec{dataset_fn, args.dump(), resource};
  {
    MutexLock g(mu_);
    resources_.push_back(spec);
  }
  for (auto& w : workers_) {
    // Wait until the worker has connected (its dispatcher threads probe it);
    // a worker connecting later gets the dataset from ReplayResources.
    const auto deadline = std::chrono::steady_clock::now() + options_.connect_timeout;
    MutexLock lock(w->mu);
    while (!w->healthy && !stopping_.load()) {
      lock.Unlock();
      const std::optional<Status> aborted = CheckStop();
      lock.Lock();
      if (aborted) return *aborted;
      if (std::chrono::steady_clock::now() >= deadline) {
        return Unavailable("worker " + w->address + " unreachable for " +
                           std::to_string(options_.connect_timeout.count() / 1000) + " s");
      }
      w->cv.WaitFor(lock, std::chrono::milliseconds(100));
    }
    if (stopping_) return Cancelled("coordinator stopped");
    Status s = CreateResourcesOn(*w, spec);
    if (!s.ok() && s.code() != Code::kUnavailable) return s;
    if (!s.ok()) w->healthy = false;  // it went away: Reconnect will replay
  }
  return Status::Ok();
}

bool ClusterCoordinator::Healthy(Worker& w) {
  proto::WorkerStatusRequest req;
  req.set_coordinator_incarnation(generation_);
  proto::WorkerStatusResponse resp;
  auto ctx = rpc::Context(std::chrono::milliseconds(2000), options_.credentials);
  const auto stub = w.stub->Get();
  const grpc::Status st = stub->GetStatus(ctx.get(), req, &resp);
  w.stub->Observe(stub, st);
  if (!st.ok()) return false;
  MutexLock g(w.mu);
  return resp.incarnation() == w.incarnation;
}

void ClusterCoordinator::Reconnect(Worker& w) {
  {
    MutexLock lock(w.mu);
    if (w.reconnecting) {  // another dispatcher thread of this worker is on it
      w.cv.Wait(lock, [&]() TFJOB_REQUIRES(w.mu) { return w.healthy || stopping_ || no_more_work_; });
      return;
    }
    w.reconnecting = true;
  }
  while (!stopping_ && !no_more_work_) {
    proto::WorkerStatusRequest req;
    req.set_coordinator_incarnation(generation_);
    proto::WorkerStatusResponse resp;
    auto ctx = rpc::Context(std::chrono::milliseconds(1000), options_.credentials);
    const auto stub = w.stub->Get();
    grpc::Status st = stub->GetStatus(ctx.get(), req, &resp);
    w.stub->Observe(stub, st);
    if (st.ok()) {
      MutexLock lock(w.mu);
      if (w.incarnation != resp.incarnation()) {
        // A new process: its datasets are gone. Rebuild before taking work.
        Status s = ReplayResources(w);
        if (!s.ok()) {
          lock.Unlock();
          if (s.code() != Code::kUnavailable && s.code() != Code::kDeadlineExceeded) {
            // The worker answers but cannot build them (a flag it cannot
            // honour, bad data): the job's error, raised by Join, as when
            // CreatePerWorkerDataset meets it first. Not a lost worker.
            Stop(s, /*cancel_in_flight=*/false);
            break;
          }
          std::this_thread::sleep_for(options_.probe_interval);
          continue;
        }
        w.incarnation = resp.incarnation();
      }
      w.healthy = true;
      break;
    }
    std::this_thread::sleep_for(options_.probe_interval);
  }
  MutexLock g(w.mu);
  w.reconnecting = false;
  w.cv.NotifyAll();
}

bool ClusterCoordinator::MarkedHealthy(Worker& w) {
  MutexLock g(w.mu);
  return w.healthy;
}

bool ClusterCoordinator::NoteRestart(Worker& w, const proto::RunClosureResponse& resp) {
  bool restarted = false;
  {
    MutexLock g(w.mu);
    restarted = w.incarnation != 0 && resp.worker_incarnation() != w.incarnation;
    if (restarted) w.healthy = false;  // Reconnect rebuilds its resources
  }
  if (restarted) {
    MutexLock g(mu_);
    ++stats_.worker_failures;
    if (options_.metrics) options_.metrics->RecordWorkerFailure();
  }
  return restarted;
}

void ClusterCoordinator::Complete(Worker& w, const std::shared_ptr<Closure>& c, const grpc::Status& st,
                                  const proto::RunClosureResponse& resp) {
  Status err = !st.ok() ? rpc::FromGrpc(st, "closure " + c->request.function() + " on worker " + w.address)
               : resp.error_code() != 0
                   ? Status(static_cast<Code>(resp.error_code()), "closure " + c->request.function() + " on worker " +
                                                                      w.address + ": " + resp.error_message())
                   : Status::Ok();
  if (!err.ok()) {
    FailJob(c, err);
    return;
  }
  Result r;
  r.json = nlohmann::json::parse(resp.result_json().empty() ? "null" : resp.result_json(), nullptr, false);
  for (const auto& t : resp.results()) {
    auto v = rpc::TensorFromProto(t);
    if (v.ok()) r.tensors.push_back(std::move(v).value());
  }
  Finish(c, Status::Ok(), std::move(r));
}

void ClusterCoordinator::FailJob(const std::shared_ptr<Closure>& c, const Status& err) {
  bool first = false;
  {
    MutexLock g(mu_);
    if (!first_error_) {
      first_error_ = err;
      first = true;
    }
  }
  if (first) CancelQueued(err);
  Finish(c, err, {});
}

void ClusterCoordinator::ShutdownWorkers() {
  for (auto& w : workers_) {
    proto::WorkerShutdownRequest req;
    req.set_coordinator_incarnation(generation_);
    proto::WorkerShutdownResponse resp;
    auto ctx = rpc::Context(std::chrono::milliseconds(2000), options_.credentials);
    w->stub->Get()->Shutdown(ctx.get(), req, &resp);  // best effort: a dead worker needs no shutdown
  }
}

}  // namespace tfjob::coordinator
