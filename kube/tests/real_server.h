// The kube/ library's tests against the real API server (one control plane
// per test executable, tests/support/envtest.h) with a FaultProxy in front
// of it (tests/support/fault_proxy.h): the code under test talks to the
// proxy (`client_`), the test itself writes straight to the server as
// cluster-admin (`admin_`), so faults and the request log concern only the
// code under test. Each test gets a namespace of its own, with its
// "default" ServiceAccount (pods are refused until it exists).
// Header-only. Failure: set-up failures fail the test with the reason.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "kube/config.h"
#include "kube/rest_client.h"
#include "tests/support/envtest.h"
#include "tests/support/fault_proxy.h"
#include "tests/support/wait.h"

namespace tfjob::kube {

class RealServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    cp_ = testing::ControlPlane::Shared(&why);
    ASSERT_NE(cp_, nullptr) << why;
    auto proxy = testing::FaultProxy::Start(*cp_);
    ASSERT_TRUE(proxy.ok()) << proxy.status().message();
    proxy_ = std::move(proxy).value();
    auto admin_config = LoadKubeconfig(cp_->admin_kubeconfig());
    ASSERT_TRUE(admin_config.ok()) << admin_config.status().message();
    auto admin = RestClient::Create(*admin_config);
    ASSERT_TRUE(admin.ok()) << admin.status().message();
    admin_ = std::move(admin).value();
    ClusterConfig c;
    c.server = proxy_->url();
    auto client = RestClient::Create(c);
    ASSERT_TRUE(client.ok()) << client.status().message();
    client_ = std::move(client).value();

    // A namespace per test: names are a DNS label.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::string label;
    for (char ch : name) {
      if (std::isalnum(static_cast<unsigned char>(ch))) label += static_cast<char>(std::tolower(ch));
    }
    ns_ = "k-" + label.substr(0, 50);
    Client& a = *admin_;
    auto created = a.Create(kNamespaceResource, "", nlohmann::json{{"metadata", {{"name", ns_}}}});
    ASSERT_TRUE(created.ok()) << created.status().message();
    auto sa = a.Create(kServiceAccounts, ns_, nlohmann::json{{"metadata", {{"name", "default"}}}});
    ASSERT_TRUE(sa.ok() || sa.status().code() == Code::kAlreadyExists) << sa.status().message();
  }

  void TearDown() override {
    if (admin_ && !ns_.empty()) {
      Client& a = *admin_;
      (void)a.Delete(kNamespaceResource, "", ns_);
    }
  }

  // Waits for `pred` (polled), at most `timeout`.
  static bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
    return testing::WaitUntil(pred, timeout, std::chrono::milliseconds(5));
  }

  static inline const Resource kNamespaceResource{"", "v1", "namespaces"};
  static inline const Resource kServiceAccounts{"", "v1", "serviceaccounts"};

  testing::ControlPlane* cp_ = nullptr;
  std::unique_ptr<testing::FaultProxy> proxy_;
  std::unique_ptr<RestClient> admin_;   // straight to the server, cluster-admin
  std::unique_ptr<RestClient> client_;  // through the proxy: for the code under test
  std::string ns_;
};

}  // namespace tfjob::kube
