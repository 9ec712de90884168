#include "kube/config.h"

#include <filesystem>

#include <openssl/evp.h>
#include <yaml-cpp/yaml.h>

#include "common/files.h"

namespace tfjob::kube {

std::string Base64Decode(const std::string& in) {
  static const std::string chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int val = 0, bits = -8;
  for (unsigned char c : in) {
    if (c == '=' || std::isspace(c)) continue;
    const auto pos = chars.find(static_cast<char>(c));
    if (pos == std::string::npos) return "";
    val = (val << 6) + static_cast<int>(pos);
    bits += 6;
    if (bits >= 0) {
      out.push_back(static_cast<char>((val >> bits) & 0xff));
      bits -= 8;
    }
  }
  return out;
}

std::string Base64Encode(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

namespace {

// A file path in a kubeconfig is relative to the kubeconfig's directory.
std::string Resolve(const std::string& kubeconfig, const std::string& p) {
  if (p.empty() || std::filesystem::path(p).is_absolute()) return p;
  return (std::filesystem::path(kubeconfig).parent_path() / p).lexically_normal().string();
}

YAML::Node Named(const YAML::Node& list, const std::string& name) {
  if (!list || !list.IsSequence()) return YAML::Node();
  for (const auto& item : list) {
    if (item["name"] && item["name"].as<std::string>("") == name) return item;
  }
  return YAML::Node();
}

// Either the inline base64 data or the file the key names (inline data wins,
// as in client-go); `origin` says which, for later TLS errors.
StatusOr<std::string> DataOrFile(const YAML::Node& n, const std::string& data_key, const std::string& file_key,
                                 const std::string& kubeconfig, const std::string& field, std::string* origin) {
  if (n[data_key]) {
    std::string d = Base64Decode(n[data_key].as<std::string>(""));
    if (d.empty()) return InvalidArgument(kubeconfig + ": " + field + "." + data_key + ": not base64");
    *origin = kubeconfig + ": " + field + "." + data_key;
    return d;
  }
  if (n[file_key]) {
    const std::string path = Resolve(kubeconfig, n[file_key].as<std::string>(""));
    auto text = ReadFile(path);
    if (!text.ok()) return text.status().WithContext(kubeconfig + ": " + field + "." + file_key);
    *origin = path;
    return text;
  }
  return std::string();
}

void TrimRight(std::string& s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
}

StatusOr<ExecConfig> ParseExec(const YAML::Node& e, const std::string& kubeconfig, const std::string& field) {
  ExecConfig x;
  x.where = kubeconfig + ": " + field;
  if (!e.IsMap()) return InvalidArgument(x.where + ": expected a mapping");
  x.api_version = e["apiVersion"].as<std::string>("");
  if (x.api_version.empty()) return InvalidArgument(x.where + ".apiVersion: missing");
  if (x.api_version != "client.authentication.k8s.io/v1" && x.api_version != "client.authentication.k8s.io/v1beta1") {
    return InvalidArgument(x.where + ".apiVersion: \"" + x.api_version +
                           "\" is not client.authentication.k8s.io/v1 or v1beta1");
  }
  x.command = e["command"].as<std::string>("");
  if (x.command.empty()) return InvalidArgument(x.where + ".command: missing");
  // client-go resolves a command with a path separator against the
  // kubeconfig's directory and leaves bare names to PATH.
  if (x.command.find('/') != std::string::npos) x.command = Resolve(kubeconfig, x.command);
  if (e["args"]) {
    if (!e["args"].IsSequence()) return InvalidArgument(x.where + ".args: expected a list");
    for (const auto& a : e["args"]) x.args.push_back(a.as<std::string>(""));
  }
  if (e["env"] && !e["env"].IsNull()) {
    if (!e["env"].IsSequence()) return InvalidArgument(x.where + ".env: expected a list of {name, value}");
    for (const auto& v : e["env"]) {
      const std::string name = v["name"].as<std::string>("");
      if (name.empty()) return InvalidArgument(x.where + ".env: an entry has no name");
      x.env.emplace_back(name, v["value"].as<std::string>(""));
    }
  }
  x.install_hint = e["installHint"].as<std::string>("");
  x.provide_cluster_info = e["provideClusterInfo"].as<bool>(false);
  const std::string mode = e["interactiveMode"].as<std::string>("");
  if (mode == "Always") {
    return InvalidArgument(x.where + ".interactiveMode: Always needs a terminal, which the operator does not have");
  }
  if (!mode.empty() && mode != "Never" && mode != "IfAvailable") {
    return InvalidArgument(x.where + ".interactiveMode: \"" + mode + "\" is not Never, IfAvailable or Always");
  }
  return x;
}

}  // namespace

StatusOr<ClusterConfig> LoadKubeconfig(const std::string& path, const std::string& context_name) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  YAML::Node doc;
  try {
    doc = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(path + ": malformed YAML at line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  try {
    const std::string ctx_name = !context_name.empty() ? context_name : doc["current-context"].as<std::string>("");
    if (ctx_name.empty()) return InvalidArgument(path + ": current-context: not set and no context given");
    YAML::Node ctx = Named(doc["contexts"], ctx_name);
    if (!ctx || !ctx["context"]) return NotFound(path + ": contexts: no context named \"" + ctx_name + "\"");
    const std::string cluster_name = ctx["context"]["cluster"].as<std::string>("");
    const std::string user_name = ctx["context"]["user"].as<std::string>("");
    YAML::Node cluster = Named(doc["clusters"], cluster_name);
    if (!cluster || !cluster["cluster"])
      return NotFound(path + ": clusters: no cluster named \"" + cluster_name + "\"");
    ClusterConfig c;
    const YAML::Node cl = cluster["cluster"];
    c.server = cl["server"].as<std::string>("");
    if (c.server.empty()) return InvalidArgument(path + ": clusters[" + cluster_name + "].cluster.server: missing");
    c.insecure_skip_tls_verify = cl["insecure-skip-tls-verify"].as<bool>(false);
    ASSIGN_OR_RETURN(c.ca_pem, DataOrFile(cl, "certificate-authority-data", "certificate-authority", path,
                                          "clusters[" + cluster_name + "].cluster", &c.ca_origin));
    if (ctx["context"]["namespace"]) c.default_namespace = ctx["context"]["namespace"].as<std::string>("default");
    YAML::Node user = Named(doc["users"], user_name);
    if (user && user["user"]) {
      const YAML::Node u = user["user"];
      const std::string field = "users[" + user_name + "].user";
      ASSIGN_OR_RETURN(c.client_cert_pem, DataOrFile(u, "client-certificate-data", "client-certificate", path, field,
                                                     &c.client_cert_origin));
      ASSIGN_OR_RETURN(c.client_key_pem,
                       DataOrFile(u, "client-key-data", "client-key", path, field, &c.client_key_origin));
      if (c.client_cert_pem.empty() != c.client_key_pem.empty()) {
        return InvalidArgument(path + ": " + field + ": a client certificate needs both a certificate and a key");
      }
      if (u["auth-provider"]) {
        return InvalidArgument(path + ": " + field + ".auth-provider (" +
                               u["auth-provider"]["name"].as<std::string>("?") +
                               ") is not supported; use an exec credential plugin (users[].user.exec), "
                               "e.g. gke-gcloud-auth-plugin or kubelogin");
      }
      if (u["username"] || u["password"]) {
        return InvalidArgument(path + ": " + field + ": basic authentication (username/password) is not supported");
      }
      c.token = u["token"].as<std::string>("");
      if (c.token.empty() && u["tokenFile"]) {
        // Read now, so a missing file is reported at start-up; re-read later
        // as it changes.
        c.token_file = Resolve(path, u["tokenFile"].as<std::string>(""));
        auto t = ReadFile(c.token_file);
        if (!t.ok()) return t.status().WithContext(path + ": " + field + ".tokenFile");
        c.token = *t;
      }
      if (u["exec"] && !u["exec"].IsNull()) {
        if (!c.token.empty()) {
          return InvalidArgument(path + ": " + field + ": exec and token (or tokenFile) are mutually exclusive");
        }
        ASSIGN_OR_RETURN(ExecConfig x, ParseExec(u["exec"], path, field + ".exec"));
        c.exec = std::move(x);
      }
    }
    TrimRight(c.token);
    return c;
  } catch (const YAML::Exception& e) {
    return InvalidArgument(path + ": unexpected structure at line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
}

StatusOr<ClusterConfig> InClusterConfig(const Env& env, const std::string& sa_dir) {
  auto host = env("KUBERNETES_SERVICE_HOST");
  auto port = env("KUBERNETES_SERVICE_PORT");
  if (!host || !port || host->empty() || port->empty()) {
    return NotFound("not running in a cluster: KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT are not set");
  }
  ClusterConfig c;
  const bool v6 = host->find(':') != std::string::npos;
  c.server = "https://" + (v6 ? "[" + *host + "]" : *host) + ":" + *port;
  // Projected service-account tokens expire and are rewritten by the
  // kubelet: the file is the credential, re-read as it changes.
  c.token_file = sa_dir + "/token";
  ASSIGN_OR_RETURN(c.token, ReadFile(c.token_file));
  TrimRight(c.token);
  c.ca_origin = sa_dir + "/ca.crt";
  ASSIGN_OR_RETURN(c.ca_pem, ReadFile(c.ca_origin));
  if (auto ns = ReadFile(sa_dir + "/namespace"); ns.ok() && !ns->empty()) c.default_namespace = *ns;
  return c;
}

}  // namespace tfjob::kube
