// What the tfjob-operator end-to-end suites share (e2e_test.cc,
// e2e_faults_test.cc, e2e_lax_crd_test.cc): the real API server of
// envtest_support.h, TFJobs submitted from examples/ or built here, and,
// for the scenarios that need faults on cue or a log of what the operator
// sent, a FaultProxy (tests/support/fault_proxy.h) between the operator and
// the server. The test's own writes always go straight to the server as
// cluster-admin. Header-only. Failure: set-up errors fail the test.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "common/files.h"
#include "kube/config.h"
#include "operator/api/codec.h"
#include "operator/tests/envtest_support.h"
#include "tests/support/fault_proxy.h"
#include "tests/support/subprocess.h"

namespace tfjob::op::envtest {

class OperatorE2E : public RealApiServerTest {
 protected:
  // A proxy in front of the server and a kubeconfig for the operator that
  // points at it (this test's namespace as its default).
  void StartProxy() {
    auto proxy = ::tfjob::testing::FaultProxy::Start(*cp_);
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = std::move(proxy).value();
    proxy_kubeconfig_ = dir_ + "/proxy.kubeconfig";
    ASSERT_TRUE(proxy_->WriteKubeconfig(proxy_kubeconfig_, ns_).ok());
  }
  // The operator through the proxy.
  void StartOperatorBehindProxy(const std::vector<std::string>& extra = {}) {
    ASSERT_TRUE(proxy_) << "StartProxy() first";
    StartOperator(extra, proxy_kubeconfig_);
  }
  json Manifest(const std::string& example) {
    auto text = ReadFile(::tfjob::testing::SourceDir() + "/" + example);
    EXPECT_TRUE(text.ok()) << text.status();
    auto doc = api::YamlToJson(text.ok() ? *text : "", example);
    EXPECT_TRUE(doc.ok()) << doc.status();
    return doc.ok() ? *doc : json();
  }
  // Creates `job` in this test's namespace; the stored object.
  json Submit(json job) {
    job["metadata"]["namespace"] = ns_;
    Apply(job.dump());
    return Get("tfjob", job["metadata"]["name"]);
  }
  json Job(const std::string& name) { return Get("tfjob", name); }
  std::string MetricsAt(int port) {
    return ::tfjob::testing::Run({"curl", "-s", "http://127.0.0.1:" + std::to_string(port) + "/metrics"}).out;
  }
  // The metrics port an operator started with OperatorProcess() bound; 0 if
  // it never said.
  static int MetricsPort(::tfjob::testing::Process& op) {
    const auto line = op.WaitForLine("tfjob-operator: metrics on :");
    int port = 0;
    return line && std::sscanf(line->c_str(), "%d", &port) == 1 ? port : 0;
  }
  // A Worker-only job.
  static json SmallJob(const std::string& name, const std::string& policy, int workers = 2) {
    json container{{"name", "tensorflow"}, {"image", "tfjob/runtime-cpu:0.1.0"}};
    return {{"apiVersion", "kubeflow.org/v1"},
            {"kind", "TFJob"},
            {"metadata", {{"name", name}}},
            {"spec",
             {{"tfReplicaSpecs",
               {{"Worker",
                 {{"replicas", workers},
                  {"restartPolicy", policy},
                  {"template", {{"spec", {{"containers", json::array({container})}}}}}}}}}}}};
  }

  std::unique_ptr<::tfjob::testing::FaultProxy> proxy_;
  std::string proxy_kubeconfig_;
};

// A stored Secret's text for `key`: the API server keeps stringData as
// base64 `data`.
inline std::string SecretText(const json& secret, const std::string& key) {
  const json& data = secret.value("data", json::object());
  return data.contains(key) && data[key].is_string() ? kube::Base64Decode(data[key].get<std::string>()) : "";
}

inline void ExpectPkiIn(const json& secret) {
  EXPECT_THAT(SecretText(secret, "ca.crt"), ::testing::StartsWith("-----BEGIN CERTIFICATE-----"));
  EXPECT_THAT(SecretText(secret, "tls.crt"), ::testing::StartsWith("-----BEGIN CERTIFICATE-----"));
  EXPECT_THAT(SecretText(secret, "tls.key"), ::testing::StartsWith("-----BEGIN PRIVATE KEY-----"));
  EXPECT_NE(SecretText(secret, "ca.crt"), SecretText(secret, "tls.crt"));
}

}  // namespace tfjob::op::envtest
