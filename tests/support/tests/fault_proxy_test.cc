// FaultProxy in front of the real API server (one control plane for this
// executable): requests pass through untouched, and each kind of fault,
// dropped watches, the 410 on a watch and bearer tokens work as
// tests/support/fault_proxy.h says.
#include "tests/support/fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "kube/config.h"
#include "kube/rest_client.h"
#include "tests/support/envtest.h"
#include "tests/support/subprocess.h"
#include "tests/support/wait.h"

namespace tfjob::testing {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

const kube::Resource kConfigMaps{"", "v1", "configmaps"};
const kube::Resource kNamespaces{"", "v1", "namespaces"};

json ConfigMap(const std::string& name) {
  return {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", name}}}, {"data", {{"k", "v"}}}};
}

// The whole answer to one plain HTTP/1.1 request (the proxy closes after it).
std::string RawGet(int port, const std::string& target) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req = "GET " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    (void)!::write(fd, req.data(), req.size());
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

class FaultProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    cp_ = ControlPlane::Shared(&why);
    ASSERT_NE(cp_, nullptr) << why;
    auto proxy = FaultProxy::Start(*cp_);
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = std::move(proxy).value();
    client_ = NewClient("");
    ASSERT_NE(client_, nullptr);
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    ns_ = "fp-" + name.substr(0, 50);
    auto created = client_->Create(kNamespaces, "", json{{"metadata", {{"name", ns_}}}});
    ASSERT_TRUE(created.ok()) << created.status();
  }
  void TearDown() override {
    if (proxy_) {
      proxy_->ClearFaults();
      proxy_->SetBearerTokens({});
    }
    if (client_ && !ns_.empty()) (void)client_->Delete(kNamespaces, "", ns_, "Background");
  }
  std::unique_ptr<kube::RestClient> NewClient(const std::string& token) {
    kube::ClusterConfig c;
    c.server = proxy_->url();
    c.token = token;
    auto client = kube::RestClient::Create(c);
    return client.ok() ? std::move(client).value() : nullptr;
  }

  ControlPlane* cp_ = nullptr;
  std::unique_ptr<FaultProxy> proxy_;
  std::unique_ptr<kube::RestClient> client_;
  std::string ns_;
};

TEST_F(FaultProxyTest, PassesGetListCreateAndWatchThrough) {
  kube::Client& c = *client_;
  auto created = c.Create(kConfigMaps, ns_, ConfigMap("a"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_FALSE((*created)["metadata"].value("uid", "").empty()) << "the real server's object";
  auto got = c.Get(kConfigMaps, ns_, "a");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)["data"]["k"], "v");
  EXPECT_EQ(c.Get(kConfigMaps, ns_, "nope").status().code(), Code::kNotFound);
  auto list = c.List(kConfigMaps, ns_, {});
  ASSERT_TRUE(list.ok()) << list.status();
  const std::string rv = (*list)["metadata"]["resourceVersion"];

  // A watch from the list's version sees a later create, as it happens.
  std::atomic<bool> stop{false}, seen{false};
  Status watched;
  std::thread watcher([&] {
    kube::WatchOptions w;
    w.resource_version = rv;
    watched = c.Watch(
        kConfigMaps, ns_, w,
        [&](const kube::WatchEvent& ev) {
          if (ev.type == "ADDED" && ev.object["metadata"]["name"] == "b") seen = true;
          return !seen;
        },
        stop);
  });
  ASSERT_TRUE(WaitUntil([&] { return proxy_->ActiveWatches("configmaps") == 1; }));
  EXPECT_EQ(proxy_->ActiveWatches("pods"), 0);
  ASSERT_TRUE(c.Create(kConfigMaps, ns_, ConfigMap("b")).ok());
  ASSERT_TRUE(WaitUntil([&] { return seen.load(); }));
  stop = true;
  watcher.join();
  EXPECT_TRUE(watched.ok()) << watched;

  std::vector<std::string> log;
  for (const auto& r : proxy_->Requests()) {
    if (r.path.find("/namespaces/" + ns_ + "/configmaps") != std::string::npos)
      log.push_back(r.method + " " + std::to_string(r.code) + (r.watch ? " watch" : ""));
  }
  EXPECT_THAT(log, ::testing::ElementsAre("POST 201", "GET 200", "GET 404", "GET 200", "GET 200 watch", "POST 201"));
}

TEST_F(FaultProxyTest, InjectedFaultsAnswerInsteadOfTheServer) {
  kube::Client& c = *client_;
  auto created = c.Create(kConfigMaps, ns_, ConfigMap("a"));
  ASSERT_TRUE(created.ok()) << created.status();
  // A 409 storm: two PUTs refused, the third reaches the server.
  ASSERT_TRUE(proxy_->InjectFault({.method = "PUT", .path_regex = ".*/configmaps/a", .code = 409, .count = 2}).ok());
  json cm = *created;
  cm["data"]["k"] = "w";
  EXPECT_EQ(c.Update(kConfigMaps, ns_, cm).status().code(), Code::kAborted);
  EXPECT_EQ(c.Update(kConfigMaps, ns_, cm).status().code(), Code::kAborted);
  auto updated = c.Update(kConfigMaps, ns_, cm);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ((*updated)["data"]["k"], "w");

  // 500s until cleared, with the reason and message asked for.
  ASSERT_TRUE(proxy_
                  ->InjectFault({.method = "GET",
                                 .path_regex = ".*/configmaps/a",
                                 .code = 500,
                                 .count = -1,
                                 .reason = "InternalError",
                                 .message = "etcd is on fire"})
                  .ok());
  for (int i = 0; i < 3; ++i) {
    Status s = c.Get(kConfigMaps, ns_, "a").status();
    EXPECT_EQ(s.code(), Code::kUnavailable);
    EXPECT_THAT(s.message(), HasSubstr("etcd is on fire"));
  }
  EXPECT_TRUE(c.Get(kConfigMaps, ns_, "other").status().code() == Code::kNotFound) << "the regex matches whole paths";
  proxy_->ClearFaults();
  EXPECT_TRUE(c.Get(kConfigMaps, ns_, "a").ok());

  // A delay alone forwards the request after it.
  ASSERT_TRUE(proxy_->InjectFault({.method = "DELETE", .code = 0, .delay = 100ms}).ok());
  Status deleted = c.Delete(kConfigMaps, ns_, "a", "Background");
  EXPECT_TRUE(deleted.ok()) << deleted.message();
  EXPECT_EQ(c.Get(kConfigMaps, ns_, "a").status().code(), Code::kNotFound);
  EXPECT_EQ(proxy_->InjectFault({.path_regex = "("}).code(), Code::kInvalidArgument);
}

// As the real server answers a watch from a compacted version: 200, one
// ERROR event carrying a 410 Expired Status, and the end of the stream.
TEST_F(FaultProxyTest, A410OnAWatchIsAnErrorEventThenTheEnd) {
  const std::string path = "/api/v1/namespaces/" + ns_ + "/configmaps";
  ASSERT_TRUE(proxy_->InjectFault({.method = "WATCH", .path_regex = path, .code = 410}).ok());
  const std::string raw = RawGet(proxy_->port(), path + "?watch=1");
  EXPECT_EQ(raw.rfind("HTTP/1.1 200", 0), 0u) << raw;
  EXPECT_THAT(raw, HasSubstr(R"({"type":"ERROR","object":{)"));
  EXPECT_THAT(raw, HasSubstr(R"("code":410)"));
  EXPECT_THAT(raw, HasSubstr(R"("reason":"Expired")"));
  EXPECT_EQ(raw.substr(raw.size() - 5), "0\r\n\r\n") << "a clean end";

  // The client maps it to FAILED_PRECONDITION (relist); the next watch is
  // the server's again.
  ASSERT_TRUE(proxy_->InjectFault({.method = "WATCH", .path_regex = path, .code = 410}).ok());
  std::atomic<bool> stop{false};
  Status s = client_->Watch(
      kConfigMaps, ns_, {}, [](const kube::WatchEvent&) { return true; }, stop);
  EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s;
  // A list is not a watch: untouched.
  ASSERT_TRUE(proxy_->InjectFault({.method = "WATCH", .path_regex = path, .code = 410}).ok());
  EXPECT_TRUE(client_->List(kConfigMaps, ns_, {}).ok());
  proxy_->ClearFaults();
  const auto requests = proxy_->Requests();
  ASSERT_GE(requests.size(), 2u);
  EXPECT_TRUE(requests[requests.size() - 2].watch);
  EXPECT_EQ(requests[requests.size() - 2].code, 200);
}

TEST_F(FaultProxyTest, DropWatchesCutsEveryOpenWatch) {
  std::atomic<bool> stop{false};
  std::vector<Status> ended(2);
  std::vector<std::thread> watchers;
  for (int i = 0; i < 2; ++i) {
    watchers.emplace_back([&, i] {
      ended[static_cast<size_t>(i)] = client_->Watch(
          kConfigMaps, ns_, {}, [](const kube::WatchEvent&) { return true; }, stop);
    });
  }
  ASSERT_TRUE(WaitUntil([&] { return proxy_->ActiveWatches("configmaps") == 2; }));
  EXPECT_EQ(proxy_->ActiveWatches(), 2);
  proxy_->DropWatches();
  for (auto& t : watchers) t.join();
  for (const Status& s : ended) EXPECT_FALSE(s.ok()) << "a cut stream is not a clean end";
  EXPECT_TRUE(WaitUntil([&] { return proxy_->ActiveWatches() == 0; }));
  // Requests after the drop are served as ever.
  EXPECT_TRUE(client_->List(kConfigMaps, ns_, {}).ok());
}

TEST_F(FaultProxyTest, BearerTokensAreCheckedHereAndRotate) {
  proxy_->SetBearerTokens({"token-1"});
  auto anonymous = NewClient("");
  auto one = NewClient("token-1");
  auto two = NewClient("token-2");
  EXPECT_EQ(anonymous->List(kConfigMaps, ns_, {}).status().code(), Code::kUnauthenticated);
  EXPECT_TRUE(one->List(kConfigMaps, ns_, {}).ok()) << "forwarded with the admin credentials";
  EXPECT_EQ(two->List(kConfigMaps, ns_, {}).status().code(), Code::kUnauthenticated);
  proxy_->SetBearerTokens({"token-2"});
  EXPECT_EQ(one->List(kConfigMaps, ns_, {}).status().code(), Code::kUnauthenticated);
  EXPECT_TRUE(two->List(kConfigMaps, ns_, {}).ok());
  std::vector<std::string> seen;
  for (const auto& r : proxy_->Requests()) {
    if (r.path.find("/configmaps") != std::string::npos) seen.push_back(std::to_string(r.code) + " " + r.bearer_token);
  }
  EXPECT_THAT(seen, ::testing::ElementsAre("401 ", "200 token-1", "401 token-2", "401 token-1", "200 token-2"));

  // The kubeconfig carries the proxy's address and a token it accepts.
  const std::string path = MakeTempDir("fault-proxy") + "/kubeconfig";
  ASSERT_TRUE(proxy_->WriteKubeconfig(path, ns_).ok());
  auto config = kube::LoadKubeconfig(path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, proxy_->url());
  EXPECT_EQ(config->default_namespace, ns_);
  auto from_file = kube::RestClient::Create(*config);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_TRUE((*from_file)->List(kConfigMaps, ns_, {}).ok());
  proxy_->SetBearerTokens({});
}

}  // namespace
}  // namespace tfjob::testing
