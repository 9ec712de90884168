// FaultProxy: a fault-injecting HTTP proxy in front of a real kube-apiserver
// (the envtest control plane, tests/support/envtest.h), for the faults a real
// server cannot produce on cue: 409 storms, 500s, 403s, a 410 Gone on a
// watch or on a continue token, slow answers, dropped watch connections, and
// bearer tokens that change while a client runs. Everything else (storage,
// selectors, resourceVersions, paging, watches, admission, status
// subresources, garbage collection) is the real server's.
//
//   auto cp = ControlPlane::Shared(&why);
//   auto proxy = FaultProxy::Start(*cp).value();
//   client.server = proxy->url();                         // plain http on 127.0.0.1
//   proxy->InjectFault({.method = "PUT", .path_regex = ".*/tfjobs/.*/status", .code = 409, .count = 3});
//   proxy->InjectFault({.method = "WATCH", .path_regex = ".*/pods", .code = 410});
//   proxy->DropWatches();
//
// Forwarding: every request that no fault answers goes to the upstream
// (https, verified against the control plane's CA, authenticated with its
// admin client certificate, O=system:masters) on a connection of its own;
// the client's Authorization header is not passed on. Responses are relayed
// with their code, content type and headers; a watch's chunks are passed on
// as each arrives, and a watch the upstream ends cleanly ends cleanly here.
//
// Faults: the first fault whose method and path match answers the next
// `count` matching requests with a k8s v1 Status of `code` instead of forwarding them, after `delay`; code 0
// only delays, then forwards. On a watch (GET with watch=1|true or a
// /watch/ path) a code of 410 answers as the real server does when the
// version is too old: HTTP 200, one {"type":"ERROR","object":<Status 410
// Expired>} event, and the end of the stream.
//
// Ownership: the caller owns the proxy; destroying it cuts every open
// connection (watches see the stream break) and joins its threads. The
// upstream address is read once, at Start (ControlPlane::Restart keeps it).
// Thread-safety: every method may be called from any thread, concurrently
// with traffic. Failure: Start reports unreadable PKI files, bad PEM and
// bind errors; an upstream that cannot be reached or answers garbage gets
// the client a 502 Status (recorded with code 502); a watch whose upstream
// connection breaks is cut here too (no terminating chunk), so clients see
// what they would have seen without the proxy. No input aborts the proxy.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace tfjob::testing {

class ControlPlane;

class FaultProxy {
 public:
  struct Options {
    std::string upstream;  // "https://127.0.0.1:PORT" (http:// also works, without TLS)
    // PEM: the CA that signed the upstream's serving certificate, and the
    // client certificate and key the proxy authenticates with.
    std::string upstream_ca_pem, client_cert_pem, client_key_pem;
    // Authentication at the proxy: with tokens (or a client CA) set, every
    // request but /version and the health paths must carry
    // "Authorization: Bearer T" with T among them (or a client certificate
    // the CA signed), else the proxy answers 401 itself.
    std::vector<std::string> bearer_tokens;
    // Serve https with this certificate (chain) and key; the CA that signed
    // it goes into Kubeconfig(). Empty: plain http.
    std::string tls_cert_pem, tls_key_pem, tls_ca_pem;
    std::string client_ca_pem;         // with TLS: client certificates it signed authenticate as their CN
    size_t request_log_limit = 10000;  // most recent requests kept for Requests()
  };

  struct Fault {
    std::string method{};           // "GET", "PUT", ...; "WATCH" = GET with watch; "" = any. "GET" includes watches.
    std::string path_regex = ".*";  // ECMAScript; must match the whole URL path (no query string)
    int code = 500;                 // HTTP code of the injected Status; 0 = no error, only the delay
    int count = 1;                  // matching requests affected; -1 = until ClearFaults()
    std::string reason{};           // StatusReason; default from the code (409 -> Conflict, 500 -> InternalError)
    std::string message{};          // default "injected fault"
    std::chrono::milliseconds delay{0};  // applied before answering or forwarding
  };

  struct RequestRecord {
    std::string method;
    std::string path;
    std::string query;  // raw, undecoded
    int code = 0;       // 200 for a watch that started streaming
    bool watch = false;
    std::string bearer_token;  // from the client's Authorization header; "" when none
    std::string client_cn;     // CN of the client's verified certificate; "" when none
  };

  static StatusOr<std::unique_ptr<FaultProxy>> Start(Options options);
  // In front of `cp`, with its admin credentials (cp.dir()/pki).
  static StatusOr<std::unique_ptr<FaultProxy>> Start(const ControlPlane& cp, Options options);
  static StatusOr<std::unique_ptr<FaultProxy>> Start(const ControlPlane& cp) { return Start(cp, Options()); }
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  int port() const;
  std::string url() const;  // "http://127.0.0.1:<port>" ("https://" with TLS)
  // A kubeconfig (YAML) whose current context points at the proxy, with
  // `ns` as the default namespace and the first bearer token when one is set.
  std::string Kubeconfig(const std::string& ns = "default") const;
  Status WriteKubeconfig(const std::string& path, const std::string& ns = "default") const;

  Status InjectFault(const Fault& fault);  // INVALID_ARGUMENT for a bad regex
  void ClearFaults();

  // Cuts every open watch, here and upstream, without the terminating chunk.
  void DropWatches();
  // Open watch streams, for one resource ("pods", "tfjobs") or all ("").
  int ActiveWatches(const std::string& resource = "") const;

  // Replaces the accepted bearer tokens (empty, with no client CA: no
  // authentication here).
  void SetBearerTokens(std::vector<std::string> tokens);

  std::vector<RequestRecord> Requests() const;
  void ClearRequests();

 private:
  class Impl;
  explicit FaultProxy(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfjob::testing
