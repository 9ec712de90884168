// The serving half of the fault proxy (fault_proxy.h): cpp-httplib's HTTP/1.1
// server (Debian's 0.11.4) behind a small interface of its own.
//
// Why a layer and not httplib inside fault_proxy.cc: the server stays
// testable without a control plane (http_server_test), and what httplib 0.11
// lacks is made up for in one place: the proxy needs a dropped connection
// (no terminating chunk, or no answer at all), a prompt Stop() that ends idle
// keep-alive connections and open watch streams, the verified client
// certificate's CN, and bodies passed on as they are (httplib would compress
// them for clients that accept gzip, holding watch events in the compressor).
//
// httplib parses requests (keep-alive, bodies by Content-Length or chunked,
// "Expect: 100-continue"); a handler fills an HttpResponse: a whole body, a
// chunked stream that a callback writes after the head has gone out, or a
// connection closed without an answer. With a certificate and key in Options
// it speaks TLS, and with a client CA it asks for client certificates:
// clients without one are still served; a verified one's subject CN is in
// HttpRequest::client_cn.
//
// Ownership: the caller owns the server; destroying it stops it.
// Thread-safety: Start/Stop/port may be called from any thread; the handler
// and stream callbacks run on the server's pool threads, concurrently for
// different connections. Failure: Start reports bad PEM and bind errors as
// Status values; a malformed request gets a 4xx (or a closed connection)
// from httplib and the server keeps serving; a handler that throws gets its
// client a 500.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tfjob::testing {

struct HttpRequest {
  std::string method;  // upper-case as sent
  std::string target;  // request-target as sent (path + "?" + query)
  std::string path;    // target before '?', not decoded
  std::string raw_query;
  std::map<std::string, std::string> query;    // decoded; a repeated key keeps its last value
  std::map<std::string, std::string> headers;  // lower-case names; repeated ones joined with ", "
  std::string body;
  std::string client_cn;  // CN of the verified TLS client certificate; "" when none

  // The header's value, or "" when absent.
  const std::string& Header(const std::string& lower_name) const;
  // The query parameter's value, or "" when absent.
  const std::string& Query(const std::string& name) const;
  bool HasQuery(const std::string& name) const { return query.count(name) > 0; }
};

// Writes the body of a streamed response. Used by the stream callback only.
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  // Writes one chunk and flushes it; false when the peer is gone or the
  // server is stopping.
  virtual bool Write(std::string_view data) = 0;
  // True once the peer has closed its side, the connection failed or the
  // server is stopping.
  virtual bool PeerGone() = 0;
};

// A handler's answer. Left as it is (code 0): a 500.
struct HttpResponse {
  int code = 0;
  std::string content_type;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // When set: a chunked response (body unused) whose chunks this writes,
  // called once, after the head has been sent. Returning true ends the
  // stream with the terminating chunk; false cuts the connection without it
  // (a network drop).
  std::function<bool(ChunkSink&)> stream;
  // Closes the connection without any answer (a drop before the answer).
  bool abort = false;
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&)>;

class HttpServer {
 public:
  struct Options {
    std::string bind_address = "127.0.0.1";  // IPv4
    int port = 0;                            // 0: an ephemeral port
    // Connections served at once: a watch holds a thread for its life, a
    // keep-alive connection until it idles out; more wait for a free one.
    size_t threads = 128;
    size_t max_body_bytes = 32 * 1024 * 1024;  // larger: 413
    // Longer than cpprestsdk keeps an idle pooled connection (30-60 s), so
    // that the client, not the server, closes it and no request of the
    // client's races the server's close.
    int idle_timeout_seconds = 90;
    int io_timeout_seconds = 30;  // a peer silent mid-request, or not reading, is dropped after this
    // TLS: PEM certificate (chain) and key; both empty: plain HTTP.
    std::string tls_cert_pem, tls_key_pem;
    // PEM CA bundle: client certificates signed by it are accepted (and
    // named in client_cn); clients without one are still served.
    std::string client_ca_pem;
  };

  static StatusOr<std::unique_ptr<HttpServer>> Start(const Options& options, HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  // Stops accepting, cuts every connection (open streams end without their
  // terminating chunk) and joins all threads. Handlers blocked elsewhere
  // must be released by the caller first.
  void Stop();

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfjob::testing
