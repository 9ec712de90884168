// How the operator reaches the API server: from a kubeconfig file
// (--kubeconfig or $KUBECONFIG: server, CA, client certificate and key from
// files or inline data, bearer token or token file, an exec credential
// plugin, insecure-skip-tls-verify, the current or a named context and its
// namespace) or from inside a pod (service-account token file and CA,
// KUBERNETES_SERVICE_HOST / _PORT).
// Pure parsing plus explicit file reads; errors name the file and field.
// Credentials that change while the operator runs (token files, exec
// plugins) are kept as their source here and refreshed by credentials.h.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tfjob::kube {

// A kubeconfig user's exec credential plugin, as client-go runs it: the
// command prints an ExecCredential (client.authentication.k8s.io/v1, or
// v1beta1) with a token or a client certificate, and an optional
// expirationTimestamp after which it is run again.
struct ExecConfig {
  std::string api_version;
  // Absolute, relative to the kubeconfig's directory (when it contains a
  // '/'), or looked up on PATH.
  std::string command;
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;  // added to the operator's environment
  std::string install_hint;                              // shown when the command cannot be run
  bool provide_cluster_info = false;                     // KUBERNETES_EXEC_INFO carries spec.cluster
  std::string where;                                     // "<kubeconfig>: users[NAME].user.exec", for error messages
};

struct ClusterConfig {
  std::string server;  // "https://10.0.0.1:443" or "http://127.0.0.1:8080"
  std::string ca_pem;  // PEM of the CA bundle; empty: system roots
  std::string client_cert_pem;
  std::string client_key_pem;
  std::string token;  // bearer token (for token_file: its contents when loaded)
  bool insecure_skip_tls_verify = false;
  std::string default_namespace = "default";
  // Where each PEM came from, for TLS errors: the file's path, or
  // "<kubeconfig>: clusters[NAME].cluster.certificate-authority-data".
  std::string ca_origin, client_cert_origin, client_key_origin;
  // A token file that is re-read when it changes and at least every minute
  // (kubelet rotates projected service-account tokens): kubeconfig
  // tokenFile, or the in-cluster token. Empty: `token` is fixed.
  std::string token_file;
  std::optional<ExecConfig> exec;
};

StatusOr<ClusterConfig> LoadKubeconfig(const std::string& path, const std::string& context = "");

using Env = std::function<std::optional<std::string>(const std::string&)>;
// The service account's files live under `sa_dir`
// (/var/run/secrets/kubernetes.io/serviceaccount in a pod).
StatusOr<ClusterConfig> InClusterConfig(const Env& env,
                                        const std::string& sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// "" for input that is not base64.
std::string Base64Decode(const std::string& in);
std::string Base64Encode(const std::string& in);

}  // namespace tfjob::kube
