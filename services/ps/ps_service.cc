#include "services/ps/ps_service.h"

#include <cstring>

#include "common/mutex.h"
#include "services/checkpoint/checkpoint.h"
#include "services/rpc/rpc.h"
#include "services/tensor/eigen.h"
#include "services/tensor/ops.h"

namespace tfjob::ps {
namespace {

grpc::Status Err(const Status& s) { return rpc::ToGrpc(s); }

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

namespace {

int ApplyThreads(int asked) {
  if (asked > 0) return asked - 1;  // the calling thread is one of them
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::min(4, cores) - 1;
}

}  // namespace

ParameterServerService::ParameterServerService(PsOptions options)
    : options_(options), incarnation_(rpc::NewIncarnation()), apply_pool_(ApplyThreads(options.apply_threads)) {}

std::shared_ptr<ParameterServerService::Shard> ParameterServerService::Find(const std::string& name) {
  ReaderLock lock(table_mu_);
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

Status ParameterServerService::CheckGeneration(uint64_t generation, const char* what) const {
  const uint64_t fence = fence_.load();
  if (generation != 0 && generation < fence) {
    return FailedPrecondition(std::string(what) + ": refused, the calling chief (generation " +
                              std::to_string(generation) + ") has been replaced by a newer one (generation " +
                              std::to_string(fence) + ")");
  }
  return Status::Ok();
}

StatusOr<std::string> ParameterServerService::CheckpointPath(int64_t step) const {
  if (options_.checkpoint_dir.empty()) {
    return FailedPrecondition(
        "this parameter server was started without --checkpoint-dir; give every task of the "
        "job the same --checkpoint-dir");
  }
  if (step < 0) return InvalidArgument("checkpoint step " + std::to_string(step) + " is negative");
  return options_.checkpoint_dir + "/ckpt-" + std::to_string(step) + "/" + options_.checkpoint_file;
}

grpc::Status ParameterServerService::Save(grpc::ServerContext* call, const proto::SaveRequest* req,
                                          proto::SaveResponse* resp) {
  if (auto a = rpc::Authenticate(*call, options_.credentials); !a.ok()) return a;
  if (Status g = CheckGeneration(req->coordinator_incarnation(), "Save"); !g.ok()) return Err(g);
  auto path = CheckpointPath(req->step());
  if (!path.ok()) return Err(path.status());
  auto writer = checkpoint::Writer::Create(*path);
  if (!writer.ok()) return Err(writer.status());
  std::vector<std::pair<std::string, std::shared_ptr<Shard>>> shards;
  {
    ReaderLock lock(table_mu_);
    shards.assign(shards_.begin(), shards_.end());
  }
  // One shard copied at a time, written, dropped: saving needs memory for
  // the largest shard, not a copy of the whole table.
  int64_t bytes = 0;
  for (const auto& [name, shard] : shards) {
    checkpoint::Entry e;
    {
      ReaderLock g(shard->mu);
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
  if (Status g = CheckGeneration(req->coordinator_incarnation(), "Restore"); !g.ok()) return Err(g);
  auto path = CheckpointPath(req->step());
  if (!path.ok()) return Err(path.status());
  // Check everything before changing anything: one streamed pass over the
  // file (every chunk's checksum, names and shapes against the table).
  auto check = checkpoint::Check(*path);
  if (!check.ok()) return Err(check.status());
  for (const auto& e : check->entries) {
    auto shard = Find(e.name);
    if (!shard) return Err(NotFound("Restore: checkpoint has \"" + e.name + "\", which is not created here"));
    ReaderLock g(shard->mu);
    bool ok = e.tensors.size() == 1 + shard->slots.slots.size() && e.tensors[0].first == shard->value.dtype() &&
              e.tensors[0].second == shard->value.shape();
    for (size_t k = 0; ok && k < shard->slots.slots.size(); ++k)
      ok = e.tensors[k + 1].second == shard->slots.slots[k].shape();
    if (!ok) return Err(InvalidArgument("Restore: \"" + e.name + "\" in " + *path + " does not match the variable"));
  }
  // Then a second pass, one entry at a time into fresh tensors swapped in
  // when the entry is complete: memory for the largest shard, not the table.
  checkpoint::Entry pending;
  auto install = [&]() {
    if (pending.name.empty()) return;
    auto shard = Find(pending.name);
    WriterLock g(shard->mu);
    shard->value = pending.tensors[0];
    for (size_t i = 0; i < shard->slots.slots.size(); ++i) shard->slots.slots[i] = pending.tensors[i + 1];
    shard->slots.iterations = pending.iterations;
    // The closures this shard remembers were applied to the values just
    // replaced: the same ids re-run on the restored state must apply.
    shard->seen.clear();
    shard->seen_order.clear();
    pending = {};
  };
  Status s = checkpoint::ReadInto(
      *path,
      [&](const std::string& name, int64_t iterations, size_t k, DType dtype, const Shape& shape) -> StatusOr<Tensor*> {
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
  applied_.store(0);
  resp->set_variables(static_cast<int>(check->entries.size()));
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::GetStatus(grpc::ServerContext* call, const proto::StatusRequest*,
                                               proto::StatusResponse* resp) {
  if (auto a = rpc::Authenticate(*call, options_.credentials); !a.ok()) return a;
  resp->set_incarnation(incarnation_);
  ReaderLock lock(table_mu_);
  for (const auto& [name, _] : shards_) resp->add_variables(name);
  resp->set_applied_updates(applied_.load());
  resp->set_fence(fence_.load());
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Fence(grpc::ServerContext* call, const proto::FenceRequest* req,
                                           proto::FenceResponse* resp) {
  if (auto a = rpc::Authenticate(*call, options_.credentials); !a.ok()) return a;
  const uint64_t generation = req->coordinator_incarnation();
  if (generation == 0) return Err(InvalidArgument("Fence: coordinator incarnation 0"));
  // Exclusive: waits for the pushes being applied, so none of the previous
  // chief's lands after this returns.
  WriterLock g(fence_mu_);
  const uint64_t previous = fence_.load();
  if (generation < previous) {
    return Err(FailedPrecondition("Fence: refused, chief generation " + std::to_string(generation) +
                                  " is older than generation " + std::to_string(previous) +
                                  ", which holds this parameter server"));
  }
  fence_.store(generation);
  if (closure_namespace_ == 0) closure_namespace_ = req->closure_namespace();
  resp->set_previous(previous);
  resp->set_closure_namespace(closure_namespace_);
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Shutdown(grpc::ServerContext* call, const proto::ShutdownRequest* req,
                                              proto::ShutdownResponse*) {
  if (auto a = rpc::Authenticate(*call, options_.credentials); !a.ok()) return a;
  if (Status g = CheckGeneration(req->coordinator_incarnation(), "Shutdown"); !g.ok()) return Err(g);
  // Only signal: stopping the server from inside its own handler would deadlock.
  completed_.store(true);
  RequestShutdown();
  return grpc::Status::OK;
}

void ParameterServerService::RequestShutdown() {
  MutexLock g(shutdown_mu_);
  shutdown_ = true;
  shutdown_cv_.NotifyAll();
}

void ParameterServerService::WaitForShutdown() {
  MutexLock lock(shutdown_mu_);
  shutdown_cv_.Wait(lock, [&]() TFJOB_REQUIRES(shutdown_mu_) { return shutdown_; });
}

}  // namespace tfjob::ps
