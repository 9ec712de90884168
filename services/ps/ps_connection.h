// One pooled data-plane connection of a PsClient (ps_client.h): the pool
// (ps_client_pool.cc) opens and hands them out, the requests
// (ps_client.cc) use them. Private to services/ps.
// Ownership: the client's pool owns idle connections; a call owns the one it
// took until it gives it back. Thread-safety: one call at a time. Failure:
// none here (plain state).
#pragma once

#include <cstdint>
#include <memory>

#include "services/net/net.h"
#include "services/ps/ps_client.h"
#include "services/ps/shm.h"
#include "services/ps/wire.h"

namespace tfjob::ps {

class PsClient::Connection {
 public:
  net::Fd fd;
  wire::Clock::time_point deadline;     // of the call using it
  std::unique_ptr<shm::Region> region;  // once the PS mapped it
  // The response being read: its payload in the region, and how far.
  const std::byte* response_shm = nullptr;
  uint64_t response_bytes = 0;
  uint64_t response_at = 0;
};

}  // namespace tfjob::ps
