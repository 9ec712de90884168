#include "tests/support/http_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <system_error>
#include <thread>
#include <vector>

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

namespace tfjob::testing {

namespace {

const std::string kEmpty;

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Shuts down (both ways) the accepted connections of the server listening on
// `port`: all of them, or with a peer only the one from that client address.
// httplib 0.11 hands out no connection handles, and a worker waiting for a
// keep-alive connection's next request does not look at stop() for up to the
// idle timeout; a shut-down socket wakes it at once. Each descriptor is
// duplicated and the duplicate checked, so one closed and reused meanwhile is
// someone else's socket, fails the check and is left alone.
void ShutDownConnections(int port, const std::string& peer_addr = "", int peer_port = 0) {
  std::vector<int> fds;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (const dirent* e = ::readdir(dir)) {
      if (e->d_name[0] >= '0' && e->d_name[0] <= '9') fds.push_back(std::atoi(e->d_name));
    }
    ::closedir(dir);
  }
  for (int fd : fds) {
    const int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) continue;
    sockaddr_in local{}, peer{};
    socklen_t local_len = sizeof local, peer_len = sizeof peer;
    char addr[INET_ADDRSTRLEN] = "";
    if (::getsockname(dup, reinterpret_cast<sockaddr*>(&local), &local_len) == 0 && local.sin_family == AF_INET &&
        ntohs(local.sin_port) == port && ::getpeername(dup, reinterpret_cast<sockaddr*>(&peer), &peer_len) == 0 &&
        (peer_port == 0 || (ntohs(peer.sin_port) == peer_port &&
                            ::inet_ntop(AF_INET, &peer.sin_addr, addr, sizeof addr) && peer_addr == addr))) {
      ::shutdown(dup, SHUT_RDWR);
    }
    ::close(dup);
  }
}

Status SetUpTls(SSL_CTX* ctx, const HttpServer::Options& o) {
  auto fail = [](const std::string& what) {
    char buf[256] = "unknown error";
    if (unsigned long e = ERR_get_error()) ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    return InvalidArgument("TLS: " + what + ": " + buf);
  };
  // The server's certificate and its chain, or (client_ca) trusted CAs.
  auto load_certs = [&](const std::string& pem, bool client_ca) -> Status {
    const char* what = client_ca ? "client CA" : "server certificate";
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
    bool first = true;
    while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
      int ok = client_ca ? X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), cert)
                         : (first ? SSL_CTX_use_certificate(ctx, cert) : SSL_CTX_add1_chain_cert(ctx, cert));
      // Named in the certificate request, for clients that pick by issuer.
      if (client_ca && ok == 1) ok = SSL_CTX_add_client_CA(ctx, cert);
      X509_free(cert);
      if (ok != 1) return fail(what);
      first = false;
    }
    ERR_clear_error();  // the end of the PEM stream reads as an error
    if (first) return InvalidArgument(std::string("TLS: ") + what + ": no PEM certificate");
    return Status::Ok();
  };
  RETURN_IF_ERROR(load_certs(o.tls_cert_pem, false));
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(o.tls_key_pem.data(), static_cast<int>(o.tls_key_pem.size())), BIO_free);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
  if (!key) return fail("server key");
  const int ok = SSL_CTX_use_PrivateKey(ctx, key);
  EVP_PKEY_free(key);
  if (ok != 1 || SSL_CTX_check_private_key(ctx) != 1) return fail("server key");
  if (!o.client_ca_pem.empty()) {
    RETURN_IF_ERROR(load_certs(o.client_ca_pem, true));
    // Asked for, not required (no SSL_VERIFY_FAIL_IF_NO_PEER_CERT, which
    // httplib's other constructors set): bearer-token clients present none.
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  }
  return Status::Ok();
}

// The subject CN of the peer's certificate. One that failed verification has
// failed the handshake already; one that is here verified.
std::string ClientCn(const SSL* ssl) {
  std::string out;
  X509* peer = ssl ? SSL_get1_peer_certificate(ssl) : nullptr;
  if (!peer) return out;
  char cn[256] = {};
  if (SSL_get_verify_result(ssl) == X509_V_OK &&
      X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, cn, sizeof cn) > 0) {
    out = cn;
  }
  X509_free(peer);
  return out;
}

class Sink : public ChunkSink {
 public:
  Sink(httplib::DataSink& sink, const std::atomic<bool>& stopping) : sink_(sink), stopping_(stopping) {}
  bool Write(std::string_view data) override {
    // An empty write would end httplib's stream.
    return !stopping_ && (data.empty() || sink_.write(data.data(), data.size()));
  }
  // is_writable() also peeks for the peer's end of stream.
  bool PeerGone() override { return stopping_ || !sink_.is_writable(); }

 private:
  httplib::DataSink& sink_;
  const std::atomic<bool>& stopping_;
};

}  // namespace

struct HttpServer::Impl {
  HttpHandler handler;
  std::unique_ptr<httplib::Server> server;
  std::thread thread;
  std::atomic<bool> loop_returned{false};
  std::atomic<bool> stopping{false};
  int port = 0;

  void Serve(const httplib::Request& in, httplib::Response& out);
};

void HttpServer::Impl::Serve(const httplib::Request& in, httplib::Response& out) {
  // httplib would compress the answer for a client that accepts gzip or br
  // (holding watch events back in the compressor) and cut Range parts out of
  // it; the proxy passes bodies on as they are. `in` is httplib's own
  // non-const request object, so changing it is defined.
  auto& request = const_cast<httplib::Request&>(in);
  request.headers.erase("Accept-Encoding");
  request.ranges.clear();

  HttpRequest req;
  req.method = in.method;
  req.target = in.target;
  if (req.target.empty() || req.target[0] != '/') {
    out.status = 400;
    out.set_content("request target must be a path\n", "text/plain");
    return;
  }
  const size_t q = req.target.find('?');
  req.path = req.target.substr(0, q);
  if (q != std::string::npos) req.raw_query = req.target.substr(q + 1);
  for (const auto& [name, value] : in.params) req.query[name] = value;
  for (const auto& [name, value] : in.headers) {
    // httplib adds these itself; they describe the connection, not the request.
    if (name == "REMOTE_ADDR" || name == "REMOTE_PORT" || name == "LOCAL_ADDR" || name == "LOCAL_PORT") continue;
    auto [it, inserted] = req.headers.emplace(Lower(name), value);
    if (!inserted) it->second += ", " + value;
  }
  req.body = in.body;
  req.client_cn = ClientCn(in.ssl);

  HttpResponse res;
  handler(req, res);
  if (res.abort) {
    // httplib's write of this answer then fails, and it closes the connection.
    ShutDownConnections(port, in.remote_addr, in.remote_port);
    res = HttpResponse();
    res.code = 500;
  }
  if (res.code == 0) {
    res.code = 500;
    res.content_type = "text/plain";
    res.body = "handler wrote no response\n";
  }
  out.status = res.code;
  for (const auto& [name, value] : res.headers) out.set_header(name, value);
  if (!res.stream) {
    out.body = std::move(res.body);
    if (!res.content_type.empty()) out.set_header("Content-Type", res.content_type);
    return;
  }
  // Called once: the whole stream is written in this one call.
  auto provider = [this, stream = std::move(res.stream)](size_t, httplib::DataSink& sink) {
    Sink chunks(sink, stopping);
    bool clean = false;
    try {
      clean = stream(chunks);
    } catch (...) {
      // httplib catches handler exceptions, not these: one would end the
      // pool thread and the process.
    }
    clean = clean && !stopping;
    if (clean) sink.done();
    return clean;  // false: httplib closes without the terminating chunk
  };
  out.set_chunked_content_provider(res.content_type, std::move(provider));
}

const std::string& HttpRequest::Header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? kEmpty : it->second;
}

const std::string& HttpRequest::Query(const std::string& name) const {
  auto it = query.find(name);
  return it == query.end() ? kEmpty : it->second;
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const Options& options, HttpHandler handler) {
  auto impl = std::make_unique<Impl>();
  impl->handler = std::move(handler);
  if (!options.tls_cert_pem.empty() || !options.tls_key_pem.empty()) {
    Status tls = Status::Ok();
    impl->server = std::make_unique<httplib::SSLServer>([&](SSL_CTX& ctx) {
      tls = SetUpTls(&ctx, options);
      return tls.ok();
    });
    if (!impl->server->is_valid()) return tls.ok() ? Internal("TLS: SSL_CTX_new failed") : tls;
  } else {
    impl->server = std::make_unique<httplib::Server>();
  }
  httplib::Server& server = *impl->server;
  server.new_task_queue = [n = options.threads] { return new httplib::ThreadPool(n); };
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which
  // another socket could share the port, and ShutDownConnections tells this
  // server's connections by the port.
  server.set_socket_options([](int sock) {
    int one = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  });
  server.set_keep_alive_max_count(1000000);  // httplib's default closes after 5 requests
  server.set_keep_alive_timeout(options.idle_timeout_seconds);
  server.set_read_timeout(options.io_timeout_seconds);
  server.set_write_timeout(options.io_timeout_seconds);
  server.set_payload_max_length(options.max_body_bytes);
  Impl* raw = impl.get();
  auto serve = [raw](const httplib::Request& in, httplib::Response& out) { raw->Serve(in, out); };
  server.Get(".*", serve).Post(".*", serve).Put(".*", serve).Patch(".*", serve).Delete(".*", serve);
  server.Options(".*", serve);

  const int port = options.port == 0 ? server.bind_to_any_port(options.bind_address)
                                     : (server.bind_to_port(options.bind_address, options.port) ? options.port : -1);
  if (port <= 0) return Unavailable("cannot listen on " + options.bind_address + ":" + std::to_string(options.port));
  raw->port = port;
  try {
    raw->thread = std::thread([raw] {
      raw->server->listen_after_bind();
      raw->loop_returned = true;
    });
  } catch (const std::system_error& e) {
    return Unavailable(std::string("server thread: ") + e.what());
  }
  // stop() does nothing until the loop has marked itself running, so a
  // server stopped at once would otherwise wait forever for its thread.
  while (!server.is_running() && !raw->loop_returned) std::this_thread::yield();
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::~HttpServer() { Stop(); }

int HttpServer::port() const { return impl_->port; }

void HttpServer::Stop() {
  if (impl_->stopping.exchange(true)) return;
  impl_->server->stop();  // closes the listening socket: nothing new is accepted
  ShutDownConnections(impl_->port);
  if (impl_->thread.joinable()) impl_->thread.join();  // the pool's threads are joined in there
}

}  // namespace tfjob::testing
