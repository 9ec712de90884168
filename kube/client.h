// The operator's view of the Kubernetes API: a thin interface (read, write,
// status, watch) so the reconciler can be tested over any implementation and
// faults can be injected by wrapping it. RestClient is the real one.
//
// Status codes, one meaning each: NOT_FOUND (404), ALREADY_EXISTS (409 on
// create), ABORTED (409 Conflict: stale resourceVersion, requeue),
// FAILED_PRECONDITION (410 Gone: relist), INVALID_ARGUMENT (400, 422),
// PERMISSION_DENIED (403), UNAUTHENTICATED (401), RESOURCE_EXHAUSTED (429),
// UNAVAILABLE (5xx, connection errors: retry).
// Thread-safety: implementations are safe for concurrent use.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tfjob::kube {

struct Resource {
  std::string group;    // "" for core
  std::string version;  // "v1"
  std::string plural;   // "pods"

  // "/api/v1/namespaces/ns/pods[/name][/sub]" (all namespaces when ns is empty).
  std::string Path(const std::string& ns, const std::string& name = "", const std::string& sub = "") const;
};

inline const Resource kPods{"", "v1", "pods"};
inline const Resource kServices{"", "v1", "services"};
inline const Resource kEvents{"", "v1", "events"};
inline const Resource kTFJobs{"kubeflow.org", "v1", "tfjobs"};
inline const Resource kLeases{"coordination.k8s.io", "v1", "leases"};
inline const Resource kSecrets{"", "v1", "secrets"};
inline const Resource kNetworkPolicies{"networking.k8s.io", "v1", "networkpolicies"};
inline const Resource kNodes{"", "v1", "nodes"};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;
  // Pagination (the API's limit/continue): at most `limit` items (0: all);
  // the list's metadata.continue, when set, asks for the next page.
  int64_t limit = 0;
  std::string continue_token;
};

struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
  nlohmann::json object;
};

struct WatchOptions {
  std::string label_selector;
  std::string resource_version;
  bool allow_bookmarks = true;
  int timeout_seconds = 300;
};

class Client {
 public:
  virtual ~Client() = default;
  virtual StatusOr<nlohmann::json> Get(const Resource& r, const std::string& ns, const std::string& name) = 0;
  virtual StatusOr<nlohmann::json> List(const Resource& r, const std::string& ns, const ListOptions& o) = 0;
  virtual StatusOr<nlohmann::json> Create(const Resource& r, const std::string& ns, const nlohmann::json& obj) = 0;
  // PUT; `obj` carries metadata.resourceVersion for optimistic concurrency.
  virtual StatusOr<nlohmann::json> Update(const Resource& r, const std::string& ns, const nlohmann::json& obj) = 0;
  virtual StatusOr<nlohmann::json> UpdateStatus(const Resource& r, const std::string& ns,
                                                const nlohmann::json& obj) = 0;
  // RFC 7386 merge patch, of the object or (status=true) its status subresource.
  virtual StatusOr<nlohmann::json> MergePatch(const Resource& r, const std::string& ns, const std::string& name,
                                              const nlohmann::json& patch, bool status = false) = 0;
  // propagation: "Background" (default), "Foreground" or "Orphan".
  // grace_period_seconds: DeleteOptions.gracePeriodSeconds when >= 0 (0:
  // at once, as `kubectl delete --force --grace-period=0`: a pod bound to a
  // node whose kubelet is gone is removed without it); < 0: the object's own.
  virtual Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                        const std::string& propagation = "Background", int64_t grace_period_seconds = -1) = 0;
  // Streams events to `on_event` until the server ends the watch, `on_event`
  // returns false, or `stop` becomes true. A 410 Gone (in the HTTP status or
  // as an ERROR event) returns FAILED_PRECONDITION: the caller relists.
  virtual Status Watch(const Resource& r, const std::string& ns, const WatchOptions& o,
                       const std::function<bool(const WatchEvent&)>& on_event, const std::atomic<bool>& stop) = 0;
};

// HTTP status (and the API server's Status body) to a Status.
Status FromHttp(int http_status, const std::string& body, const std::string& what);

}  // namespace tfjob::kube
