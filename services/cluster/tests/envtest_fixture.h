// The Kubernetes cluster resolver's tests against the real API server (one
// control plane per test executable, tests/support/envtest.h), after the
// pattern of kube/tests/real_server.h. The test writes straight to the
// server as cluster-admin (`admin_`) and plays the kubelet through the pods'
// status subresource (PutPod); the code under test talks to the server
// directly too, or, in a test that reads what it requested, through a
// FaultProxy (StartProxy: tests/support/fault_proxy.h) whose request log
// then holds the resolver's requests only. Each test gets a namespace of
// its own with its "default" ServiceAccount (pods are refused until it
// exists). Used by services/cluster/tests/kubernetes_test.cc and
// services/runtime/tests/kubernetes_resolver_test.cc.
// Header-only. Failure: set-up failures fail the test with the reason.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "kube/config.h"
#include "kube/rest_client.h"
#include "tests/support/envtest.h"
#include "tests/support/fault_proxy.h"
#include "tests/support/subprocess.h"
#include "tests/support/wait.h"

namespace tfjob::cluster::testing {

class EnvtestTest : public ::testing::Test {
 protected:
  static inline const kube::Resource kNamespaces{"", "v1", "namespaces"};
  static inline const kube::Resource kServiceAccounts{"", "v1", "serviceaccounts"};
  static inline const kube::Resource kRoles{"rbac.authorization.k8s.io", "v1", "roles"};
  static inline const kube::Resource kRoleBindings{"rbac.authorization.k8s.io", "v1", "rolebindings"};

  // `prefix` starts the namespace's name ("c", "r").
  void SetUpNamespace(const std::string& prefix) {
    std::string why;
    cp_ = tfjob::testing::ControlPlane::Shared(&why);
    ASSERT_NE(cp_, nullptr) << why;
    auto admin_config = kube::LoadKubeconfig(cp_->admin_kubeconfig());
    ASSERT_TRUE(admin_config.ok()) << admin_config.status().message();
    auto admin = kube::RestClient::Create(*admin_config);
    ASSERT_TRUE(admin.ok()) << admin.status().message();
    admin_ = std::move(admin).value();

    // A namespace per test: names are a DNS label.
    std::string label;
    for (char ch : std::string(::testing::UnitTest::GetInstance()->current_test_info()->name())) {
      if (std::isalnum(static_cast<unsigned char>(ch))) label += static_cast<char>(std::tolower(ch));
    }
    ns_ = prefix + "-" + label.substr(0, 50);
    auto created = Admin().Create(kNamespaces, "", nlohmann::json{{"metadata", {{"name", ns_}}}});
    ASSERT_TRUE(created.ok()) << created.status().message();
    auto sa = Admin().Create(kServiceAccounts, ns_, nlohmann::json{{"metadata", {{"name", "default"}}}});
    ASSERT_TRUE(sa.ok() || sa.status().code() == Code::kAlreadyExists) << sa.status().message();
  }

  void TearDown() override {
    proxy_.reset();
    if (admin_ && !ns_.empty()) (void)Admin().Delete(kNamespaces, "", ns_);
  }

  kube::Client& Admin() { return *admin_; }

  // The TFJob CRD (crds/kubeflow.org_tfjobs.yaml), once per process, waited
  // for until established.
  void InstallTfJobCrd() {
    static std::once_flag once;
    static std::string error;
    std::call_once(once, [this] {
      // Server-side: the schema is larger than client-side apply's
      // last-applied annotation allows.
      auto r = cp_->Kubectl(
          {"apply", "--server-side", "-f", tfjob::testing::SourceDir() + "/crds/kubeflow.org_tfjobs.yaml"});
      if (r.exit_code != 0) {
        error = "kubectl apply of the TFJob CRD failed: " + r.err;
        return;
      }
      const bool established = tfjob::testing::WaitUntil(
          [&] {
            r = cp_->Kubectl({"get", "crd", "tfjobs.kubeflow.org", "-o",
                              R"(jsonpath={.status.conditions[?(@.type=="Established")].status})"});
            return r.out == "True";
          },
          std::chrono::seconds(60), std::chrono::milliseconds(100));
      if (!established) error = "the TFJob CRD was not established in 60 s: " + r.err;
    });
    ASSERT_TRUE(error.empty()) << error;
  }

  // A FaultProxy in front of the server, for a test that reads the requests
  // the code under test made (proxy_->Requests()).
  void StartProxy() {
    auto proxy = tfjob::testing::FaultProxy::Start(*cp_);
    ASSERT_TRUE(proxy.ok()) << proxy.status().message();
    proxy_ = std::move(proxy).value();
  }

  // Stores `obj` in the test's namespace (its metadata.namespace replaced).
  void Create(const kube::Resource& r, nlohmann::json obj) {
    obj["metadata"]["namespace"] = ns_;
    auto created = Admin().Create(r, ns_, obj);
    ASSERT_TRUE(created.ok()) << created.status().message();
  }

  // `pod` created in the test's namespace when it does not exist yet, then,
  // as the kubelet would, its `status` (phase, podIP) written through the
  // status subresource: the server ignores a status on create.
  void PutPod(nlohmann::json pod) {
    pod["metadata"]["namespace"] = ns_;
    nlohmann::json status = pod.value("status", nlohmann::json::object());
    pod.erase("status");
    if (status.value("podIP", "").empty()) status.erase("podIP");  // none yet
    const std::string name = pod["metadata"]["name"];
    auto created = Admin().Create(kube::kPods, ns_, pod);
    ASSERT_TRUE(created.ok() || created.status().code() == Code::kAlreadyExists) << created.status().message();
    if (status.empty()) return;
    auto patched = Admin().MergePatch(kube::kPods, ns_, name, nlohmann::json{{"status", status}}, /*status=*/true);
    ASSERT_TRUE(patched.ok()) << patched.status().message();
  }

  tfjob::testing::ControlPlane* cp_ = nullptr;
  std::unique_ptr<kube::RestClient> admin_;  // straight to the server, cluster-admin
  std::unique_ptr<tfjob::testing::FaultProxy> proxy_;
  std::string ns_;
};

}  // namespace tfjob::cluster::testing
