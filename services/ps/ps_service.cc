#include "services/ps/ps_service.h"

#include <cstring>

#include "services/checkpoint/checkpoint.h"
#include "services/rpc/rpc.h"
#include "services/tensor/eigen.h"
#include "services/tensor/ops.h"

namespace tfjob::ps {
namespace {

uint64_t DedupKey(uint64_t closure_id, uint32_t sequence) {
  // splitmix-style mix: distinct (id, sequence) pairs collide with negligible probability.
  uint64_t z = closure_id * 0x9e3779b97f4a7c15ULL + sequence + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

grpc::Status Err(const Status& s) { return rpc::ToGrpc(s); }

// Closure ids carry the coordinator's incarnation in their high half.
constexpr uint64_t kCoordinatorMask = 0xffffffff00000000ULL;

// Rows of `value` for a sparse update, validated against the shard.
Status CheckRows(const Tensor& var, const std::vector<int64_t>& rows, const Tensor& value, const std::string& name) {
  if (var.rank() < 1) return InvalidArgument("\"" + name + "\": sparse update on a scalar");
  Shape want = var.shape();
  want[0] = static_cast<int64_t>(rows.size());
  if (value.dtype() != var.dtype() || value.shape() != want) {
    return InvalidArgument("\"" + name + "\": sparse update " + value.DebugString() + " should be " +
                           std::string(DTypeName(var.dtype())) + ShapeString(want));
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= var.dim(0)) {
      return InvalidArgument("\"" + name + "\": row " + std::to_string(rows[i]) + " outside [0, " +
                             std::to_string(var.dim(0)) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace

proto::Optimizer OptimizerToProto(const model::OptimizerSpec& s) {
  proto::Optimizer p;
  p.set_type(static_cast<proto::Optimizer::Type>(static_cast<int>(s.type)));
  p.set_learning_rate(s.learning_rate);
  p.set_momentum(s.momentum);
  p.set_nesterov(s.nesterov);
  p.set_rho(s.rho);
  p.set_centered(s.centered);
  p.set_epsilon(s.epsilon);
  p.set_initial_accumulator_value(s.initial_accumulator_value);
  p.set_beta_1(s.beta_1);
  p.set_beta_2(s.beta_2);
  p.set_amsgrad(s.amsgrad);
  return p;
}

model::OptimizerSpec OptimizerFromProto(const proto::Optimizer& p) {
  model::OptimizerSpec s;
  s.type = static_cast<model::OptimizerType>(static_cast<int>(p.type()));
  s.learning_rate = p.learning_rate();
  s.momentum = p.momentum();
  s.nesterov = p.nesterov();
  s.rho = p.rho();
  s.centered = p.centered();
  s.epsilon = p.epsilon();
  s.initial_accumulator_value = p.initial_accumulator_value();
  s.beta_1 = p.beta_1();
  s.beta_2 = p.beta_2();
  s.amsgrad = p.amsgrad();
  return s;
}

ParameterServerService::ParameterServerService(PsOptions options)
    : options_(options), incarnation_(rpc::NewIncarnation()) {}

std::shared_ptr<ParameterServerService::Shard> ParameterServerService::Find(const std::string& name) {
  std::shared_lock lock(table_mu_);
  auto it = shards_.find(name);
  return it == shards_.end() ? nullptr : it->second;
}

bool ParameterServerService::Remember(Shard& s, uint64_t key) {
  if (!s.seen.insert(key).second) return false;
  s.seen_order.push_back(key);
  if (s.seen_order.size() > options_.dedup_window) {
    s.seen.erase(s.seen_order.front());
    s.seen_order.pop_front();
  }
  return true;
}

grpc::Status ParameterServerService::CreateVariable(grpc::ServerContext* call, const proto::CreateVariableRequest* req,
                                                    proto::CreateVariableResponse* resp) {
  if (auto a = rpc::Authenticate(*call, options_.credentials); !a.ok()) return a;
  runtime_metrics::ScopedRpc rpc_metrics(options_.metrics, "CreateVariable", req, resp);
  if (req->name().empty()) return Err(InvalidArgument("CreateVariable: empty name"));
  auto value = rpc::TensorFromProto(req->initial_value());
  if (!value.ok()) return Err(value.status().WithContext("CreateVariable \"" + req->name() + "\""));
  std::unique_lock lock(table_mu_);
  auto it = shards_.find(req->name());
  if (it != shards_.end()) {
    std::lock_guard g(it->second->mu);
    if (it->second->value.shape() != value->shape() || it->second->value.dtype() != value->dtype()) {
      return Err(AlreadyExists("variable \"" + req->name() + "\" exists as " + it->second->value.DebugString() +
                               ", not " + value->DebugString()));
    }
    resp->set_created(false);
    return grpc::Status::OK;
  }
  auto shard = std::make_shared<Shard>();
  shard->value = std::move(value).value();
  if (req->has_optimizer() && shard->value.dtype() == DType::kFloat32) {
    shard->optimizer.emplace(OptimizerFromProto(req->optimizer()));
    shard->slots = shard->optimizer->CreateSlots(shard->value);
  }
  shards_.emplace(req->name(), std::move(shard));
  resp->set_created(true);
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Pull(grpc::ServerContext* call, const proto::PullRequest* req, proto::PullResponse* resp) {
  if (auto a = rpc::Authenticate(*call, options_.credentials); !a.ok()) return a;
  runtime_metrics::ScopedRpc rpc_metrics(options_.metrics, "Pull", req, resp);
  if (req->rows_size() > 0 && req->names_size() != 1) {
    return Err(InvalidArgument("Pull: rows need exactly one variable, got " + std::to_string(req->names_size())));
  }
  for (const std::string& name : req->names()) {
    auto shard = Find(name);
    if (!shard) return Err(NotFound("Pull: no variable \"" + name + "\" on this parameter server"));
    std::lock_guard g(shard->mu);
    if (req->rows_size() == 0) {
      rpc::TensorToProto(shard->value, resp->add_values());
      continue;
    }
    std::vector<int64_t> rows(req->rows().begin(), req->rows().end());
    auto idx = Tensor::FromVector({static_cast<int64_t>(rows.size())}, rows);
    auto picked = ops::Gather(shard->value, *idx);
    if (!picked.ok()) return Err(InvalidArgument("Pull \"" + name + "\": " + picked.status().message()));
    rpc::TensorToProto(*picked, resp->add_values());
  }
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Push(grpc::ServerContext* call, const proto::PushRequest* req, proto::PushResponse* resp) {
  if (auto a = rpc::Authenticate(*call, options_.credentials); !a.ok()) return a;
  runtime_metrics::ScopedRpc rpc_metrics(options_.metrics, "Push", req, resp);
  if (const uint64_t fence = fence_.load(); fence != 0) {
    const uint64_t from = req->coordinator_incarnation() != 0 ? req->coordinator_incarnation()
                                                              : req->closure_id() & kCoordinatorMask;
    if ((from & kCoordinatorMask) != (fence & kCoordinatorMask)) {
      return Err(FailedPrecondition("Push: closure " + std::to_string(req->closure_id()) +
                                    " comes from a coordinator that has been fenced off (a newer chief took over)"));
    }
  }
  // Validate everything first so a bad request changes nothing.
  struct Prepared {
    std::shared_ptr<Shard> shard;
    const proto::Update* update;
    Tensor value;
    std::vector<int64_t> rows;
  };
  std::vector<Prepared> prepared;
  prepared.reserve(static_cast<size_t>(req->updates_size()));
  for (const proto::Update& u : req->updates()) {
    auto shard = Find(u.name());
    if (!shard) return Err(NotFound("Push: no variable \"" + u.name() + "\" on this parameter server"));
    auto value = rpc::TensorFromProto(u.value());
    if (!value.ok()) return Err(value.status().WithContext("Push \"" + u.name() + "\""));
    Prepared p{shard, &u, std::move(value).value(), std::vector<int64_t>(u.rows().begin(), u.rows().end())};
    std::lock_guard g(shard->mu);
    if (!p.rows.empty()) {
      Status s = CheckRows(shard->value, p.rows, p.value, u.name());
      if (!s.ok()) return Err(s.WithContext("Push"));
    } else if (p.value.dtype() != shard->value.dtype() || p.value.shape() != shard->value.shape()) {
      return Err(InvalidArgument("Push \"" + u.name() + "\": update " + p.value.DebugString() +
                                 " does not match variable " + shard->value.DebugString()));
    }
    if (u.kind() == proto::Update::APPLY_GRADIENT && !shard->optimizer) {
      return Err(FailedPrecondition("Push \"" + u.name() + "\": variable has no optimizer to apply gradients with"));
    }
    prepared.push_back(std::move(p));
  }
  const bool dedup = req->closure_id() != 0;
  const uint64_t key = DedupKey(req->closure_id(), req->sequence());
  int duplicates = 0;
  for (Prepared& p : prepared) {
    Shard& s = *p.shard;
    std::lock_guard g(s.mu);
    if (dedup && !Remember(s, key)) {
      ++duplicates;
      continue;
    }
    Status st;
    const bool sparse = !p.rows.empty();
    Tensor rows_t;
    if (sparse) rows_t = *Tensor::FromVector({static_cast<int64_t>(p.rows.size())}, p.rows);
    switch (p.update->kind()) {
      case proto::Update::APPLY_GRADIENT:
        st = sparse ? s.optimizer->ApplySparse(s.value, rows_t, p.value, s.slots)
                    : s.optimizer->ApplyDense(s.value, p.value, s.slots);
        break;
      case proto::Update::ASSIGN_ADD:
        if (sparse) {
          st = ops::ScatterAdd(s.value, rows_t, p.value);
        } else if (s.value.dtype() == DType::kFloat32) {
          AsArray(s.value) += AsArray(p.value);
        } else {
          int64_t* v = s.value.data<int64_t>();
          const int64_t* d = p.value.data<int64_t>();
          for (int64_t i = 0; i < s.value.size(); ++i) v[i] += d[i];
        }
        break;
      case proto::Update::ASSIGN:
        if (sparse) {
          const int64_t row = s.value.dim(0) ? s.value.size() / s.value.dim(0) : 0;
          const size_t rb = static_cast<size_t>(row) * DTypeSize(s.value.dtype());
          for (size_t i = 0; i < p.rows.size(); ++i) {
            std::memcpy(s.value.raw() + p.rows[i] * rb, p.value.raw() + i * rb, rb);
          }
        } else {
          std::memcpy(s.value.raw(), p.value.raw(), s.value.bytes());
        }
        break;
      default:
        st = InvalidArgument("Push \"" + p.update->name() + "\": unknown update kind");
    }
    if (!st.ok()) return Err(st);
    applied_.fetch_add(1, std::memory_order_relaxed);
  }
  resp->set_duplicates(duplicates);
  return grpc::Status::OK;
}

StatusOr<std::string> ParameterServerService::CheckpointPath(int64_t step) const {
  if (options_.checkpoint_dir.empty()) {
    return FailedPrecondition("this parameter server was started without --checkpoint-dir; give every task of the "
                              "job the same --checkpoint-dir");
  }
  if (step < 0) return InvalidArgument("checkpoint step " + std::to_string(step) + " is negative");
  return options_.checkpoint_dir + "/ckpt-" + std::to_string(step) + "/" + options_.checkpoint_file;
}

grpc::Status ParameterServerService::Save(grpc::ServerContext* call, const proto::SaveRequest* req, proto::SaveResponse* resp) {
  if (auto a = rpc::Authenticate(*call, options_.credentials); !a.ok()) return a;
  auto path = CheckpointPath(req->step());
  if (!path.ok()) return Err(path.status());
  auto writer = checkpoint::Writer::Create(*path);
  if (!writer.ok()) return Err(writer.status());
  std::vector<std::pair<std::string, std::shared_ptr<Shard>>> shards;
  {
    std::shared_lock lock(table_mu_);
    shards.assign(shards_.begin(), shards_.end());
  }
  // One shard copied at a time, written, dropped: saving needs memory for
  // the largest shard, not a copy of the whole table.
  int64_t bytes = 0;
  for (const auto& [name, shard] : shards) {
    checkpoint::Entry e;
    {
      std::lock_guard g(shard->mu);
      e = checkpoint::Entry{name, shard->slots.iterations, {shard->value.Clone()}};
      for (const Tensor& t : shard->slots.slots) e.tensors.push_back(t.Clone());
    }
    for (const auto& t : e.tensors) bytes += static_cast<int64_t>(t.bytes());
    if (Status s = (*writer)->Add(e); !s.ok()) return Err(s);
  }
  if (auto s = (*writer)->Commit(); !s.ok()) return Err(s.status());
  resp->set_bytes(bytes);
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Restore(grpc::ServerContext* call, const proto::RestoreRequest* req,
                                             proto::RestoreResponse* resp) {
  if (auto a = rpc::Authenticate(*call, options_.credentials); !a.ok()) return a;
  auto path = CheckpointPath(req->step());
  if (!path.ok()) return Err(path.status());
  // Check everything before changing anything: one streamed pass over the
  // file (every chunk's checksum, names and shapes against the table).
  auto check = checkpoint::Check(*path);
  if (!check.ok()) return Err(check.status());
  for (const auto& e : check->entries) {
    auto shard = Find(e.name);
    if (!shard) return Err(NotFound("Restore: checkpoint has \"" + e.name + "\", which is not created here"));
    std::lock_guard g(shard->mu);
    bool ok = e.tensors.size() == 1 + shard->slots.slots.size() && e.tensors[0].first == shard->value.dtype() &&
              e.tensors[0].second == shard->value.shape();
    for (size_t k = 0; ok && k < shard->slots.slots.size(); ++k) ok = e.tensors[k + 1].second == shard->slots.slots[k].shape();
    if (!ok) return Err(InvalidArgument("Restore: \"" + e.name + "\" in " + *path + " does not match the variable"));
  }
  // Then a second pass, one entry at a time into fresh tensors swapped in
  // when the entry is complete: memory for the largest shard, not the table.
  checkpoint::Entry pending;
  auto install = [&]() {
    if (pending.name.empty()) return;
    auto shard = Find(pending.name);
    std::lock_guard g(shard->mu);
    shard->value = pending.tensors[0];
    for (size_t i = 0; i < shard->slots.slots.size(); ++i) shard->slots.slots[i] = pending.tensors[i + 1];
    shard->slots.iterations = pending.iterations;
    pending = {};
  };
  Status s = checkpoint::ReadInto(*path, [&](const std::string& name, int64_t iterations, size_t k, DType dtype,
                                             const Shape& shape) -> StatusOr<Tensor*> {
    if (k == 0) {
      install();
      pending.name = name;
      pending.iterations = iterations;
    }
    ASSIGN_OR_RETURN(Tensor t, Tensor::CreateUninitialized(dtype, shape));
    pending.tensors.push_back(std::move(t));
    return &pending.tensors.back();
  });
  if (!s.ok()) return Err(s);
  install();
  resp->set_variables(static_cast<int>(check->entries.size()));
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::GetStatus(grpc::ServerContext* call, const proto::StatusRequest*,
                                               proto::StatusResponse* resp) {
  if (auto a = rpc::Authenticate(*call, options_.credentials); !a.ok()) return a;
  resp->set_incarnation(incarnation_);
  std::shared_lock lock(table_mu_);
  for (const auto& [name, _] : shards_) resp->add_variables(name);
  resp->set_applied_updates(applied_.load());
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Fence(grpc::ServerContext* call, const proto::FenceRequest* req,
                                           proto::FenceResponse* resp) {
  if (auto a = rpc::Authenticate(*call, options_.credentials); !a.ok()) return a;
  if (req->coordinator_incarnation() == 0) return Err(InvalidArgument("Fence: coordinator incarnation 0"));
  resp->set_previous(fence_.exchange(req->coordinator_incarnation()));
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Shutdown(grpc::ServerContext* call, const proto::ShutdownRequest*,
                                              proto::ShutdownResponse*) {
  if (auto a = rpc::Authenticate(*call, options_.credentials); !a.ok()) return a;
  // Only signal: stopping the server from inside its own handler would deadlock.
  RequestShutdown();
  return grpc::Status::OK;
}

void ParameterServerService::RequestShutdown() {
  std::lock_guard g(shutdown_mu_);
  shutdown_ = true;
  shutdown_cv_.notify_all();
}

void ParameterServerService::WaitForShutdown() {
  std::unique_lock lock(shutdown_mu_);
  shutdown_cv_.wait(lock, [&] { return shutdown_; });
}

StatusOr<std::unique_ptr<PsServer>> PsServer::Start(const std::string& address, PsOptions options) {
  std::unique_ptr<PsServer> s(new PsServer());
  s->service_ = std::make_unique<ParameterServerService>(options);
  ASSIGN_OR_RETURN(s->server_, rpc::StartServer(address, {s->service_.get()}, &s->port_));
  return s;
}

PsServer::~PsServer() { Stop(); }

void PsServer::Wait() {
  service_->WaitForShutdown();
  Stop();
}

void PsServer::Stop(std::chrono::milliseconds grace) {
  if (server_) {
    // A short deadline lets the Shutdown RPC that triggered this complete.
    server_->Shutdown(std::chrono::system_clock::now() + grace);
    server_->Wait();
    server_.reset();
  }
}

}  // namespace tfjob::ps
