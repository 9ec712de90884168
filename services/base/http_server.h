// The HTTP server for /metrics, /healthz and /readyz, shared by the
// operator and every runtime role. Each route is an exact path answered by
// a handler for GET; any other path is 404.
//
// Built on Debian's cpp-httplib. Without a host it listens on every
// interface, IPv6 and IPv4 (dual-stack); port 0 binds a port the kernel
// picks, on the socket the server keeps.
//
// Ownership: the server owns its listening thread; handlers are copied in
// and must stay callable (and whatever they capture alive) until the server
// is destroyed. Thread-safety: handlers run on the server's thread pool, so
// they may run concurrently with each other and with the caller. Failure:
// Start returns UNAVAILABLE when the address cannot be bound, INVALID_ARGUMENT
// when it does not parse; a running server never fails.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/status.h"

namespace tfjob::base {

struct HttpResponse {
  int status = 200;
  std::string body;
  std::string content_type = "text/plain; charset=utf-8";
};

using HttpHandler = std::function<HttpResponse()>;

class HttpServer {
 public:
  // `bind` is ":PORT" (every interface), "HOST:PORT", "[IPV6]:PORT", or a bare "PORT".
  // Port 0 picks a free port; port() tells which.
  static StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& bind,
                                                     std::map<std::string, HttpHandler> routes);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }

 private:
  struct Impl;
  HttpServer() = default;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace tfjob::base
