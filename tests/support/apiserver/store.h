// The API server double's state and semantics, without HTTP: typed objects
// keyed by resource/namespace/name, one global resourceVersion counter, an
// event log bounded by a compaction window, watch cursors over that log, and
// the rules of create/update/patch/delete (optimistic concurrency, status
// subresource isolation, generation, finalizers, ownerReference cascades).
//
// Errors are k8s Status values (ApiError) so the HTTP layer can send them as
// they are; the direct C++ API converts them to tfjob::Status.
//
// Thread-safety: every public method is safe to call concurrently; one mutex
// guards all state, and every write wakes waiting watchers. Failure: never
// throws; malformed input yields an ApiError.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/apiserver/resources.h"
#include "tests/support/apiserver/selectors.h"

namespace tfjob::testing::apiserver {

// A failed request as k8s reports it: HTTP code, StatusReason, message.
struct ApiError {
  int code = 500;
  std::string reason;  // NotFound, AlreadyExists, Conflict, Invalid, BadRequest, Expired, ...
  std::string message;
  nlohmann::json details;  // null, or {name, group, kind, causes}

  // A v1 Status object ("kind":"Status","status":"Failure",...).
  nlohmann::json ToJson() const;
};

ApiError MakeError(int code, std::string reason, std::string message, nlohmann::json details = nullptr);
// The StatusReason k8s uses for an HTTP code (500 -> InternalError, ...).
std::string DefaultReason(int code);

template <typename T>
class ApiResult {
 public:
  ApiResult(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  ApiResult(ApiError error) : v_(std::move(error)) {}  // NOLINT
  bool ok() const { return v_.index() == 1; }
  const ApiError& error() const { return std::get<0>(v_); }
  T& value() { return std::get<1>(v_); }
  const T& value() const { return std::get<1>(v_); }

 private:
  std::variant<ApiError, T> v_;
};

enum class PatchType { kMerge, kStrategicMerge, kJsonPatch };

struct ListOptions {
  LabelSelector labels;
  FieldSelector fields;
  int64_t limit = 0;  // 0: no limit
  std::string continue_token;
};

struct DeleteOptions {
  std::string propagation;  // "", Background, Foreground, Orphan
  std::string precondition_uid;
  std::string precondition_resource_version;
  bool dry_run = false;
};

struct ListResult {
  std::vector<nlohmann::json> items;
  std::string resource_version;
  std::string continue_token;
  int64_t remaining = -1;  // remainingItemCount when paginated
};

struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED
  nlohmann::json object;
};

// One watch's position in the event log. Owned by the watching thread.
struct WatchCursor {
  std::string resource_id;
  std::string ns;  // "" = all namespaces
  LabelSelector labels;
  FieldSelector fields;
  uint64_t position = 0;  // events with resourceVersion > position are pending
  uint64_t epoch = 0;     // DropWatches() generation at start
  bool active = false;
};

class Store {
 public:
  struct Options {
    size_t compaction_window = 10000;                              // events kept for watch replay (min 1)
    std::function<std::chrono::system_clock::time_point()> clock;  // default: system_clock::now
  };

  explicit Store(Options options);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // ---- Registry --------------------------------------------------------
  std::vector<ResourceInfo> Resources() const;
  std::optional<ResourceInfo> Find(const std::string& group, const std::string& version,
                                   const std::string& plural) const;
  // "pods", "tfjobs", "tfjob", "po", "tfjobs.kubeflow.org", "events.events.k8s.io"; core wins ties.
  std::optional<ResourceInfo> Resolve(const std::string& name) const;

  // ---- Objects ---------------------------------------------------------
  // `ns` is ignored for cluster-scoped resources. Results are copies.
  ApiResult<nlohmann::json> Create(const ResourceInfo& r, const std::string& ns, nlohmann::json body, bool dry_run);
  // status=true: the status subresource (only .status changes).
  ApiResult<nlohmann::json> Update(const ResourceInfo& r, const std::string& ns, const std::string& name,
                                   nlohmann::json body, bool status, bool dry_run);
  ApiResult<nlohmann::json> Patch(const ResourceInfo& r, const std::string& ns, const std::string& name, PatchType type,
                                  const nlohmann::json& patch, bool status, bool dry_run);
  ApiResult<nlohmann::json> Delete(const ResourceInfo& r, const std::string& ns, const std::string& name,
                                   const DeleteOptions& options);
  ApiResult<ListResult> DeleteCollection(const ResourceInfo& r, const std::string& ns, const ListOptions& list,
                                         const DeleteOptions& options);
  ApiResult<nlohmann::json> Get(const ResourceInfo& r, const std::string& ns, const std::string& name) const;
  ApiResult<ListResult> List(const ResourceInfo& r, const std::string& ns, const ListOptions& options) const;

  // ---- Watch -----------------------------------------------------------
  // Positions `cursor` (its filter fields set by the caller). With an empty
  // or "0" resource_version (or send_initial_events) the current matching
  // objects come back as synthetic ADDED events; otherwise replay starts
  // after that version. Errors: 410 Expired (compacted), 504 too large, 400.
  ApiResult<std::vector<WatchEvent>> StartWatch(WatchCursor* cursor, const std::string& resource_version,
                                                bool send_initial_events);
  void EndWatch(WatchCursor* cursor);

  enum class WaitOutcome { kEvents, kTimeout, kDropped, kExpired, kShutdown };
  // Blocks until events for `cursor` exist, the deadline passes, watches are
  // dropped, the cursor falls behind compaction, or Shutdown().
  WaitOutcome Wait(WatchCursor* cursor, std::chrono::steady_clock::time_point deadline,
                   std::vector<WatchEvent>* events);

  void DropWatches();                                       // every open watch ends with kDropped
  void Shutdown();                                          // every open and future Wait returns kShutdown
  int ActiveWatches(const std::string& resource_id) const;  // "" = all

  // ---- Versions --------------------------------------------------------
  uint64_t resource_version() const;
  uint64_t compacted_version() const;  // watches from below this get 410
  void CompactNow();                   // forget every event so far
  // Blocks until resource_version() > since or the deadline; true if it moved.
  bool WaitForWrite(uint64_t since, std::chrono::steady_clock::time_point deadline) const;

 private:
  struct Event {
    uint64_t rv;
    std::string type;
    std::string resource_id;
    std::string ns;
    nlohmann::json object;
    nlohmann::json prev;  // MODIFIED: the object before the write
  };
  using Key = std::pair<std::string, std::string>;  // namespace, name
  using Objects = std::map<Key, nlohmann::json>;

  bool RegisteredLocked(const ResourceInfo& r) const;
  const ResourceInfo* FindByIdLocked(const std::string& id) const;
  std::optional<ApiError> CheckShapeLocked(const ResourceInfo& r, nlohmann::json& obj) const;
  std::optional<ApiError> ValidateMetaLocked(const ResourceInfo& r, const nlohmann::json& obj) const;
  ApiResult<nlohmann::json> UpdateLocked(const ResourceInfo& r, const nlohmann::json& old, nlohmann::json next,
                                         bool status, bool dry_run);
  // Writes: bump the version, store, log, wake watchers.
  nlohmann::json CommitLocked(const ResourceInfo& r, nlohmann::json obj, const char* type, const nlohmann::json* prev);
  nlohmann::json RemoveLocked(const std::string& resource_id, const Key& key);
  // Deletes (or marks for deletion, with finalizers) and applies the policy.
  nlohmann::json DeleteLocked(const ResourceInfo& r, const Key& key, const std::string& policy,
                              std::set<std::string>* visited);
  void FinishDeletionLocked(const ResourceInfo& r, const Key& key, const std::string& policy,
                            std::set<std::string>* visited, nlohmann::json* removed);
  void CascadeLocked(const nlohmann::json& owner, bool owner_namespaced, const std::string& policy,
                     std::set<std::string>* visited);
  void RegisterCrdLocked(const nlohmann::json& crd);
  void UnregisterCrdLocked(const std::string& crd_name);
  nlohmann::json CrdStatus(const nlohmann::json& crd, const nlohmann::json& old_status) const;
  std::string NewUidLocked();
  std::string Now() const;

  Options options_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<ResourceInfo> registry_;
  std::map<std::string, Objects> objects_;  // by ResourceInfo::id()
  std::deque<Event> log_;                   // rv strictly increasing by 1
  uint64_t rv_ = 0;
  uint64_t compacted_rv_ = 0;
  uint64_t drop_epoch_ = 0;
  bool shutdown_ = false;
  std::map<std::string, int> watch_counts_;
  std::map<std::string, std::string> pending_policy_;  // uid -> propagation, for finalizer-blocked deletes
  std::mt19937_64 rng_;
};

}  // namespace tfjob::testing::apiserver
