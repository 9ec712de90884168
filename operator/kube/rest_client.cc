#include "operator/kube/rest_client.h"

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>

namespace tfjob::op::kube {

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

TokenBucket::TokenBucket(double qps, int burst)
    : qps_(qps), tokens_(burst), burst_(burst), last_(std::chrono::steady_clock::now()) {}

void TokenBucket::Take() {
  std::unique_lock lock(mu_);
  while (true) {
    const auto now = std::chrono::steady_clock::now();
    tokens_ = std::min(burst_, tokens_ + std::chrono::duration<double>(now - last_).count() * qps_);
    last_ = now;
    if (tokens_ >= 1) {
      tokens_ -= 1;
      return;
    }
    const double wait = (1 - tokens_) / qps_;
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    lock.lock();
  }
}

struct RestClient::Impl {
  ClusterConfig config;
  RestOptions options;
  std::unique_ptr<http::client::http_client> client;
  std::unique_ptr<TokenBucket> limiter;

  http::client::http_client_config ClientConfig(std::chrono::seconds timeout) const {
    http::client::http_client_config cc;
    cc.set_timeout(timeout);
    cc.set_validate_certificates(!config.insecure_skip_tls_verify);
    const ClusterConfig cfg = config;
    cc.set_ssl_context_callback([cfg](boost::asio::ssl::context& ctx) {
      boost::system::error_code ec;
      if (!cfg.ca_pem.empty()) ctx.add_certificate_authority(boost::asio::buffer(cfg.ca_pem), ec);
      if (!cfg.client_cert_pem.empty()) ctx.use_certificate_chain(boost::asio::buffer(cfg.client_cert_pem), ec);
      if (!cfg.client_key_pem.empty()) {
        ctx.use_private_key(boost::asio::buffer(cfg.client_key_pem), boost::asio::ssl::context::pem, ec);
      }
    });
    return cc;
  }

  void Authorize(http::http_request& req) const {
    if (!config.token.empty()) req.headers().add("Authorization", "Bearer " + config.token);
    req.headers().add("Accept", "application/json");
    req.headers().add("User-Agent", "tfjob-operator/0.1");
  }
};

StatusOr<std::unique_ptr<RestClient>> RestClient::Create(const ClusterConfig& config, RestOptions options) {
  if (config.server.empty()) return InvalidArgument("kubernetes client: no server address");
  std::unique_ptr<RestClient> c(new RestClient());
  c->impl_ = std::make_unique<Impl>();
  c->impl_->config = config;
  c->impl_->options = options;
  c->impl_->limiter = std::make_unique<TokenBucket>(options.qps, options.burst);
  try {
    c->impl_->client = std::make_unique<http::client::http_client>(config.server, c->impl_->ClientConfig(options.timeout));
  } catch (const std::exception& e) {
    return InvalidArgument("kubernetes client: bad server \"" + config.server + "\": " + e.what());
  }
  return c;
}

RestClient::~RestClient() = default;

StatusOr<nlohmann::json> RestClient::Send(const std::string& method, const std::string& path, const nlohmann::json* body,
                                          const std::string& content_type, const std::string& what) {
  impl_->limiter->Take();
  requests_.fetch_add(1, std::memory_order_relaxed);
  try {
    http::http_request req(method);
    req.set_request_uri(path);
    impl_->Authorize(req);
    if (body) {
      // cpprest's string overloads of set_body read a std::string buffer
      // through a byte-stream pointer to an unrelated type (undefined
      // behaviour UBSan reports); a byte vector is the stream's own type.
      const std::string text = body->dump();
      req.headers().set_content_type(content_type);
      req.set_body(std::vector<unsigned char>(text.begin(), text.end()));
    }
    http::http_response resp = impl_->client->request(req).get();
    const std::string text = resp.extract_utf8string(true).get();
    if (resp.status_code() >= 300) return FromHttp(resp.status_code(), text, what);
    if (text.empty()) return nlohmann::json::object();
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded()) return Internal(what + ": response is not JSON");
    return j;
  } catch (const std::exception& e) {
    return Unavailable(what + ": " + e.what());
  }
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
  return q;
}

std::string NameOf(const nlohmann::json& obj) {
  if (obj.is_object() && obj.contains("metadata") && obj["metadata"].is_object() &&
      obj["metadata"].contains("name") && obj["metadata"]["name"].is_string()) {
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
  return Send("PUT", r.Path(ns, name, "status"), &obj, "application/json", "update status of " + r.plural + " " + ns + "/" + name);
}

StatusOr<nlohmann::json> RestClient::MergePatch(const Resource& r, const std::string& ns, const std::string& name,
                                                const nlohmann::json& patch, bool status) {
  return Send("PATCH", r.Path(ns, name, status ? "status" : ""), &patch, "application/merge-patch+json",
              "patch " + r.plural + " " + ns + "/" + name);
}

Status RestClient::Delete(const Resource& r, const std::string& ns, const std::string& name, const std::string& propagation) {
  nlohmann::json opts{{"kind", "DeleteOptions"}, {"apiVersion", "v1"}, {"propagationPolicy", propagation}};
  return Send("DELETE", r.Path(ns, name), &opts, "application/json", "delete " + r.plural + " " + ns + "/" + name).status();
}

Status RestClient::Watch(const Resource& r, const std::string& ns, const WatchOptions& o,
                         const std::function<bool(const WatchEvent&)>& on_event, const std::atomic<bool>& stop) {
  impl_->limiter->Take();
  requests_.fetch_add(1, std::memory_order_relaxed);
  std::string q = "?watch=1&timeoutSeconds=" + std::to_string(o.timeout_seconds);
  if (o.allow_bookmarks) q += "&allowWatchBookmarks=true";
  if (!o.resource_version.empty()) q += "&resourceVersion=" + UrlEncode(o.resource_version);
  if (!o.label_selector.empty()) q += "&labelSelector=" + UrlEncode(o.label_selector);
  const std::string what = "watch " + r.plural;
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
                                      impl_->ClientConfig(std::chrono::seconds(o.timeout_seconds + 30)));
    http::http_request req("GET");
    req.set_request_uri(r.Path(ns) + q);
    impl_->Authorize(req);
    http::http_response resp = client.request(req, cts.get_token()).get();
    if (resp.status_code() != 200) {
      return FromHttp(resp.status_code(), resp.extract_utf8string(true).get(), what);
    }
    auto body = resp.body();
    while (!stop) {
      // Bytes, as the response stream holds them: read_line into a
      // std::string buffer would go through the same mistyped pointer.
      concurrency::streams::container_buffer<std::vector<uint8_t>> line;
      const size_t n = body.read_line(line).get();
      const std::string text(line.collection().begin(), line.collection().end());
      if (n == 0 && text.empty()) {
        if (body.is_eof()) return Status::Ok();  // the server ended the watch
        continue;
      }
      auto j = nlohmann::json::parse(text, nullptr, false);
      if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) continue;
      WatchEvent ev{j["type"].get<std::string>(), j.value("object", nlohmann::json::object())};
      if (ev.type == "ERROR") {
        const int code = ev.object.is_object() ? ev.object.value("code", 500) : 500;
        return FromHttp(code, ev.object.dump(), what);
      }
      if (!on_event(ev)) return Status::Ok();
    }
    return Status::Ok();
  } catch (const pplx::task_canceled&) {
    return Status::Ok();
  } catch (const std::exception& e) {
    if (stop) return Status::Ok();
    return Unavailable(what + ": " + e.what());
  }
}

}  // namespace tfjob::op::kube
