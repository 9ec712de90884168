#include "kube/config.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kube/client.h"
#include "tests/support/subprocess.h"

namespace tfjob::kube {
namespace {

using ::testing::HasSubstr;
namespace t = ::tfjob::testing;

std::string Dir(const std::string& name) {
  auto d = std::filesystem::path(::testing::TempDir()) / ("kubeconfig-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  // Removed when the test process exits.
  static struct Created {
    std::vector<std::filesystem::path> dirs;
    ~Created() {
      std::error_code ec;
      for (const auto& p : dirs) std::filesystem::remove_all(p, ec);
    }
  } created;
  created.dirs.push_back(d);
  return d.string();
}

TEST(KubeconfigTest, TokenAndInlineCaFromTheCurrentContext) {
  const std::string d = Dir("token");
  // "-----BEGIN CERTIFICATE-----\n" in base64, standing in for a CA bundle.
  t::WriteText(d + "/config", R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: c1
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
- name: c2
  cluster: {server: "http://127.0.0.1:8080", insecure-skip-tls-verify: true}
contexts:
- name: dev
  context: {cluster: c1, user: u1, namespace: team-a}
- name: local
  context: {cluster: c2, user: u2}
users:
- name: u1
  user: {token: "abc123"}
- name: u2
  user: {tokenFile: token.txt}
)");
  t::WriteText(d + "/token.txt", "from-file\n");
  auto c = LoadKubeconfig(d + "/config");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://10.0.0.1:6443");
  EXPECT_EQ(c->token, "abc123");
  EXPECT_EQ(c->ca_pem, "-----BEGIN CERTIFICATE-----\n");
  EXPECT_EQ(c->default_namespace, "team-a");
  auto l = LoadKubeconfig(d + "/config", "local");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->server, "http://127.0.0.1:8080");
  EXPECT_TRUE(l->insecure_skip_tls_verify);
  EXPECT_EQ(l->token, "from-file");  // relative to the kubeconfig, trailing newline dropped
  EXPECT_EQ(l->default_namespace, "default");
}

TEST(KubeconfigTest, ClientCertificateFiles) {
  const std::string d = Dir("certs");
  t::WriteText(d + "/cert.pem", "CERT");
  t::WriteText(d + "/key.pem", "KEY");
  t::WriteText(d + "/config",
               "current-context: x\nclusters: [{name: c, cluster: {server: 'https://h:1'}}]\n"
               "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
               "users: [{name: u, user: {client-certificate: cert.pem, client-key: " +
                   d + "/key.pem}}]\n");
  auto c = LoadKubeconfig(d + "/config");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->client_cert_pem, "CERT");
  EXPECT_EQ(c->client_key_pem, "KEY");
}

TEST(KubeconfigTest, ErrorsNameTheFileAndField) {
  const std::string d = Dir("bad");
  EXPECT_EQ(LoadKubeconfig(d + "/missing").status().code(), Code::kNotFound);
  t::WriteText(d + "/garbage", "clusters: [unclosed");
  EXPECT_THAT(LoadKubeconfig(d + "/garbage").status().message(), HasSubstr("malformed YAML"));
  t::WriteText(d + "/noctx", "clusters: []\n");
  EXPECT_THAT(LoadKubeconfig(d + "/noctx").status().message(), HasSubstr("current-context"));
  t::WriteText(d + "/wrong", "current-context: x\ncontexts: [{name: x, context: {cluster: nope, user: u}}]\n");
  auto s = LoadKubeconfig(d + "/wrong").status();
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("no cluster named \"nope\""));
  t::WriteText(
      d + "/nofile",
      "current-context: x\nclusters: [{name: c, cluster: {server: 'https://h:1', certificate-authority: /no/ca.pem}}]\n"
      "contexts: [{name: x, context: {cluster: c, user: u}}]\n");
  EXPECT_THAT(LoadKubeconfig(d + "/nofile").status().message(), HasSubstr("certificate-authority"));
}

TEST(KubeconfigTest, ExecPluginsAndWhereCredentialsComeFrom) {
  const std::string d = Dir("exec");
  t::WriteText(d + "/ca.pem", "CA");
  t::WriteText(d + "/token", "tok\n");
  const std::string head =
      "current-context: x\nclusters: [{name: c, cluster: {server: 'https://h:1', certificate-authority: ca.pem}}]\n"
      "contexts: [{name: x, context: {cluster: c, user: u}}]\n";
  t::WriteText(d + "/config", head + R"(users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: bin/../plugins/get-token
      args: [--region, eu]
      env: [{name: A, value: "1"}, {name: B, value: two}]
      installHint: install get-token
      provideClusterInfo: true
      interactiveMode: IfAvailable
)");
  auto c = LoadKubeconfig(d + "/config");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ca_origin, d + "/ca.pem");
  ASSERT_TRUE(c->exec.has_value());
  EXPECT_EQ(c->exec->api_version, "client.authentication.k8s.io/v1");
  EXPECT_EQ(c->exec->command, d + "/plugins/get-token");  // relative to the kubeconfig
  EXPECT_EQ(c->exec->args, (std::vector<std::string>{"--region", "eu"}));
  EXPECT_EQ(c->exec->env, (std::vector<std::pair<std::string, std::string>>{{"A", "1"}, {"B", "two"}}));
  EXPECT_EQ(c->exec->install_hint, "install get-token");
  EXPECT_TRUE(c->exec->provide_cluster_info);
  EXPECT_EQ(c->exec->where, d + "/config: users[u].user.exec");
  EXPECT_TRUE(c->token.empty());

  // A bare command name is left to PATH; v1beta1 is accepted.
  t::WriteText(d + "/bare", head +
                                "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1beta1, "
                                "command: aws, args: [eks, get-token]}}}]\n");
  c = LoadKubeconfig(d + "/bare");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->exec->command, "aws");

  // A token file is kept as the source, for re-reads.
  t::WriteText(d + "/tokenfile", head +
                                     "users: [{name: u, user: {tokenFile: token, client-certificate-data: Q0VSVA==, "
                                     "client-key-data: S0VZ}}]\n");
  c = LoadKubeconfig(d + "/tokenfile");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->token_file, d + "/token");
  EXPECT_EQ(c->token, "tok");
  EXPECT_EQ(c->client_cert_pem, "CERT");
  EXPECT_EQ(c->client_cert_origin, d + "/tokenfile: users[u].user.client-certificate-data");
  EXPECT_EQ(c->client_key_origin, d + "/tokenfile: users[u].user.client-key-data");
}

TEST(KubeconfigTest, UnusableUsersAreErrorsNamingTheField) {
  const std::string d = Dir("badexec");
  const std::string head =
      "current-context: x\nclusters: [{name: c, cluster: {server: 'https://h:1'}}]\n"
      "contexts: [{name: x, context: {cluster: c, user: u}}]\n";
  auto error = [&](const std::string& user) {
    t::WriteText(d + "/config", head + "users: [{name: u, user: " + user + "}]\n");
    return LoadKubeconfig(d + "/config").status();
  };
  EXPECT_THAT(error("{exec: {command: x}}").message(), HasSubstr("users[u].user.exec.apiVersion: missing"));
  EXPECT_THAT(error("{exec: {apiVersion: client.authentication.k8s.io/v1alpha1, command: x}}").message(),
              HasSubstr("is not client.authentication.k8s.io/v1 or v1beta1"));
  EXPECT_THAT(error("{exec: {apiVersion: client.authentication.k8s.io/v1}}").message(),
              HasSubstr("users[u].user.exec.command: missing"));
  EXPECT_THAT(
      error("{exec: {apiVersion: client.authentication.k8s.io/v1, command: x, interactiveMode: Always}}").message(),
      HasSubstr("interactiveMode: Always needs a terminal"));
  EXPECT_THAT(error("{token: t, exec: {apiVersion: client.authentication.k8s.io/v1, command: x}}").message(),
              HasSubstr("exec and token (or tokenFile) are mutually exclusive"));
  EXPECT_THAT(error("{auth-provider: {name: gcp}}").message(),
              HasSubstr("users[u].user.auth-provider (gcp) is not supported; use an exec credential plugin"));
  EXPECT_THAT(error("{client-certificate-data: Q0VSVA==}").message(),
              HasSubstr("a client certificate needs both a certificate and a key"));
  EXPECT_THAT(error("{tokenFile: /no/such/token}").message(), HasSubstr("users[u].user.tokenFile"));
}

TEST(Base64Test, RoundTrip) {
  for (const std::string s : {"", "a", "ab", "abc", "abcd", "-----BEGIN CERTIFICATE-----\n"}) {
    EXPECT_EQ(Base64Decode(Base64Encode(s)), s) << s;
  }
  EXPECT_EQ(Base64Encode("ab"), "YWI=");
}

TEST(InClusterTest, ServiceAccountFilesAndEnvironment) {
  const std::string d = Dir("sa");
  t::WriteText(d + "/token", "sa-token\n");
  t::WriteText(d + "/ca.crt", "CA");
  t::WriteText(d + "/namespace", "kubeflow");
  auto env = [](const std::string& k) -> std::optional<std::string> {
    if (k == "KUBERNETES_SERVICE_HOST") return "10.96.0.1";
    if (k == "KUBERNETES_SERVICE_PORT") return "443";
    return std::nullopt;
  };
  auto c = InClusterConfig(env, d);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://10.96.0.1:443");
  EXPECT_EQ(c->token, "sa-token");
  EXPECT_EQ(c->ca_pem, "CA");
  EXPECT_EQ(c->ca_origin, d + "/ca.crt");
  EXPECT_EQ(c->token_file, d + "/token");
  EXPECT_EQ(c->default_namespace, "kubeflow");
  auto none = InClusterConfig([](const std::string&) { return std::optional<std::string>(); }, d);
  EXPECT_EQ(none.status().code(), Code::kNotFound);
}

TEST(ResourceTest, Paths) {
  EXPECT_EQ(kPods.Path("ns", "p"), "/api/v1/namespaces/ns/pods/p");
  EXPECT_EQ(kTFJobs.Path("ns", "j", "status"), "/apis/kubeflow.org/v1/namespaces/ns/tfjobs/j/status");
  EXPECT_EQ(kTFJobs.Path(""), "/apis/kubeflow.org/v1/tfjobs");
}

TEST(FromHttpTest, OneMeaningPerCode) {
  EXPECT_EQ(FromHttp(409, R"({"reason":"AlreadyExists","message":"x"})", "create").code(), Code::kAlreadyExists);
  EXPECT_EQ(FromHttp(409, R"({"reason":"Conflict","message":"stale"})", "update").code(), Code::kAborted);
  EXPECT_EQ(FromHttp(410, "{}", "watch").code(), Code::kFailedPrecondition);
  EXPECT_EQ(FromHttp(404, "{}", "get").code(), Code::kNotFound);
  EXPECT_EQ(FromHttp(422, "{}", "create").code(), Code::kInvalidArgument);
  EXPECT_EQ(FromHttp(503, "oops", "get").code(), Code::kUnavailable);
  EXPECT_EQ(FromHttp(429, "{}", "get").code(), Code::kResourceExhausted);
  EXPECT_THAT(FromHttp(409, R"({"reason":"Conflict","message":"stale rv"})", "update tfjobs ns/j").message(),
              HasSubstr("update tfjobs ns/j: HTTP 409 Conflict: stale rv"));
}

}  // namespace
}  // namespace tfjob::kube
