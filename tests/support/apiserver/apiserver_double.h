// ApiServerDouble: an in-memory kube-apiserver for end-to-end tests, served
// over real HTTP/1.1 on 127.0.0.1 so the operator binary (and kubectl) run
// against it unmodified.
//
// Serves core/v1 pods, services, events, configmaps, namespaces;
// coordination.k8s.io/v1 leases; events.k8s.io/v1 events;
// apiextensions.k8s.io/v1 customresourcedefinitions, and whatever the CRDs
// created through it define (kubeflow.org/v1 tfjobs is pre-registered by
// default, mirroring crds/kubeflow.org_tfjobs.yaml; a test checks they agree;
// the gang schedulers' PodGroups, scheduling.volcano.sh/v1beta1 and
// scheduling.x-k8s.io/v1alpha1, on request).
//
//   auto server = ApiServerDouble::Start().value();
//   server->WriteKubeconfig(dir + "/kubeconfig");       // for the operator / kubectl
//   server->InjectFault({.method = "PUT", .path_regex = ".*/tfjobs/.*/status", .code = 409});
//   EXPECT_TRUE(server->WaitFor([&] { return server->List("pods", "default")->size() == 3; }, 10s));
//
// k8s semantics modelled
//   - Paths: /api/v1/namespaces/{ns}/{plural}[/{name}[/status]], the same under
//     /apis/{group}/{version}, cluster-wide list/watch (/api/v1/pods), the
//     legacy /watch/ prefix, deletecollection. Namespaces need not exist
//     ("default" and "kube-system" do).
//   - One global resourceVersion (etcd-like), one event per write. The server
//     sets uid, creationTimestamp, resourceVersion, generation (bumped when
//     anything but metadata changes, and status too for types with a status
//     subresource). An update that changes nothing writes nothing (no new
//     version, no event), as etcd3's GuaranteedUpdate.
//   - Create: 201; 409 AlreadyExists; generateName; resourceVersion set -> 500
//     as k8s; status dropped for types with a status subresource (pods start
//     Pending, namespaces Active, CRDs Established/NamesAccepted).
//   - Update (PUT): metadata.resourceVersion, when set, must be current (409
//     Conflict), when absent the update is unconditional; uid precondition;
//     name/namespace mismatch 400; server-owned metadata kept. PUT on the main
//     resource keeps the old status; PUT/PATCH on /status changes only status.
//   - PATCH: merge (RFC 7386), JSON patch (RFC 6902, failed "test" -> 422),
//     strategic merge for built-in types treated as a merge patch minus "$"
//     directives (lists are replaced, not merged by key); strategic merge on
//     custom resources -> 415, as k8s. A resourceVersion in a patch is a
//     precondition.
//   - DELETE: 200 with the object; 404 NotFound; DeleteOptions in the body or
//     query (propagationPolicy, orphanDependents, preconditions, dryRun).
//     Garbage collection runs synchronously: dependents are found by
//     ownerReferences uid (same namespace, or any for a cluster-scoped owner);
//     Background deletes the owner then dependents, Foreground dependents
//     first, Orphan strips the reference; a dependent with another live owner
//     only loses the reference. Finalizers: deletion sets deletionTimestamp
//     and waits until an update removes the last finalizer; new finalizers
//     are refused meanwhile. Deleting a namespace deletes its objects;
//     deleting a CRD deletes its objects and unregisters the resource.
//   - LIST: {kind: <Kind>List, metadata.resourceVersion, items}; label
//     selectors in full k8s syntax; field selectors on metadata.name,
//     metadata.namespace and the fields k8s supports per type (others 400);
//     limit/continue with remainingItemCount; continue tokens expire (410)
//     once compaction passes them.
//   - WATCH (?watch=1|true): chunked newline-delimited {"type","object"}
//     events. resourceVersion ""/"0" (or sendInitialEvents=true) starts with
//     synthetic ADDED events for current objects; N replays from after N; a
//     compacted N gets an ERROR event with a 410 Expired Status and the stream
//     ends; N in the future gets an ERROR 504 (ResourceVersionTooLarge).
//     Selectors see transitions (starts matching: ADDED, stops: DELETED).
//     allowWatchBookmarks: BOOKMARK events (kind, apiVersion,
//     metadata.resourceVersion only) every Options.bookmark_interval, and the
//     "k8s.io/initial-events-end" bookmark after sendInitialEvents.
//     timeoutSeconds ends the stream cleanly; a watcher that falls behind the
//     compaction window gets ERROR 410; DropWatches() cuts connections.
//   - Discovery: /version, /api, /api/v1, /apis, /apis/{g}, /apis/{g}/{v}
//     (APIResourceList with verbs, shortNames, categories, */status), and an
//     OpenAPI v3 index and per-group-version documents that declare
//     fieldValidation, so kubectl needs no --validate=false. Tables
//     (Accept: application/json;as=Table;v=v1;g=meta.k8s.io) with Name plus
//     the CRD's additionalPrinterColumns (TFJob: State, Age), also on watches;
//     PartialObjectMetadata(List).
//   - Errors are v1 Status objects with k8s reasons and codes: 400 BadRequest
//     (malformed JSON, kind/apiVersion mismatch, bad selectors), 422 Invalid
//     with causes (missing/invalid name, labels, annotations, ownerReferences),
//     404, 405, 406, 409, 410, 415, 500, 504; 401 Unauthorized when
//     authentication is on and the request has no accepted credential.
//   - TLS (optional): https with a given certificate; client certificates
//     signed by a given CA authenticate as their CN.
//
// Simplified or absent (know these when an e2e test passes here but would
// not on a cluster)
//   - No OpenAPI schema validation, pruning, defaulting or CEL rules for custom
//     resources (fieldValidation=Strict is accepted and ignored), and no
//     defaulting of built-in types. No admission, RBAC, quotas.
//   - Authentication is a set of bearer tokens and/or a client CA (with TLS);
//     no token review, OIDC or impersonation.
//   - No kubelet, scheduler or controllers: pods stay Pending until a test
//     writes their status (Put/UpdateStatus). Pods are deleted at once
//     (gracePeriodSeconds ignored); GC and namespace deletion are synchronous.
//   - One count-bounded event log for all resources. LIST always serves the
//     latest state (resourceVersion/resourceVersionMatch ignored); continue
//     pages read live data but report the first page's version.
//   - No server-side apply (application/apply-patch+yaml -> 415), no
//     managedFields, no protobuf/YAML bodies, no HTTP/2, no aggregated
//     discovery (clients fall back to the legacy documents), no /openapi/v2,
//     no conversion between CRD versions, core/v1 and events.k8s.io/v1 events
//     are stored separately.
//
// Ownership: the caller owns the server; destroying it stops the listener
// and cuts open connections (watches see the stream break).
// Thread-safety: every method may be called from any thread, concurrently
// with HTTP traffic. Failure: Start reports bind errors; the direct accessors
// return the errors the HTTP API would, as Status codes (404 NOT_FOUND,
// 409 AlreadyExists ALREADY_EXISTS, 409 Conflict ABORTED, 400/422
// INVALID_ARGUMENT, 410 OUT_OF_RANGE, 504 DEADLINE_EXCEEDED, else INTERNAL)
// with "<code> <reason>: <message>"; no input, over HTTP or direct, crashes
// the server.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tfjob::testing {

class ApiServerDouble {
 public:
  struct Options {
    std::string bind_address = "127.0.0.1";
    int port = 0;                                       // 0: an ephemeral port
    size_t compaction_window = 10000;                   // watch events kept for replay; older versions get 410 Gone
    std::chrono::milliseconds bookmark_interval{1000};  // for watches with allowWatchBookmarks=true
    // Authentication. With a bearer token or a client CA set, every request
    // (but /version and the health paths) must carry an accepted token or a
    // client certificate the CA signed; others get 401. SetBearerTokens()
    // changes the accepted tokens while the server runs (token rotation).
    std::string bearer_token;  // non-empty: "Authorization: Bearer <token>" accepted
    // TLS: serve https with this PEM certificate (chain) and key; the CA
    // that signed it goes into Kubeconfig() as certificate-authority-data.
    std::string tls_cert_pem, tls_key_pem, tls_ca_pem;
    std::string client_ca_pem;       // client certificates it signed authenticate as their CN
    bool register_tfjob_crd = true;  // create the TFJob CRD at start-up
    // Create Volcano's and scheduler-plugins' PodGroup CRDs at start-up.
    bool register_podgroup_crds = false;
    std::string server_version = "v1.30.0";  // /version's gitVersion
    // Clock for creationTimestamp/deletionTimestamp and Table ages.
    std::function<std::chrono::system_clock::time_point()> clock;
    size_t request_log_limit = 10000;  // most recent requests kept for Requests()
  };

  // Makes the next `count` requests that match fail with `code` (or just wait
  // `delay` when code is 0).
  struct Fault {
    std::string method{};           // "GET", "PUT", ...; "WATCH" = GET with watch; "" = any. "GET" includes watches.
    std::string path_regex = ".*";  // ECMAScript; must match the whole URL path (no query string)
    int code = 500;                 // HTTP code of the injected Status; 0 = no error, only the delay
    int count = 1;                  // matching requests affected; -1 = until ClearFaults()
    std::string reason{};           // StatusReason; default from the code (409 -> Conflict, 500 -> InternalError)
    std::string message{};          // default "injected fault"
    std::chrono::milliseconds delay{0};  // applied before answering
  };

  struct RequestRecord {
    std::string method;
    std::string path;
    std::string query;  // raw, undecoded
    int code = 0;       // 200 for a watch that started streaming
    bool watch = false;
    std::string bearer_token;  // from the Authorization header; "" when none
    std::string client_cn;     // CN of the verified client certificate; "" when none
  };

  static StatusOr<std::unique_ptr<ApiServerDouble>> Start(Options options);
  static StatusOr<std::unique_ptr<ApiServerDouble>> Start() { return Start(Options()); }
  ~ApiServerDouble();
  ApiServerDouble(const ApiServerDouble&) = delete;
  ApiServerDouble& operator=(const ApiServerDouble&) = delete;

  int port() const;
  std::string url() const;  // "http://127.0.0.1:<port>" ("https://" with TLS)
  // A kubeconfig (YAML) whose current context points here, with `ns` as the
  // default namespace and the bearer token when one is set.
  std::string Kubeconfig(const std::string& ns = "default") const;
  Status WriteKubeconfig(const std::string& path, const std::string& ns = "default") const;

  // ---- Direct access, bypassing HTTP ------------------------------------
  // Same semantics and watch events as the HTTP API. `resource` is a plural,
  // singular or short name ("tfjobs", "po") or plural.group
  // ("events.events.k8s.io"); the core group wins ties. `ns` is ignored for
  // cluster-scoped resources; List with ns "" lists all namespaces.
  StatusOr<nlohmann::json> Get(const std::string& resource, const std::string& ns, const std::string& name) const;
  StatusOr<std::vector<nlohmann::json>> List(const std::string& resource, const std::string& ns,
                                             const std::string& label_selector = "") const;
  StatusOr<nlohmann::json> Create(const std::string& resource, const std::string& ns, nlohmann::json object);
  // PUT: metadata.resourceVersion, when set, must be current (else ABORTED).
  StatusOr<nlohmann::json> Update(const std::string& resource, const std::string& ns, nlohmann::json object);
  StatusOr<nlohmann::json> UpdateStatus(const std::string& resource, const std::string& ns, nlohmann::json object);
  // Create-or-replace, unconditionally, status included (two writes when the
  // resource has a status subresource). For tests playing kubelet.
  StatusOr<nlohmann::json> Put(const std::string& resource, const std::string& ns, nlohmann::json object);
  StatusOr<nlohmann::json> MergePatch(const std::string& resource, const std::string& ns, const std::string& name,
                                      const nlohmann::json& patch, bool status = false);
  // propagation: Background (default), Foreground or Orphan.
  StatusOr<nlohmann::json> Delete(const std::string& resource, const std::string& ns, const std::string& name,
                                  const std::string& propagation = "");

  // ---- Versions, watches, faults ---------------------------------------
  uint64_t ResourceVersion() const;
  // Forgets every watch event so far: a watch from any older version gets 410.
  void CompactNow();
  // Ends every open watch by closing its connection (no terminating chunk).
  void DropWatches();
  // Open watch streams, for one resource ("pods", "tfjobs") or all ("").
  int ActiveWatches(const std::string& resource = "") const;

  // Replaces the accepted bearer tokens (empty, with no client CA: no
  // authentication at all).
  void SetBearerTokens(std::vector<std::string> tokens);

  Status InjectFault(const Fault& fault);  // INVALID_ARGUMENT for a bad regex
  void ClearFaults();

  std::vector<RequestRecord> Requests() const;
  void ClearRequests();

  // Re-evaluates `pred` after every write until it holds or `timeout`
  // passes. `pred` may call this object's accessors.
  bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) const;

 private:
  class Impl;
  explicit ApiServerDouble(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfjob::testing
