// A minimal HTTP/1.1 server over POSIX sockets for the API server double.
//
// Why not cpprestsdk's http_listener: a watch is a response that never ends,
// and the double must notice when the client has gone, flush every event as
// its own chunk, and be able to cut a stream without the terminating chunk
// (a dropped connection). A few hundred lines of sockets give that control.
//
// One thread per connection (tests open a handful). Requests on a connection
// are served in order (keep-alive; no pipelining beyond that). Bodies with
// Content-Length or chunked transfer encoding are accepted; "Expect:
// 100-continue" is answered.
//
// With a certificate and key in Options it speaks TLS (OpenSSL) instead, and
// with a client CA it asks for client certificates: a request whose
// certificate verified carries the subject's CN in HttpRequest::client_cn.
//
// Thread-safety: Start/Stop/port may be called from any thread; the handler
// runs on connection threads, concurrently for different connections.
// Failure: malformed requests get a 400 and the connection is closed; the
// server never aborts on input.
#pragma once

#include <atomic>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"

namespace tfjob::testing::apiserver {

struct HttpRequest {
  std::string method;  // upper-case as sent
  std::string target;  // request-target as sent (path + "?" + query)
  std::string path;    // target before '?', not decoded
  std::string raw_query;
  std::map<std::string, std::string> query;    // decoded; a repeated key keeps its last value
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string client_cn;  // CN of the verified TLS client certificate; "" when none

  // The header's value, or "" when absent.
  const std::string& Header(const std::string& lower_name) const;
  // The query parameter's value, or "" when absent.
  const std::string& Query(const std::string& name) const;
  bool HasQuery(const std::string& name) const { return query.count(name) > 0; }
};

// How a handler answers. Exactly one of Send or StartStream should be used;
// a handler that does neither gets a 500 written for it.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // A complete response with Content-Length.
  virtual void Send(int code, std::string_view content_type, std::string_view body,
                    const std::vector<std::pair<std::string, std::string>>& extra_headers = {}) = 0;
  // Starts a chunked response; false when the peer is gone.
  virtual bool StartStream(int code, std::string_view content_type) = 0;
  // Writes one chunk and flushes it; false when the peer is gone.
  virtual bool WriteChunk(std::string_view data) = 0;
  // Ends the stream with the terminating chunk (a clean end).
  virtual void EndStream() = 0;
  // Closes the connection without ending the response (a network drop).
  virtual void Abort() = 0;
  // True once the peer has closed its side or the connection failed.
  virtual bool PeerGone() = 0;
};

using HttpHandler = std::function<void(const HttpRequest&, ResponseWriter&)>;

// Decodes %XX escapes; with plus_is_space, '+' becomes ' ' (query strings).
// Invalid escapes are kept literally.
std::string PercentDecode(std::string_view s, bool plus_is_space);
std::string PercentEncode(std::string_view s);

class HttpServer {
 public:
  struct Options {
    std::string bind_address = "127.0.0.1";
    int port = 0;  // 0: an ephemeral port
    size_t max_connections = 512;
    size_t max_header_bytes = 64 * 1024;
    size_t max_body_bytes = 32 * 1024 * 1024;
    int idle_timeout_seconds = 300;  // a silent keep-alive connection is closed after this
    int send_timeout_seconds = 30;   // a peer that stops reading is dropped after this
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

  int port() const { return port_; }
  // Stops accepting, shuts every connection down and joins all threads.
  // Handlers blocked elsewhere must be released by the caller first.
  void Stop();

 private:
  struct Connection {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  HttpServer(const Options& options, HttpHandler handler) : options_(options), handler_(std::move(handler)) {}
  Status SetUpTls();
  void AcceptLoop();
  void Serve(Connection* conn);
  void ReapFinished();

  Options options_;
  HttpHandler handler_;
  std::shared_ptr<void> tls_;  // the SSL_CTX, when serving TLS
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};
  int port_ = 0;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;  // guards conns_ and every Connection::fd
  std::list<std::unique_ptr<Connection>> conns_;
};

}  // namespace tfjob::testing::apiserver
