// A group of collective members in separate processes, formed from the
// training cluster as TensorFlow's MultiWorkerMirroredStrategy forms it: the
// `chief` (or `master`) task first, then the `worker` tasks by index; `ps` and
// `evaluator` tasks never join. Rank 0 leads the rendezvous.
//
// Form() is how a member enters the group, at start and again after any
// failure: it sends "here I am, my state is at step S" to the leader, who
// waits until every member has said so, picks the next generation number and
// the member with the newest state (largest S, ties to the lowest rank), and
// tells everyone. Then each member connects the ring of that generation and
// gets a RingCommunicator for it. A member that restarted simply calls Form()
// like everyone else; the survivors, whose operations failed when it died,
// call Form() too, so the group re-forms with a new generation and the caller
// sends the newest state from the source rank to the others (the training
// loop does that with Communicator::Broadcast).
//
// Ownership: the Group owns its listening socket, a thread accepting
// connections on it, and the current generation's communicator.
// Thread-safety: Form and comm() from one thread; the acceptor runs on its
// own and hands joins and links to Form under mu_. Failure: Form fails
// after Options::rendezvous_timeout with an error naming the member that
// never came (DEADLINE_EXCEEDED), or the leader that could not be reached
// (UNAVAILABLE); members started from different cluster specs are refused
// (INVALID_ARGUMENT).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "services/cluster/cluster.h"
#include "services/collective/communicator.h"
#include "services/net/net.h"
#include "services/collective/ring.h"

namespace tfjob::collective {

// The members of the collective group of `cluster`, in rank order: chief or
// master first, then workers by index. INVALID_ARGUMENT when there is no
// chief and no worker.
StatusOr<std::vector<Peer>> MembersFromCluster(const cluster::ClusterSpec& cluster);
// The rank of task type:index among `members`; NOT_FOUND when it is not one.
StatusOr<int> RankOf(const std::vector<Peer>& members, const std::string& type, int64_t index);

class Group {
 public:
  // Listens on every interface at the port of members[rank].address.
  static StatusOr<std::unique_ptr<Group>> Create(std::vector<Peer> members, int rank, Options options);
  // The same on a socket the caller already listens on (tests listen on
  // port 0 first and put the ports they got into `members`).
  static StatusOr<std::unique_ptr<Group>> Create(std::vector<Peer> members, int rank, Options options,
                                                 net::Listener listener);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  struct Formation {
    int64_t generation = 0;
    int source_rank = 0;         // the member holding the newest state
    std::vector<int64_t> steps;  // each member's step as it joined, by rank
  };
  // Forms the group (again): see above. `step` is how many training steps
  // this member's state has completed. The previous generation's
  // communicator is closed first (its neighbours are told).
  StatusOr<Formation> Form(int64_t step) TFJOB_EXCLUDES(mu_);

  // The current generation's communicator; null before the first Form.
  Communicator* comm() { return comm_.get(); }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(members_.size()); }
  const std::vector<Peer>& members() const { return members_; }
  const Peer& self() const { return members_[static_cast<size_t>(rank_)]; }
  int port() const { return port_; }

 private:
  Group(std::vector<Peer> members, int rank, Options options, net::Listener listener);

  struct Join {
    net::Fd fd;  // invalid for the leader's own join
    uint32_t rank = 0;
    int64_t generation = 0;
    int64_t step = 0;
    uint64_t incarnation = 0;
  };

  void AcceptLoop() TFJOB_EXCLUDES(mu_);
  void HandleConnection(net::Fd fd) TFJOB_EXCLUDES(mu_);
  StatusOr<Formation> Lead(int64_t step, net::Clock::time_point deadline) TFJOB_EXCLUDES(mu_);
  StatusOr<Formation> Follow(int64_t step, net::Clock::time_point deadline);
  StatusOr<std::unique_ptr<RingCommunicator>> Connect(int64_t generation, net::Clock::time_point deadline)
      TFJOB_EXCLUDES(mu_);
  std::string Names(const std::vector<int>& ranks) const;

  const std::vector<Peer> members_;
  const int rank_;
  const Options options_;
  const uint64_t fingerprint_;
  const uint64_t incarnation_;
  net::Listener listener_;
  const int port_;
  int64_t generation_ = 0;  // the last one this member was part of
  std::unique_ptr<RingCommunicator> comm_;

  // What the acceptor thread hands to Form.
  Mutex mu_;
  CondVar cv_;
  bool stop_ TFJOB_GUARDED_BY(mu_) = false;
  std::map<uint32_t, Join> joins_ TFJOB_GUARDED_BY(mu_);                         // leader: by rank
  std::map<std::pair<int64_t, uint32_t>, net::Fd> links_ TFJOB_GUARDED_BY(mu_);  // (generation, from rank)
  std::thread acceptor_;
};

}  // namespace tfjob::collective
