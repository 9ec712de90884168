// Real-cluster credentials against the real API server (envtest) behind the
// FaultProxy, which checks the client's credentials itself (the accepted
// bearer tokens change on cue, client certificates name their CN in its
// request log) and forwards as cluster-admin: token files that
// rotate (re-read on change, at least every minute, and after a 401), exec
// credential plugins (a script printing an ExecCredential, re-run before its
// expirationTimestamp), client certificates and CAs from files or inline
// data over TLS, and TLS set-up errors that name the file and the reason.
// Time is a fake wall clock the tests move.
#include "kube/credentials.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/files.h"
#include "common/time.h"
#include "kube/rest_client.h"
#include "tests/support/envtest.h"
#include "tests/support/fault_proxy.h"
#include "tests/support/test_pki.h"
#include "tests/support/subprocess.h"

namespace tfjob::kube {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using namespace std::chrono_literals;
namespace t = ::tfjob::testing;
using SysTime = std::chrono::system_clock::time_point;

void WriteExecutable(const std::string& path, const std::string& text) {
  t::WriteText(path, text);
  ASSERT_EQ(chmod(path.c_str(), 0755), 0);
}

std::string Indent(const std::string& yaml, int spaces) {
  std::string out, pad(static_cast<size_t>(spaces), ' ');
  size_t start = 0;
  while (start < yaml.size()) {
    size_t nl = yaml.find('\n', start);
    if (nl == std::string::npos) nl = yaml.size();
    out += pad + yaml.substr(start, nl - start) + "\n";
    start = nl + 1;
  }
  return out;
}

// A kubeconfig with one cluster, one user and a context joining them.
std::string Kubeconfig(const std::string& server, const std::string& cluster_extra, const std::string& user) {
  return "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    server: " + server +
         "\n" + Indent(cluster_extra, 4) +
         "contexts:\n- name: c\n  context: {cluster: c, user: u}\nusers:\n- name: u\n" + "  user:\n" +
         (user.empty() ? "    {}\n" : Indent(user, 4));
}

class FakeClock {
 public:
  FakeClock() : now_(*ParseRfc3339("2030-01-01T00:00:00Z")) {}
  WallClock fn() {
    return [this] {
      std::lock_guard g(mu_);
      return now_;
    };
  }
  void Set(const std::string& rfc3339) {
    std::lock_guard g(mu_);
    now_ = *ParseRfc3339(rfc3339);
  }
  void Advance(std::chrono::seconds d) {
    std::lock_guard g(mu_);
    now_ += d;
  }

 private:
  std::mutex mu_;
  SysTime now_;
};

class CredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = t::MakeTempDir("credentials"); }

  // The proxy, in front of this executable's control plane.
  void StartServer(t::FaultProxy::Options o = {}) {
    std::string why;
    t::ControlPlane* cp = t::ControlPlane::Shared(&why);
    ASSERT_NE(cp, nullptr) << why;
    auto s = t::FaultProxy::Start(*cp, o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
  }
  std::unique_ptr<RestClient> ClientFor(const ClusterConfig& c) {
    RestOptions o;
    o.credentials.clock = clock_.fn();
    auto client = RestClient::Create(c, o);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(client).value() : nullptr;
  }
  std::unique_ptr<RestClient> ClientFor(const std::string& kubeconfig_yaml) {
    t::WriteText(dir_ + "/kubeconfig", kubeconfig_yaml);
    auto c = LoadKubeconfig(dir_ + "/kubeconfig");
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? ClientFor(*c) : nullptr;
  }
  // One request: a list of pods (200 once authenticated).
  Status ListPods(RestClient& c) {
    server_->ClearRequests();
    return c.List(kPods, "default", {}).status();
  }
  // (HTTP code, bearer token) of every request since the last ListPods.
  std::vector<std::pair<int, std::string>> Seen() {
    std::vector<std::pair<int, std::string>> out;
    for (const auto& r : server_->Requests()) out.emplace_back(r.code, r.bearer_token);
    return out;
  }
  using Seen_t = std::vector<std::pair<int, std::string>>;

  std::string dir_;
  FakeClock clock_;
  std::unique_ptr<t::FaultProxy> server_;
};

// ---- Token files ----------------------------------------------------------------

// The in-cluster service-account token as the kubelet projects it: token ->
// ..data/token, and a rotation swaps the ..data symlink. The new token is
// read on the next request, before the server has to refuse the old one.
// Over TLS, with the CA from ca.crt.
TEST_F(CredentialsTest, InClusterTokenIsReReadWhenTheKubeletRotatesIt) {
  auto pki = t::TestPki::Create();
  ASSERT_TRUE(pki.ok()) << pki.status();
  auto server_cert = pki->Server();
  ASSERT_TRUE(server_cert.ok());
  t::FaultProxy::Options o;
  o.tls_cert_pem = server_cert->cert_pem;
  o.tls_key_pem = server_cert->key_pem;
  o.bearer_tokens = {"token-one"};
  StartServer(o);
  const std::string sa = dir_ + "/sa";
  std::filesystem::create_directories(sa + "/..2030_01");
  t::WriteText(sa + "/..2030_01/token", "token-one\n");
  t::WriteText(sa + "/..2030_01/ca.crt", pki->ca_pem());
  t::WriteText(sa + "/..2030_01/namespace", "default");
  std::filesystem::create_directory_symlink("..2030_01", sa + "/..data");
  for (const char* f : {"token", "ca.crt", "namespace"}) {
    std::filesystem::create_symlink(std::string("..data/") + f, sa + "/" + f);
  }
  const std::string port = std::to_string(server_->port());
  auto config = InClusterConfig(
      [&](const std::string& k) -> std::optional<std::string> {
        if (k == "KUBERNETES_SERVICE_HOST") return "127.0.0.1";
        if (k == "KUBERNETES_SERVICE_PORT") return port;
        return std::nullopt;
      },
      sa);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->token_file, sa + "/token");
  auto client = ClientFor(*config);
  ASSERT_TRUE(client);
  ASSERT_TRUE(ListPods(*client).ok());
  EXPECT_EQ(Seen(), (Seen_t{{200, "token-one"}}));

  // The kubelet writes a new directory and swaps the symlink atomically.
  std::filesystem::create_directories(sa + "/..2030_02");
  t::WriteText(sa + "/..2030_02/token", "token-two-rotated\n");
  std::filesystem::create_directory_symlink("..2030_02", sa + "/..data_tmp");
  std::filesystem::rename(sa + "/..data_tmp", sa + "/..data");
  server_->SetBearerTokens({"token-two-rotated"});
  ASSERT_TRUE(ListPods(*client).ok());
  EXPECT_EQ(Seen(), (Seen_t{{200, "token-two-rotated"}}));  // no 401 first: the change was seen
}

// Rewrites the token file in place with the same length and modification
// time: a change only the once-a-minute re-read (or a 401) can find.
void RewriteUnnoticeably(const std::string& path, const std::string& text) {
  struct stat before {};
  ASSERT_EQ(stat(path.c_str(), &before), 0);
  ASSERT_EQ(static_cast<size_t>(before.st_size), text.size());
  t::WriteText(path, text);
  const timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

TEST_F(CredentialsTest, TokenFileIsReReadAtLeastEveryMinute) {
  t::FaultProxy::Options o;
  StartServer(o);
  server_->SetBearerTokens({"token-a1", "token-a2"});
  t::WriteText(dir_ + "/token", "token-a1");
  auto client = ClientFor(Kubeconfig(server_->url(), "", "tokenFile: token"));
  ASSERT_TRUE(client);
  ASSERT_TRUE(ListPods(*client).ok());
  EXPECT_EQ(Seen(), (Seen_t{{200, "token-a1"}}));
  RewriteUnnoticeably(dir_ + "/token", "token-a2");
  clock_.Advance(59s);
  ASSERT_TRUE(ListPods(*client).ok());
  EXPECT_EQ(Seen(), (Seen_t{{200, "token-a1"}}));  // unchanged as far as stat can tell, and read 59 s ago
  clock_.Advance(1s);
  ASSERT_TRUE(ListPods(*client).ok());
  EXPECT_EQ(Seen(), (Seen_t{{200, "token-a2"}}));
  // A visible change (another size) is read at once.
  t::WriteText(dir_ + "/token", "token-a3-longer");
  server_->SetBearerTokens({"token-a3-longer"});
  ASSERT_TRUE(ListPods(*client).ok());
  EXPECT_EQ(Seen(), (Seen_t{{200, "token-a3-longer"}}));
  // A file that disappears keeps the last good token.
  std::filesystem::remove(dir_ + "/token");
  clock_.Advance(120s);
  ASSERT_TRUE(ListPods(*client).ok());
  EXPECT_EQ(Seen(), (Seen_t{{200, "token-a3-longer"}}));
}

// A 401 re-reads the file and retries once; a token the server still refuses
// is an UNAUTHENTICATED error after exactly two attempts.
TEST_F(CredentialsTest, A401ReReadsTheTokenFileAndRetriesOnce) {
  StartServer();
  server_->SetBearerTokens({"token-b1"});
  t::WriteText(dir_ + "/token", "token-b1");
  auto client = ClientFor(Kubeconfig(server_->url(), "", "tokenFile: token"));
  ASSERT_TRUE(client);
  ASSERT_TRUE(ListPods(*client).ok());
  RewriteUnnoticeably(dir_ + "/token", "token-b2");
  server_->SetBearerTokens({"token-b2"});
  ASSERT_TRUE(ListPods(*client).ok());
  EXPECT_EQ(Seen(), (Seen_t{{401, "token-b1"}, {200, "token-b2"}}));
  server_->SetBearerTokens({"something-else"});
  Status s = ListPods(*client);
  EXPECT_EQ(s.code(), Code::kUnauthenticated) << s;
  EXPECT_EQ(Seen(), (Seen_t{{401, "token-b2"}, {401, "token-b2"}}));
}

// ---- Exec credential plugins -------------------------------------------------------

// Counts its runs, keeps what it was given, and prints an ExecCredential
// with token exec-token-<run> expiring at the time in $STATE/expiry.
const char* kTokenPlugin = R"SH(#!/bin/sh
n=$(( $(cat "$STATE/runs" 2>/dev/null || echo 0) + 1 ))
echo $n > "$STATE/runs"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$STATE/exec-info-$n.json"
printf '%s %s' "$1" "$2" > "$STATE/args"
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"exec-token-%s","expirationTimestamp":"%s"}}\n' "$n" "$(cat "$STATE/expiry")"
)SH";

std::string ExecUser(const std::string& command, const std::string& state, const std::string& extra = "") {
  return "exec:\n  apiVersion: client.authentication.k8s.io/v1\n  command: " + command +
         "\n  args: [--cluster, c1]\n  env:\n  - {name: STATE, value: " + state + "}\n" + extra;
}

TEST_F(CredentialsTest, ExecPluginTokenIsRenewedBeforeItExpires) {
  StartServer();
  server_->SetBearerTokens({"exec-token-1"});
  WriteExecutable(dir_ + "/plugin.sh", kTokenPlugin);
  t::WriteText(dir_ + "/expiry", "2030-01-01T00:10:00Z");  // ten minutes: renewed a minute early
  // A command with a '/' is relative to the kubeconfig's directory.
  auto client = ClientFor(Kubeconfig(
      server_->url(), "", ExecUser("./plugin.sh", dir_, "  provideClusterInfo: true\n  interactiveMode: Never\n")));
  ASSERT_TRUE(client);
  ASSERT_TRUE(ListPods(*client).ok());
  EXPECT_EQ(Seen(), (Seen_t{{200, "exec-token-1"}}));
  EXPECT_EQ(client->credentials().exec_runs(), 1);
  EXPECT_EQ(*ReadFile(dir_ + "/args"), "--cluster c1");
  const json info = json::parse(*ReadFile(dir_ + "/exec-info-1.json"));
  EXPECT_EQ(info["kind"], "ExecCredential");
  EXPECT_EQ(info["apiVersion"], "client.authentication.k8s.io/v1");
  EXPECT_EQ(info["spec"]["interactive"], false);
  EXPECT_EQ(info["spec"]["cluster"]["server"], server_->url());

  clock_.Set("2030-01-01T00:08:59Z");
  ASSERT_TRUE(ListPods(*client).ok());
  EXPECT_EQ(client->credentials().exec_runs(), 1);  // still well within its lifetime

  t::WriteText(dir_ + "/expiry", "2030-01-01T00:20:00Z");
  server_->SetBearerTokens({"exec-token-2"});
  clock_.Set("2030-01-01T00:09:00Z");  // expiry minus a tenth of the lifetime (60 s)
  ASSERT_TRUE(ListPods(*client).ok());
  EXPECT_EQ(Seen(), (Seen_t{{200, "exec-token-2"}}));  // renewed before the server had to refuse it
  EXPECT_EQ(client->credentials().exec_runs(), 2);

  // Revoked early: the 401 re-runs the plugin and the request is retried.
  server_->SetBearerTokens({"exec-token-3"});
  ASSERT_TRUE(ListPods(*client).ok());
  EXPECT_EQ(Seen(), (Seen_t{{401, "exec-token-2"}, {200, "exec-token-3"}}));
  EXPECT_EQ(client->credentials().exec_runs(), 3);
}

// Without expirationTimestamp the credential lasts until the server refuses it.
TEST_F(CredentialsTest, ExecCredentialWithoutExpiryLastsUntilRefused) {
  WriteExecutable(dir_ + "/plugin.sh", R"(#!/bin/sh
n=$(( $(cat "$STATE/runs" 2>/dev/null || echo 0) + 1 )); echo $n > "$STATE/runs"
echo '{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"t'$n'"}}'
)");
  ClusterConfig c;
  c.server = "http://127.0.0.1:1";
  c.exec =
      ExecConfig{"client.authentication.k8s.io/v1beta1", dir_ + "/plugin.sh", {}, {{"STATE", dir_}}, "", false, "test"};
  Credentials creds(c, {clock_.fn(), 60s});
  EXPECT_EQ(creds.Current()->bearer_token, "t1");
  clock_.Advance(std::chrono::hours(24 * 365));
  EXPECT_EQ(creds.Current()->bearer_token, "t1");
  creds.Invalidate();
  EXPECT_EQ(creds.Current()->bearer_token, "t2");
  EXPECT_EQ(creds.exec_runs(), 2);
}

// What goes wrong with a plugin is one line naming the plugin and why.
TEST_F(CredentialsTest, ExecPluginFailuresAreClearErrors) {
  auto run = [&](const std::string& script, const std::string& hint = "") {
    WriteExecutable(dir_ + "/p.sh", "#!/bin/sh\n" + script + "\n");
    ClusterConfig c;
    c.server = "http://127.0.0.1:1";
    c.exec =
        ExecConfig{"client.authentication.k8s.io/v1", dir_ + "/p.sh", {}, {}, hint, false, "kc: users[u].user.exec"};
    return Credentials(c, {clock_.fn(), 60s}).Current().status();
  };
  Status s = run("echo 'error: run login first' >&2; exit 3");
  EXPECT_EQ(s.code(), Code::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("kc: users[u].user.exec"));
  EXPECT_THAT(s.message(), HasSubstr("exit code 3: error: run login first"));
  s = run("echo not json");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("not a JSON ExecCredential: not json"));
  s = run(
      R"(echo '{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"x"}}')");
  EXPECT_THAT(s.message(), HasSubstr("configured for client.authentication.k8s.io/v1 but returned apiVersion "
                                     "\"client.authentication.k8s.io/v1beta1\""));
  s = run(R"(echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{}}')");
  EXPECT_THAT(s.message(), HasSubstr("neither a token nor a client certificate"));
  s = run(
      R"(echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"x","expirationTimestamp":"soon"}}')");
  EXPECT_THAT(s.message(), HasSubstr("expirationTimestamp \"soon\" is not an RFC 3339 time"));

  ClusterConfig missing;
  missing.server = "http://127.0.0.1:1";
  missing.exec = ExecConfig{"client.authentication.k8s.io/v1",
                            "no-such-auth-plugin-xyz",
                            {},
                            {},
                            "Install it with: apt-get install xyz",
                            false,
                            "kc: users[u].user.exec"};
  s = Credentials(missing, {clock_.fn(), 60s}).Current().status();
  EXPECT_EQ(s.code(), Code::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("exec plugin \"no-such-auth-plugin-xyz\""));
  EXPECT_THAT(s.message(), HasSubstr("cannot run it"));
  EXPECT_THAT(s.message(), HasSubstr("Install it with: apt-get install xyz"));

  // Through the client: the request fails with the plugin's error, and the
  // server is never asked.
  StartServer();
  WriteExecutable(dir_ + "/fail.sh", "#!/bin/sh\necho 'credentials expired' >&2\nexit 1\n");
  auto client = ClientFor(Kubeconfig(server_->url(), "", ExecUser(dir_ + "/fail.sh", dir_)));
  ASSERT_TRUE(client);
  s = ListPods(*client);
  EXPECT_EQ(s.code(), Code::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("credentials expired"));
  EXPECT_TRUE(server_->Requests().empty());
}

// ---- TLS: client certificates and CAs -------------------------------------------

class TlsTest : public CredentialsTest {
 protected:
  void SetUp() override {
    CredentialsTest::SetUp();
    auto pki = t::TestPki::Create();
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = std::move(pki).value();
    auto server_cert = pki_.Server();
    ASSERT_TRUE(server_cert.ok()) << server_cert.status();
    auto client = pki_.Client("tfjob-operator");
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *client;
    t::FaultProxy::Options o;
    o.tls_cert_pem = server_cert->cert_pem;
    o.tls_key_pem = server_cert->key_pem;
    o.tls_ca_pem = pki_.ca_pem();
    o.client_ca_pem = pki_.ca_pem();
    StartServer(o);
    t::WriteText(dir_ + "/ca.crt", pki_.ca_pem());
    t::WriteText(dir_ + "/client.crt", client_.cert_pem);
    t::WriteText(dir_ + "/client.key", client_.key_pem);
  }
  std::vector<std::string> ClientNames() {
    std::vector<std::string> out;
    for (const auto& r : server_->Requests()) out.push_back(std::to_string(r.code) + " " + r.client_cn);
    return out;
  }
  t::TestPki pki_;
  t::KeyPair client_;
};

TEST_F(TlsTest, ClientCertificateAndCaFromFiles) {
  auto client = ClientFor(Kubeconfig(server_->url(), "certificate-authority: ca.crt",
                                     "client-certificate: client.crt\nclient-key: " + dir_ + "/client.key"));
  ASSERT_TRUE(client);
  Status s = ListPods(*client);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(ClientNames(), std::vector<std::string>{"200 tfjob-operator"});
}

TEST_F(TlsTest, ClientCertificateAndCaFromInlineData) {
  auto client = ClientFor(Kubeconfig(server_->url(), "certificate-authority-data: " + Base64Encode(pki_.ca_pem()),
                                     "client-certificate-data: " + Base64Encode(client_.cert_pem) +
                                         "\nclient-key-data: " + Base64Encode(client_.key_pem)));
  ASSERT_TRUE(client);
  Status s = ListPods(*client);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(ClientNames(), std::vector<std::string>{"200 tfjob-operator"});
  // No client certificate and no token: the server refuses.
  auto anonymous = ClientFor(Kubeconfig(server_->url(), "certificate-authority: ca.crt", ""));
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(ListPods(*anonymous).code(), Code::kUnauthenticated);
}

// A server certificate from another CA: the handshake fails, and the error
// says it was TLS and which CA was used.
TEST_F(TlsTest, AnUntrustedServerIsAClearError) {
  auto other = t::TestPki::Create("another CA");
  ASSERT_TRUE(other.ok());
  t::WriteText(dir_ + "/other-ca.crt", other->ca_pem());
  auto client = ClientFor(Kubeconfig(server_->url(), "certificate-authority: other-ca.crt",
                                     "client-certificate: client.crt\nclient-key: client.key"));
  ASSERT_TRUE(client);
  Status s = ListPods(*client);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("TLS with " + server_->url() + " failed"));
  EXPECT_THAT(s.message(), HasSubstr(dir_ + "/other-ca.crt"));
}

// Bad TLS material fails at start-up, naming the file (or kubeconfig field)
// and OpenSSL's reason.
TEST_F(TlsTest, BadTlsFilesAreReportedWithTheFileAndReason) {
  auto create = [&](const std::string& cluster_extra, const std::string& user) {
    t::WriteText(dir_ + "/kubeconfig", Kubeconfig(server_->url(), cluster_extra, user));
    auto c = LoadKubeconfig(dir_ + "/kubeconfig");
    if (!c.ok()) return c.status();
    return RestClient::Create(*c).status();
  };
  t::WriteText(dir_ + "/garbage.crt", "this is not a certificate\n");
  Status s = create("certificate-authority: garbage.crt", "");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("certificate authority " + dir_ + "/garbage.crt: no PEM certificate"));

  std::string broken = pki_.ca_pem();
  broken.replace(broken.find('\n') + 5, 20, "!!!!!!!!!!!!!!!!!!!!");
  t::WriteText(dir_ + "/broken.crt", broken);
  s = create("certificate-authority: broken.crt", "");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("certificate authority " + dir_ + "/broken.crt: "));
  EXPECT_GT(s.message().size(),
            (std::string("kubernetes client: TLS: certificate authority ") + dir_ + "/broken.crt: ").size());

  s = create("certificate-authority: ca.crt", "client-certificate: garbage.crt\nclient-key: client.key");
  EXPECT_THAT(s.message(), HasSubstr("client certificate " + dir_ + "/garbage.crt: "));

  s = create("certificate-authority: ca.crt", "client-certificate: client.crt\nclient-key: garbage.crt");
  EXPECT_THAT(s.message(), HasSubstr("client key " + dir_ + "/garbage.crt: "));

  auto other = pki_.Client("someone-else");
  ASSERT_TRUE(other.ok());
  t::WriteText(dir_ + "/other.key", other->key_pem);
  s = create("certificate-authority: ca.crt",
             "client-certificate-data: " + Base64Encode(client_.cert_pem) + "\nclient-key: other.key");
  EXPECT_THAT(s.message(), HasSubstr("client key " + dir_ + "/other.key does not match client certificate " + dir_ +
                                     "/kubeconfig: users[u].user.client-certificate-data"));

  s = create("certificate-authority: ca.crt\ninsecure-skip-tls-verify: true", "");
  EXPECT_THAT(s.message(), HasSubstr("together with insecure-skip-tls-verify is not allowed"));
  s = create("certificate-authority: /no/such/ca.crt", "");
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("certificate-authority"));
  EXPECT_THAT(s.message(), HasSubstr("/no/such/ca.crt"));
}

// An exec plugin may hand over a client certificate instead of a token;
// when it is renewed, new connections carry the new certificate.
TEST_F(TlsTest, ExecPluginClientCertificate) {
  auto first = pki_.Client("exec-user-1");
  auto second = pki_.Client("exec-user-2");
  ASSERT_TRUE(first.ok() && second.ok());
  auto credential = [](const t::KeyPair& kp, const std::string& expiry) {
    return json{
        {"apiVersion", "client.authentication.k8s.io/v1"},
        {"kind", "ExecCredential"},
        {"status",
         {{"clientCertificateData", kp.cert_pem}, {"clientKeyData", kp.key_pem}, {"expirationTimestamp", expiry}}}}
        .dump();
  };
  t::WriteText(dir_ + "/credential.json", credential(*first, "2030-01-01T01:00:00Z"));
  WriteExecutable(dir_ + "/plugin.sh", "#!/bin/sh\ncat \"$STATE/credential.json\"\n");
  auto client = ClientFor(Kubeconfig(server_->url(), "certificate-authority: ca.crt", ExecUser("./plugin.sh", dir_)));
  ASSERT_TRUE(client);
  Status s = ListPods(*client);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(ClientNames(), std::vector<std::string>{"200 exec-user-1"});
  t::WriteText(dir_ + "/credential.json", credential(*second, "2030-01-01T02:00:00Z"));
  clock_.Set("2030-01-01T00:59:30Z");
  s = ListPods(*client);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(ClientNames(), std::vector<std::string>{"200 exec-user-2"});
  EXPECT_EQ(client->credentials().exec_runs(), 2);
  // A plugin certificate whose key does not match is refused before use.
  t::WriteText(dir_ + "/credential.json",
               json{{"apiVersion", "client.authentication.k8s.io/v1"},
                    {"kind", "ExecCredential"},
                    {"status", {{"clientCertificateData", first->cert_pem}, {"clientKeyData", second->key_pem}}}}
                   .dump());
  client->credentials().Invalidate();
  s = ListPods(*client);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("status.clientKeyData does not match client certificate"));
  EXPECT_TRUE(server_->Requests().empty());
}

}  // namespace
}  // namespace tfjob::kube
