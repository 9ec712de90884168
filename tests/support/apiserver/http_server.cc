#include "tests/support/apiserver/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

namespace tfjob::testing::apiserver {

namespace {

const std::string kEmpty;

const char* ReasonPhrase(int code) {
  switch (code) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 413: return "Request Entity Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return code < 400 ? "OK" : "Error";
  }
}

// One connection's byte stream: the socket, or a TLS session over it. Used
// by the connection's own thread only.
class Io {
 public:
  Io(int fd, SSL* ssl) : fd_(fd), ssl_(ssl) {}
  int fd() const { return fd_; }

  // Like recv(2): > 0 bytes read, 0 at end of stream, < 0 on error.
  ssize_t Recv(char* buf, size_t n) {
    for (;;) {
      if (ssl_) {
        const int r = SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(n, 1 << 30)));
        if (r > 0) return r;
        const int e = SSL_get_error(ssl_, r);
        if (e == SSL_ERROR_ZERO_RETURN) return 0;
        if (e == SSL_ERROR_SYSCALL && errno == EINTR) continue;
        return -1;
      }
      ssize_t r = ::recv(fd_, buf, n, 0);
      if (r < 0 && errno == EINTR) continue;
      return r;
    }
  }

  // Writes everything or fails; MSG_NOSIGNAL so a closed peer is an error, not SIGPIPE.
  bool SendAll(std::string_view data) {
    while (!data.empty()) {
      if (ssl_) {
        // SIGPIPE is avoided by the server ignoring it while TLS is on
        // (OpenSSL writes with send(2) flags of its own).
        const int r = SSL_write(ssl_, data.data(), static_cast<int>(std::min<size_t>(data.size(), 1 << 30)));
        if (r <= 0) {
          if (SSL_get_error(ssl_, r) == SSL_ERROR_SYSCALL && errno == EINTR) continue;
          return false;
        }
        data.remove_prefix(static_cast<size_t>(r));
        continue;
      }
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

 private:
  int fd_;
  SSL* ssl_;
};

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Buffered reads from one connection, bounded by the server's limits.
class Reader {
 public:
  explicit Reader(Io& io) : io_(io) {}
  std::string& buf() { return buf_; }

  // Reads at least one more byte; false on EOF, error or idle timeout.
  bool More() {
    char tmp[16384];
    ssize_t n = io_.Recv(tmp, sizeof tmp);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }
  bool Fill(size_t need) {
    while (buf_.size() < need) {
      if (!More()) return false;
    }
    return true;
  }
  // A line ending in "\n" (CR stripped), at most `limit` bytes.
  bool Line(std::string* line, size_t limit) {
    size_t pos;
    while ((pos = buf_.find('\n')) == std::string::npos) {
      if (buf_.size() > limit || !More()) return false;
    }
    if (pos > limit) return false;
    *line = buf_.substr(0, pos);
    if (!line->empty() && line->back() == '\r') line->pop_back();
    buf_.erase(0, pos + 1);
    return true;
  }

 private:
  Io& io_;
  std::string buf_;
};

class ConnWriter : public ResponseWriter {
 public:
  ConnWriter(Io& io, bool keep_alive) : io_(io), fd_(io.fd()), keep_alive_(keep_alive) {}

  void Send(int code, std::string_view content_type, std::string_view body,
            const std::vector<std::pair<std::string, std::string>>& extra_headers) override {
    if (state_ != kNone) return;
    state_ = kDone;
    std::string head = StatusLine(code);
    if (!content_type.empty()) head += "Content-Type: " + std::string(content_type) + "\r\n";
    for (const auto& [k, v] : extra_headers) head += k + ": " + v + "\r\n";
    head += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    // One buffer so small responses leave in one segment.
    head.append(body);
    if (!io_.SendAll(head)) broken_ = true;
  }

  bool StartStream(int code, std::string_view content_type) override {
    if (state_ != kNone) return false;
    state_ = kStreaming;
    std::string head = StatusLine(code);
    head += "Content-Type: " + std::string(content_type) + "\r\nTransfer-Encoding: chunked\r\n\r\n";
    if (!io_.SendAll(head)) broken_ = true;
    return !broken_;
  }

  bool WriteChunk(std::string_view data) override {
    if (state_ != kStreaming || broken_) return false;
    if (data.empty()) return true;  // an empty chunk would end the stream
    char size[32];
    int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    std::string chunk(size, static_cast<size_t>(n));
    chunk.append(data);
    chunk += "\r\n";
    if (!io_.SendAll(chunk)) broken_ = true;
    return !broken_;
  }

  void EndStream() override {
    if (state_ != kStreaming) return;
    state_ = kDone;
    if (!broken_ && !io_.SendAll("0\r\n\r\n")) broken_ = true;
  }

  void Abort() override {
    state_ = kDone;
    broken_ = true;
    ::shutdown(fd_, SHUT_RDWR);
  }

  bool PeerGone() override {
    if (broken_) return true;
    pollfd p{fd_, static_cast<short>(POLLIN | POLLRDHUP), 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    if (p.revents & POLLIN) {
      char c;
      ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0) return true;
    }
    return false;
  }

  bool responded() const { return state_ != kNone; }
  // The stream was left open by the handler: it cannot be reused.
  bool reusable() const { return keep_alive_ && !broken_ && state_ == kDone; }
  bool streaming() const { return state_ == kStreaming; }

 private:
  enum State { kNone, kStreaming, kDone };

  std::string StatusLine(int code) const {
    std::string s = "HTTP/1.1 " + std::to_string(code) + " " + ReasonPhrase(code) + "\r\n";
    s += "Cache-Control: no-cache, private\r\n";
    if (!keep_alive_) s += "Connection: close\r\n";
    return s;
  }

  Io& io_;
  int fd_;
  bool keep_alive_;
  bool broken_ = false;
  State state_ = kNone;
};

void SendSimple(Io& io, int code, std::string_view body) {
  std::string r =
      "HTTP/1.1 " + std::to_string(code) + " " + ReasonPhrase(code) +
      "\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n";
  r.append(body);
  io.SendAll(r);
}

bool ValidToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c <= 32 || c >= 127 || std::strchr("()<>@,;:\\\"/[]?={}", c)) return false;
  }
  return true;
}

void ParseQuery(std::string_view q, std::map<std::string, std::string>* out) {
  while (!q.empty()) {
    size_t amp = q.find('&');
    std::string_view kv = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
    if (kv.empty()) continue;
    size_t eq = kv.find('=');
    std::string key = PercentDecode(kv.substr(0, eq), true);
    std::string value = eq == std::string_view::npos ? "" : PercentDecode(kv.substr(eq + 1), true);
    (*out)[key] = value;
  }
}

}  // namespace

const std::string& HttpRequest::Header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? kEmpty : it->second;
}

const std::string& HttpRequest::Query(const std::string& name) const {
  auto it = query.find(name);
  return it == query.end() ? kEmpty : it->second;
}

std::string PercentDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%' && i + 2 < s.size()) {
      int hi = HexValue(s[i + 1]), lo = HexValue(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_is_space && c == '+' ? ' ' : c);
  }
  return out;
}

std::string PercentEncode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

Status HttpServer::SetUpTls() {
  if (options_.tls_cert_pem.empty() && options_.tls_key_pem.empty()) return Status::Ok();
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  auto fail = [](const std::string& what) {
    char buf[256] = "unknown error";
    if (unsigned long e = ERR_get_error()) ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    return InvalidArgument("TLS: " + what + ": " + buf);
  };
  if (!ctx) return fail("SSL_CTX_new");
  auto load_certs = [&](const std::string& pem, bool chain) -> Status {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
    bool first = true;
    while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
      int ok = chain ? (first ? SSL_CTX_use_certificate(ctx.get(), cert) : SSL_CTX_add1_chain_cert(ctx.get(), cert))
                     : X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx.get()), cert);
      if (!chain && ok == 1) SSL_CTX_add_client_CA(ctx.get(), cert);
      X509_free(cert);
      if (ok != 1) return fail(chain ? "server certificate" : "client CA");
      first = false;
    }
    ERR_clear_error();  // the end of the PEM stream reads as an error
    if (first)
      return InvalidArgument(std::string("TLS: ") + (chain ? "server certificate" : "client CA") +
                             ": no PEM certificate");
    return Status::Ok();
  };
  RETURN_IF_ERROR(load_certs(options_.tls_cert_pem, true));
  {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(
        BIO_new_mem_buf(options_.tls_key_pem.data(), static_cast<int>(options_.tls_key_pem.size())), BIO_free);
    EVP_PKEY* key = PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
    if (!key) return fail("server key");
    const int ok = SSL_CTX_use_PrivateKey(ctx.get(), key);
    EVP_PKEY_free(key);
    if (ok != 1 || SSL_CTX_check_private_key(ctx.get()) != 1) return fail("server key");
  }
  if (!options_.client_ca_pem.empty()) {
    RETURN_IF_ERROR(load_certs(options_.client_ca_pem, false));
    // Asked for, not required: bearer-token clients present none.
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  }
  // Writes to a peer that has gone raise SIGPIPE inside OpenSSL.
  ::signal(SIGPIPE, SIG_IGN);
  tls_ = ctx;
  return Status::Ok();
}

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const Options& options, HttpHandler handler) {
  std::unique_ptr<HttpServer> s(new HttpServer(options, std::move(handler)));
  RETURN_IF_ERROR(s->SetUpTls());
  s->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s->listen_fd_ < 0) return Unavailable(std::string("socket: ") + std::strerror(errno));
  int one = 1;
  ::setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(options.port));
  if (::inet_pton(AF_INET, options.bind_address.c_str(), &addr.sin_addr) != 1) {
    return InvalidArgument("bind address is not an IPv4 address: " + options.bind_address);
  }
  if (::bind(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return Unavailable("bind " + options.bind_address + ":" + std::to_string(options.port) + ": " +
                       std::strerror(errno));
  }
  if (::listen(s->listen_fd_, 128) != 0) return Unavailable(std::string("listen: ") + std::strerror(errno));
  socklen_t len = sizeof addr;
  ::getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  s->port_ = ntohs(addr.sin_port);
  if (::pipe2(s->wake_fds_, O_CLOEXEC) != 0) return Unavailable(std::string("pipe: ") + std::strerror(errno));
  s->accept_thread_ = std::thread([p = s.get()] { p->AcceptLoop(); });
  return s;
}

HttpServer::~HttpServer() {
  Stop();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  for (int fd : wake_fds_) {
    if (fd >= 0) ::close(fd);
  }
}

void HttpServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (wake_fds_[1] >= 0) (void)!::write(wake_fds_[1], "x", 1);
  if (accept_thread_.joinable()) accept_thread_.join();
  std::list<std::unique_ptr<Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : conns_) {
      if (c->fd >= 0) ::shutdown(c->fd, SHUT_RDWR);
    }
    conns.swap(conns_);
  }
  for (auto& c : conns) {
    if (c->thread.joinable()) c->thread.join();
  }
}

void HttpServer::ReapFinished() {
  std::list<std::unique_ptr<Connection>> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      if ((*it)->done.load()) {
        finished.push_back(std::move(*it));
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : finished) c->thread.join();
}

void HttpServer::AcceptLoop() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fds_[0], POLLIN, 0}};
  while (!stopping_.load()) {
    int r = ::poll(fds, 2, 1000);
    ReapFinished();
    if (r < 0 && errno != EINTR) break;
    if (r <= 0 || !(fds[0].revents & POLLIN)) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    timeval rcv{options_.idle_timeout_seconds, 0}, snd{options_.send_timeout_seconds, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rcv, sizeof rcv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &snd, sizeof snd);
    std::lock_guard<std::mutex> lock(mu_);
    if (conns_.size() >= options_.max_connections) {
      Io plain(fd, nullptr);
      if (!tls_) SendSimple(plain, 503, "too many connections\n");
      ::close(fd);
      continue;
    }
    auto conn = std::make_unique<Connection>();
    conn->fd = fd;
    Connection* raw = conn.get();
    conns_.push_back(std::move(conn));
    raw->thread = std::thread([this, raw] { Serve(raw); });
  }
}

void HttpServer::Serve(Connection* conn) {
  const int fd = conn->fd;
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(nullptr, SSL_free);
  std::string client_cn;
  if (tls_) {
    ssl.reset(SSL_new(static_cast<SSL_CTX*>(tls_.get())));
    if (!ssl || SSL_set_fd(ssl.get(), fd) != 1 || SSL_accept(ssl.get()) != 1) {
      ERR_clear_error();
      ssl.reset();
      std::lock_guard<std::mutex> lock(mu_);
      ::close(conn->fd);
      conn->fd = -1;
      conn->done.store(true);
      return;
    }
    // A certificate that failed verification has failed the handshake
    // already; one that is here verified.
    if (X509* peer = SSL_get_peer_certificate(ssl.get())) {
      char cn[256] = {};
      if (SSL_get_verify_result(ssl.get()) == X509_V_OK &&
          X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, cn, sizeof cn) > 0) {
        client_cn = cn;
      }
      X509_free(peer);
    }
  }
  Io io(fd, ssl.get());
  Reader in(io);
  while (!stopping_.load()) {
    std::string line;
    // Tolerate blank lines between requests (RFC 9112 section 2.2).
    do {
      if (!in.Line(&line, options_.max_header_bytes)) {
        if (in.buf().size() > options_.max_header_bytes) SendSimple(io, 431, "request line too long\n");
        goto done;
      }
    } while (line.empty());

    HttpRequest req;
    {
      size_t sp1 = line.find(' ');
      size_t sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
      if (sp2 == std::string::npos) {
        SendSimple(io, 400, "malformed request line\n");
        goto done;
      }
      req.method = line.substr(0, sp1);
      req.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
      std::string version = line.substr(sp2 + 1);
      if (!ValidToken(req.method) || req.target.empty() || version.rfind("HTTP/1.", 0) != 0 || version.size() != 8) {
        SendSimple(io, 400, "malformed request line\n");
        goto done;
      }
      // Absolute form ("http://host/path") as a proxy would send it.
      if (req.target.rfind("http://", 0) == 0 || req.target.rfind("https://", 0) == 0) {
        size_t slash = req.target.find('/', req.target.find("//") + 2);
        req.target = slash == std::string::npos ? "/" : req.target.substr(slash);
      }
      if (req.target[0] != '/') {
        SendSimple(io, 400, "request target must be a path\n");
        goto done;
      }
      size_t q = req.target.find('?');
      req.path = req.target.substr(0, q);
      if (q != std::string::npos) req.raw_query = req.target.substr(q + 1);
      ParseQuery(req.raw_query, &req.query);
      bool http10 = version == "HTTP/1.0";

      size_t header_bytes = line.size();
      for (;;) {
        if (!in.Line(&line, options_.max_header_bytes)) {
          if (in.buf().size() > options_.max_header_bytes) SendSimple(io, 431, "headers too large\n");
          goto done;
        }
        if (line.empty()) break;
        header_bytes += line.size();
        if (header_bytes > options_.max_header_bytes || req.headers.size() > 256) {
          SendSimple(io, 431, "headers too large\n");
          goto done;
        }
        size_t colon = line.find(':');
        if (colon == std::string::npos || !ValidToken(std::string_view(line).substr(0, colon))) {
          SendSimple(io, 400, "malformed header\n");
          goto done;
        }
        std::string name = Lower(std::string_view(line).substr(0, colon));
        std::string value(Trim(std::string_view(line).substr(colon + 1)));
        auto [it, inserted] = req.headers.emplace(name, value);
        if (!inserted) it->second += ", " + value;
      }

      std::string connection = Lower(req.Header("connection"));
      // Responses to HEAD carry a body here; closing keeps the framing honest.
      bool keep_alive = !http10 && connection.find("close") == std::string::npos && req.method != "HEAD";

      bool chunked = Lower(req.Header("transfer-encoding")).find("chunked") != std::string::npos;
      const std::string& cl = req.Header("content-length");
      size_t length = 0;
      if (!chunked && !cl.empty()) {
        if (cl.size() > 12 || cl.find_first_not_of("0123456789") != std::string::npos) {
          SendSimple(io, 400, "bad Content-Length\n");
          goto done;
        }
        length = std::stoull(cl);
        if (length > options_.max_body_bytes) {
          SendSimple(io, 413, "body too large\n");
          goto done;
        }
      }
      if ((chunked || length > 0) && Lower(req.Header("expect")) == "100-continue" && in.buf().empty()) {
        if (!io.SendAll("HTTP/1.1 100 Continue\r\n\r\n")) goto done;
      }
      if (chunked) {
        for (;;) {
          if (!in.Line(&line, 1024)) {
            SendSimple(io, 400, "malformed chunk\n");
            goto done;
          }
          std::string_view size_part = Trim(std::string_view(line).substr(0, line.find(';')));
          if (size_part.empty() || size_part.size() > 8) {
            SendSimple(io, 400, "malformed chunk size\n");
            goto done;
          }
          size_t size = 0;
          for (char c : size_part) {
            int h = HexValue(c);
            if (h < 0) {
              SendSimple(io, 400, "malformed chunk size\n");
              goto done;
            }
            size = size * 16 + static_cast<size_t>(h);
          }
          if (size == 0) {
            // Trailers, ignored, up to the empty line.
            do {
              if (!in.Line(&line, options_.max_header_bytes)) goto done;
            } while (!line.empty());
            break;
          }
          if (req.body.size() + size > options_.max_body_bytes) {
            SendSimple(io, 413, "body too large\n");
            goto done;
          }
          if (!in.Fill(size + 2)) goto done;
          req.body.append(in.buf(), 0, size);
          in.buf().erase(0, size + 2);
        }
      } else if (length > 0) {
        if (!in.Fill(length)) goto done;
        req.body = in.buf().substr(0, length);
        in.buf().erase(0, length);
      }

      req.client_cn = client_cn;
      ConnWriter writer(io, keep_alive);
      handler_(req, writer);
      if (!writer.responded()) {
        writer.Send(500, "text/plain", "handler wrote no response\n", {});
      } else if (writer.streaming()) {
        writer.Abort();
      }
      if (!writer.reusable()) goto done;
    }
  }
done:
  if (ssl) {
    SSL_shutdown(ssl.get());  // close_notify, without waiting for the peer's
    ssl.reset();
    ERR_clear_error();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ::close(conn->fd);
    conn->fd = -1;
  }
  conn->done.store(true);
}

}  // namespace tfjob::testing::apiserver
