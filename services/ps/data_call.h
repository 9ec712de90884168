// One data-plane request being served, shared by the files of the PS's
// data plane (ps_data.cc, ps_push.cc); not part of the PS's interface.
#pragma once

#include <string>

#include "services/ps/ps_service.h"
#include "services/ps/shm.h"
#include "services/ps/wire.h"

namespace tfjob::ps {

struct ParameterServerService::Call {
  const net::Fd& fd;
  const std::string& peer;
  Staging& staging;
  wire::Frame frame;
  std::string meta;
  wire::Clock::time_point deadline;
  uint64_t received = 0;                   // payload bytes read so far
  uint64_t sent = 0;                       // response bytes
  shm::Region* region = nullptr;           // the connection's, once attached
  const std::byte* shm_payload = nullptr;  // the request's payload, when in the region
};

}  // namespace tfjob::ps
