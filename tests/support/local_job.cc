#include "tests/support/local_job.h"

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"

namespace tfjob::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPatience = std::chrono::seconds(120);

}  // namespace

LocalJob::LocalJob(const std::string& manifest, const std::string& state_dir,
                   const std::map<std::string, std::string>& env)
    : dir_(state_dir), run_({BinDir() + "/tfjob", "run", manifest, "--state-dir", state_dir}, env) {}

LocalJob::~LocalJob() {
  // A failed test must not leave replicas behind. They die with the runner
  // (PR_SET_PDEATHSIG), but their process groups are killed too, in case.
  if (run_.running()) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
      if (e.path().extension() == ".pid") {
        if (pid_t p = Pid(e.path().stem().string()); p > 0) kill(-p, SIGKILL);
      }
    }
    run_.Stop(SIGKILL);
  }
}

pid_t LocalJob::Pid(const std::string& pod) const {
  std::ifstream in(dir_ + "/" + pod + ".pid");
  long p = 0;
  return (in >> p) ? static_cast<pid_t>(p) : 0;
}

pid_t LocalJob::WaitForPid(const std::string& pod, pid_t old) {
  const auto deadline = Clock::now() + kPatience;
  while (Clock::now() < deadline && run_.running()) {
    if (pid_t p = Pid(pod); p > 0 && p != old && Alive(p)) return p;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

size_t LocalJob::WaitForOutput(const std::regex& re, size_t from, std::smatch* m) {
  const auto deadline = Clock::now() + kPatience;
  while (Clock::now() < deadline) {
    const bool alive = run_.running();
    const std::string out = run_.output();
    std::smatch local;
    std::smatch& mm = m ? *m : local;
    if (from <= out.size()) {
      auto begin = out.cbegin() + static_cast<std::ptrdiff_t>(from);
      if (std::regex_search(begin, out.cend(), mm, re))
        return from + static_cast<size_t>(mm.position(0) + mm.length(0));
    }
    if (!alive) return std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::string::npos;
}

int LocalJob::SignalAndAwaitExit(const std::string& pod, int sig) {
  const pid_t p = WaitForPid(pod);
  if (p <= 0) return -1;
  const size_t before = output().size();
  kill(p, sig);
  std::smatch m;
  if (WaitForOutput(std::regex("\\[" + pod + "\\] (?:stopped: )?exited with code ([0-9]+)"), before, &m) ==
      std::string::npos) {
    return -1;
  }
  return std::stoi(m[1]);
}

pid_t LocalJob::SignalAndAwaitRestart(const std::string& pod, int sig) {
  const pid_t p = WaitForPid(pod);
  if (p <= 0) return 0;
  kill(p, sig);
  return WaitForPid(pod, p);
}

int LocalJob::Wait(std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  while (run_.running() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return run_.Stop(SIGTERM);
}

std::string YamlList(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + nlohmann::json(items[i]).dump();
  return out + "]";
}

std::string TfJobYaml(const std::string& name, const std::vector<Replica>& replicas, const std::string& run_policy) {
  std::string y = "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: " + name + "}\nspec:\n";
  if (!run_policy.empty()) y += "  runPolicy: " + run_policy + "\n";
  y += "  tfReplicaSpecs:\n";
  for (const Replica& r : replicas) {
    y +=
        "    " + r.type + ":\n      replicas: " + std::to_string(r.replicas) +
        "\n      restartPolicy: " + r.restart_policy +
        "\n      template: {spec: {containers: [{name: tensorflow, image: tfjob/runtime-cpu:0.1.0,\n        command: " +
        r.command + "}]}}\n";
  }
  return y;
}

bool Alive(pid_t pid) {
  if (pid <= 0 || kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  // "pid (comm) S ...": the state follows the last ')'.
  const size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z';
}

}  // namespace tfjob::testing
