#include "services/worker/worker.h"

#include <algorithm>

#include "common/mutex.h"
#include "services/rpc/rpc.h"

namespace tfjob::worker {

int64_t ClosureContext::worker_index() const { return state_.env().worker_index; }
const std::vector<std::shared_ptr<ps::PsClient>>& ClosureContext::ps() const { return state_.ps(); }
StatusOr<std::optional<data::Element>> ClosureContext::Next(const std::string& resource) {
  return state_.Next(resource);
}

Status Registry::AddClosure(const std::string& name, ClosureFn fn) {
  if (!closures_.emplace(name, std::move(fn)).second)
    return AlreadyExists("closure \"" + name + "\" is already registered");
  return Status::Ok();
}

Status Registry::AddDataset(const std::string& name, DatasetFn fn) {
  if (!datasets_.emplace(name, std::move(fn)).second)
    return AlreadyExists("dataset \"" + name + "\" is already registered");
  return Status::Ok();
}

const ClosureFn* Registry::FindClosure(const std::string& name) const {
  auto it = closures_.find(name);
  return it == closures_.end() ? nullptr : &it->second;
}

const DatasetFn* Registry::FindDataset(const std::string& name) const {
  auto it = datasets_.find(name);
  return it == datasets_.end() ? nullptr : &it->second;
}

WorkerState::WorkerState(WorkerEnv env) : env_(std::move(env)) {
  env_.ps.clear();
  for (const auto& a : env_.ps_addresses) env_.ps.push_back(std::make_shared<ps::PsClient>(a, env_.ps_options));
}

void WorkerState::SetResource(const std::string& name, std::unique_ptr<data::Iterator> it) {
  auto r = std::make_shared<Resource>();
  {
    MutexLock init(r->mu);  // not shared yet; the lock is for the analysis
    r->it = std::move(it);
  }
  MutexLock g(mu_);
  resources_[name] = std::move(r);
}

StatusOr<std::optional<data::Element>> WorkerState::Next(const std::string& name) {
  std::shared_ptr<Resource> r;
  {
    MutexLock g(mu_);
    auto it = resources_.find(name);
    if (it == resources_.end()) {
      return FailedPrecondition("worker " + std::to_string(env_.worker_index) + " has no resource \"" + name + "\"");
    }
    r = it->second;
  }
  MutexLock g(r->mu);
  return r->it->Next();
}

std::vector<std::string> WorkerState::ResourceNames() {
  MutexLock g(mu_);
  std::vector<std::string> out;
  for (const auto& [k, _] : resources_) out.push_back(k);
  return out;
}

WorkerService::WorkerService(const Registry& registry, WorkerEnv env)
    : registry_(registry), state_(std::move(env)), incarnation_(rpc::NewIncarnation()) {}

Status WorkerService::Admit(uint64_t generation, const char* what) {
  if (generation == 0) return Status::Ok();
  uint64_t seen = generation_.load();
  while (generation > seen && !generation_.compare_exchange_weak(seen, generation)) {
  }
  if (generation < seen) {
    return FailedPrecondition(std::string(what) + " refused: chief generation " + std::to_string(generation) +
                              " has been replaced by generation " + std::to_string(seen));
  }
  return Status::Ok();
}

grpc::Status WorkerService::CreateResources(grpc::ServerContext* call, const proto::CreateResourcesRequest* req,
                                            proto::CreateResourcesResponse*) {
  if (auto a = rpc::Authenticate(*call, state_.env().ps_options.credentials); !a.ok()) return a;
  if (Status g = Admit(req->coordinator_incarnation(), "CreateResources"); !g.ok()) return rpc::ToGrpc(g);
  const DatasetFn* fn = registry_.FindDataset(req->dataset_fn());
  if (!fn) return rpc::ToGrpc(NotFound("no dataset function \"" + req->dataset_fn() + "\" on this worker"));
  nlohmann::json args = nlohmann::json::parse(req->args_json().empty() ? "null" : req->args_json(), nullptr, false);
  if (args.is_discarded()) return rpc::ToGrpc(InvalidArgument("CreateResources: args are not JSON"));
  auto ds = (*fn)(state_.env(), args);
  if (!ds.ok()) return rpc::ToGrpc(ds.status());
  auto it = ds->MakeIterator();
  if (!it.ok()) return rpc::ToGrpc(it.status());
  state_.SetResource(req->resource(), std::move(it).value());
  return grpc::Status::OK;
}

grpc::Status WorkerService::RunClosure(grpc::ServerContext* call, const proto::RunClosureRequest* req,
                                       proto::RunClosureResponse* resp) {
  if (auto a = rpc::Authenticate(*call, state_.env().ps_options.credentials); !a.ok()) return a;
  resp->set_worker_incarnation(incarnation_);
  auto fail = [&](const Status& s) {
    resp->set_error_code(static_cast<int>(s.code()));
    resp->set_error_message(s.message());
    return grpc::Status::OK;
  };
  if (!TakeTurn(call, req->max_running(), req->closure_id(), req->queued_behind()))
    return grpc::Status(grpc::StatusCode::CANCELLED, "closure call cancelled");
  struct Turn {
    WorkerService* w;
    ~Turn() { w->EndTurn(); }
  } turn{this};
  // Admitted once its turn came: a newer chief may have spoken meanwhile.
  if (Status g = Admit(req->coordinator_incarnation(), "closure"); !g.ok()) return fail(g);
  const ClosureFn* fn = registry_.FindClosure(req->function());
  if (!fn) return fail(NotFound("no closure \"" + req->function() + "\" on this worker"));
  nlohmann::json args = nlohmann::json::parse(req->args_json().empty() ? "null" : req->args_json(), nullptr, false);
  if (args.is_discarded()) return fail(InvalidArgument("closure args are not JSON"));
  std::vector<Tensor> tensors;
  for (const auto& t : req->args()) {
    auto v = rpc::TensorFromProto(t);
    if (!v.ok()) return fail(v.status());
    tensors.push_back(std::move(v).value());
  }
  ClosureContext ctx(req->closure_id(), req->coordinator_incarnation(), state_);
  StatusOr<ClosureResult> r = Status(Code::kInternal, "closure threw");
  const auto start = std::chrono::steady_clock::now();
  try {
    r = (*fn)(ctx, args, tensors);
  } catch (const std::exception& e) {
    r = Internal(std::string("closure \"") + req->function() + "\" threw: " + e.what());
  }
  if (auto* m = state_.env().metrics) {
    m->RecordWorkerClosure(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  closures_run_.fetch_add(1, std::memory_order_relaxed);
  if (!r.ok()) return fail(r.status());
  resp->set_result_json(r->json.dump());
  for (const Tensor& t : r->tensors) rpc::TensorToProto(t, resp->add_results());
  return grpc::Status::OK;
}

bool WorkerService::TakeTurn(grpc::ServerContext* call, uint32_t max_running, uint64_t closure_id, uint64_t behind) {
  // Long next to two calls' arrival gap on one connection, short next to a
  // closure's deadline: the predecessor was cancelled if it has not come.
  constexpr auto kPredecessorWait = std::chrono::seconds(2);
  const auto give_up = std::chrono::steady_clock::now() + kPredecessorWait;
  MutexLock lock(turn_mu_);
  const std::pair<uint64_t, uint64_t> me{closure_id, arrivals_++};
  waiting_.insert(me);
  arrived_.push_back(closure_id);
  if (arrived_.size() > 64) arrived_.pop_front();
  turn_cv_.NotifyAll();  // a closure sent behind this one may wait for it
  auto predecessor_missing = [&]() TFJOB_REQUIRES(turn_mu_) {
    return behind != 0 && std::find(arrived_.begin(), arrived_.end(), behind) == arrived_.end() &&
           std::chrono::steady_clock::now() < give_up;
  };
  while (*waiting_.begin() != me || (max_running != 0 && running_ >= max_running) || predecessor_missing()) {
    // A cancelled call wakes no one here; it is seen within this wait.
    if (call->IsCancelled()) {
      waiting_.erase(me);
      turn_cv_.NotifyAll();  // the next in line may be this one's successor
      return false;
    }
    turn_cv_.WaitFor(lock, std::chrono::milliseconds(50));
  }
  waiting_.erase(me);
  ++running_;
  turn_cv_.NotifyAll();  // the next in line may fit as well
  return true;
}

void WorkerService::EndTurn() {
  {
    MutexLock g(turn_mu_);
    --running_;
  }
  turn_cv_.NotifyAll();  // waiters may carry different limits
}

grpc::Status WorkerService::GetStatus(grpc::ServerContext* call, const proto::WorkerStatusRequest* req,
                                      proto::WorkerStatusResponse* resp) {
  if (auto a = rpc::Authenticate(*call, state_.env().ps_options.credentials); !a.ok()) return a;
  // A probe only teaches the worker a newer generation; it refuses nothing.
  (void)Admit(req->coordinator_incarnation(), "GetStatus");
  resp->set_incarnation(incarnation_);
  resp->set_generation(generation_.load());
  for (const auto& n : state_.ResourceNames()) resp->add_resources(n);
  resp->set_closures_run(closures_run_.load());
  {
    MutexLock g(turn_mu_);
    resp->set_closures_running(running_);
    resp->set_closures_waiting(static_cast<int64_t>(waiting_.size()));
  }
  return grpc::Status::OK;
}

grpc::Status WorkerService::Shutdown(grpc::ServerContext* call, const proto::WorkerShutdownRequest* req,
                                     proto::WorkerShutdownResponse*) {
  if (auto a = rpc::Authenticate(*call, state_.env().ps_options.credentials); !a.ok()) return a;
  if (Status g = Admit(req->coordinator_incarnation(), "Shutdown"); !g.ok()) return rpc::ToGrpc(g);
  completed_.store(true);
  RequestShutdown();
  return grpc::Status::OK;
}

void WorkerService::RequestShutdown() {
  MutexLock g(shutdown_mu_);
  shutdown_ = true;
  shutdown_cv_.NotifyAll();
}

void WorkerService::WaitForShutdown() {
  MutexLock lock(shutdown_mu_);
  shutdown_cv_.Wait(lock, [&]() TFJOB_REQUIRES(shutdown_mu_) { return shutdown_; });
}

StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(const std::string& address, const Registry& registry,
                                                            WorkerEnv env) {
  std::unique_ptr<WorkerServer> s(new WorkerServer());
  const rpc::Credentials credentials = env.ps_options.credentials;
  s->service_ = std::make_unique<WorkerService>(registry, std::move(env));
  ASSIGN_OR_RETURN(s->server_, rpc::StartServer(address, {s->service_.get()}, &s->port_, credentials));
  return s;
}

WorkerServer::~WorkerServer() { Stop(); }

void WorkerServer::Wait() {
  service_->WaitForShutdown();
  Stop();
}

void WorkerServer::Stop(std::chrono::milliseconds grace) {
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + grace);
    server_->Wait();
    server_.reset();
  }
}

}  // namespace tfjob::worker
