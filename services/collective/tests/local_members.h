// n group members on 127.0.0.1, "worker:0".."worker:n-1", each with a socket
// already listening on a port of its own: what the collective, strategy and
// runtime tests build a group from. Header-only, for tests.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "services/collective/group.h"
#include "services/net/net.h"

namespace tfjob::collective::testing {

struct LocalMembers {
  std::vector<Peer> members;
  std::vector<net::Listener> listeners;  // listeners[r] is members[r]'s
};

inline StatusOr<LocalMembers> ListenLocally(int n) {
  LocalMembers out;
  for (int r = 0; r < n; ++r) {
    ASSIGN_OR_RETURN(net::Listener l, net::Listen("127.0.0.1", 0));
    out.members.push_back({"worker:" + std::to_string(r), "127.0.0.1:" + std::to_string(l.port)});
    out.listeners.push_back(std::move(l));
  }
  return out;
}

}  // namespace tfjob::collective::testing
