#include "kube/informer.h"
#include "common/mutex.h"

#include <chrono>
#include <iostream>

namespace tfjob::kube {

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
  return m.contains("resourceVersion") && m["resourceVersion"].is_string() ? m["resourceVersion"].get<std::string>()
                                                                           : "";
}

std::string Encode(const nlohmann::json& obj) {
  const std::vector<std::uint8_t> bytes = nlohmann::json::to_cbor(obj);
  return std::string(bytes.begin(), bytes.end());
}

nlohmann::json Decode(const std::string& cbor) {
  return nlohmann::json::from_cbor(cbor.begin(), cbor.end(), /*strict=*/true, /*allow_exceptions=*/false);
}

std::string LabelOf(const nlohmann::json& obj, const std::string& key) {
  if (key.empty() || !obj.is_object()) return "";
  const auto m = obj.find("metadata");
  if (m == obj.end() || !m->is_object()) return "";
  const auto l = m->find("labels");
  if (l == m->end() || !l->is_object()) return "";
  const auto v = l->find(key);
  return v != l->end() && v->is_string() ? v->get<std::string>() : "";
}

std::string NamespaceOf(const std::string& key) { return key.substr(0, key.find('/')); }

bool HasLabels(const nlohmann::json& obj, const std::map<std::string, std::string>& labels) {
  for (const auto& [k, v] : labels) {
    const auto m = obj.find("metadata");
    if (m == obj.end() || !m->is_object()) return false;
    const auto l = m->find("labels");
    if (l == m->end() || !l->is_object() || !l->contains(k) || (*l)[k] != v) return false;
  }
  return true;
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
  MutexLock g(mu_);
  return rv_;
}

std::optional<nlohmann::json> Informer::Get(const std::string& ns, const std::string& name) const {
  MutexLock g(mu_);
  auto it = store_.find(ns + "/" + name);
  if (it == store_.end()) return std::nullopt;
  return Decode(it->second.cbor);
}

size_t Informer::size() const {
  MutexLock g(mu_);
  return store_.size();
}

size_t Informer::encoded_bytes() const {
  MutexLock g(mu_);
  size_t n = 0;
  for (const auto& [key, e] : store_) n += e.cbor.size();
  return n;
}

std::vector<nlohmann::json> Informer::List(const std::string& ns,
                                           const std::map<std::string, std::string>& labels) const {
  std::vector<nlohmann::json> out;
  MutexLock g(mu_);
  // The index serves a list by its label in one namespace.
  if (!index_label_.empty() && !ns.empty() && labels.size() == 1 && labels.begin()->first == index_label_) {
    const auto keys = index_.find(ns + "/" + labels.begin()->second);
    if (keys == index_.end()) return out;
    for (const auto& key : keys->second) {
      const auto it = store_.find(key);
      if (it != store_.end()) out.push_back(Decode(it->second.cbor));
    }
    return out;
  }
  for (const auto& [key, e] : store_) {
    if (!ns.empty() && key.rfind(ns + "/", 0) != 0) continue;
    nlohmann::json obj = Decode(e.cbor);
    if (HasLabels(obj, labels)) out.push_back(std::move(obj));
  }
  return out;
}

nlohmann::json Informer::Transformed(const nlohmann::json& raw) const {
  if (!transform_) return raw;
  // A transform that throws on an object it did not expect is a bug; the
  // whole object is kept rather than the watch (and the operator) lost.
  try {
    return transform_(raw);
  } catch (const std::exception& e) {
    std::cerr << "informer " << resource_.plural << ": transform failed, keeping the whole object: " << e.what()
              << std::endl;
  }
  return raw;
}

void Informer::StoreLocked(const std::string& key, const nlohmann::json& obj) {
  EraseLocked(key);
  Entry e{Encode(obj), ResourceVersionOf(obj), LabelOf(obj, index_label_)};
  if (!e.index_value.empty()) index_[NamespaceOf(key) + "/" + e.index_value].insert(key);
  store_[key] = std::move(e);
}

void Informer::EraseLocked(const std::string& key) {
  const auto it = store_.find(key);
  if (it == store_.end()) return;
  if (!it->second.index_value.empty()) {
    const std::string slot = NamespaceOf(key) + "/" + it->second.index_value;
    auto keys = index_.find(slot);
    if (keys != index_.end()) {
      keys->second.erase(key);
      if (keys->second.empty()) index_.erase(keys);
    }
  }
  store_.erase(it);
}

void Informer::Apply(const std::string& type, nlohmann::json obj) {
  const std::string key = ObjectKey(obj);
  {
    MutexLock g(mu_);
    if (const std::string rv = ResourceVersionOf(obj); !rv.empty()) rv_ = rv;
    if (type == "DELETED") {
      EraseLocked(key);
    } else {
      StoreLocked(key, obj);
    }
  }
  for (const auto& h : handlers_) h(type, obj);
}

Status Informer::Relist() {
  ListOptions o;
  o.label_selector = selector_;
  o.limit = page_size_;
  // Transformed as each page arrives, so a list of thousands of whole
  // objects is never held at once.
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
        fresh[std::move(key)] = Transformed(item);
      }
    }
    const nlohmann::json meta = list.value("metadata", nlohmann::json::object());
    rv = meta.is_object() ? meta.value("resourceVersion", "") : "";
    const std::string next = meta.is_object() ? meta.value("continue", "") : "";
    if (next.empty()) break;
    o.continue_token = next;
  }
  // What the cache holds, by key: its resource version, and the object for
  // a DELETED event.
  std::map<std::string, std::string> old;
  {
    MutexLock g(mu_);
    for (const auto& [key, e] : store_) old[key] = e.resource_version;
  }
  // Deliver what changed while we were not watching.
  for (const auto& [key, version] : old) {
    if (fresh.count(key)) continue;
    std::optional<nlohmann::json> gone;
    {
      MutexLock g(mu_);
      const auto it = store_.find(key);
      if (it != store_.end()) gone = Decode(it->second.cbor);
    }
    if (gone) Apply("DELETED", std::move(*gone));
  }
  for (auto& [key, obj] : fresh) {
    auto it = old.find(key);
    if (it == old.end()) {
      Apply("ADDED", std::move(obj));
    } else if (it->second != ResourceVersionOf(obj)) {
      Apply("MODIFIED", std::move(obj));
    }
  }
  MutexLock g(mu_);
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
    Status s = client_.Watch(
        resource_, ns_, w,
        [&](const WatchEvent& ev) {
          if (ev.type == "BOOKMARK") {
            MutexLock g(mu_);
            if (const std::string rv = ResourceVersionOf(ev.object); !rv.empty()) rv_ = rv;
            return true;
          }
          Apply(ev.type, Transformed(ev.object));
          return !stop_.load();
        },
        stop_);
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

}  // namespace tfjob::kube
