#include "services/strategy/group_recovery.h"

#include <ostream>

#include "services/collective/nccl.h"

namespace tfjob::strategy {

using collective::ReduceOp;

GroupRecovery::GroupRecovery(Options o) : o_(std::move(o)) {}

void GroupRecovery::Log(const std::string& line) const {
  if (o_.log) *o_.log << line << std::endl;
}

GroupReducer GroupRecovery::reducer() const {
  return nccl_ ? GroupReducer{nccl_.get(), true} : GroupReducer{o_.group->comm(), false};
}

Status GroupRecovery::Form(TrainState& st, VariableCopy& state) {
  while (true) {
    const int64_t before = st.step;
    nccl_.reset();
    ASSIGN_OR_RETURN(collective::Group::Formation f, o_.group->Form(st.step));
    Status s = SyncFrom(f.source_rank, st, state);
    using_nccl_ = false;
    if (s.ok()) s = ChooseCommunication();
    if (s.ok()) {
      if (formed_) ++regroups_;
      if (!formed_ && f.source_rank != o_.group->rank()) joined_at_ = st.step;
      if (st.step < before) lost_steps_ += before - st.step;
      // A member whose last all-reduce failed after another member's
      // completed takes that step from it rather than computing it again.
      if (formed_ && st.step > before) adopted_steps_ += st.step - before;
      formed_ = true;
      const collective::Peer& src = o_.group->members()[static_cast<size_t>(f.source_rank)];
      Log("fit: group generation " + std::to_string(f.generation) + " of " + std::to_string(o_.group->size()) +
          " members formed at step " + std::to_string(st.step) + " (state from " + src.name +
          (before != st.step ? ", this member was at step " + std::to_string(before) : "") + ")");
      return s;
    }
    if (!collective::IsRecoverable(s)) return s;
    Log("fit: sending the state failed (" + s.message() + "); forming the group again");
  }
}

Status GroupRecovery::ChooseCommunication() {
  const bool on_device = !o_.device.is_cpu();
  bool nccl = o_.communication == collective::Implementation::kNccl;
  if (o_.communication == collective::Implementation::kAuto) {
    // AUTO: NCCL when every member trains on a GPU and can join NCCL;
    // every member votes (a member on the CPU votes no), so they all pick
    // the same.
    Tensor vote = Tensor::Scalar(on_device && collective::NcclAvailable().ok() ? 1.f : 0.f);
    RETURN_IF_ERROR(o_.group->comm()->AllReduce(vote, ReduceOp::kSum));
    nccl = vote.data<float>()[0] == static_cast<float>(o_.group->size());
  }
  if (!nccl) return Status::Ok();
  // A new generation needs a new NCCL communicator; its id travels over the
  // ring just formed.
  ASSIGN_OR_RETURN(
      nccl_, collective::MakeNcclCommunicator(*o_.group->comm(), on_device ? o_.device.index : -1, o_.collective));
  using_nccl_ = true;
  return Status::Ok();
}

Status GroupRecovery::SyncFrom(int source, TrainState& st, VariableCopy& state) {
  collective::Communicator& comm = *o_.group->comm();
  std::string bytes;
  if (comm.rank() == source) {
    nlohmann::json j{{"state", st.ToJson()}, {"iterations", nlohmann::json::array()}};
    for (const model::SlotState& s : state.slots) j["iterations"].push_back(s.iterations);
    bytes = j.dump();
  }
  RETURN_IF_ERROR(comm.BroadcastBytes(bytes, source));
  const std::vector<Tensor*> tensors = StateTensors(state);
  RETURN_IF_ERROR(Staged(tensors, [&comm, source](std::span<Tensor* const> t) { return comm.Broadcast(t, source); }));
  if (comm.rank() == source) return Status::Ok();
  const nlohmann::json j = nlohmann::json::parse(bytes, nullptr, false);
  if (j.is_discarded() || !j.contains("state") || !j.contains("iterations") ||
      j["iterations"].size() != state.slots.size()) {
    return DataLoss("collective: malformed training state from rank " + std::to_string(source));
  }
  ASSIGN_OR_RETURN(st, TrainState::FromJson(j["state"]));
  for (size_t v = 0; v < state.slots.size(); ++v) state.slots[v].iterations = j["iterations"][v].get<int64_t>();
  return Status::Ok();
}

Status GroupRecovery::Recover(const Status& cause, TrainState& st, VariableCopy& state) {
  if (!collective::IsRecoverable(cause)) return cause;
  Log("fit: " + cause.message() + "; forming the group again");
  return Form(st, state);
}

Status GroupRecovery::Finish(TrainState& st, VariableCopy& state) {
  if (!formed_) return Status::Ok();
  while (true) {
    Status s = o_.group->comm()->Barrier();
    if (s.ok()) return s;
    RETURN_IF_ERROR(Recover(s, st, state));
  }
}

Status GroupRecovery::FailGroup(const Status& s) {
  if (o_.group->comm() && !collective::IsRecoverable(s)) {
    o_.group->comm()->Abort(Status(s.code(), o_.group->self().name + ": " + s.message()));
  }
  return s;
}

void GroupRecovery::AddSummary(nlohmann::json& j, int64_t steps_computed) const {
  j["communication"] = using_nccl_ ? "nccl" : "ring";
  j["num_workers"] = o_.group->size();
  j["rank"] = o_.group->rank();
  j["recovery"] = {{"regroups", regroups_},
                   {"generation", o_.group->comm() ? o_.group->comm()->generation() : 0},
                   {"steps_computed", steps_computed},
                   {"steps_adopted", adopted_steps_},
                   {"joined_at_step", joined_at_},
                   {"lost_steps", lost_steps_}};
}

}  // namespace tfjob::strategy
