// FaultProxy's client half (tests/support/fault_proxy.h): one HTTP/1.1
// connection to the upstream API server, over TLS (OpenSSL) or plain TCP,
// and the reading of one response from it: the head, then the body whole
// or chunk by chunk as it arrives.
//
// Every wait polls in short slices and asks the caller's `keep_waiting`
// whether to go on, so a proxy that stops, a watch that is dropped or a
// client that has gone ends a wait within a fraction of a second.
// Thread-safety: an Upstream is used by one thread; Shutdown() may be called
// from any thread to make that thread's reads and writes fail. Failure:
// Status values and false returns, never exceptions.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tfjob::testing::proxy {

struct UpstreamTarget {
  std::string host;
  int port = 0;
  bool tls = false;
};

// "https://127.0.0.1:6443" -> {127.0.0.1, 6443, true}.
StatusOr<UpstreamTarget> ParseUpstream(const std::string& url);

// A client SSL_CTX (as void) that verifies the server against `ca_pem` and
// presents the client certificate when one is given.
StatusOr<std::shared_ptr<void>> ClientTlsContext(const std::string& ca_pem, const std::string& cert_pem,
                                                 const std::string& key_pem);

using KeepWaiting = std::function<bool()>;

struct ResponseHead {
  int code = 0;
  std::multimap<std::string, std::string> headers;  // lower-case names
  bool chunked = false;
  long long length = -1;  // Content-Length; -1: none (chunked, or up to the end of the stream)
  std::string Header(const std::string& lower_name) const;
};

class Upstream {
 public:
  static StatusOr<std::unique_ptr<Upstream>> Connect(const UpstreamTarget& target, const std::shared_ptr<void>& tls);
  ~Upstream();
  Upstream(const Upstream&) = delete;
  Upstream& operator=(const Upstream&) = delete;

  bool Write(std::string_view data);
  // Makes every read and write on this connection fail from now on.
  void Shutdown();

  // The status line and headers. `no_body`: the answer to a HEAD.
  bool ReadHead(ResponseHead* head, bool no_body, const KeepWaiting& keep_waiting);
  // The whole body (chunked, by length or to the end of the stream).
  bool ReadBody(const ResponseHead& head, std::string* body, const KeepWaiting& keep_waiting);
  // The next piece of the body as it arrives: a chunk's data, or what has
  // arrived of a body without chunking. *end: the body has ended cleanly.
  // False when the stream broke (or keep_waiting said stop).
  bool ReadPiece(const ResponseHead& head, std::string* data, bool* end, const KeepWaiting& keep_waiting);

 private:
  enum class Got { kData, kEof, kError };
  Upstream() = default;
  Got More(const KeepWaiting& keep_waiting);
  bool Line(std::string* line, const KeepWaiting& keep_waiting);
  bool Fill(size_t need, const KeepWaiting& keep_waiting);

  int fd_ = -1;
  std::shared_ptr<void> ssl_;  // the SSL session, when TLS
  std::string buf_;            // read but not yet consumed
  long long left_ = -1;        // bytes of a Content-Length body not yet returned
  bool eof_ = false;
};

}  // namespace tfjob::testing::proxy
