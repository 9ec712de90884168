// Variables as the chief and the workers see them under parameter-server
// training: one logical variable, stored as shards on PS tasks (Placement).
// Pulls land each shard straight in the rows it fills of the destination (no
// concatenation, no second copy); Fetch pulls only the rows asked for from
// the shards that hold them (embedding lookups); pushes split dense gradients
// by rows and route sparse rows to their shard, all tagged with the closure
// id so every shard applies them at most once. Every PS gets its request
// before any answer is read, so the PS tasks work in parallel with no
// thread of the caller's per PS; one request per PS for whole values.
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
  // PushGradients, then Fetch of `items`, which see the push: for each PS
  // that has both, its push and its whole-value pulls go in one exchange
  // (ps::PsClient::PushPullInto), its row pulls after it. Returns what
  // PushGradients returns. On an error, any part may have happened; the
  // push is applied at most once however often it is retried.
  StatusOr<int> PushAndFetch(uint64_t closure_id, uint32_t sequence, const std::vector<Grad>& grads,
                             uint64_t generation, std::vector<Item>& items);
  // PushAndFetch in two halves, so the caller computes while the PS tasks
  // answer: Start sends each PS its request; Finish reads the answers and
  // returns what PushAndFetch returns. The destinations of `items` (planned
  // by Start) are written by Finish and must stay alive and unread until
  // then. Dropping a Pending unfinished abandons its exchanges (a push may
  // or may not have been applied, at most once).
  class Pending;
  StatusOr<std::unique_ptr<Pending>> Start(uint64_t closure_id, uint32_t sequence, const std::vector<Grad>& grads,
                                           uint64_t generation, std::vector<Item>& items);
  StatusOr<int> Finish(std::unique_ptr<Pending> p);
  // Adds `delta` to a variable (ASSIGN_ADD), exactly once per closure id.
  StatusOr<int> AssignAdd(uint64_t closure_id, uint32_t sequence, const std::string& name, const Tensor& delta,
                          uint64_t generation = 0);

 private:
  // Per PS: the whole shards to pull in one request (into views of the
  // destinations), and the row pulls.
  struct RowPull {
    std::string shard;
    std::vector<int64_t> local;
    Tensor into;
  };
  struct FetchPlan {
    std::vector<std::string> names;
    std::vector<Tensor> into;
    std::vector<RowPull> rows;
  };
  // Checks `items` and plans their pulls (destinations resized in place).
  Status PlanFetch(std::vector<Item>& items, std::map<int64_t, FetchPlan>& by_ps);
  // Splits gradients into each PS's updates (dense by rows, sparse rows to
  // their shard, with shard-local ids).
  Status PlanPush(const std::vector<Grad>& grads, std::map<int64_t, std::vector<ps::Update>>& by_ps);
  // Starts `plan`'s row pulls from `ps`, adding them to `started`.
  Status StartRowPulls(int64_t ps, FetchPlan& plan, std::vector<std::unique_ptr<ps::PsClient::Pending>>& started);

  Placement placement_;
  std::vector<std::shared_ptr<ps::PsClient>> ps_;
};

class VariableStore::Pending {
 private:
  friend class VariableStore;
  std::map<int64_t, FetchPlan> pulls;  // the destinations the answers fill
  struct Call {
    int64_t ps = 0;
    bool pushes = false;                              // its row pulls start once the push is answered
    std::unique_ptr<ps::PsClient::Pending> exchange;  // push and/or whole values
    std::vector<std::unique_ptr<ps::PsClient::Pending>> rows;
  };
  std::vector<Call> calls;
};

}  // namespace tfjob::strategy
