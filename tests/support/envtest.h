// A real Kubernetes control plane for tests: etcd, kube-apiserver and
// kube-controller-manager (garbage collector, namespaces, service-account
// tokens) on loopback, from the kit in ../shared/envtest (or $TFJOB_ENVTEST,
// a copy of it elsewhere), in the spirit of controller-runtime's envtest.
// There is no kubelet and no scheduler: pods are stored, never run; tests
// play the kubelet by writing pod status through the status subresource.
//
// With KUBEBUILDER_ASSETS set (the folder setup-envtest lays out: etcd,
// kube-apiserver, kubectl), those binaries are used instead of the kit's;
// kube-controller-manager comes from that folder when it holds one, else
// from the kit.
//
// One control plane per test process, started on first use and stopped when
// the process exits (a watchdog stops it too if the process dies first).
// Thread-safety: Shared() may be called from any thread; the object's
// methods are const and reentrant. Failure: Shared() returns nullptr with one
// line saying what is missing or what failed (the kit, etcd, a start error).
#pragma once

#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace tfjob::testing {

class ControlPlane {
 public:
  static ControlPlane* Shared(std::string* why);

  const std::string& dir() const { return dir_; }
  // cluster-admin (O=system:masters).
  std::string admin_kubeconfig() const { return dir_ + "/admin.kubeconfig"; }
  // https://127.0.0.1:PORT
  const std::string& server() const { return server_; }
  // kubectl with the admin kubeconfig: the official v1.31 from .tools/bin
  // (scripts/setup.sh) when there, else the kit's v1.26.
  RunResult Kubectl(const std::vector<std::string>& args) const;
  // Writes `manifest` to a file and `kubectl apply`s it (server-side when
  // `server_side`).
  RunResult Apply(const std::string& manifest, bool server_side = false) const;
  // Stops and starts the API server, etcd and controller manager again,
  // keeping etcd's data: an API server restart.
  bool Restart(std::string* why) const;

  ~ControlPlane();

 private:
  ControlPlane() = default;
  bool Start(std::string* why) const;
  std::string dir_, kit_;
  mutable std::string server_;    // set by Start
  std::vector<std::string> env_;  // NAME=VALUE for the kit's scripts
};

// The official kubectl and helm (scripts/setup.sh puts them in
// SourceDir()/.tools/bin); "" when not installed.
std::string ToolPath(const std::string& name);

}  // namespace tfjob::testing
