#include "services/ps/ps_client.h"

#include "services/ps/ps_service.h"

namespace tfjob::ps {

PsClient::PsClient(std::string address, ClientOptions options)
    : address_(std::move(address)), options_(options), stub_(proto::ParameterServer::NewStub(rpc::MakeChannel(address_))) {}

template <typename Req, typename Resp, typename Fn>
Status PsClient::Call(const char* what, const Req& req, Resp* resp, Fn fn) {
  const std::string context = std::string(what) + " on parameter server " + address_;
  return rpc::CallWithRetry(address_, options_.retry, [&]() {
    auto ctx = rpc::Context(options_.timeout, options_.credentials);
    return rpc::FromGrpc((stub_.get()->*fn)(ctx.get(), req, resp), context);
  });
}

StatusOr<bool> PsClient::CreateVariable(const std::string& name, const Tensor& initial,
                                        const std::optional<model::OptimizerSpec>& optimizer) {
  proto::CreateVariableRequest req;
  req.set_name(name);
  rpc::TensorToProto(initial, req.mutable_initial_value());
  if (optimizer) *req.mutable_optimizer() = OptimizerToProto(*optimizer);
  proto::CreateVariableResponse resp;
  RETURN_IF_ERROR(Call("CreateVariable", req, &resp, &proto::ParameterServer::Stub::CreateVariable));
  return resp.created();
}

StatusOr<std::vector<Tensor>> PsClient::Pull(const std::vector<std::string>& names) {
  proto::PullRequest req;
  for (const auto& n : names) req.add_names(n);
  proto::PullResponse resp;
  RETURN_IF_ERROR(Call("Pull", req, &resp, &proto::ParameterServer::Stub::Pull));
  if (resp.values_size() != static_cast<int>(names.size())) return Internal("Pull: wrong number of values from " + address_);
  std::vector<Tensor> out;
  for (const auto& v : resp.values()) {
    ASSIGN_OR_RETURN(Tensor t, rpc::TensorFromProto(v));
    out.push_back(std::move(t));
  }
  return out;
}

StatusOr<Tensor> PsClient::PullRows(const std::string& name, const std::vector<int64_t>& rows) {
  proto::PullRequest req;
  req.add_names(name);
  for (int64_t r : rows) req.add_rows(r);
  proto::PullResponse resp;
  RETURN_IF_ERROR(Call("Pull", req, &resp, &proto::ParameterServer::Stub::Pull));
  if (resp.values_size() != 1) return Internal("Pull: wrong number of values from " + address_);
  return rpc::TensorFromProto(resp.values(0));
}

StatusOr<int> PsClient::Push(uint64_t closure_id, uint32_t sequence, const std::vector<Update>& updates) {
  proto::PushRequest req;
  req.set_closure_id(closure_id);
  req.set_sequence(sequence);
  for (const Update& u : updates) {
    proto::Update* p = req.add_updates();
    p->set_name(u.name);
    p->set_kind(u.kind == Update::Kind::kApplyGradient ? proto::Update::APPLY_GRADIENT
                : u.kind == Update::Kind::kAssignAdd  ? proto::Update::ASSIGN_ADD
                                                      : proto::Update::ASSIGN);
    rpc::TensorToProto(u.value, p->mutable_value());
    if (u.rows) {
      if (u.rows->dtype() != DType::kInt64) return InvalidArgument("Push \"" + u.name + "\": rows must be int64");
      for (int64_t r : u.rows->flat<int64_t>()) p->add_rows(r);
    }
  }
  proto::PushResponse resp;
  RETURN_IF_ERROR(Call("Push", req, &resp, &proto::ParameterServer::Stub::Push));
  return resp.duplicates();
}

StatusOr<int64_t> PsClient::Save(int64_t step) {
  proto::SaveRequest req;
  req.set_step(step);
  proto::SaveResponse resp;
  RETURN_IF_ERROR(Call("Save", req, &resp, &proto::ParameterServer::Stub::Save));
  return resp.bytes();
}

StatusOr<int> PsClient::Restore(int64_t step) {
  proto::RestoreRequest req;
  req.set_step(step);
  proto::RestoreResponse resp;
  RETURN_IF_ERROR(Call("Restore", req, &resp, &proto::ParameterServer::Stub::Restore));
  return resp.variables();
}

StatusOr<PsStatus> PsClient::GetStatus() {
  proto::StatusRequest req;
  proto::StatusResponse resp;
  RETURN_IF_ERROR(Call("GetStatus", req, &resp, &proto::ParameterServer::Stub::GetStatus));
  return PsStatus{resp.incarnation(), {resp.variables().begin(), resp.variables().end()}, resp.applied_updates()};
}

StatusOr<uint64_t> PsClient::Fence(uint64_t coordinator_incarnation) {
  proto::FenceRequest req;
  req.set_coordinator_incarnation(coordinator_incarnation);
  proto::FenceResponse resp;
  RETURN_IF_ERROR(Call("Fence", req, &resp, &proto::ParameterServer::Stub::Fence));
  return resp.previous();
}

Status PsClient::Shutdown() {
  proto::ShutdownRequest req;
  proto::ShutdownResponse resp;
  return Call("Shutdown", req, &resp, &proto::ParameterServer::Stub::Shutdown);
}

}  // namespace tfjob::ps
