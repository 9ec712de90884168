// How fast the operator brings up many jobs at once, and how much memory it
// needs: 1,000 TFJobs of 4 replicas each (1 PS + 3 workers) are created in
// the API-server double at once; we time until all 4,000 pods and 4,000
// services exist, then read the operator process's peak RSS (VmHWM).
// The operator runs as its own process over real HTTP, with --qps/--burst
// raised so the client-side rate limit is not what is measured (the flags
// are printed). Bounded: gives up after --timeout seconds.
#include <csignal>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include "common/flags.h"
#include "services/base/tests/http_get.h"
#include "tests/support/apiserver/apiserver_double.h"
#include "tests/support/process.h"

using json = nlohmann::json;

namespace {

json Job(int i) {
  json container{{"name", "tensorflow"}, {"image", "tfjob/runtime-cpu:0.1.0"}, {"command", {"tfjob-runtime", "counter"}}};
  auto replica = [&](int n) {
    return json{{"replicas", n}, {"restartPolicy", "OnFailure"},
                {"template", {{"spec", {{"containers", json::array({container})}}}}}};
  };
  return {{"apiVersion", "kubeflow.org/v1"},
          {"kind", "TFJob"},
          {"metadata", {{"name", "job-" + std::to_string(i)}, {"namespace", "default"}}},
          {"spec", {{"tfReplicaSpecs", {{"PS", replica(1)}, {"Worker", replica(3)}}}}}};
}

long PeakRssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  tfjob::Flags flags;
  flags.Value("jobs", "TFJobs to create", "1000")
      .Value("operator", "path of tfjob-operator", "build/bin/tfjob-operator")
      .Value("qps", "operator --qps", "2000")
      .Value("burst", "operator --burst", "4000")
      .Value("workers", "operator --workers", "4")
      .Value("timeout", "give up after this many seconds", "120");
  if (auto s = flags.Parse({argv + 1, argv + argc}); !s.ok()) {
    std::cerr << s.message() << "\n" << flags.Usage();
    return 2;
  }
  const int jobs = static_cast<int>(*flags.GetInt("jobs"));
  auto server = tfjob::testing::ApiServerDouble::Start();
  if (!server.ok()) {
    std::cerr << server.status() << std::endl;
    return 1;
  }
  const std::string kubeconfig = "/tmp/tfjob-operator-scale-" + std::to_string(getpid()) + ".kubeconfig";
  (void)(*server)->WriteKubeconfig(kubeconfig);
  // Its endpoints on ports it binds itself; its start-up line says which.
  tfjob::testing::Process op({flags.Get("operator"), "--kubeconfig", kubeconfig, "--namespace", "default", "--qps",
                              flags.Get("qps"), "--burst", flags.Get("burst"), "--workers", flags.Get("workers"),
                              "--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0"});
  int metrics = 0, health = 0;
  const auto ports = op.WaitForLine("tfjob-operator: metrics on :");
  if (!ports || std::sscanf(ports->c_str(), "%d, health probes on :%d", &metrics, &health) != 2) {
    std::cerr << "the operator did not start:\n" << op.output() << std::endl;
    std::remove(kubeconfig.c_str());
    return 1;
  }
  // Let the operator's caches sync on the empty cluster first: /readyz says when.
  const auto ready_by = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (tfjob::testing::HttpGet(health, "/readyz").status != 200) {
    if (std::chrono::steady_clock::now() > ready_by) {
      std::cerr << "the operator never became ready:\n" << op.output() << std::endl;
      std::remove(kubeconfig.c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < jobs; ++i) {
    if (auto r = (*server)->Create("tfjobs", "default", Job(i)); !r.ok()) {
      std::cerr << r.status() << std::endl;
      return 1;
    }
  }
  const size_t want = static_cast<size_t>(jobs) * 4;
  size_t pods = 0, services = 0;
  const auto deadline = t0 + std::chrono::seconds(*flags.GetInt("timeout"));
  while (std::chrono::steady_clock::now() < deadline) {
    pods = (*server)->List("pods", "default")->size();
    services = (*server)->List("services", "default")->size();
    if (pods >= want && services >= want) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const long rss = PeakRssKiB(op.pid());
  op.Stop(SIGTERM);
  std::remove(kubeconfig.c_str());
  std::printf("Operator scale: %d TFJobs x 4 replicas (1 PS + 3 workers), operator --qps %s --burst %s --workers %s\n",
              jobs, flags.Get("qps").c_str(), flags.Get("burst").c_str(), flags.Get("workers").c_str());
  std::printf("  pods %zu/%zu, services %zu/%zu\n", pods, want, services, want);
  std::printf("  seconds until every pod and service exists: %.2f   (goal < 20)\n", seconds);
  std::printf("  operator peak RSS: %.1f MiB   (goal < 40)\n", rss / 1024.0);
  return pods >= want && services >= want ? 0 : 1;
}
