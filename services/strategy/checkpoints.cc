#include "services/strategy/checkpoints.h"

#include <map>

#include "services/checkpoint/checkpoint.h"
#include "services/strategy/sharding.h"
#include "services/tensor/ops.h"

namespace tfjob::strategy {

StatusOr<int64_t> WriteVariables(const checkpoint::Manager& mgr, int64_t step, bool final, nlohmann::json state,
                                 const std::vector<std::string>& names, const std::vector<Tensor>& values,
                                 const std::vector<model::SlotState>& slots) {
  ASSIGN_OR_RETURN(std::string dir, mgr.Prepare(step));
  std::vector<checkpoint::Entry> entries;
  int64_t bytes = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    checkpoint::Entry e{names[i], slots[i].iterations, {values[i]}};
    for (const Tensor& t : slots[i].slots) e.tensors.push_back(t);
    for (const Tensor& t : e.tensors) bytes += static_cast<int64_t>(t.bytes());
    entries.push_back(std::move(e));
  }
  RETURN_IF_ERROR(checkpoint::Write(dir + "/" + kVariablesFile, entries));
  state["num_ps"] = 0;
  RETURN_IF_ERROR(mgr.Commit(step, final, state, {kVariablesFile}));
  return bytes;
}

Status ReadVariables(const checkpoint::Committed& c, const std::vector<std::string>& names, std::vector<Tensor>& values,
                     std::vector<model::SlotState>& slots) {
  const int64_t num_ps = c.state.value("num_ps", int64_t{-1});
  if (num_ps != 0 || c.files.size() != 1) {
    return FailedPrecondition(c.dir + " was written by parameter-server training (" + std::to_string(c.files.size()) +
                              " parameter-server files); a synchronous strategy cannot continue from it");
  }
  ASSIGN_OR_RETURN(std::vector<checkpoint::Entry> entries, checkpoint::Read(c.files[0]));
  std::map<std::string, checkpoint::Entry*> by_name;
  for (auto& e : entries) by_name[e.name] = &e;
  // Everything is checked before anything is replaced.
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = by_name.find(names[i]);
    if (it == by_name.end()) return DataLoss(c.dir + ": no variable \"" + names[i] + "\"");
    const checkpoint::Entry& e = *it->second;
    if (e.tensors.size() != 1 + slots[i].slots.size() || e.tensors[0].shape() != values[i].shape() ||
        e.tensors[0].dtype() != values[i].dtype()) {
      return DataLoss(c.dir + ": variable \"" + names[i] + "\" does not match the model (" +
                      (e.tensors.empty() ? std::string("no tensors") : e.tensors[0].DebugString()) + " vs " +
                      values[i].DebugString() + ")");
    }
    for (size_t k = 0; k < slots[i].slots.size(); ++k) {
      if (e.tensors[k + 1].shape() != slots[i].slots[k].shape()) {
        return DataLoss(c.dir + ": optimizer slot " + std::to_string(k) + " of \"" + names[i] +
                        "\" has the wrong shape");
      }
    }
  }
  for (size_t i = 0; i < names.size(); ++i) {
    checkpoint::Entry& e = *by_name[names[i]];
    values[i] = e.tensors[0];
    for (size_t k = 0; k < slots[i].slots.size(); ++k) slots[i].slots[k] = e.tensors[k + 1];
    slots[i].iterations = e.iterations;
  }
  return Status::Ok();
}

StatusOr<std::vector<Tensor>> ValuesFromCheckpoint(const checkpoint::Committed& c, const model::Model& m) {
  const int64_t num_ps = c.state.value("num_ps", int64_t{0});
  ASSIGN_OR_RETURN(Partitioner part, ParsePartitioner(c.state.value("partitioner", "none")));
  const int64_t files = num_ps == 0 ? 1 : num_ps;
  if (num_ps < 0 || static_cast<int64_t>(c.files.size()) != files) {
    return DataLoss(c.dir + ": has " + std::to_string(c.files.size()) + " variable files where " +
                    std::to_string(files) + " were expected");
  }
  // A synchronous checkpoint is one file of whole variables: placing them on
  // one "PS" without a partitioner names them the same way.
  Placement placement(files, num_ps == 0 ? Partitioner::None() : part);
  for (const auto& v : m.variables()) RETURN_IF_ERROR(placement.Add(v.name, v.shape).status());
  std::map<std::string, Tensor> shards;
  for (const std::string& f : c.files) {
    ASSIGN_OR_RETURN(std::vector<checkpoint::Entry> entries, checkpoint::Read(f));
    for (auto& e : entries) {
      if (e.tensors.empty()) return DataLoss(f + ": \"" + e.name + "\" has no value");
      shards[e.name] = std::move(e.tensors[0]);
    }
  }
  std::vector<Tensor> out;
  for (const auto& var : m.variables()) {
    ASSIGN_OR_RETURN(const PlacedVariable* v, placement.Find(var.name));
    std::vector<Tensor> parts;
    for (const auto& sh : v->shards) {
      auto it = shards.find(sh.name);
      if (it == shards.end()) return DataLoss(c.dir + ": no shard \"" + sh.name + "\"");
      if (it->second.shape() != sh.shape) return DataLoss(c.dir + ": shard \"" + sh.name + "\" has the wrong shape");
      parts.push_back(it->second);
    }
    if (parts.size() == 1) {
      out.push_back(std::move(parts[0]));
    } else {
      ASSIGN_OR_RETURN(Tensor full, ops::Concat(parts));
      out.push_back(std::move(full));
    }
  }
  return out;
}

}  // namespace tfjob::strategy
