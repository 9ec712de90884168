// What the real-API-server tests share: the process's control plane
// (tests/support/envtest.h) with the TFJob CRD installed, a namespace per
// test, the real tfjob-operator binary against it, and the kubelet's part
// played by writing pod status through the status subresource.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/envtest.h"
#include "tests/support/process.h"

namespace tfjob::op::envtest {

using json = nlohmann::json;

class RealApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // The operator, watching this test's namespace, with the admin identity
  // unless `kubeconfig` says otherwise. Reads the ports it bound.
  void StartOperator(const std::vector<std::string>& extra = {}, const std::string& kubeconfig = "");
  void StopOperator();
  std::unique_ptr<::tfjob::testing::Process> OperatorProcess(const std::vector<std::string>& extra,
                                                             const std::string& kubeconfig = "");

  // kubectl with the admin identity; fails the test on a non-zero exit
  // unless `may_fail`.
  ::tfjob::testing::RunResult Kubectl(const std::vector<std::string>& args, bool may_fail = false);
  // `kubectl apply` of a manifest (YAML or JSON) into this namespace.
  ::tfjob::testing::RunResult Apply(const std::string& manifest, bool may_fail = false);
  json Get(const std::string& resource, const std::string& name, bool may_fail = false);
  std::optional<json> TryGet(const std::string& resource, const std::string& name);
  std::vector<json> List(const std::string& resource, const std::string& selector = "");
  std::vector<json> Pods(const std::string& job);
  std::vector<json> Services(const std::string& job);
  std::vector<json> Events(const std::string& object_name);
  bool HasCondition(const std::string& job, const std::string& type);
  // metadata.uid of the object ("" when absent); one argument: a pod.
  std::string Uid(const std::string& resource, const std::string& name);
  std::string Uid(const std::string& pod) { return Uid("pod", pod); }
  // Every pod of `job` Running, as the kubelet would report it.
  void AllRunning(const std::string& job);
  // Installs a CRD (JSON, server-side) and waits until it is established.
  void InstallCrd(const json& crd);
  // The kubelet's part: phase, and the tensorflow container's state.
  void SetPhase(const std::string& pod, const std::string& phase, std::optional<int> exit_code = std::nullopt);
  void SetPodStatus(const std::string& pod, const json& status);
  bool Eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  std::string Metrics();
  // A TFJob manifest: `replicas` is YAML for tfReplicaSpecs' entries.
  static std::string JobYaml(const std::string& name, const std::string& replica_specs,
                             const std::string& extra_spec = "");
  static std::string Replica(const std::string& type, int n, const std::string& policy = "Never",
                             const std::string& container_extra = "");

  // The TFJob CRD the process installs (once, in the first SetUp): the
  // project's, unless a fixture installs another.
  virtual std::string CrdPath();

  ::tfjob::testing::ControlPlane* cp_ = nullptr;
  std::map<std::string, std::string> op_env_;  // the operator's extra environment
  std::string ns_;
  std::string dir_;
  std::unique_ptr<::tfjob::testing::Process> op_;
  int metrics_port_ = 0, health_port_ = 0;
};

// The value of the tensorflow container's variable `name` in a pod ("" when
// absent).
std::string Env(const json& pod, const std::string& name);

// The gang schedulers' PodGroup CRDs (Volcano's scheduling.volcano.sh/
// v1beta1, scheduler-plugins' scheduling.x-k8s.io/v1alpha1) as far as the
// operator uses them: the kind, a status subresource, their printer columns,
// and a schema that keeps every field (the schedulers' own are long and the
// operator writes only fields both define).
json VolcanoPodGroupCrd();
json SchedulerPluginsPodGroupCrd();

// The garbage collector acts for a custom resource (a TFJob, a PodGroup)
// only once its periodic discovery, every 30 s in kube-controller-manager,
// has found the resource; waits on it allow for that.
inline constexpr std::chrono::seconds kGarbageCollectorTimeout{90};

}  // namespace tfjob::op::envtest
