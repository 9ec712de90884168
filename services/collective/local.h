// The in-process implementation of Communicator: replicas that are threads
// of one process (MirroredStrategy over CPU thread groups). Each operation
// is two rendezvous of all replicas; in between, replica r sums (or copies)
// slice r of every tensor, reading all replicas' buffers in rank order and
// writing the result into each, so the work is spread over the replicas and
// every replica gets the same bits.
//
// Ownership: the LocalGroup owns its members' communicators; tensors passed
// to an operation are borrowed until every replica has returned from it.
// Thread-safety: each member is used by its own thread; Abort from any.
// Failure: a replica that does not reach an operation within
// Options::timeout fails the others with DEADLINE_EXCEEDED naming it;
// replicas that disagree on an operation all get INVALID_ARGUMENT; Abort
// fails every current and later operation with its reason.
#pragma once

#include <memory>
#include <vector>

#include "common/mutex.h"
#include "services/collective/communicator.h"

namespace tfjob::collective {

class LocalGroup {
 public:
  explicit LocalGroup(int size, Options options = {});
  ~LocalGroup();
  LocalGroup(const LocalGroup&) = delete;
  LocalGroup& operator=(const LocalGroup&) = delete;

  int size() const { return size_; }
  // Replica `rank`'s communicator, valid while the group lives.
  Communicator* member(int rank);
  // A replica that cannot go on calls this so the others do not wait for it.
  void Abort(const Status& reason) TFJOB_EXCLUDES(mu_);

 private:
  class Member;
  friend class Member;

  struct Call {
    std::string op;
    std::vector<Tensor*> tensors;
    int root = -1;
    const Tensor* in = nullptr;  // all_gather
  };

  // Blocks until every replica has arrived at this barrier; DEADLINE_EXCEEDED
  // naming the missing ones after the timeout, or the abort reason. With
  // `agree`, the last to arrive checks the published calls before anyone is
  // released, so no replica reads another's call after it may have gone.
  Status Arrive(int rank, bool agree = false) TFJOB_EXCLUDES(mu_);
  // Every replica's call matches replica 0's. Run by the last replica to
  // arrive, with the lock held and before the phase changes, so every other
  // replica still waits in Arrive and its call still stands.
  Status Agree() const TFJOB_REQUIRES(mu_);

  const int size_;
  const Options options_;
  std::vector<std::unique_ptr<Member>> members_;
  // Not guarded by mu_: slot r is written by replica r alone before it
  // arrives at a barrier, and read by the others only between that barrier
  // and the next, which orders the accesses.
  std::vector<Call> calls_;

  // The barrier.
  Mutex mu_;
  CondVar cv_;
  int arrived_ TFJOB_GUARDED_BY(mu_) = 0;
  uint64_t phase_ TFJOB_GUARDED_BY(mu_) = 0;
  std::vector<bool> here_ TFJOB_GUARDED_BY(mu_);
  Status error_ TFJOB_GUARDED_BY(mu_);
};

}  // namespace tfjob::collective
