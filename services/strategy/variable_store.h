// Variables as the chief and the workers see them under parameter-server
// training: one logical variable, stored as shards on PS tasks (Placement).
// Pulls land each shard straight in the rows it fills of the destination (no
// concatenation, no second copy); Fetch pulls only the rows asked for from
// the shards that hold them (embedding lookups); pushes split dense gradients
// by rows and route sparse rows to their shard, all tagged with the closure
// id so every shard applies them at most once. Requests to different PS
// tasks run in parallel, one request per PS for whole values.
//
// Ownership: borrows nothing; holds shared PS clients. Thread-safety: all
// methods may be called concurrently (PsClient is thread-safe; the placement
// is immutable after construction). Failure: PS errors come back as Status
// naming the PS address; argument errors as INVALID_ARGUMENT.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "services/model/layers.h"
#include "services/model/spec.h"
#include "services/ps/ps_client.h"
#include "services/strategy/sharding.h"

namespace tfjob::strategy {

class VariableStore {
 public:
  VariableStore(Placement placement, std::vector<std::shared_ptr<ps::PsClient>> ps);

  const Placement& placement() const { return placement_; }
  const std::vector<std::shared_ptr<ps::PsClient>>& ps() const { return ps_; }

  // Creates every shard of `name` from the full initial value. Idempotent:
  // existing shards are kept (a restarted chief does not reset training).
  Status Create(const std::string& name, const Tensor& initial, const std::optional<model::OptimizerSpec>& optimizer);

  // Full values, in the order asked.
  StatusOr<std::vector<Tensor>> Pull(const std::vector<std::string>& names);

  // One pull of several variables: whole values, or (with `rows`) only
  // those rows, ascending and distinct, into `out` of shape
  // [rows.size(), ...row shape]. `out` is reused when it already has the
  // shape (and replaced by a new tensor otherwise), so a caller keeping its
  // tensors between steps pulls without allocating.
  struct Item {
    std::string name;
    std::optional<std::vector<int64_t>> rows;
    Tensor* out = nullptr;
  };
  Status Fetch(std::vector<Item>& items);

  // Rows `ids` (int64, any order, repeats allowed) of a variable, [k, ...].
  StatusOr<Tensor> Lookup(const std::string& name, const std::vector<int64_t>& ids);

  struct Grad {
    std::string name;
    model::Gradient grad;  // dense (full shape) or sparse (global row ids)
  };
  // Applies gradients with each shard's optimizer (deltas of non-trainable
  // variables are added, ASSIGN_ADD): one Push per PS, the PS tasks in
  // parallel. Returns the number of shard updates skipped as duplicates.
  // `generation` is the chief's whose closure pushes (ps::PsClient::Push).
  StatusOr<int> PushGradients(uint64_t closure_id, uint32_t sequence, const std::vector<Grad>& grads,
                              uint64_t generation = 0);
  // Adds `delta` to a variable (ASSIGN_ADD), exactly once per closure id.
  StatusOr<int> AssignAdd(uint64_t closure_id, uint32_t sequence, const std::string& name, const Tensor& delta,
                          uint64_t generation = 0);

 private:
  // Runs fn(ps) for every PS in `which`, all but one on their own threads;
  // returns the first error.
  Status ForEachPs(const std::vector<int64_t>& which, const std::function<Status(int64_t)>& fn);

  Placement placement_;
  std::vector<std::shared_ptr<ps::PsClient>> ps_;
};

}  // namespace tfjob::strategy
