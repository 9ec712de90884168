// What a parameter server's data plane (services/ps/ps_data.cc) does with
// whatever a connection sends: the input goes through a socket pair into
// ParameterServerService::ServeData of a fresh service, as a peer would send
// it, and the connection ends where the input does. Invariants: no crash or
// sanitizer report; nothing allocated for a size a header claims but whose
// bytes never came (libFuzzer's malloc limit); no hang (-timeout); and what
// the PS sends back is a sequence of whole response frames, each OK or one
// of the codes a bad request gets.
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include "fuzz/fuzz_util.h"
#include "services/ps/ps_service.h"
#include "services/ps/wire.h"

namespace {

bool RefusalCode(uint32_t code) {
  switch (static_cast<tfjob::Code>(code)) {
    case tfjob::Code::kOk:
    case tfjob::Code::kInvalidArgument:
    case tfjob::Code::kNotFound:
    case tfjob::Code::kAlreadyExists:
    case tfjob::Code::kFailedPrecondition:
    case tfjob::Code::kUnauthenticated: return true;
    default: return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tfjob;
  ps::PsOptions o;
  o.max_tensor_bytes = 16 << 20;
  o.max_request_bytes = 16 << 20;
  o.request_timeout = std::chrono::seconds(5);
  o.apply_threads = 1;
  ps::ParameterServerService service(o);
  int sv[2];
  fuzz::Check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
  // The peer writes the input and hangs up; a second thread reads every
  // answer, so neither side can block the other.
  std::thread writer([&] {
    size_t at = 0;
    while (at < size) {
      const ssize_t w = send(sv[1], data + at, size - at, MSG_NOSIGNAL);
      if (w <= 0) break;  // the PS hung up first
      at += static_cast<size_t>(w);
    }
    shutdown(sv[1], SHUT_WR);
  });
  std::string answers;
  std::thread reader([&] {
    char buf[1 << 16];
    ssize_t n;
    while ((n = read(sv[1], buf, sizeof buf)) > 0) answers.append(buf, static_cast<size_t>(n));
  });
  std::atomic<bool> stopping{false}, busy{false};
  net::Fd served(sv[0]);
  service.ServeData(served, "fuzz", stopping, busy);
  shutdown(sv[0], SHUT_RDWR);
  writer.join();
  reader.join();
  served.Reset();
  close(sv[1]);

  size_t at = 0;
  while (at < answers.size()) {
    ps::wire::Frame f;
    fuzz::Check(answers.size() - at >= sizeof f, "a response frame was cut short");
    std::memcpy(&f, answers.data() + at, sizeof f);
    fuzz::Check(f.magic == ps::wire::kResponseMagic, "an answer is not a response frame");
    fuzz::Check(RefusalCode(f.kind), "unexpected response code " + std::to_string(f.kind) + ": " +
                                         answers.substr(at + sizeof f, std::min<size_t>(f.meta_bytes, 200)));
    fuzz::Check(f.kind == 0 || f.payload_bytes == 0, "an error carries a payload");
    const uint64_t whole = sizeof f + uint64_t{f.meta_bytes} + f.payload_bytes;
    fuzz::Check(answers.size() - at >= whole, "a response was cut short");
    at += static_cast<size_t>(whole);
  }
  return 0;
}
