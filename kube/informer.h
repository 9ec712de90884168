// A list+watch cache of one resource (optionally one namespace and a label
// selector), as client-go's informer: list (in pages of limit/continue, 500
// objects by default, as client-go's pager; an expired continue token
// restarts the list unpaginated), then watch from the list's resourceVersion; bookmarks advance the version; a 410 Gone
// or a broken watch leads to a relist (with backoff), and the relist's differences are delivered as events, so nothing
// is missed.
//
// Ownership: borrows the Client, which must outlive the informer; owns its
// thread (Start / Stop). Thread-safety: Get/List/HasSynced from any thread;
// handlers run on the informer's thread and must not block for long.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "kube/client.h"

namespace tfjob::kube {

class Informer {
 public:
  // type: ADDED, MODIFIED or DELETED; `object` the new (or last) state.
  using Handler = std::function<void(const std::string& type, const nlohmann::json& object)>;

  // Applied to every object before it is cached and handed to handlers,
  // like client-go's TransformFunc: keep only what the controller reads.
  using Transform = std::function<nlohmann::json(nlohmann::json)>;

  Informer(Client& client, Resource resource, std::string ns, std::string label_selector = "",
           Transform transform = nullptr);
  ~Informer();

  void AddHandler(Handler h);  // before Start
  // Objects per list page (0: one unpaginated list); before Start.
  void SetPageSize(int64_t n) { page_size_ = n; }
  // Indexes the cache by this label's value (before Start): List with
  // exactly that label then reads its objects only, instead of scanning
  // the whole cache (as client-go's indexers).
  void SetIndexLabel(std::string key) { index_label_ = std::move(key); }
  void Start();
  void Stop();
  bool HasSynced() const { return synced_.load(); }

  // Objects come back decoded: the cache keeps each (after the transform)
  // as CBOR, a third or less of a parsed object's memory.
  std::optional<nlohmann::json> Get(const std::string& ns, const std::string& name) const;
  // Objects whose labels include every pair in `labels` (all when empty).
  std::vector<nlohmann::json> List(const std::string& ns, const std::map<std::string, std::string>& labels = {}) const;

  int64_t relists() const { return relists_.load(); }
  size_t size() const;
  // Bytes the cached objects take encoded (what the cache holds, less the
  // map's own overhead).
  size_t encoded_bytes() const;
  std::string resource_version() const;

 private:
  void Run();
  struct Entry {
    std::string cbor;  // the transformed object
    std::string resource_version;
    std::string index_value;  // the index label's value ("" when absent)
  };
  Status Relist();
  nlohmann::json Transformed(const nlohmann::json& raw) const;
  void Apply(const std::string& type, nlohmann::json obj);  // obj transformed
  void StoreLocked(const std::string& key, const nlohmann::json& obj) TFJOB_REQUIRES(mu_);
  void EraseLocked(const std::string& key) TFJOB_REQUIRES(mu_);

  Client& client_;
  const Resource resource_;
  const std::string ns_, selector_;
  const Transform transform_;
  int64_t page_size_ = 500;
  std::vector<Handler> handlers_;
  mutable Mutex mu_;
  std::map<std::string, Entry> store_ TFJOB_GUARDED_BY(mu_);  // "ns/name"
  std::string index_label_;
  std::map<std::string, std::set<std::string>> index_ TFJOB_GUARDED_BY(mu_);  // "ns/value" -> keys
  std::string rv_ TFJOB_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false}, synced_{false};
  std::atomic<int64_t> relists_{0};
  std::thread thread_;
};

std::string ObjectKey(const nlohmann::json& obj);  // "ns/name"

}  // namespace tfjob::kube
