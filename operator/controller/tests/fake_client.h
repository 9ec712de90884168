// An in-memory kube::Client for the controller's unit tests: objects by
// resource, namespace and name, one resourceVersion counter, optimistic
// concurrency on updates, equality label selectors, and watches fed from
// an event log. Tests read what was written and count requests by verb and
// resource, and can run a hook before any request (to change the world
// behind the controller's caches). Test-only; safe for concurrent use.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kube/client.h"

namespace tfjob::op::controller::testing {

class FakeClient final : public kube::Client {
 public:
  // Runs (outside the client's lock) before each request: verb is GET,
  // LIST, POST, PUT, PUT status, PATCH or DELETE.
  using Hook = std::function<void(const std::string& verb, const kube::Resource& r, const std::string& name)>;
  void SetHook(Hook h) {
    std::lock_guard g(mu_);
    hook_ = std::move(h);
  }

  // Adds or removes an object directly, as another client would; `silent`
  // leaves no watch event (a cache that has not heard yet).
  nlohmann::json Put(const kube::Resource& r, nlohmann::json obj) {
    std::lock_guard g(mu_);
    return StoreLocked(r, std::move(obj), "ADDED");
  }
  void Remove(const kube::Resource& r, const std::string& ns, const std::string& name, bool silent) {
    std::lock_guard g(mu_);
    auto it = objects_.find(Key(r, ns, name));
    if (it == objects_.end()) return;
    nlohmann::json gone = it->second;
    objects_.erase(it);
    if (!silent) LogLocked(r, "DELETED", gone);
  }

  std::vector<nlohmann::json> Objects(const kube::Resource& r, const std::string& ns) const {
    std::lock_guard g(mu_);
    std::vector<nlohmann::json> out;
    const std::string prefix = r.plural + "/" + ns + "/";
    for (const auto& [k, v] : objects_) {
      if (k.rfind(prefix, 0) == 0) out.push_back(v);
    }
    return out;
  }
  // Requests made, by "VERB plural" ("POST pods", "PUT status tfjobs").
  int Count(const std::string& verb_and_plural) const {
    std::lock_guard g(mu_);
    auto it = counts_.find(verb_and_plural);
    return it == counts_.end() ? 0 : it->second;
  }

  StatusOr<nlohmann::json> Get(const kube::Resource& r, const std::string& ns, const std::string& name) override {
    Before("GET", r, name);
    std::lock_guard g(mu_);
    auto it = objects_.find(Key(r, ns, name));
    if (it == objects_.end()) return NotFound(r.plural + " " + ns + "/" + name + " not found");
    return it->second;
  }

  StatusOr<nlohmann::json> List(const kube::Resource& r, const std::string& ns, const kube::ListOptions& o) override {
    Before("LIST", r, "");
    std::lock_guard g(mu_);
    nlohmann::json items = nlohmann::json::array();
    for (const auto& [k, v] : objects_) {
      if (k.rfind(r.plural + "/", 0) != 0) continue;
      if (!ns.empty() && v["metadata"].value("namespace", "") != ns) continue;
      if (Matches(v, o.label_selector)) items.push_back(v);
    }
    return nlohmann::json{{"items", items}, {"metadata", {{"resourceVersion", std::to_string(rv_)}}}};
  }

  StatusOr<nlohmann::json> Create(const kube::Resource& r, const std::string& ns, const nlohmann::json& obj) override {
    Before("POST", r, obj["metadata"].value("name", ""));
    std::lock_guard g(mu_);
    nlohmann::json o = obj;
    o["metadata"]["namespace"] = ns;
    if (objects_.count(Key(r, ns, o["metadata"].value("name", "")))) {
      return AlreadyExists(r.plural + " " + ns + "/" + o["metadata"].value("name", "") + " already exists");
    }
    o["metadata"]["uid"] = "uid-" + std::to_string(++uids_);
    return StoreLocked(r, std::move(o), "ADDED");
  }

  StatusOr<nlohmann::json> Update(const kube::Resource& r, const std::string& ns, const nlohmann::json& obj) override {
    return Replace("PUT", r, ns, obj, false);
  }
  StatusOr<nlohmann::json> UpdateStatus(const kube::Resource& r, const std::string& ns,
                                        const nlohmann::json& obj) override {
    return Replace("PUT status", r, ns, obj, true);
  }

  StatusOr<nlohmann::json> MergePatch(const kube::Resource& r, const std::string& ns, const std::string& name,
                                      const nlohmann::json& patch, bool status) override {
    Before(status ? "PATCH status" : "PATCH", r, name);
    std::lock_guard g(mu_);
    auto it = objects_.find(Key(r, ns, name));
    if (it == objects_.end()) return NotFound(r.plural + " " + ns + "/" + name + " not found");
    nlohmann::json o = it->second;
    o.merge_patch(status ? nlohmann::json{{"status", patch.value("status", nlohmann::json::object())}} : patch);
    return StoreLocked(r, std::move(o), "MODIFIED");
  }

  Status Delete(const kube::Resource& r, const std::string& ns, const std::string& name, const std::string&,
                int64_t grace_period_seconds) override {
    Before("DELETE", r, name);
    std::lock_guard g(mu_);
    if (grace_period_seconds == 0) ++counts_["FORCE-DELETE " + r.plural];
    auto it = objects_.find(Key(r, ns, name));
    if (it == objects_.end()) return NotFound(r.plural + " " + ns + "/" + name + " not found");
    nlohmann::json gone = it->second;
    objects_.erase(it);
    LogLocked(r, "DELETED", gone);
    return Status::Ok();
  }

  Status Watch(const kube::Resource& r, const std::string& ns, const kube::WatchOptions& o,
               const std::function<bool(const kube::WatchEvent&)>& on_event, const std::atomic<bool>& stop) override {
    Before("WATCH", r, "");
    int64_t from = o.resource_version.empty() ? 0 : std::stoll(o.resource_version);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(o.timeout_seconds);
    std::unique_lock l(mu_);
    const int id = next_watch_++;
    watches_[id] = {r.plural, from};
    struct Unregister {
      FakeClient* c;
      int id;
      ~Unregister() {
        std::lock_guard g(c->mu_);
        c->watches_.erase(id);
      }
    };
    while (!stop && std::chrono::steady_clock::now() < until) {
      std::vector<kube::WatchEvent> due;
      for (const auto& e : log_) {
        if (e.rv <= from || e.plural != r.plural) continue;
        from = e.rv;
        if (!ns.empty() && e.object["metadata"].value("namespace", "") != ns) continue;
        if (Matches(e.object, o.label_selector)) due.push_back({e.type, e.object});
      }
      if (!due.empty()) {
        l.unlock();
        {
          Unregister done{this, id};
          for (const auto& ev : due) {
            if (!on_event(ev)) return Status::Ok();
          }
          done.id = -1;  // still watching
        }
        l.lock();
      }
      watches_[id].second = from;  // every event so far has been handed over
      if (!due.empty()) continue;
      changed_.wait_for(l, std::chrono::milliseconds(20));
    }
    watches_.erase(id);
    return Status::Ok();
  }

  // Every open watch has handed its handler every event logged so far.
  bool AllDelivered() const {
    std::lock_guard g(mu_);
    for (const auto& [id, w] : watches_) {
      for (const auto& e : log_) {
        if (e.plural == w.first && e.rv > w.second) return false;
      }
    }
    return true;
  }

 private:
  struct Logged {
    int64_t rv;
    std::string plural, type;
    nlohmann::json object;
  };

  static std::string Key(const kube::Resource& r, const std::string& ns, const std::string& name) {
    return r.plural + "/" + ns + "/" + name;
  }

  // "a=b,c=d" (equality only, as the controller's informers use).
  static bool Matches(const nlohmann::json& obj, const std::string& selector) {
    if (selector.empty()) return true;
    const nlohmann::json labels = obj["metadata"].value("labels", nlohmann::json::object());
    size_t start = 0;
    while (start <= selector.size()) {
      const size_t comma = std::min(selector.find(',', start), selector.size());
      const std::string term = selector.substr(start, comma - start);
      const size_t eq = term.find('=');
      if (eq == std::string::npos) {
        if (!labels.contains(term)) return false;
      } else if (labels.value(term.substr(0, eq), std::string("\x01")) != term.substr(eq + 1)) {
        return false;
      }
      start = comma + 1;
    }
    return true;
  }

  void Before(const std::string& verb, const kube::Resource& r, const std::string& name) {
    Hook hook;
    {
      std::lock_guard g(mu_);
      ++counts_[verb + " " + r.plural];
      hook = hook_;
    }
    if (hook) hook(verb, r, name);
  }

  StatusOr<nlohmann::json> Replace(const std::string& verb, const kube::Resource& r, const std::string& ns,
                                   const nlohmann::json& obj, bool status) {
    const std::string name = obj["metadata"].value("name", "");
    Before(verb, r, name);
    std::lock_guard g(mu_);
    auto it = objects_.find(Key(r, ns, name));
    if (it == objects_.end()) return NotFound(r.plural + " " + ns + "/" + name + " not found");
    if (obj["metadata"].value("resourceVersion", "") != it->second["metadata"].value("resourceVersion", "")) {
      return Aborted("the object has been modified; please apply your changes to the latest version");
    }
    nlohmann::json o = it->second;
    if (status) {
      o["status"] = obj.value("status", nlohmann::json::object());
    } else {
      nlohmann::json keep_status = o.value("status", nlohmann::json());
      o = obj;
      if (!keep_status.is_null()) o["status"] = keep_status;
    }
    return StoreLocked(r, std::move(o), "MODIFIED");
  }

  nlohmann::json StoreLocked(const kube::Resource& r, nlohmann::json obj, const std::string& type) {
    obj["metadata"]["resourceVersion"] = std::to_string(++rv_);
    objects_[Key(r, obj["metadata"].value("namespace", ""), obj["metadata"].value("name", ""))] = obj;
    LogLocked(r, type, obj, false);
    return obj;
  }
  void LogLocked(const kube::Resource& r, const std::string& type, const nlohmann::json& obj, bool bump = true) {
    log_.push_back({bump ? ++rv_ : rv_, r.plural, type, obj});
    changed_.notify_all();
  }

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, nlohmann::json> objects_;
  std::vector<Logged> log_;
  std::map<std::string, int> counts_;
  int64_t rv_ = 0, uids_ = 0;
  Hook hook_;
  int next_watch_ = 0;
  std::map<int, std::pair<std::string, int64_t>> watches_;  // id -> (plural, last rv handed over)
};

}  // namespace tfjob::op::controller::testing
