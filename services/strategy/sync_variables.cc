#include "services/strategy/sync_variables.h"

#include "services/tensor/backend.h"

namespace tfjob::strategy {

std::vector<std::string> VariableNames(std::span<const VariableInfo> vars) {
  std::vector<std::string> names;
  names.reserve(vars.size());
  for (const VariableInfo& v : vars) names.push_back(v.name);
  return names;
}

StatusOr<std::vector<Tensor>> ToHost(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) {
    ASSIGN_OR_RETURN(Tensor h, t.ToDevice(Device::Cpu()));
    out.push_back(std::move(h));
  }
  return out;
}

StatusOr<VariableCopy> ToHost(const VariableCopy& copy) {
  VariableCopy host;
  host.device = Device::Cpu();
  ASSIGN_OR_RETURN(host.values, ToHost(copy.values));
  for (const model::SlotState& s : copy.slots) {
    model::SlotState h;
    h.iterations = s.iterations;
    ASSIGN_OR_RETURN(h.slots, ToHost(s.slots));
    host.slots.push_back(std::move(h));
  }
  return host;
}

Status Assign(const VariableCopy& host, VariableCopy& copy) {
  for (size_t v = 0; v < host.values.size(); ++v) {
    ASSIGN_OR_RETURN(copy.values[v], host.values[v].ToDevice(copy.device));
    copy.slots[v].iterations = host.slots[v].iterations;
    for (size_t k = 0; k < host.slots[v].slots.size(); ++k) {
      ASSIGN_OR_RETURN(copy.slots[v].slots[k], host.slots[v].slots[k].ToDevice(copy.device));
    }
  }
  return Status::Ok();
}

std::vector<Tensor*> StateTensors(VariableCopy& copy) {
  std::vector<Tensor*> tensors;
  for (Tensor& v : copy.values) tensors.push_back(&v);
  for (model::SlotState& s : copy.slots) {
    for (Tensor& t : s.slots) tensors.push_back(&t);
  }
  return tensors;
}

Status Staged(std::span<Tensor* const> tensors, const std::function<Status(std::span<Tensor* const>)>& op) {
  bool device = false;
  for (Tensor* t : tensors) device = device || !t->on_cpu();
  if (!device) return op(tensors);
  std::vector<Tensor> host;
  host.reserve(tensors.size());
  for (Tensor* t : tensors) {
    ASSIGN_OR_RETURN(Tensor h, t->ToDevice(Device::Cpu()));
    // A private copy: the download of a host tensor is the tensor itself.
    host.push_back(t->on_cpu() ? h.Clone() : std::move(h));
  }
  std::vector<Tensor*> p;
  for (Tensor& h : host) p.push_back(&h);
  RETURN_IF_ERROR(op(p));
  for (size_t i = 0; i < tensors.size(); ++i) {
    Tensor* t = tensors[i];
    if (t->on_cpu()) {
      *t = host[i];
      continue;
    }
    ASSIGN_OR_RETURN(device::Backend * b, device::BackendFor(t->device()));
    RETURN_IF_ERROR(b->Upload(host[i], *t));
  }
  return Status::Ok();
}

}  // namespace tfjob::strategy
