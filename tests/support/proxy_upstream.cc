#include "tests/support/proxy_upstream.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

namespace tfjob::testing::proxy {

namespace {

constexpr int kPollSliceMs = 100;
constexpr size_t kMaxLine = 64 * 1024;

std::string OpenSslError(const std::string& what) {
  char buf[256] = "unknown error";
  if (unsigned long e = ERR_get_error()) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return what + ": " + buf;
}

std::string LowerCase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string TrimSpaces(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  size_t e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

StatusOr<UpstreamTarget> ParseUpstream(const std::string& url) {
  UpstreamTarget t;
  std::string rest;
  if (url.rfind("https://", 0) == 0) {
    t.tls = true;
    rest = url.substr(8);
  } else if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else {
    return InvalidArgument("upstream must be http:// or https://: " + url);
  }
  rest = rest.substr(0, rest.find('/'));
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) {
    t.host = rest;
    t.port = t.tls ? 443 : 80;
  } else {
    t.host = rest.substr(0, colon);
    const std::string port = rest.substr(colon + 1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
      return InvalidArgument("upstream port is not a number: " + url);
    t.port = std::stoi(port);
  }
  if (t.host.empty()) return InvalidArgument("upstream has no host: " + url);
  return t;
}

StatusOr<std::shared_ptr<void>> ClientTlsContext(const std::string& ca_pem, const std::string& cert_pem,
                                                 const std::string& key_pem) {
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_client_method()), SSL_CTX_free);
  if (!ctx) return Internal(OpenSslError("SSL_CTX_new"));
  if (!ca_pem.empty()) {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size())),
                                                  BIO_free);
    int n = 0;
    while (X509* ca = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
      X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx.get()), ca);
      X509_free(ca);
      ++n;
    }
    ERR_clear_error();  // the end of the PEM stream reads as an error
    if (n == 0) return InvalidArgument("upstream CA: no PEM certificate");
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  }
  if (!cert_pem.empty()) {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())),
                                                  BIO_free);
    X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
    if (!cert) return InvalidArgument(OpenSslError("client certificate"));
    const int ok = SSL_CTX_use_certificate(ctx.get(), cert);
    X509_free(cert);
    if (ok != 1) return InvalidArgument(OpenSslError("client certificate"));
    std::unique_ptr<BIO, decltype(&BIO_free)> kbio(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())),
                                                   BIO_free);
    EVP_PKEY* key = PEM_read_bio_PrivateKey(kbio.get(), nullptr, nullptr, nullptr);
    if (!key) return InvalidArgument(OpenSslError("client key"));
    const int key_ok = SSL_CTX_use_PrivateKey(ctx.get(), key);
    EVP_PKEY_free(key);
    if (key_ok != 1 || SSL_CTX_check_private_key(ctx.get()) != 1) return InvalidArgument(OpenSslError("client key"));
  }
  return std::shared_ptr<void>(ctx);
}

std::string ResponseHead::Header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? "" : it->second;
}

StatusOr<std::unique_ptr<Upstream>> Upstream::Connect(const UpstreamTarget& target, const std::shared_ptr<void>& tls) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(target.port);
  if (int e = ::getaddrinfo(target.host.c_str(), port.c_str(), &hints, &found); e != 0)
    return Unavailable("upstream " + target.host + ": " + gai_strerror(e));
  std::unique_ptr<Upstream> u(new Upstream());
  std::string error = "no address";
  for (addrinfo* a = found; a && u->fd_ < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      u->fd_ = fd;
    } else {
      error = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (u->fd_ < 0) return Unavailable("upstream " + target.host + ":" + port + ": " + error);
  int one = 1;
  ::setsockopt(u->fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  timeval snd{30, 0};
  ::setsockopt(u->fd_, SOL_SOCKET, SO_SNDTIMEO, &snd, sizeof snd);
  if (target.tls) {
    std::shared_ptr<SSL> ssl(SSL_new(static_cast<SSL_CTX*>(tls.get())), SSL_free);
    if (!ssl || SSL_set_fd(ssl.get(), u->fd_) != 1) return Internal(OpenSslError("SSL_new"));
    SSL_set_tlsext_host_name(ssl.get(), target.host.c_str());
    if (SSL_connect(ssl.get()) != 1) return Unavailable(OpenSslError("TLS with the upstream"));
    u->ssl_ = ssl;
  }
  return u;
}

Upstream::~Upstream() {
  if (ssl_) {
    ssl_.reset();
    ERR_clear_error();
  }
  if (fd_ >= 0) ::close(fd_);
}

void Upstream::Shutdown() { ::shutdown(fd_, SHUT_RDWR); }

bool Upstream::Write(std::string_view data) {
  SSL* ssl = static_cast<SSL*>(ssl_.get());
  while (!data.empty()) {
    if (ssl) {
      const int r = SSL_write(ssl, data.data(), static_cast<int>(std::min<size_t>(data.size(), 1 << 30)));
      if (r <= 0) {
        if (SSL_get_error(ssl, r) == SSL_ERROR_SYSCALL && errno == EINTR) continue;
        ERR_clear_error();
        return false;
      }
      data.remove_prefix(static_cast<size_t>(r));
      continue;
    }
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

Upstream::Got Upstream::More(const KeepWaiting& keep_waiting) {
  if (eof_) return Got::kEof;
  SSL* ssl = static_cast<SSL*>(ssl_.get());
  for (;;) {
    if (!ssl || SSL_pending(ssl) == 0) {
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, kPollSliceMs);
      if (r < 0 && errno != EINTR) return Got::kError;
      if (r <= 0) {
        if (!keep_waiting()) return Got::kError;
        continue;
      }
    }
    char tmp[16384];
    if (ssl) {
      const int r = SSL_read(ssl, tmp, sizeof tmp);
      if (r > 0) {
        buf_.append(tmp, static_cast<size_t>(r));
        return Got::kData;
      }
      const int e = SSL_get_error(ssl, r);
      ERR_clear_error();
      if (e == SSL_ERROR_WANT_READ || (e == SSL_ERROR_SYSCALL && errno == EINTR)) continue;
      if (e == SSL_ERROR_ZERO_RETURN) {
        eof_ = true;
        return Got::kEof;
      }
      return Got::kError;
    }
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n > 0) {
      buf_.append(tmp, static_cast<size_t>(n));
      return Got::kData;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      eof_ = true;
      return Got::kEof;
    }
    return Got::kError;
  }
}

bool Upstream::Line(std::string* line, const KeepWaiting& keep_waiting) {
  size_t pos;
  while ((pos = buf_.find('\n')) == std::string::npos) {
    if (buf_.size() > kMaxLine || More(keep_waiting) != Got::kData) return false;
  }
  *line = buf_.substr(0, pos);
  if (!line->empty() && line->back() == '\r') line->pop_back();
  buf_.erase(0, pos + 1);
  return true;
}

bool Upstream::Fill(size_t need, const KeepWaiting& keep_waiting) {
  while (buf_.size() < need) {
    if (More(keep_waiting) != Got::kData) return false;
  }
  return true;
}

bool Upstream::ReadHead(ResponseHead* head, bool no_body, const KeepWaiting& keep_waiting) {
  std::string line;
  do {  // 1xx answers come before the real one
    if (!Line(&line, keep_waiting)) return false;
    if (line.rfind("HTTP/1.", 0) != 0 || line.size() < 12) return false;
    head->code = std::atoi(line.c_str() + 9);
    head->headers.clear();
    for (;;) {
      if (!Line(&line, keep_waiting)) return false;
      if (line.empty()) break;
      const size_t colon = line.find(':');
      if (colon == std::string::npos) return false;
      head->headers.emplace(LowerCase(line.substr(0, colon)), TrimSpaces(line.substr(colon + 1)));
    }
  } while (head->code >= 100 && head->code < 200);
  if (head->code < 200 || head->code > 599) return false;
  head->chunked = LowerCase(head->Header("transfer-encoding")).find("chunked") != std::string::npos;
  const std::string cl = head->Header("content-length");
  head->length = -1;
  if (no_body || head->code == 204 || head->code == 304) {
    head->length = 0;
    head->chunked = false;
  } else if (!head->chunked && !cl.empty()) {
    if (cl.size() > 15 || cl.find_first_not_of("0123456789") != std::string::npos) return false;
    head->length = std::stoll(cl);
  }
  left_ = head->length;
  return true;
}

bool Upstream::ReadPiece(const ResponseHead& head, std::string* data, bool* end, const KeepWaiting& keep_waiting) {
  data->clear();
  *end = false;
  if (head.chunked) {
    std::string line;
    if (!Line(&line, keep_waiting)) return false;
    const std::string size_part = TrimSpaces(line.substr(0, line.find(';')));
    if (size_part.empty() || size_part.size() > 12 ||
        size_part.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
      return false;
    const size_t size = std::stoull(size_part, nullptr, 16);
    if (size == 0) {
      do {  // trailers, up to the empty line
        if (!Line(&line, keep_waiting)) return false;
      } while (!line.empty());
      *end = true;
      return true;
    }
    if (!Fill(size + 2, keep_waiting)) return false;
    data->assign(buf_, 0, size);
    buf_.erase(0, size + 2);
    return true;
  }
  if (left_ == 0) {
    *end = true;
    return true;
  }
  if (buf_.empty()) {
    const Got g = More(keep_waiting);
    if (g == Got::kEof && left_ < 0) {
      *end = true;  // a body that runs to the end of the stream
      return true;
    }
    if (g != Got::kData) return false;
  }
  const size_t take = left_ < 0 ? buf_.size() : std::min(buf_.size(), static_cast<size_t>(left_));
  data->assign(buf_, 0, take);
  buf_.erase(0, take);
  if (left_ > 0) left_ -= static_cast<long long>(take);
  return true;
}

bool Upstream::ReadBody(const ResponseHead& head, std::string* body, const KeepWaiting& keep_waiting) {
  body->clear();
  std::string piece;
  bool end = false;
  while (!end) {
    if (!ReadPiece(head, &piece, &end, keep_waiting)) return false;
    body->append(piece);
  }
  return true;
}

}  // namespace tfjob::testing::proxy
