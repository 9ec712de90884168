// Group recovery of multi_worker_mirrored (sync.h): forming the collective
// group, again whenever a member failed, hung or restarted, and bringing
// every member to the newest member's state (the most steps done: its
// variables, optimizer state and training progress), so that no completed
// step is lost; choosing for each generation what reduces the gradients
// (the ring, or NCCL joined through it); and the counts the strategy's
// summary reports.
//
// Ownership: borrows the Group; owns the generation's NCCL communicator.
// Thread-safety: driven by the strategy's one thread. Failure: Status
// values; a failure the group can recover from (collective::IsRecoverable)
// forms the group again, any other is returned as is.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "services/collective/communicator.h"
#include "services/collective/group.h"
#include "services/strategy/stats.h"
#include "services/strategy/sync_variables.h"

namespace tfjob::strategy {

// What all-reduces a step's gradients across the group: NCCL reduces device
// tensors in place; the ring works on host memory (sync_variables.h Staged).
struct GroupReducer {
  collective::Communicator* comm = nullptr;
  bool nccl = false;
};

class GroupRecovery {
 public:
  struct Options {
    collective::Group* group = nullptr;  // not null
    collective::Implementation communication = collective::Implementation::kAuto;
    collective::Options collective;  // for NCCL communicators
    Device device;                   // where this member trains
    std::ostream* log = nullptr;     // formation and recovery lines; nullptr for silence
  };
  explicit GroupRecovery(Options o);

  // Forms the group (again) and takes the newest member's state into `st`
  // and `state` (the copy the group's members keep alike). Forms again
  // while sending the state fails in a way the group recovers from.
  Status Form(TrainState& st, VariableCopy& state);
  // After a failed step, checkpoint or barrier: `cause` itself when the
  // group cannot recover from it, else the group formed again.
  Status Recover(const Status& cause, TrainState& st, VariableCopy& state);
  // Returns once every member has the last step: nobody leaves before, and
  // a member lost on the way rejoins and gets it. OK at once when the group
  // was never formed (a finished run restored from its checkpoint).
  Status Finish(TrainState& st, VariableCopy& state);
  // An error of this member's own (its input, its compute): the group
  // stops with it rather than waiting for this member to come back. Returns
  // `s`.
  Status FailGroup(const Status& s);
  // This member restored a checkpoint at `step` before forming the group.
  void RestoredAt(int64_t step) { joined_at_ = step; }

  bool formed() const { return formed_; }
  GroupReducer reducer() const;
  // The summary's group fields: communication, num_workers, rank, recovery.
  void AddSummary(nlohmann::json& j, int64_t steps_computed) const;

 private:
  Status SyncFrom(int source, TrainState& st, VariableCopy& state);
  // NCCL when asked for, or when AUTO and every member votes for it; the
  // outcome of the vote or of joining NCCL.
  Status ChooseCommunication();
  void Log(const std::string& line) const;

  const Options o_;
  std::unique_ptr<collective::Communicator> nccl_;  // this generation's, when it reduces
  // What the summary reports: whether the last formation chose NCCL (it
  // stays set when a later formation fails before choosing).
  bool using_nccl_ = false;
  bool formed_ = false;
  int64_t regroups_ = 0;
  int64_t joined_at_ = 0;
  int64_t lost_steps_ = 0;
  int64_t adopted_steps_ = 0;
};

}  // namespace tfjob::strategy
