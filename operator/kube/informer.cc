#include "operator/kube/informer.h"

#include <chrono>
#include <iostream>

namespace tfjob::op::kube {

std::string ObjectKey(const nlohmann::json& obj) {
  if (!obj.is_object() || !obj.contains("metadata") || !obj["metadata"].is_object()) return "";
  const auto& m = obj["metadata"];
  const std::string ns = m.contains("namespace") && m["namespace"].is_string() ? m["namespace"].get<std::string>() : "";
  const std::string name = m.contains("name") && m["name"].is_string() ? m["name"].get<std::string>() : "";
  return ns + "/" + name;
}

namespace {

std::string ResourceVersionOf(const nlohmann::json& obj) {
  if (!obj.is_object() || !obj.contains("metadata") || !obj["metadata"].is_object()) return "";
  const auto& m = obj["metadata"];
  return m.contains("resourceVersion") && m["resourceVersion"].is_string() ? m["resourceVersion"].get<std::string>() : "";
}

}  // namespace

Informer::Informer(Client& client, Resource resource, std::string ns, std::string label_selector, Transform transform)
    : client_(client),
      resource_(std::move(resource)),
      ns_(std::move(ns)),
      selector_(std::move(label_selector)),
      transform_(std::move(transform)) {}

Informer::~Informer() { Stop(); }

void Informer::AddHandler(Handler h) { handlers_.push_back(std::move(h)); }

void Informer::Start() {
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void Informer::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::string Informer::resource_version() const {
  std::lock_guard g(mu_);
  return rv_;
}

std::optional<nlohmann::json> Informer::Get(const std::string& ns, const std::string& name) const {
  std::lock_guard g(mu_);
  auto it = store_.find(ns + "/" + name);
  if (it == store_.end()) return std::nullopt;
  return it->second;
}

std::vector<nlohmann::json> Informer::List(const std::string& ns, const std::map<std::string, std::string>& labels) const {
  std::vector<nlohmann::json> out;
  std::lock_guard g(mu_);
  for (const auto& [key, obj] : store_) {
    if (!ns.empty() && key.rfind(ns + "/", 0) != 0) continue;
    bool match = true;
    for (const auto& [k, v] : labels) {
      const auto& l = obj["metadata"].value("labels", nlohmann::json::object());
      if (!l.is_object() || !l.contains(k) || l[k] != v) {
        match = false;
        break;
      }
    }
    if (match) out.push_back(obj);
  }
  return out;
}

void Informer::Apply(const std::string& type, const nlohmann::json& raw) {
  nlohmann::json obj = raw;
  if (transform_) {
    // A transform that throws on an object it did not expect is a bug; the
    // whole object is kept rather than the watch (and the operator) lost.
    try {
      obj = transform_(raw);
    } catch (const std::exception& e) {
      std::cerr << "informer " << resource_.plural << ": transform failed, keeping the whole object: " << e.what()
                << std::endl;
    }
  }
  const std::string key = ObjectKey(obj);
  {
    std::lock_guard g(mu_);
    if (const std::string rv = ResourceVersionOf(obj); !rv.empty()) rv_ = rv;
    if (type == "DELETED") store_.erase(key);
    else store_[key] = obj;
  }
  for (const auto& h : handlers_) h(type, obj);
}

Status Informer::Relist() {
  ListOptions o;
  o.label_selector = selector_;
  o.limit = page_size_;
  std::map<std::string, nlohmann::json> fresh;
  std::string rv;
  for (;;) {
    auto page = client_.List(resource_, ns_, o);
    if (!page.ok()) {
      // client-go's pager: a continue token the server has compacted away
      // (410) means starting over with one full list.
      if (page.status().code() == Code::kFailedPrecondition && !o.continue_token.empty()) {
        o.continue_token.clear();
        o.limit = 0;
        fresh.clear();
        continue;
      }
      return page.status();
    }
    nlohmann::json& list = *page;
    if (!list.is_object()) return Internal("list " + resource_.plural + ": the response is not an object");
    if (list.contains("items") && list["items"].is_array()) {
      for (auto& item : list["items"]) {
        // The key first: json's operator= takes its argument by value, and the
        // right operand is evaluated (moved from) before the left.
        std::string key = ObjectKey(item);
        fresh[std::move(key)] = std::move(item);
      }
    }
    const nlohmann::json meta = list.value("metadata", nlohmann::json::object());
    rv = meta.is_object() ? meta.value("resourceVersion", "") : "";
    const std::string next = meta.is_object() ? meta.value("continue", "") : "";
    if (next.empty()) break;
    o.continue_token = next;
  }
  std::map<std::string, nlohmann::json> old;
  {
    std::lock_guard g(mu_);
    old = store_;
  }
  // Deliver what changed while we were not watching.
  for (const auto& [key, obj] : old) {
    if (!fresh.count(key)) Apply("DELETED", obj);
  }
  for (const auto& [key, obj] : fresh) {
    auto it = old.find(key);
    if (it == old.end()) Apply("ADDED", obj);
    else if (ResourceVersionOf(it->second) != ResourceVersionOf(obj)) Apply("MODIFIED", obj);
  }
  std::lock_guard g(mu_);
  rv_ = rv;
  relists_.fetch_add(1);
  return Status::Ok();
}

void Informer::Run() {
  auto backoff = std::chrono::milliseconds(100);
  bool need_list = true;
  // Like client-go's reflector, say when the API server cannot be listed or
  // watched (once per distinct error, else every 30 s) and when it can again.
  std::string last_error;
  auto last_said = std::chrono::steady_clock::time_point();
  auto say = [&](const char* what, const Status& s) {
    const auto now = std::chrono::steady_clock::now();
    if (s.message() == last_error && now - last_said < std::chrono::seconds(30)) return;
    std::cerr << "tfjob-operator: " << resource_.plural << ": " << what << " failed (retrying): " << s.message()
              << std::endl;
    last_error = s.message();
    last_said = now;
  };
  while (!stop_) {
    if (need_list) {
      if (Status s = Relist(); !s.ok()) {
        say("list", s);
        std::this_thread::sleep_for(backoff);
        backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
        continue;
      }
      if (!last_error.empty()) {
        std::cerr << "tfjob-operator: " << resource_.plural << ": listed again" << std::endl;
        last_error.clear();
      }
      synced_ = true;
      need_list = false;
      backoff = std::chrono::milliseconds(100);
    }
    WatchOptions w;
    w.label_selector = selector_;
    w.resource_version = resource_version();
    w.timeout_seconds = 60;
    Status s = client_.Watch(resource_, ns_, w, [&](const WatchEvent& ev) {
      if (ev.type == "BOOKMARK") {
        std::lock_guard g(mu_);
        if (const std::string rv = ResourceVersionOf(ev.object); !rv.empty()) rv_ = rv;
        return true;
      }
      Apply(ev.type, ev.object);
      return !stop_.load();
    }, stop_);
    if (stop_) break;
    if (s.code() == Code::kFailedPrecondition) {
      need_list = true;  // 410 Gone: our version was compacted away
    } else if (!s.ok()) {
      say("watch", s);
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
      need_list = true;  // a broken stream may have lost events: relist to be sure
    }
  }
}

}  // namespace tfjob::op::kube
