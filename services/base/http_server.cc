#include "services/base/http_server.h"

#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include <httplib.h>

namespace tfjob::base {
namespace {

struct Bind {
  std::string host;
  int port = 0;
};

StatusOr<Bind> ParseBind(const std::string& bind) {
  const auto colon = bind.rfind(':');
  Bind b;
  // No host: every interface, IPv6 and IPv4 (a dual-stack socket).
  b.host = colon == std::string::npos || colon == 0 ? "::" : bind.substr(0, colon);
  if (b.host.size() >= 2 && b.host.front() == '[' && b.host.back() == ']') b.host = b.host.substr(1, b.host.size() - 2);
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
  httplib::Server server;
  std::thread thread;
  std::atomic<bool> loop_returned{false};
};

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& bind,
                                                        std::map<std::string, HttpHandler> routes) {
  ASSIGN_OR_RETURN(Bind b, ParseBind(bind));
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->impl_ = std::make_unique<Impl>();
  httplib::Server& server = s->impl_->server;
  for (auto& route : routes) {
    // A named copy: clang 14 cannot capture a structured binding.
    HttpHandler handler = route.second;
    server.Get(route.first, [handler](const httplib::Request&, httplib::Response& res) {
      HttpResponse r = handler();
      res.status = r.status;
      res.set_content(r.body, r.content_type.c_str());
    });
  }
  // SO_REUSEADDR only: cpp-httplib's default also sets SO_REUSEPORT, which
  // would let a second process share (and steal connections from) a port
  // already in use instead of failing to bind it.
  server.set_socket_options([](int sock) {
    int one = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  });
  // Anything else is 404, as before, with a body that says so.
  server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) res.set_content("not found\n", "text/plain; charset=utf-8");
  });
  // Port 0: the kernel picks one on the socket this server keeps, so no
  // other process can take it in between.
  const int port = b.port == 0 ? server.bind_to_any_port(b.host) : (server.bind_to_port(b.host, b.port) ? b.port : -1);
  if (port <= 0) {
    return Unavailable("cannot listen on " + bind + ": " + std::strerror(errno ? errno : EADDRINUSE));
  }
  s->port_ = port;
  std::atomic<bool>& done = s->impl_->loop_returned;
  s->impl_->thread = std::thread([&server, &done] {
    server.listen_after_bind();
    done = true;
  });
  // stop() does nothing until the loop has marked itself running, so a
  // server destroyed at once would otherwise wait forever for its thread.
  while (!server.is_running() && !done) std::this_thread::yield();
  return s;
}

HttpServer::~HttpServer() {
  if (impl_) {
    impl_->server.stop();
    if (impl_->thread.joinable()) impl_->thread.join();
  }
}

}  // namespace tfjob::base
