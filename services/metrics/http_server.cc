#include "services/metrics/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cpprest/http_listener.h>

namespace tfjob::runtime_metrics {
namespace {

using web::http::http_request;
using web::http::experimental::listener::http_listener;

struct Bind {
  std::string host;
  int port = 0;
};

StatusOr<Bind> ParseBind(const std::string& bind) {
  const auto colon = bind.rfind(':');
  Bind b;
  b.host = colon == std::string::npos || colon == 0 ? "0.0.0.0" : bind.substr(0, colon);
  const std::string port = colon == std::string::npos ? bind : bind.substr(colon + 1);
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 0 || p > 65535) {
    return InvalidArgument("bind address \"" + bind + "\": port must be a number in 0..65535");
  }
  b.port = static_cast<int>(p);
  return b;
}

}  // namespace

struct HttpServer::Impl {
  std::unique_ptr<http_listener> listener;
  std::map<std::string, HttpHandler> routes;
};

StatusOr<int> PickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return Unavailable("bind: " + why);
  }
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& bind,
                                                         std::map<std::string, HttpHandler> routes) {
  ASSIGN_OR_RETURN(Bind b, ParseBind(bind));
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->impl_ = std::make_unique<Impl>();
  s->impl_->routes = std::move(routes);
  // cpprestsdk cannot report the port it bound, so port 0 becomes a port
  // that was free a moment ago; another process may take it in between, so
  // a few attempts.
  const int attempts = b.port == 0 ? 5 : 1;
  std::string last_error;
  for (int i = 0; i < attempts; ++i) {
    int port = b.port;
    if (port == 0) {
      ASSIGN_OR_RETURN(port, PickFreePort());
    }
    try {
      auto listener = std::make_unique<http_listener>("http://" + b.host + ":" + std::to_string(port));
      Impl* impl = s->impl_.get();
      listener->support(web::http::methods::GET, [impl](http_request req) {
        auto it = impl->routes.find(req.relative_uri().path());
        if (it == impl->routes.end()) {
          req.reply(web::http::status_codes::NotFound, "not found\n");
          return;
        }
        HttpResponse r = it->second();
        req.reply(static_cast<web::http::status_code>(r.status), r.body, r.content_type);
      });
      listener->open().wait();
      s->impl_->listener = std::move(listener);
      s->port_ = port;
      return s;
    } catch (const std::exception& e) {
      last_error = e.what();
    }
  }
  return Unavailable("cannot listen on " + bind + ": " + last_error);
}

HttpServer::~HttpServer() {
  if (impl_ && impl_->listener) {
    try {
      impl_->listener->close().wait();
    } catch (const std::exception&) {
      // Closing only fails when the listener is already gone.
    }
  }
}

}  // namespace tfjob::runtime_metrics
