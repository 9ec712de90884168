#include "tests/support/apiserver/apiserver_double.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <mutex>
#include <optional>
#include <regex>
#include <set>

#include "tests/support/apiserver/base64.h"
#include "tests/support/apiserver/http_server.h"
#include "tests/support/apiserver/resources.h"
#include "tests/support/apiserver/selectors.h"
#include "tests/support/apiserver/store.h"

namespace tfjob::testing {

using nlohmann::json;
using namespace apiserver;  // NOLINT: this file is the implementation of that namespace's front end

namespace {

// Objects may hold strings from URLs (any bytes): never throw on invalid UTF-8.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

Status ToStatus(const ApiError& e) {
  Code code;
  switch (e.code) {
    case 400:
    case 422: code = Code::kInvalidArgument; break;
    case 401: code = Code::kUnauthenticated; break;
    case 403: code = Code::kPermissionDenied; break;
    case 404: code = Code::kNotFound; break;
    case 409: code = e.reason == "AlreadyExists" ? Code::kAlreadyExists : Code::kAborted; break;
    case 410: code = Code::kOutOfRange; break;
    case 429: code = Code::kResourceExhausted; break;
    case 503: code = Code::kUnavailable; break;
    case 504: code = Code::kDeadlineExceeded; break;
    default: code = Code::kInternal; break;
  }
  return Status(code, std::to_string(e.code) + " " + e.reason + ": " + e.message);
}

template <typename T>
StatusOr<T> Convert(ApiResult<T>&& r) {
  if (!r.ok()) return ToStatus(r.error());
  return std::move(r.value());
}

// Nesting depth of a JSON text (brackets outside strings), computed without
// recursion so that absurd input cannot exhaust the stack.
size_t JsonDepth(std::string_view text) {
  size_t depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      max_depth = std::max(max_depth, ++depth);
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return max_depth;
}

// Parsed JSON, or discarded when invalid or nested deeper than k8s would take.
json ParseBody(const std::string& text) {
  constexpr size_t kMaxDepth = 1000;
  if (JsonDepth(text) > kMaxDepth) return json(json::value_t::discarded);
  return json::parse(text, nullptr, false);
}

bool Truthy(const std::string& v) { return v == "1" || v == "true" || v == "True"; }

std::vector<std::string> SplitPath(const std::string& path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (j > i) out.push_back(PercentDecode(std::string_view(path).substr(i, j - i), false));
    i = j + 1;
  }
  return out;
}

// What the client accepts, in its order of preference.
struct Negotiated {
  enum Wire { kJson, kTable, kPartial, kNone } wire = kJson;
  std::string version = "v1";  // of meta.k8s.io for Table / PartialObjectMetadata
};

Negotiated Negotiate(const std::string& accept) {
  if (accept.empty()) return {};
  size_t i = 0;
  while (i <= accept.size()) {
    size_t j = accept.find(',', i);
    if (j == std::string::npos) j = accept.size();
    std::string range = accept.substr(i, j - i);
    i = j + 1;
    std::map<std::string, std::string> params;
    std::string type;
    size_t k = 0;
    bool first = true;
    while (k <= range.size()) {
      size_t e = range.find(';', k);
      if (e == std::string::npos) e = range.size();
      std::string part = range.substr(k, e - k);
      k = e + 1;
      part.erase(0, part.find_first_not_of(" \t"));
      part.erase(part.find_last_not_of(" \t") + 1);
      if (first) {
        type = part;
        first = false;
      } else if (size_t eq = part.find('='); eq != std::string::npos) {
        params[part.substr(0, eq)] = part.substr(eq + 1);
      }
    }
    if (type != "application/json" && type != "*/*" && type != "application/*") continue;
    auto as = params.find("as");
    if (as == params.end()) return {};
    if (params["g"] != "meta.k8s.io" || (params["v"] != "v1" && params["v"] != "v1beta1")) continue;
    if (as->second == "Table") return {Negotiated::kTable, params["v"]};
    if (as->second == "PartialObjectMetadata" || as->second == "PartialObjectMetadataList") {
      return {Negotiated::kPartial, params["v"]};
    }
  }
  return {Negotiated::kNone, ""};
}

// Records the request in the log before its response leaves, so a client
// that has the response always finds the request in Requests().
class RecordingWriter : public ResponseWriter {
 public:
  RecordingWriter(ResponseWriter& w, std::function<void(int code)> record) : w_(w), record_(std::move(record)) {}
  void Send(int code, std::string_view content_type, std::string_view body,
            const std::vector<std::pair<std::string, std::string>>& extra) override {
    if (responded_) return;
    responded_ = true;
    record_(code);
    w_.Send(code, content_type, body, extra);
  }
  bool StartStream(int code, std::string_view content_type) override {
    if (responded_) return false;
    responded_ = true;
    record_(code);
    return w_.StartStream(code, content_type);
  }
  bool WriteChunk(std::string_view data) override { return w_.WriteChunk(data); }
  void EndStream() override { w_.EndStream(); }
  void Abort() override { w_.Abort(); }
  bool PeerGone() override { return w_.PeerGone(); }
  bool responded() const { return responded_; }

 private:
  ResponseWriter& w_;
  std::function<void(int)> record_;
  bool responded_ = false;
};

void SendJson(ResponseWriter& w, int code, const json& body, const std::string& content_type = "application/json") {
  w.Send(code, content_type, Dump(body));
}

void SendError(ResponseWriter& w, const ApiError& e) { SendJson(w, e.code, e.ToJson()); }

}  // namespace

class ApiServerDouble::Impl {
 public:
  explicit Impl(Options o) : options(std::move(o)) {}
  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    stop_cv.notify_all();
    if (store) store->Shutdown();
    if (http) http->Stop();
    http.reset();
    store.reset();
  }

  void Handle(const HttpRequest& req, ResponseWriter& raw);

  Options options;
  std::unique_ptr<Store> store;
  std::unique_ptr<HttpServer> http;  // set once by Start; handlers use `port`
  std::atomic<int> port{0};

  mutable std::mutex mu;  // guards the members below
  std::condition_variable stop_cv;
  bool stopping = false;
  struct Rule {
    Fault fault;
    std::regex re;
  };
  std::vector<Rule> faults;
  std::deque<RequestRecord> requests;
  std::set<std::string> bearer_tokens;  // accepted tokens

 private:
  void Dispatch(const HttpRequest& req, RecordingWriter& w, bool is_watch);
  // Returns true when a fault answered the request.
  bool ApplyFault(const HttpRequest& req, RecordingWriter& w, bool is_watch);
  void Record(const HttpRequest& req, int code, bool watch);
  void ServeResource(const HttpRequest& req, RecordingWriter& w, const std::string& group, const std::string& version,
                     std::vector<std::string> rest, bool is_watch);
  void ServeWatch(const HttpRequest& req, RecordingWriter& w, const ResourceInfo& r, const std::string& ns,
                  const std::string& name, const Negotiated& neg);
  json Render(const ResourceInfo& r, const json& obj, const Negotiated& neg, bool column_definitions = true) const;
  json RenderList(const ResourceInfo& r, const ListResult& list, const Negotiated& neg) const;
  json RootPaths() const;
};

void ApiServerDouble::Impl::Record(const HttpRequest& req, int code, bool watch) {
  std::lock_guard<std::mutex> lock(mu);
  if (options.request_log_limit == 0) return;
  std::string token;
  if (const std::string& h = req.Header("authorization"); h.rfind("Bearer ", 0) == 0) token = h.substr(7);
  requests.push_back({req.method, req.path, req.raw_query, code, watch, token, req.client_cn});
  while (requests.size() > options.request_log_limit) requests.pop_front();
}

void ApiServerDouble::Impl::Handle(const HttpRequest& req, ResponseWriter& raw) {
  const bool is_watch =
      req.method == "GET" && (Truthy(req.Query("watch")) || req.path.rfind("/api/v1/watch/", 0) == 0 ||
                              (req.path.rfind("/apis/", 0) == 0 && req.path.find("/watch/") != std::string::npos));
  RecordingWriter w(raw, [&](int code) { Record(req, code, is_watch); });
  try {
    Dispatch(req, w, is_watch);
  } catch (const std::exception& e) {
    if (!w.responded())
      SendError(w, MakeError(500, "InternalError", std::string("Internal error occurred: ") + e.what()));
  } catch (...) {
    if (!w.responded()) SendError(w, MakeError(500, "InternalError", "Internal error occurred"));
  }
}

bool ApiServerDouble::Impl::ApplyFault(const HttpRequest& req, RecordingWriter& w, bool is_watch) {
  Fault hit;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (faults.empty() || req.path.size() > 4096) return false;  // libstdc++ regex recursion depth
    auto it = std::find_if(faults.begin(), faults.end(), [&](const Rule& r) {
      const std::string& m = r.fault.method;
      bool method_ok = m.empty() || m == req.method || (m == "WATCH" && is_watch);
      return method_ok && std::regex_match(req.path, r.re);
    });
    if (it == faults.end()) return false;
    hit = it->fault;
    if (it->fault.count > 0 && --it->fault.count == 0) faults.erase(it);
  }
  if (hit.delay.count() > 0) {
    std::unique_lock<std::mutex> lock(mu);
    stop_cv.wait_for(lock, hit.delay, [&] { return stopping; });
  }
  if (hit.code == 0) return false;
  std::string message = hit.message.empty() ? "injected fault" : hit.message;
  ApiError e = MakeError(hit.code, hit.reason, message);
  std::vector<std::pair<std::string, std::string>> headers;
  if (hit.code == 429 || hit.code == 503) headers.push_back({"Retry-After", "1"});
  w.Send(hit.code, "application/json", Dump(e.ToJson()), headers);
  return true;
}

json ApiServerDouble::Impl::RootPaths() const {
  json paths = {"/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"};
  std::set<std::string> seen;
  for (const auto& r : store->Resources()) {
    if (r.group.empty()) continue;
    if (seen.insert("/apis/" + r.group).second) paths.push_back("/apis/" + r.group);
    if (seen.insert("/apis/" + r.api_version()).second) paths.push_back("/apis/" + r.api_version());
  }
  return {{"paths", paths}};
}

void ApiServerDouble::Impl::Dispatch(const HttpRequest& req, RecordingWriter& w, bool is_watch) {
  std::vector<std::string> segs = SplitPath(req.path);
  if (segs.size() == 1 && (segs[0] == "healthz" || segs[0] == "livez" || segs[0] == "readyz")) {
    w.Send(200, "text/plain; charset=utf-8", "ok", {});
    return;
  }
  bool public_path = segs.size() == 1 && segs[0] == "version";
  if (!public_path) {
    bool required, accepted;
    {
      std::lock_guard<std::mutex> lock(mu);
      required = !bearer_tokens.empty() || !options.client_ca_pem.empty();
      const std::string& h = req.Header("authorization");
      accepted = !req.client_cn.empty() || (h.rfind("Bearer ", 0) == 0 && bearer_tokens.count(h.substr(7)));
    }
    if (required && !accepted) {
      SendError(w, MakeError(401, "Unauthorized", "Unauthorized"));
      return;
    }
  }
  if (ApplyFault(req, w, is_watch)) return;

  const bool discovery = segs.empty() || (segs[0] == "api" && segs.size() <= 2) ||
                         (segs[0] == "apis" && segs.size() <= 3) || (segs.size() == 1 && segs[0] == "version") ||
                         segs[0] == "openapi";
  if (discovery && req.method != "GET") {
    SendError(w, MakeError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource"));
    return;
  }
  auto not_found = [&] {
    SendError(w, MakeError(404, "NotFound", "the server could not find the requested resource"));
  };
  if (segs.empty()) return SendJson(w, 200, RootPaths());
  if (segs[0] == "version" && segs.size() == 1) {
    std::string v = options.server_version;
    std::string major = "1", minor = "30";
    if (size_t dot = v.find('.'); v.size() > 1 && dot != std::string::npos) {
      major = v.substr(1, dot - 1);
      minor = v.substr(dot + 1, v.find('.', dot + 1) - dot - 1);
    }
    return SendJson(w, 200,
                    {{"major", major},
                     {"minor", minor},
                     {"gitVersion", v},
                     {"gitCommit", "0000000000000000000000000000000000000000"},
                     {"gitTreeState", "clean"},
                     {"buildDate", "2024-01-01T00:00:00Z"},
                     {"goVersion", "go1.22.0"},
                     {"compiler", "gc"},
                     {"platform", "linux/amd64"}});
  }
  if (segs[0] == "openapi") {
    if (segs.size() == 2 && segs[1] == "v3") return SendJson(w, 200, OpenApiV3Root(store->Resources()));
    if (segs.size() >= 3 && segs[1] == "v3") {
      std::string gv;
      for (size_t i = 2; i < segs.size(); ++i) gv += (i > 2 ? "/" : "") + segs[i];
      json doc = OpenApiV3GroupVersion(store->Resources(), gv);
      return doc.is_null() ? not_found() : SendJson(w, 200, doc);
    }
    // No /openapi/v2: kubectl uses v3 when the server offers it.
    return not_found();
  }
  if (segs[0] == "api") {
    if (segs.size() == 1) {
      return SendJson(w, 200, ApiVersionsDoc(options.bind_address + ":" + std::to_string(port.load())));
    }
    if (segs[1] != "v1") return not_found();
    if (segs.size() == 2) return SendJson(w, 200, ApiResourceListDoc(store->Resources(), "", "v1"));
    return ServeResource(req, w, "", "v1", {segs.begin() + 2, segs.end()}, is_watch);
  }
  if (segs[0] == "apis") {
    if (segs.size() == 1) return SendJson(w, 200, ApiGroupListDoc(store->Resources()));
    if (segs.size() == 2) {
      json g = ApiGroupDoc(store->Resources(), segs[1]);
      return g.is_null() ? not_found() : SendJson(w, 200, g);
    }
    if (segs.size() == 3) {
      json l = ApiResourceListDoc(store->Resources(), segs[1], segs[2]);
      return l.is_null() ? not_found() : SendJson(w, 200, l);
    }
    return ServeResource(req, w, segs[1], segs[2], {segs.begin() + 3, segs.end()}, is_watch);
  }
  not_found();
}

json ApiServerDouble::Impl::Render(const ResourceInfo& r, const json& obj, const Negotiated& neg,
                                   bool column_definitions) const {
  if (neg.wire == Negotiated::kTable) {
    std::string rv = obj["metadata"].value("resourceVersion", "");
    return ToTable(r, {&obj}, rv, "", "meta.k8s.io/" + neg.version,
                   options.clock ? options.clock() : std::chrono::system_clock::now(), column_definitions);
  }
  if (neg.wire == Negotiated::kPartial) {
    return {{"kind", "PartialObjectMetadata"},
            {"apiVersion", "meta.k8s.io/" + neg.version},
            {"metadata", obj.value("metadata", json::object())}};
  }
  return obj;
}

json ApiServerDouble::Impl::RenderList(const ResourceInfo& r, const ListResult& list, const Negotiated& neg) const {
  if (neg.wire == Negotiated::kTable) {
    std::vector<const json*> ptrs;
    for (const auto& o : list.items) ptrs.push_back(&o);
    return ToTable(r, ptrs, list.resource_version, list.continue_token, "meta.k8s.io/" + neg.version,
                   options.clock ? options.clock() : std::chrono::system_clock::now());
  }
  json meta = {{"resourceVersion", list.resource_version}};
  if (!list.continue_token.empty()) meta["continue"] = list.continue_token;
  if (list.remaining >= 0) meta["remainingItemCount"] = list.remaining;
  json items = json::array();
  if (neg.wire == Negotiated::kPartial) {
    for (const auto& o : list.items) items.push_back(Render(r, o, neg));
    return {{"kind", "PartialObjectMetadataList"},
            {"apiVersion", "meta.k8s.io/" + neg.version},
            {"metadata", meta},
            {"items", items}};
  }
  for (const auto& o : list.items) items.push_back(o);
  return {{"kind", r.list_kind}, {"apiVersion", r.api_version()}, {"metadata", meta}, {"items", items}};
}

void ApiServerDouble::Impl::ServeResource(const HttpRequest& req, RecordingWriter& w, const std::string& group,
                                          const std::string& version, std::vector<std::string> rest, bool is_watch) {
  auto not_found = [&] {
    SendError(w, MakeError(404, "NotFound", "the server could not find the requested resource"));
  };
  auto method_not_allowed = [&] {
    SendError(w, MakeError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource"));
  };
  bool watch_path = false;
  if (!rest.empty() && rest[0] == "watch") {
    watch_path = true;
    rest.erase(rest.begin());
  }
  std::string ns;
  if (rest.size() >= 3 && rest[0] == "namespaces" &&
      !(group.empty() && rest.size() == 3 && (rest[2] == "status" || rest[2] == "finalize"))) {
    ns = rest[1];
    rest.erase(rest.begin(), rest.begin() + 2);
  }
  if (rest.empty() || rest.size() > 3) return not_found();
  std::optional<ResourceInfo> found = store->Find(group, version, rest[0]);
  if (!found) return not_found();
  const ResourceInfo& r = *found;
  if (!ns.empty() && !r.namespaced) return not_found();
  std::string name = rest.size() >= 2 ? rest[1] : "";
  bool status = false;
  if (rest.size() == 3) {
    if (rest[2] != "status" || !r.has_status) return not_found();
    status = true;
  }
  if (r.namespaced && ns.empty() && !name.empty()) return not_found();

  Negotiated neg = Negotiate(req.Header("accept"));
  if (neg.wire == Negotiated::kNone) {
    return SendError(w, MakeError(406, "NotAcceptable",
                                  "only the following media types are accepted: application/json, "
                                  "application/json;as=Table;v=v1;g=meta.k8s.io"));
  }
  const std::string& dry = req.Query("dryRun");
  if (!dry.empty() && dry != "All") {
    return SendError(
        w, MakeError(400, "BadRequest", "dryRun: Unsupported value: \"" + dry + "\": supported values: \"All\""));
  }
  bool dry_run = dry == "All";

  auto list_options = [&](ListOptions* lo) -> bool {
    auto labels = LabelSelector::Parse(req.Query("labelSelector"));
    if (!labels.ok()) {
      SendError(w, MakeError(400, "BadRequest", labels.status().message()));
      return false;
    }
    auto fields = FieldSelector::Parse(req.Query("fieldSelector"), r.selectable_fields());
    if (!fields.ok()) {
      SendError(w, MakeError(400, "BadRequest", fields.status().message()));
      return false;
    }
    lo->labels = std::move(labels).value();
    lo->fields = std::move(fields).value();
    const std::string& limit = req.Query("limit");
    if (!limit.empty()) {
      if (limit.size() > 12 || limit.find_first_not_of("0123456789") != std::string::npos) {
        SendError(w, MakeError(400, "BadRequest", "limit: Invalid value: \"" + limit + "\""));
        return false;
      }
      lo->limit = std::stoll(limit);
    }
    lo->continue_token = req.Query("continue");
    return true;
  };
  auto parse_body = [&](json* out) -> bool {
    const std::string& ct = req.Header("content-type");
    if (ct.find("protobuf") != std::string::npos || ct.find("yaml") != std::string::npos) {
      SendError(w, MakeError(415, "UnsupportedMediaType",
                             "the body of the request was in an unknown format - accepted media types include: "
                             "application/json"));
      return false;
    }
    *out = ParseBody(req.body);
    if (out->is_discarded()) {
      SendError(w,
                MakeError(400, "BadRequest",
                          "the request body is not valid JSON, or is nested too deeply (couldn't get version/kind)"));
      return false;
    }
    return true;
  };
  auto answer = [&](ApiResult<json>&& result, int ok_code) {
    if (!result.ok()) return SendError(w, result.error());
    SendJson(w, ok_code, Render(r, result.value(), neg));
  };

  const std::string& m = req.method;
  if (m == "GET") {
    if (is_watch || watch_path) {
      if (!name.empty() && status) return not_found();
      return ServeWatch(req, w, r, ns, name, neg);
    }
    if (!name.empty()) return answer(store->Get(r, ns, name), 200);
    ListOptions lo;
    if (!list_options(&lo)) return;
    auto list = store->List(r, ns, lo);
    if (!list.ok()) return SendError(w, list.error());
    return SendJson(w, 200, RenderList(r, list.value(), neg));
  }
  if (watch_path) return method_not_allowed();
  if (m == "POST") {
    if (!name.empty() || (r.namespaced && ns.empty())) return method_not_allowed();
    json body;
    if (!parse_body(&body)) return;
    return answer(store->Create(r, ns, std::move(body), dry_run), 201);
  }
  if (m == "PUT") {
    if (name.empty()) return method_not_allowed();
    json body;
    if (!parse_body(&body)) return;
    return answer(store->Update(r, ns, name, std::move(body), status, dry_run), 200);
  }
  if (m == "PATCH") {
    if (name.empty()) return method_not_allowed();
    std::string ct = req.Header("content-type");
    ct = ct.substr(0, ct.find(';'));
    ct.erase(ct.find_last_not_of(" \t") + 1);
    PatchType type;
    if (ct == "application/merge-patch+json") {
      type = PatchType::kMerge;
    } else if (ct == "application/strategic-merge-patch+json" && r.crd_name.empty()) {
      type = PatchType::kStrategicMerge;
    } else if (ct == "application/json-patch+json") {
      type = PatchType::kJsonPatch;
    } else {
      std::string accepted = "application/json-patch+json, application/merge-patch+json";
      if (r.crd_name.empty()) accepted += ", application/strategic-merge-patch+json";
      return SendError(
          w, MakeError(415, "UnsupportedMediaType",
                       "the body of the request was in an unknown format - accepted media types include: " + accepted));
    }
    json patch = ParseBody(req.body);
    if (patch.is_discarded()) return SendError(w, MakeError(400, "BadRequest", "error decoding patch: invalid JSON"));
    return answer(store->Patch(r, ns, name, type, patch, status, dry_run), 200);
  }
  if (m == "DELETE") {
    if (status) return method_not_allowed();
    DeleteOptions del;
    del.dry_run = dry_run;
    del.propagation = req.Query("propagationPolicy");
    if (Truthy(req.Query("orphanDependents")) && del.propagation.empty()) del.propagation = "Orphan";
    if (!req.body.empty()) {
      json body = ParseBody(req.body);
      if (!body.is_object()) return SendError(w, MakeError(400, "BadRequest", "DeleteOptions must be a JSON object"));
      if (body.contains("propagationPolicy") && body["propagationPolicy"].is_string()) {
        del.propagation = body["propagationPolicy"].get<std::string>();
      } else if (body.contains("orphanDependents") && body["orphanDependents"].is_boolean() &&
                 del.propagation.empty()) {
        del.propagation = body["orphanDependents"].get<bool>() ? "Orphan" : "Background";
      }
      if (body.contains("preconditions") && body["preconditions"].is_object()) {
        const json& pre = body["preconditions"];
        if (pre.contains("uid") && pre["uid"].is_string()) del.precondition_uid = pre["uid"].get<std::string>();
        if (pre.contains("resourceVersion") && pre["resourceVersion"].is_string()) {
          del.precondition_resource_version = pre["resourceVersion"].get<std::string>();
        }
      }
      if (body.contains("dryRun") && body["dryRun"].is_array()) {
        for (const auto& d : body["dryRun"]) {
          if (d == "All") del.dry_run = true;
        }
      }
    }
    if (!name.empty()) return answer(store->Delete(r, ns, name, del), 200);
    ListOptions lo;
    if (!list_options(&lo)) return;
    auto deleted = store->DeleteCollection(r, ns, lo, del);
    if (!deleted.ok()) return SendError(w, deleted.error());
    return SendJson(w, 200, RenderList(r, deleted.value(), neg));
  }
  method_not_allowed();
}

void ApiServerDouble::Impl::ServeWatch(const HttpRequest& req, RecordingWriter& w, const ResourceInfo& r,
                                       const std::string& ns, const std::string& name, const Negotiated& neg) {
  WatchCursor cursor;
  cursor.resource_id = r.id();
  cursor.ns = ns;
  auto labels = LabelSelector::Parse(req.Query("labelSelector"));
  if (!labels.ok()) return SendError(w, MakeError(400, "BadRequest", labels.status().message()));
  std::string field_text = req.Query("fieldSelector");
  if (!name.empty()) {
    // Escape as a field selector value so odd names cannot add terms.
    std::string escaped;
    for (char c : name) {
      if (c == ',' || c == '=' || c == '\\' || c == '!') escaped += '\\';
      escaped += c;
    }
    field_text = field_text.empty() ? "metadata.name=" + escaped : field_text + ",metadata.name=" + escaped;
  }
  auto fields = FieldSelector::Parse(field_text, r.selectable_fields());
  if (!fields.ok()) return SendError(w, MakeError(400, "BadRequest", fields.status().message()));
  cursor.labels = std::move(labels).value();
  cursor.fields = std::move(fields).value();
  const bool bookmarks = Truthy(req.Query("allowWatchBookmarks"));
  const bool send_initial = Truthy(req.Query("sendInitialEvents"));
  const std::string& timeout_text = req.Query("timeoutSeconds");
  long long timeout_seconds = 0;
  if (!timeout_text.empty()) {
    if (timeout_text.size() > 9 || timeout_text.find_first_not_of("0123456789") != std::string::npos) {
      return SendError(w, MakeError(400, "BadRequest", "timeoutSeconds: Invalid value: \"" + timeout_text + "\""));
    }
    timeout_seconds = std::stoll(timeout_text);
  }

  auto start = store->StartWatch(&cursor, req.Query("resourceVersion"), send_initial);
  if (!start.ok() && start.error().code == 400) return SendError(w, start.error());
  struct Guard {
    Store* s;
    WatchCursor* c;
    ~Guard() { s->EndWatch(c); }
  } guard{store.get(), &cursor};

  if (!w.StartStream(200, "application/json")) return;
  bool first = true;
  auto emit = [&](const std::string& type, const json& obj) {
    json ev = {{"type", type}, {"object", obj}};
    return w.WriteChunk(Dump(ev) + "\n");
  };
  auto emit_object = [&](const WatchEvent& e) {
    bool defs = first;
    first = false;
    return emit(e.type, Render(r, e.object, neg, defs));
  };
  auto bookmark = [&](bool initial_end) {
    json meta = {{"resourceVersion", std::to_string(cursor.position)}};
    if (initial_end) meta["annotations"] = {{"k8s.io/initial-events-end", "true"}};
    return emit("BOOKMARK", {{"kind", r.kind}, {"apiVersion", r.api_version()}, {"metadata", meta}});
  };
  if (!start.ok()) {
    emit("ERROR", start.error().ToJson());
    w.EndStream();
    return;
  }
  for (const auto& e : start.value()) {
    if (!emit_object(e)) return;
  }
  if (send_initial && bookmarks && !bookmark(true)) return;

  using Clock = std::chrono::steady_clock;
  const auto interval = std::max(options.bookmark_interval, std::chrono::milliseconds(1));
  const Clock::time_point end =
      timeout_seconds > 0 ? Clock::now() + std::chrono::seconds(timeout_seconds) : Clock::time_point::max();
  Clock::time_point next_bookmark = Clock::now() + interval;
  for (;;) {
    // Wake at least every 200 ms to notice a client that went away.
    Clock::time_point wake = std::min(end, Clock::now() + std::chrono::milliseconds(200));
    if (bookmarks) wake = std::min(wake, next_bookmark);
    std::vector<WatchEvent> events;
    switch (store->Wait(&cursor, wake, &events)) {
      case Store::WaitOutcome::kEvents:
        for (const auto& e : events) {
          if (!emit_object(e)) return;
        }
        break;
      case Store::WaitOutcome::kTimeout: break;
      case Store::WaitOutcome::kDropped:
      case Store::WaitOutcome::kShutdown: w.Abort(); return;
      case Store::WaitOutcome::kExpired:
        // The watcher fell behind the compaction window.
        emit("ERROR", MakeError(410, "Expired", "The resourceVersion for the provided watch is too old.").ToJson());
        w.EndStream();
        return;
    }
    Clock::time_point now = Clock::now();
    if (now >= end) {
      w.EndStream();
      return;
    }
    if (bookmarks && now >= next_bookmark) {
      if (!bookmark(false)) return;
      next_bookmark = now + interval;
    }
    if (w.PeerGone()) return;
  }
}

// ---- Public API -------------------------------------------------------------

ApiServerDouble::ApiServerDouble(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ApiServerDouble::~ApiServerDouble() = default;

StatusOr<std::unique_ptr<ApiServerDouble>> ApiServerDouble::Start(Options options) {
  auto impl = std::make_unique<Impl>(options);
  Store::Options so;
  so.compaction_window = options.compaction_window;
  so.clock = options.clock;
  impl->store = std::make_unique<Store>(so);
  for (const char* ns : {"default", "kube-system"}) {
    auto r = impl->store->Create(*impl->store->Resolve("namespaces"), "", {{"metadata", {{"name", ns}}}}, false);
    if (!r.ok()) return ToStatus(r.error());
  }
  if (options.register_tfjob_crd) {
    auto r = impl->store->Create(*impl->store->Resolve("customresourcedefinitions"), "", TfJobCrd(), false);
    if (!r.ok()) return ToStatus(r.error());
  }
  if (options.register_podgroup_crds) {
    for (const json& crd : {VolcanoPodGroupCrd(), SchedulerPluginsPodGroupCrd()}) {
      auto r = impl->store->Create(*impl->store->Resolve("customresourcedefinitions"), "", crd, false);
      if (!r.ok()) return ToStatus(r.error());
    }
  }
  if (!options.bearer_token.empty()) impl->bearer_tokens.insert(options.bearer_token);
  HttpServer::Options ho;
  ho.tls_cert_pem = options.tls_cert_pem;
  ho.tls_key_pem = options.tls_key_pem;
  ho.client_ca_pem = options.client_ca_pem;
  ho.bind_address = options.bind_address;
  ho.port = options.port;
  ho.max_body_bytes = 3 * 1024 * 1024;  // kube-apiserver's MaxRequestBodyBytes
  Impl* raw = impl.get();
  auto http = HttpServer::Start(ho, [raw](const HttpRequest& req, ResponseWriter& w) { raw->Handle(req, w); });
  if (!http.ok()) return http.status();
  impl->http = std::move(http).value();
  impl->port.store(impl->http->port());
  return std::unique_ptr<ApiServerDouble>(new ApiServerDouble(std::move(impl)));
}

int ApiServerDouble::port() const { return impl_->http->port(); }

std::string ApiServerDouble::url() const {
  const bool tls = !impl_->options.tls_cert_pem.empty();
  return (tls ? "https://" : "http://") + impl_->options.bind_address + ":" + std::to_string(port());
}

std::string ApiServerDouble::Kubeconfig(const std::string& ns) const {
  std::string y =
      "apiVersion: v1\nkind: Config\nclusters:\n- name: double\n  cluster:\n    server: " + url() +
      (impl_->options.tls_ca_pem.empty() ? std::string()
                                         : "\n    certificate-authority-data: " + Base64(impl_->options.tls_ca_pem)) +
      "\ncontexts:\n- name: double\n  context:\n    cluster: double\n    user: double\n    namespace: " + ns +
      "\ncurrent-context: double\nusers:\n- name: double\n  user:\n";
  if (impl_->options.bearer_token.empty()) {
    y += "    {}\n";
  } else {
    y += "    token: " + impl_->options.bearer_token + "\n";
  }
  return y;
}

Status ApiServerDouble::WriteKubeconfig(const std::string& path, const std::string& ns) const {
  std::ofstream out(path, std::ios::trunc);
  out << Kubeconfig(ns);
  out.close();
  if (!out) return Internal("writing " + path + " failed");
  return Status::Ok();
}

namespace {

StatusOr<ResourceInfo> ResolveOrError(const Store& store, const std::string& resource) {
  auto r = store.Resolve(resource);
  if (!r) return NotFound("the server doesn't have a resource type \"" + resource + "\"");
  return *r;
}

std::string NameOf(const json& obj) {
  if (!obj.is_object() || !obj.contains("metadata") || !obj["metadata"].is_object()) return "";
  return obj["metadata"].value("name", "");
}

}  // namespace

StatusOr<json> ApiServerDouble::Get(const std::string& resource, const std::string& ns, const std::string& name) const {
  ASSIGN_OR_RETURN(ResourceInfo r, ResolveOrError(*impl_->store, resource));
  return Convert(impl_->store->Get(r, ns, name));
}

StatusOr<std::vector<json>> ApiServerDouble::List(const std::string& resource, const std::string& ns,
                                                  const std::string& label_selector) const {
  ASSIGN_OR_RETURN(ResourceInfo r, ResolveOrError(*impl_->store, resource));
  ListOptions lo;
  ASSIGN_OR_RETURN(lo.labels, LabelSelector::Parse(label_selector));
  auto list = impl_->store->List(r, ns, lo);
  if (!list.ok()) return ToStatus(list.error());
  return std::move(list.value().items);
}

StatusOr<json> ApiServerDouble::Create(const std::string& resource, const std::string& ns, json object) {
  ASSIGN_OR_RETURN(ResourceInfo r, ResolveOrError(*impl_->store, resource));
  return Convert(impl_->store->Create(r, ns, std::move(object), false));
}

StatusOr<json> ApiServerDouble::Update(const std::string& resource, const std::string& ns, json object) {
  ASSIGN_OR_RETURN(ResourceInfo r, ResolveOrError(*impl_->store, resource));
  std::string name = NameOf(object);
  return Convert(impl_->store->Update(r, ns, name, std::move(object), false, false));
}

StatusOr<json> ApiServerDouble::UpdateStatus(const std::string& resource, const std::string& ns, json object) {
  ASSIGN_OR_RETURN(ResourceInfo r, ResolveOrError(*impl_->store, resource));
  std::string name = NameOf(object);
  return Convert(impl_->store->Update(r, ns, name, std::move(object), true, false));
}

StatusOr<json> ApiServerDouble::Put(const std::string& resource, const std::string& ns, json object) {
  ASSIGN_OR_RETURN(ResourceInfo r, ResolveOrError(*impl_->store, resource));
  std::string name = NameOf(object);
  if (object.is_object() && object.contains("metadata") && object["metadata"].is_object()) {
    object["metadata"].erase("resourceVersion");
  }
  json status = object.is_object() ? object.value("status", json()) : json();
  auto existing = impl_->store->Get(r, ns, name);
  ApiResult<json> written = existing.ok() ? impl_->store->Update(r, ns, name, object, false, false)
                                          : impl_->store->Create(r, ns, object, false);
  if (!written.ok() || !r.has_status || status.is_null()) return Convert(std::move(written));
  json with_status = written.value();
  with_status["status"] = status;
  with_status["metadata"].erase("resourceVersion");
  return Convert(impl_->store->Update(r, ns, name, std::move(with_status), true, false));
}

StatusOr<json> ApiServerDouble::MergePatch(const std::string& resource, const std::string& ns, const std::string& name,
                                           const json& patch, bool status) {
  ASSIGN_OR_RETURN(ResourceInfo r, ResolveOrError(*impl_->store, resource));
  return Convert(impl_->store->Patch(r, ns, name, PatchType::kMerge, patch, status, false));
}

StatusOr<json> ApiServerDouble::Delete(const std::string& resource, const std::string& ns, const std::string& name,
                                       const std::string& propagation) {
  ASSIGN_OR_RETURN(ResourceInfo r, ResolveOrError(*impl_->store, resource));
  DeleteOptions d;
  d.propagation = propagation;
  return Convert(impl_->store->Delete(r, ns, name, d));
}

uint64_t ApiServerDouble::ResourceVersion() const { return impl_->store->resource_version(); }
void ApiServerDouble::CompactNow() { impl_->store->CompactNow(); }
void ApiServerDouble::DropWatches() { impl_->store->DropWatches(); }

int ApiServerDouble::ActiveWatches(const std::string& resource) const {
  if (resource.empty()) return impl_->store->ActiveWatches("");
  auto r = impl_->store->Resolve(resource);
  return r ? impl_->store->ActiveWatches(r->id()) : 0;
}

Status ApiServerDouble::InjectFault(const Fault& fault) {
  Impl::Rule rule;
  rule.fault = fault;
  if (rule.fault.count == 0) return InvalidArgument("fault count must be positive or -1");
  try {
    rule.re = std::regex(fault.path_regex, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return InvalidArgument("bad path_regex \"" + fault.path_regex + "\": " + e.what());
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->faults.push_back(std::move(rule));
  return Status::Ok();
}

void ApiServerDouble::SetBearerTokens(std::vector<std::string> tokens) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->bearer_tokens = std::set<std::string>(tokens.begin(), tokens.end());
}

void ApiServerDouble::ClearFaults() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->faults.clear();
}

std::vector<ApiServerDouble::RequestRecord> ApiServerDouble::Requests() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return {impl_->requests.begin(), impl_->requests.end()};
}

void ApiServerDouble::ClearRequests() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->requests.clear();
}

bool ApiServerDouble::WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) const {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  for (;;) {
    uint64_t seen = impl_->store->resource_version();
    if (pred()) return true;
    Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    // Writes wake us at once; other conditions (watches, requests) are polled.
    impl_->store->WaitForWrite(seen, std::min(deadline, now + std::chrono::milliseconds(50)));
  }
}

}  // namespace tfjob::testing
