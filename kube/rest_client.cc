#include "kube/rest_client.h"
#include "common/mutex.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

namespace tfjob::kube {

namespace http = web::http;

std::string Resource::Path(const std::string& ns, const std::string& name, const std::string& sub) const {
  std::string p = group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
  if (!ns.empty()) p += "/namespaces/" + ns;
  p += "/" + plural;
  if (!name.empty()) p += "/" + name;
  if (!sub.empty()) p += "/" + sub;
  return p;
}

Status FromHttp(int code, const std::string& body, const std::string& what) {
  std::string reason, message;
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object()) {
    if (j.contains("reason") && j["reason"].is_string()) reason = j["reason"].get<std::string>();
    if (j.contains("message") && j["message"].is_string()) message = j["message"].get<std::string>();
  }
  if (message.empty()) message = body.substr(0, 200);
  const std::string m = what + ": HTTP " + std::to_string(code) + (reason.empty() ? "" : " " + reason) + ": " + message;
  switch (code) {
    case 400:
    case 422: return InvalidArgument(m);
    case 401: return Status(Code::kUnauthenticated, m);
    case 403: return Status(Code::kPermissionDenied, m);
    case 404: return NotFound(m);
    case 409: return reason == "AlreadyExists" ? AlreadyExists(m) : Aborted(m);
    case 410: return FailedPrecondition(m);
    case 429: return ResourceExhausted(m);
    default: return code >= 500 ? Unavailable(m) : Status(Code::kUnknown, m);
  }
}

std::string UrlEncode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

namespace {

class SteadyRateClock final : public RateClock {
 public:
  std::chrono::steady_clock::time_point Now() override { return std::chrono::steady_clock::now(); }
  void SleepFor(std::chrono::nanoseconds d) override { std::this_thread::sleep_for(d); }
};

// OpenSSL's reason for the most recent failure, or asio's message.
std::string TlsReason(const boost::system::error_code& ec) {
  std::string reason = ec.message();
  if (const unsigned long e = ERR_peek_last_error(); e != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    const char* r = ERR_reason_error_string(e);
    reason = r ? r : buf;
  }
  ERR_clear_error();
  return reason;
}

// Loads the CA, certificate and key into a scratch context: what the
// per-connection callback will do, done once up front so a bad file is an
// error at start-up that names it, not a failed handshake later.
Status CheckTls(const std::string& ca, const std::string& ca_origin, const AuthState& auth) {
  boost::asio::ssl::context ctx(boost::asio::ssl::context::tls_client);
  boost::system::error_code ec;
  ERR_clear_error();
  if (!ca.empty()) {
    if (ca.find("-----BEGIN") == std::string::npos) {
      return InvalidArgument("TLS: certificate authority " + ca_origin + ": no PEM certificate in it");
    }
    ctx.add_certificate_authority(boost::asio::buffer(ca), ec);
    if (ec) return InvalidArgument("TLS: certificate authority " + ca_origin + ": " + TlsReason(ec));
  }
  if (!auth.client_cert_pem.empty()) {
    ctx.use_certificate_chain(boost::asio::buffer(auth.client_cert_pem), ec);
    if (ec) return InvalidArgument("TLS: client certificate " + auth.client_cert_origin + ": " + TlsReason(ec));
    ctx.use_private_key(boost::asio::buffer(auth.client_key_pem), boost::asio::ssl::context::pem, ec);
    if (ec) {
      const std::string reason = TlsReason(ec);
      if (reason.find("mismatch") != std::string::npos) {
        return InvalidArgument("TLS: client key " + auth.client_key_origin + " does not match client certificate " +
                               auth.client_cert_origin + ": " + reason);
      }
      return InvalidArgument("TLS: client key " + auth.client_key_origin + ": " + reason);
    }
    if (SSL_CTX_check_private_key(ctx.native_handle()) != 1) {
      boost::system::error_code none;
      return InvalidArgument("TLS: client key " + auth.client_key_origin + " does not match client certificate " +
                             auth.client_cert_origin + ": " + TlsReason(none));
    }
  }
  return Status::Ok();
}

bool IsHttps(const std::string& server) { return server.rfind("https://", 0) == 0; }

}  // namespace

std::shared_ptr<RateClock> RealRateClock() { return std::make_shared<SteadyRateClock>(); }

TokenBucket::TokenBucket(double qps, int burst, std::shared_ptr<RateClock> clock)
    : clock_(clock ? std::move(clock) : RealRateClock()),
      qps_(qps),
      burst_(std::max(1, burst)),
      tokens_(std::max(1, burst)),
      last_(clock_->Now()) {}

void TokenBucket::Take() {
  MutexLock lock(mu_);
  while (true) {
    const auto now = clock_->Now();
    tokens_ = std::min(burst_, tokens_ + std::chrono::duration<double>(now - last_).count() * qps_);
    last_ = now;
    // The tolerance absorbs rounding in (1 - tokens) / qps, so one wait of
    // exactly that long always yields the token.
    if (tokens_ >= 1 - 1e-9) {
      tokens_ = std::max(0.0, tokens_ - 1);
      return;
    }
    const auto wait =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>((1 - tokens_) / qps_));
    // Others wait behind this one: the lock is held, as client-go's limiter
    // serves waiters in order.
    clock_->SleepFor(std::max(wait, std::chrono::nanoseconds(1)));
  }
}

struct RestClient::Impl {
  ClusterConfig config;
  RestOptions options;
  std::shared_ptr<Credentials> creds;
  std::unique_ptr<TokenBucket> limiter;
  Mutex mu;
  std::shared_ptr<http::client::http_client> client TFJOB_GUARDED_BY(mu);
  uint64_t client_generation TFJOB_GUARDED_BY(mu) = 0;
  uint64_t checked_generation TFJOB_GUARDED_BY(mu) = 0;  // client certificates up to this one passed CheckTls

  // A certificate from an exec plugin is checked like a static one, once.
  Status CheckCertLocked(const AuthState& auth) TFJOB_REQUIRES(mu) {
    if (!IsHttps(config.server) || auth.cert_generation == checked_generation) return Status::Ok();
    if (!auth.client_cert_pem.empty()) RETURN_IF_ERROR(CheckTls("", "", auth));
    checked_generation = auth.cert_generation;
    return Status::Ok();
  }

  http::client::http_client_config ClientConfig(std::chrono::seconds timeout, const AuthState& auth) const {
    http::client::http_client_config cc;
    cc.set_timeout(timeout);
    cc.set_validate_certificates(!config.insecure_skip_tls_verify);
    // Checked by CheckTls before any client is made with them, so the
    // errors this callback would meet have been reported already.
    cc.set_ssl_context_callback(
        [ca = config.ca_pem, cert = auth.client_cert_pem, key = auth.client_key_pem](boost::asio::ssl::context& ctx) {
          boost::system::error_code ec;
          if (!ca.empty()) ctx.add_certificate_authority(boost::asio::buffer(ca), ec);
          if (!cert.empty()) ctx.use_certificate_chain(boost::asio::buffer(cert), ec);
          if (!key.empty()) ctx.use_private_key(boost::asio::buffer(key), boost::asio::ssl::context::pem, ec);
        });
    return cc;
  }

  // The credentials for the next request and a client whose connections
  // carry the current client certificate (a new one when it changed).
  StatusOr<std::pair<std::shared_ptr<http::client::http_client>, AuthState>> Prepare() {
    ASSIGN_OR_RETURN(AuthState auth, creds->Current());
    MutexLock g(mu);
    RETURN_IF_ERROR(CheckCertLocked(auth));
    if (!client || client_generation != auth.cert_generation) {
      try {
        client = std::make_shared<http::client::http_client>(config.server, ClientConfig(options.timeout, auth));
      } catch (const std::exception& e) {
        return InvalidArgument("kubernetes client: bad server \"" + config.server + "\": " + e.what());
      }
      client_generation = auth.cert_generation;
    }
    return std::make_pair(client, std::move(auth));
  }

  void Authorize(http::http_request& req, const AuthState& auth) const {
    if (!auth.bearer_token.empty()) req.headers().add("Authorization", "Bearer " + auth.bearer_token);
    req.headers().add("Accept", "application/json");
    req.headers().add("User-Agent", "tfjob-operator/0.1");
  }

  // cpprestsdk's messages for TLS failures are terse; say where.
  std::string Describe(const std::exception& e) const {
    std::string m = e.what();
    if (IsHttps(config.server) && (m.find("SSL") != std::string::npos || m.find("handshake") != std::string::npos ||
                                   m.find("certificate") != std::string::npos)) {
      m = "TLS with " + config.server + " failed (check the certificate authority" +
          (config.ca_origin.empty() ? std::string() : " " + config.ca_origin) + " and the client certificate): " + m;
    }
    return m;
  }
};

StatusOr<std::unique_ptr<RestClient>> RestClient::Create(const ClusterConfig& config, RestOptions options) {
  if (config.server.empty()) return InvalidArgument("kubernetes client: no server address");
  if (!IsHttps(config.server) && config.server.rfind("http://", 0) != 0) {
    return InvalidArgument("kubernetes client: server \"" + config.server + "\" is not an http:// or https:// URL");
  }
  if (IsHttps(config.server)) {
    if (config.insecure_skip_tls_verify && !config.ca_pem.empty()) {
      return InvalidArgument("kubernetes client: a certificate authority (" + config.ca_origin +
                             ") together with insecure-skip-tls-verify is not allowed");
    }
    AuthState static_certs;
    static_certs.client_cert_pem = config.client_cert_pem;
    static_certs.client_key_pem = config.client_key_pem;
    static_certs.client_cert_origin = config.client_cert_origin;
    static_certs.client_key_origin = config.client_key_origin;
    RETURN_IF_ERROR(CheckTls(config.ca_pem, config.ca_origin, static_certs).WithContext("kubernetes client"));
  }
  std::unique_ptr<RestClient> c(new RestClient());
  c->impl_ = std::make_unique<Impl>();
  c->impl_->config = config;
  c->impl_->options = options;
  c->on_response_ = options.on_response;
  c->impl_->creds = std::make_shared<Credentials>(config, options.credentials);
  c->impl_->limiter = std::make_unique<TokenBucket>(options.qps, options.burst, options.rate_clock);
  {
    // Nothing else sees the client yet; the lock is for the analysis.
    MutexLock l(c->impl_->mu);
    c->impl_->checked_generation = config.client_cert_pem.empty() ? 0 : 1;  // checked above
  }
  try {
    // Validates the URL now; the first request makes the real client.
    http::client::http_client probe(config.server);
  } catch (const std::exception& e) {
    return InvalidArgument("kubernetes client: bad server \"" + config.server + "\": " + e.what());
  }
  return c;
}

RestClient::~RestClient() = default;

Credentials& RestClient::credentials() { return *impl_->creds; }

StatusOr<nlohmann::json> RestClient::Send(const std::string& method, const std::string& path,
                                          const nlohmann::json* body, const std::string& content_type,
                                          const std::string& what) {
  for (int attempt = 0;; ++attempt) {
    impl_->limiter->Take();
    requests_.fetch_add(1, std::memory_order_relaxed);
    auto prepared = impl_->Prepare();
    if (!prepared.ok()) return prepared.status().WithContext(what);
    auto& [client, auth] = *prepared;
    try {
      http::http_request req(method);
      req.set_request_uri(path);
      impl_->Authorize(req, auth);
      if (body) {
        // cpprest's string overloads of set_body read a std::string buffer
        // through a byte-stream pointer to an unrelated type (undefined
        // behaviour UBSan reports); a byte vector is the stream's own type.
        const std::string text = body->dump();
        req.headers().set_content_type(content_type);
        req.set_body(std::vector<unsigned char>(text.begin(), text.end()));
      }
      http::http_response resp = client->request(req).get();
      Observe(method, std::to_string(resp.status_code()));
      const std::string text = resp.extract_utf8string(true).get();
      // Rotated token or expired exec credential: refresh once and retry.
      if (resp.status_code() == 401 && attempt == 0 && impl_->creds->Refreshable()) {
        impl_->creds->Invalidate();
        continue;
      }
      if (resp.status_code() >= 300) return FromHttp(resp.status_code(), text, what);
      if (text.empty()) return nlohmann::json::object();
      auto j = nlohmann::json::parse(text, nullptr, false);
      if (j.is_discarded()) return Internal(what + ": response is not JSON");
      return j;
    } catch (const std::exception& e) {
      Observe(method, "<error>");
      return Unavailable(what + ": " + impl_->Describe(e));
    }
  }
}

void RestClient::Observe(const std::string& method, const std::string& code) {
  if (on_response_) on_response_(method, code);
}

namespace {

std::string Query(const ListOptions& o) {
  std::string q;
  auto add = [&](const char* k, const std::string& v) {
    if (v.empty()) return;
    q += (q.empty() ? "?" : "&") + std::string(k) + "=" + UrlEncode(v);
  };
  add("labelSelector", o.label_selector);
  add("fieldSelector", o.field_selector);
  add("resourceVersion", o.resource_version);
  if (o.limit > 0) add("limit", std::to_string(o.limit));
  add("continue", o.continue_token);
  return q;
}

std::string NameOf(const nlohmann::json& obj) {
  if (obj.is_object() && obj.contains("metadata") && obj["metadata"].is_object() && obj["metadata"].contains("name") &&
      obj["metadata"]["name"].is_string()) {
    return obj["metadata"]["name"].get<std::string>();
  }
  return "";
}

}  // namespace

StatusOr<nlohmann::json> RestClient::Get(const Resource& r, const std::string& ns, const std::string& name) {
  return Send("GET", r.Path(ns, name), nullptr, "", "get " + r.plural + " " + ns + "/" + name);
}

StatusOr<nlohmann::json> RestClient::List(const Resource& r, const std::string& ns, const ListOptions& o) {
  return Send("GET", r.Path(ns) + Query(o), nullptr, "", "list " + r.plural);
}

StatusOr<nlohmann::json> RestClient::Create(const Resource& r, const std::string& ns, const nlohmann::json& obj) {
  return Send("POST", r.Path(ns), &obj, "application/json", "create " + r.plural + " " + ns + "/" + NameOf(obj));
}

StatusOr<nlohmann::json> RestClient::Update(const Resource& r, const std::string& ns, const nlohmann::json& obj) {
  const std::string name = NameOf(obj);
  if (name.empty()) return InvalidArgument("update " + r.plural + ": object has no metadata.name");
  return Send("PUT", r.Path(ns, name), &obj, "application/json", "update " + r.plural + " " + ns + "/" + name);
}

StatusOr<nlohmann::json> RestClient::UpdateStatus(const Resource& r, const std::string& ns, const nlohmann::json& obj) {
  const std::string name = NameOf(obj);
  if (name.empty()) return InvalidArgument("update status " + r.plural + ": object has no metadata.name");
  return Send("PUT", r.Path(ns, name, "status"), &obj, "application/json",
              "update status of " + r.plural + " " + ns + "/" + name);
}

StatusOr<nlohmann::json> RestClient::MergePatch(const Resource& r, const std::string& ns, const std::string& name,
                                                const nlohmann::json& patch, bool status) {
  return Send("PATCH", r.Path(ns, name, status ? "status" : ""), &patch, "application/merge-patch+json",
              "patch " + r.plural + " " + ns + "/" + name);
}

Status RestClient::Delete(const Resource& r, const std::string& ns, const std::string& name,
                          const std::string& propagation, int64_t grace_period_seconds) {
  nlohmann::json opts{{"kind", "DeleteOptions"}, {"apiVersion", "v1"}, {"propagationPolicy", propagation}};
  if (grace_period_seconds >= 0) opts["gracePeriodSeconds"] = grace_period_seconds;
  return Send("DELETE", r.Path(ns, name), &opts, "application/json", "delete " + r.plural + " " + ns + "/" + name)
      .status();
}

Status RestClient::Watch(const Resource& r, const std::string& ns, const WatchOptions& o,
                         const std::function<bool(const WatchEvent&)>& on_event, const std::atomic<bool>& stop) {
  bool unauthorized = false;
  Status s = WatchOnce(r, ns, o, on_event, stop, &unauthorized);
  if (unauthorized && impl_->creds->Refreshable() && !stop) {
    impl_->creds->Invalidate();
    s = WatchOnce(r, ns, o, on_event, stop, &unauthorized);
  }
  return s;
}

Status RestClient::WatchOnce(const Resource& r, const std::string& ns, const WatchOptions& o,
                             const std::function<bool(const WatchEvent&)>& on_event, const std::atomic<bool>& stop,
                             bool* unauthorized) {
  impl_->limiter->Take();
  requests_.fetch_add(1, std::memory_order_relaxed);
  std::string q = "?watch=1&timeoutSeconds=" + std::to_string(o.timeout_seconds);
  if (o.allow_bookmarks) q += "&allowWatchBookmarks=true";
  if (!o.resource_version.empty()) q += "&resourceVersion=" + UrlEncode(o.resource_version);
  if (!o.label_selector.empty()) q += "&labelSelector=" + UrlEncode(o.label_selector);
  const std::string what = "watch " + r.plural;
  auto auth = impl_->creds->Current();
  if (!auth.ok()) return auth.status().WithContext(what);
  {
    MutexLock g(impl_->mu);
    RETURN_IF_ERROR(impl_->CheckCertLocked(*auth).WithContext(what));
  }
  pplx::cancellation_token_source cts;
  std::atomic<bool> done{false};
  // cpprestsdk blocks in reads; a side thread turns `stop` into a cancel.
  std::thread canceller([&] {
    while (!done && !stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (stop) cts.cancel();
  });
  struct Join {
    std::atomic<bool>& done;
    std::thread& t;
    ~Join() {
      done = true;
      t.join();
    }
  } join{done, canceller};
  try {
    http::client::http_client client(impl_->config.server,
                                     impl_->ClientConfig(std::chrono::seconds(o.timeout_seconds + 30), *auth));
    http::http_request req("GET");
    req.set_request_uri(r.Path(ns) + q);
    impl_->Authorize(req, *auth);
    http::http_response resp = client.request(req, cts.get_token()).get();
    Observe("GET", std::to_string(resp.status_code()));
    if (resp.status_code() != 200) {
      *unauthorized = resp.status_code() == 401;
      return FromHttp(resp.status_code(), resp.extract_utf8string(true).get(), what);
    }
    // Read what has arrived in bulk and split the lines here: cpprestsdk's
    // read_line takes one byte at a time, each under the response buffer's
    // lock, then copies the line into the target through a task. At
    // thousands of events a second that left this thread behind the network,
    // and the backlog piled up, unbounded, in the response buffer (under
    // heaptrack, the largest item of the operator's peak heap at 10,000
    // pods; docs/operations.md).
    auto buf = resp.body().streambuf();
    std::vector<uint8_t> chunk(64 * 1024);
    std::string pending;  // the start of a line whose end has not arrived
    std::optional<Status> ended;
    auto handle = [&](std::string_view text) {
      if (text.empty()) return;
      auto j = nlohmann::json::parse(text, nullptr, false);
      if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) return;
      WatchEvent ev{j["type"].get<std::string>(), j.value("object", nlohmann::json::object())};
      if (ev.type == "ERROR") {
        const int code = ev.object.is_object() ? ev.object.value("code", 500) : 500;
        ended = FromHttp(code, ev.object.dump(), what);
      } else if (!on_event(ev)) {
        ended = Status::Ok();
      }
    };
    while (!stop) {
      // All that has arrived, or (with nothing there) a wait for one byte;
      // 0 only at the end of the response.
      const size_t want = std::clamp<size_t>(buf.in_avail(), 1, chunk.size());
      const size_t n = buf.getn(chunk.data(), want).get();
      if (n == 0) {
        handle(pending);                      // a last line without its newline
        return ended.value_or(Status::Ok());  // the server ended the watch
      }
      pending.append(reinterpret_cast<const char*>(chunk.data()), n);
      size_t start = 0;
      for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
        handle(std::string_view(pending).substr(start, nl - start));
        if (ended) return *ended;
      }
      pending.erase(0, start);
    }
    return Status::Ok();
  } catch (const pplx::task_canceled&) {
    return Status::Ok();
  } catch (const std::exception& e) {
    if (stop) return Status::Ok();
    return Unavailable(what + ": " + impl_->Describe(e));
  }
}

}  // namespace tfjob::kube
