#include "tests/support/fault_proxy.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include "tests/support/envtest.h"
#include "tests/support/http_server.h"
#include "tests/support/proxy_upstream.h"

namespace tfjob::testing {

namespace {

std::string ReasonFor(int code) {
  switch (code) {
    case 400: return "BadRequest";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "NotFound";
    case 405: return "MethodNotAllowed";
    case 409: return "Conflict";
    case 410: return "Expired";
    case 422: return "Invalid";
    case 429: return "TooManyRequests";
    case 502: return "InternalError";
    case 503: return "ServiceUnavailable";
    case 504: return "Timeout";
    default: return code >= 500 ? "InternalError" : "Unknown";
  }
}

std::string StatusJson(int code, const std::string& reason, const std::string& message) {
  return nlohmann::json{
      {"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", nlohmann::json::object()},
      {"status", "Failure"}, {"message", message}, {"reason", reason.empty() ? ReasonFor(code) : reason},
      {"code", code}}
      .dump();
}

// Answers with a k8s v1 Status.
void SetStatus(HttpResponse& res, int code, const std::string& reason, const std::string& message) {
  res.code = code;
  res.content_type = "application/json";
  res.body = StatusJson(code, reason, message);
}

bool Truthy(const std::string& v) { return v == "1" || v == "true"; }

bool IsWatch(const HttpRequest& req) {
  return req.method == "GET" && (Truthy(req.Query("watch")) || req.path.rfind("/api/v1/watch/", 0) == 0 ||
                                 (req.path.rfind("/apis/", 0) == 0 && req.path.find("/watch/") != std::string::npos));
}

// "pods" for /api/v1/namespaces/ns/pods, /api/v1/watch/pods,
// /apis/kubeflow.org/v1/namespaces/ns/tfjobs/name, ...
std::string ResourceOf(const std::string& path) {
  std::vector<std::string> segs;
  std::stringstream in(path);
  for (std::string s; std::getline(in, s, '/');) {
    if (!s.empty()) segs.push_back(s);
  }
  size_t i = 0;
  if (!segs.empty() && segs[0] == "api") i = 2;
  if (!segs.empty() && segs[0] == "apis") i = 3;
  if (i < segs.size() && segs[i] == "watch") ++i;
  if (i + 2 < segs.size() && segs[i] == "namespaces") i += 2;
  return i < segs.size() ? segs[i] : "";
}

bool PublicPath(const std::string& path) {
  return path == "/version" || path == "/healthz" || path == "/livez" || path == "/readyz";
}

// Request headers the proxy sets itself or that describe the client's
// connection, not the request.
bool HopByHop(const std::string& name) {
  static const char* const kNames[] = {"connection",
                                       "keep-alive",
                                       "proxy-connection",
                                       "proxy-authorization",
                                       "te",
                                       "trailer",
                                       "transfer-encoding",
                                       "upgrade",
                                       "host",
                                       "content-length",
                                       "authorization",
                                       "expect",
                                       "accept-encoding",
                                       "cache-control"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

std::string Base64(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(std::max(n, 0)));
  return out;
}

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

class FaultProxy::Impl {
 public:
  explicit Impl(Options o) : options(std::move(o)), tokens(options.bearer_tokens) {}
  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
      for (auto& [id, open] : conns) open.up->Shutdown();
    }
    cv.notify_all();
    if (http) http->Stop();
  }

  void Handle(const HttpRequest& req, HttpResponse& res);

  struct Rule {
    Fault fault;
    std::regex re;
  };
  // An upstream connection in flight.
  struct Open {
    proxy::Upstream* up;
    std::string resource;
    bool watch;
    bool dropped;
  };
  // Owns an upstream connection and keeps it in `conns` (for DropWatches and
  // ActiveWatches) until destroyed: after the answer, or a watch's last chunk.
  struct Flight {
    Impl* impl;
    uint64_t id;
    std::unique_ptr<proxy::Upstream> up;
    ~Flight() {
      std::lock_guard<std::mutex> lock(impl->mu);
      impl->conns.erase(id);
    }
  };

  Options options;
  proxy::UpstreamTarget target;
  std::shared_ptr<void> tls;  // client SSL_CTX for the upstream
  std::unique_ptr<HttpServer> http;

  mutable std::mutex mu;  // guards the members below
  std::condition_variable cv;
  bool stopping = false;
  std::vector<Rule> faults;
  std::deque<RequestRecord> requests;
  std::vector<std::string> tokens;
  std::map<uint64_t, Open> conns;
  uint64_t next_id = 0;

 private:
  bool Stopping() const {
    std::lock_guard<std::mutex> lock(mu);
    return stopping;
  }
  void Record(const HttpRequest& req, int code, bool watch, const std::string& token);
  // The fault that matches the request, counted; nullopt when none.
  std::optional<Fault> TakeFault(const HttpRequest& req, bool is_watch);
  void AnswerFault(const Fault& f, const HttpRequest& req, HttpResponse& res, bool is_watch, const std::string& token);
  // Passes the upstream's answer on: a watch chunk by chunk, else whole.
  void Forward(const HttpRequest& req, HttpResponse& res, bool is_watch, const std::string& token);
  std::string UpstreamRequest(const HttpRequest& req) const;
};

void FaultProxy::Impl::Record(const HttpRequest& req, int code, bool watch, const std::string& token) {
  std::lock_guard<std::mutex> lock(mu);
  if (options.request_log_limit == 0) return;
  requests.push_back({req.method, req.path, req.raw_query, code, watch, token, req.client_cn});
  while (requests.size() > options.request_log_limit) requests.pop_front();
}

void FaultProxy::Impl::Handle(const HttpRequest& req, HttpResponse& res) {
  const bool is_watch = IsWatch(req);
  std::string token;
  if (const std::string& h = req.Header("authorization"); h.rfind("Bearer ", 0) == 0) token = h.substr(7);
  bool accepted;
  {
    std::lock_guard<std::mutex> lock(mu);
    const bool required = !tokens.empty() || !options.client_ca_pem.empty();
    accepted = !required || PublicPath(req.path) || !req.client_cn.empty() ||
               (!token.empty() && std::find(tokens.begin(), tokens.end(), token) != tokens.end());
  }
  if (!accepted) {
    Record(req, 401, is_watch, token);
    return SetStatus(res, 401, "Unauthorized", "Unauthorized");
  }
  if (auto fault = TakeFault(req, is_watch)) {
    if (fault->delay.count() > 0) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, fault->delay, [&] { return stopping; });
    }
    if (fault->code != 0) return AnswerFault(*fault, req, res, is_watch, token);
  }
  Forward(req, res, is_watch, token);
}

std::optional<FaultProxy::Fault> FaultProxy::Impl::TakeFault(const HttpRequest& req, bool is_watch) {
  std::lock_guard<std::mutex> lock(mu);
  if (faults.empty() || req.path.size() > 4096) return std::nullopt;  // libstdc++ regex recursion depth
  auto it = std::find_if(faults.begin(), faults.end(), [&](const Rule& r) {
    const std::string& m = r.fault.method;
    const bool method_ok = m.empty() || m == req.method || (m == "WATCH" && is_watch);
    return method_ok && std::regex_match(req.path, r.re);
  });
  if (it == faults.end()) return std::nullopt;
  Fault hit = it->fault;
  if (it->fault.count > 0 && --it->fault.count == 0) faults.erase(it);
  return hit;
}

void FaultProxy::Impl::AnswerFault(const Fault& f, const HttpRequest& req, HttpResponse& res, bool is_watch,
                                   const std::string& token) {
  const std::string message = f.message.empty() ? "injected fault" : f.message;
  if (is_watch && f.code == 410) {
    // As the real server answers a watch from a compacted version.
    Record(req, 200, true, token);
    const std::string event = "{\"type\":\"ERROR\",\"object\":" + StatusJson(410, f.reason, message) + "}\n";
    res.code = 200;
    res.content_type = "application/json";
    res.stream = [event](ChunkSink& out) { return out.Write(event); };
    return;
  }
  Record(req, f.code, is_watch, token);
  SetStatus(res, f.code, f.reason, message);
  if (f.code == 429 || f.code == 503) res.headers.push_back({"Retry-After", "1"});
}

std::string FaultProxy::Impl::UpstreamRequest(const HttpRequest& req) const {
  std::string r = req.method + " " + req.target + " HTTP/1.1\r\nHost: " + target.host + ":" +
                  std::to_string(target.port) + "\r\nConnection: close\r\n";
  for (const auto& [name, value] : req.headers) {
    if (!HopByHop(name)) r += name + ": " + value + "\r\n";
  }
  if (!req.body.empty() || req.method == "POST" || req.method == "PUT" || req.method == "PATCH")
    r += "Content-Length: " + std::to_string(req.body.size()) + "\r\n";
  r += "\r\n";
  r += req.body;
  return r;
}

void FaultProxy::Impl::Forward(const HttpRequest& req, HttpResponse& res, bool is_watch, const std::string& token) {
  auto bad_gateway = [&](const std::string& why) {
    Record(req, 502, is_watch, token);
    SetStatus(res, 502, "", "fault proxy: " + why);
  };
  auto up = proxy::Upstream::Connect(target, tls);
  if (!up.ok()) return bad_gateway(up.status().message());
  std::shared_ptr<Flight> flight;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!stopping) {
      conns[next_id] = Open{up->get(), ResourceOf(req.path), is_watch, false};
      flight.reset(new Flight{this, next_id++, std::move(up).value()});
    }
  }
  if (!flight) return bad_gateway("stopping");
  proxy::Upstream& conn = *flight->up;
  proxy::ResponseHead head;
  auto keep_waiting = [this] { return !Stopping(); };
  if (!conn.Write(UpstreamRequest(req)) || !conn.ReadHead(&head, req.method == "HEAD", keep_waiting)) {
    bool dropped;
    {
      std::lock_guard<std::mutex> lock(mu);
      dropped = conns[flight->id].dropped;
    }
    if (dropped) {  // DropWatches() before the server answered
      res.abort = true;
      return;
    }
    return bad_gateway("no answer from " + options.upstream);
  }
  Record(req, head.code, is_watch, token);
  res.code = head.code;
  res.content_type = head.Header("content-type");
  if (is_watch && head.code == 200) {
    // Passed on chunk by chunk as it arrives; a client that has gone, a drop
    // here or upstream, or a stop ends the relay, without the last chunk.
    res.stream = [this, flight, head](ChunkSink& out) {
      auto keep_waiting = [&] { return !Stopping() && !out.PeerGone(); };
      std::string piece;
      bool end = false;
      while (!end) {
        if (!flight->up->ReadPiece(head, &piece, &end, keep_waiting)) return false;
        if (!piece.empty() && !out.Write(piece)) return false;
      }
      return true;
    };
    return;
  }
  if (!conn.ReadBody(head, &res.body, keep_waiting)) {
    res.abort = true;
    return;
  }
  for (const auto& [name, value] : head.headers) {
    // The server sets these itself.
    if (name != "content-type" && name != "content-length" && name != "transfer-encoding" && name != "connection" &&
        name != "keep-alive")
      res.headers.push_back({name, value});
  }
}

FaultProxy::FaultProxy(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FaultProxy::~FaultProxy() = default;

StatusOr<std::unique_ptr<FaultProxy>> FaultProxy::Start(Options options) {
  // OpenSSL writes to the upstream with plain send(2): an upstream that has
  // gone would raise SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  auto impl = std::make_unique<Impl>(std::move(options));
  ASSIGN_OR_RETURN(impl->target, proxy::ParseUpstream(impl->options.upstream));
  if (impl->target.tls) {
    ASSIGN_OR_RETURN(impl->tls, proxy::ClientTlsContext(impl->options.upstream_ca_pem, impl->options.client_cert_pem,
                                                        impl->options.client_key_pem));
  }
  HttpServer::Options http;
  http.tls_cert_pem = impl->options.tls_cert_pem;
  http.tls_key_pem = impl->options.tls_key_pem;
  http.client_ca_pem = impl->options.client_ca_pem;
  Impl* raw = impl.get();
  ASSIGN_OR_RETURN(
      impl->http, HttpServer::Start(http, [raw](const HttpRequest& req, HttpResponse& res) { raw->Handle(req, res); }));
  return std::unique_ptr<FaultProxy>(new FaultProxy(std::move(impl)));
}

StatusOr<std::unique_ptr<FaultProxy>> FaultProxy::Start(const ControlPlane& cp, Options options) {
  const std::string pki = cp.dir() + "/pki/";
  options.upstream = cp.server();
  ASSIGN_OR_RETURN(options.upstream_ca_pem, ReadFile(pki + "ca.crt"));
  ASSIGN_OR_RETURN(options.client_cert_pem, ReadFile(pki + "admin.crt"));
  ASSIGN_OR_RETURN(options.client_key_pem, ReadFile(pki + "admin.key"));
  return Start(std::move(options));
}

int FaultProxy::port() const { return impl_->http->port(); }

std::string FaultProxy::url() const {
  return (impl_->options.tls_cert_pem.empty() ? "http://127.0.0.1:" : "https://127.0.0.1:") + std::to_string(port());
}

std::string FaultProxy::Kubeconfig(const std::string& ns) const {
  std::string token;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!impl_->tokens.empty()) token = impl_->tokens.front();
  }
  const std::string& ca = impl_->options.tls_ca_pem;
  return "apiVersion: v1\nkind: Config\nclusters:\n- name: fault-proxy\n  cluster:\n    server: " + url() +
         (ca.empty() ? std::string() : "\n    certificate-authority-data: " + Base64(ca)) +
         "\ncontexts:\n- name: fault-proxy\n  context:\n    cluster: fault-proxy\n    user: fault-proxy\n"
         "    namespace: " +
         ns + "\ncurrent-context: fault-proxy\nusers:\n- name: fault-proxy\n  user:\n" +
         (token.empty() ? "    {}\n" : "    token: " + token + "\n");
}

Status FaultProxy::WriteKubeconfig(const std::string& path, const std::string& ns) const {
  std::ofstream out(path, std::ios::trunc);
  out << Kubeconfig(ns);
  out.close();
  if (!out) return Internal("writing " + path + " failed");
  return Status::Ok();
}

Status FaultProxy::InjectFault(const Fault& fault) {
  std::regex re;
  try {
    re = std::regex(fault.path_regex, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return InvalidArgument("fault path_regex " + fault.path_regex + ": " + e.what());
  }
  if (fault.count == 0) return Status::Ok();
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->faults.push_back({fault, std::move(re)});
  return Status::Ok();
}

void FaultProxy::ClearFaults() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->faults.clear();
}

void FaultProxy::DropWatches() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& [id, open] : impl_->conns) {
    if (!open.watch || open.dropped) continue;
    open.dropped = true;
    open.up->Shutdown();
  }
}

int FaultProxy::ActiveWatches(const std::string& resource) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<int>(std::count_if(impl_->conns.begin(), impl_->conns.end(), [&](const auto& kv) {
    const Impl::Open& o = kv.second;
    return o.watch && !o.dropped && (resource.empty() || o.resource == resource);
  }));
}

void FaultProxy::SetBearerTokens(std::vector<std::string> tokens) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->tokens = std::move(tokens);
}

std::vector<FaultProxy::RequestRecord> FaultProxy::Requests() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return {impl_->requests.begin(), impl_->requests.end()};
}

void FaultProxy::ClearRequests() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->requests.clear();
}

}  // namespace tfjob::testing
