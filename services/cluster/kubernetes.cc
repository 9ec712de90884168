#include "services/cluster/kubernetes.h"

#include <algorithm>
#include <cctype>
#include <thread>

#include "contract/labels.h"

namespace tfjob::cluster::kubernetes {
namespace {

struct PodAddress {
  int64_t index = 0;
  std::string name;
  std::string ip;
  int port = 0;
  bool ready = false;
};

std::string Str(const nlohmann::json& j, const std::string& key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

// The containerPort named tfjob-port of the container named tensorflow, or 0.
int TfJobPort(const nlohmann::json& pod) {
  const auto& spec = pod.value("spec", nlohmann::json::object());
  for (const auto& c : spec.value("containers", nlohmann::json::array())) {
    if (Str(c, "name") != "tensorflow") continue;
    for (const auto& p : c.value("ports", nlohmann::json::array())) {
      if (Str(p, "name") == "tfjob-port" && p.contains("containerPort") && p["containerPort"].is_number_integer()) {
        const int port = p["containerPort"].get<int>();
        if (port > 0 && port <= 65535) return port;
      }
    }
  }
  return 0;
}

}  // namespace

std::map<std::string, std::string> TfJobSelectors(const std::string& job, const std::vector<std::string>& types) {
  std::map<std::string, std::string> out;
  for (const auto& t : types) {
    out[t] = contract::Selector(job, t);
  }
  return out;
}

StatusOr<std::map<std::string, int64_t>> TfJobTaskCounts(const nlohmann::json& tfjob) {
  const std::string name = Str(tfjob.value("metadata", nlohmann::json::object()), "name");
  const nlohmann::json spec = tfjob.value("spec", nlohmann::json::object());
  const nlohmann::json replicas = spec.is_object() ? spec.value("tfReplicaSpecs", nlohmann::json()) : nlohmann::json();
  if (!replicas.is_object() || replicas.empty()) {
    return InvalidArgument("TFJob \"" + name + "\" has no spec.tfReplicaSpecs");
  }
  std::map<std::string, int64_t> counts;
  for (auto it = replicas.begin(); it != replicas.end(); ++it) {
    std::string type = it.key();
    std::transform(type.begin(), type.end(), type.begin(), [](unsigned char c) { return std::tolower(c); });
    if (type == "evaluator") continue;
    int64_t n = 1;
    if (it->is_object() && it->contains("replicas") && !(*it)["replicas"].is_null()) {
      const auto& r = (*it)["replicas"];
      if (!r.is_number_integer() || r.get<int64_t>() < 0) {
        return InvalidArgument("TFJob \"" + name + "\": spec.tfReplicaSpecs[" + it.key() +
                               "].replicas is not a non-negative integer");
      }
      n = r.get<int64_t>();
    }
    if (n > 0) counts[type] = n;
  }
  return counts;
}

StatusOr<ClusterSpec> ResolveCluster(kube::Client& client, const ResolverOptions& o) {
  if (o.job_selectors.empty()) return InvalidArgument("kubernetes resolver: no jobs to resolve");
  const auto deadline = std::chrono::steady_clock::now() + o.wait_timeout;
  while (true) {
    std::map<std::string, std::vector<std::string>> jobs;
    std::vector<std::string> not_ready;
    for (const auto& [job, selector] : o.job_selectors) {
      kube::ListOptions lo;
      lo.label_selector = selector;
      auto list = client.List(kube::kPods, o.ns, lo);
      if (!list.ok()) return list.status().WithContext("kubernetes resolver: listing pods " + selector + " in " + o.ns);
      std::vector<PodAddress> pods;
      for (const auto& item : list->value("items", nlohmann::json::array())) {
        PodAddress p;
        const auto& meta = item.value("metadata", nlohmann::json::object());
        p.name = Str(meta, "name");
        const std::string idx =
            Str(meta.value("labels", nlohmann::json::object()), std::string(contract::kReplicaIndexLabel));
        char* end = nullptr;
        p.index = idx.empty() ? -1 : std::strtoll(idx.c_str(), &end, 10);
        if (!idx.empty() && *end != '\0') p.index = -1;
        const auto& st = item.value("status", nlohmann::json::object());
        p.ip = Str(st, "podIP");
        p.ready = Str(st, "phase") == "Running" && !p.ip.empty() && !meta.contains("deletionTimestamp");
        p.port = TfJobPort(item);
        if (p.port == 0) p.port = o.port;
        pods.push_back(std::move(p));
      }
      // Numeric replica index first; pods without one after, by name.
      std::sort(pods.begin(), pods.end(), [](const PodAddress& a, const PodAddress& b) {
        if ((a.index < 0) != (b.index < 0)) return a.index >= 0;
        return a.index != b.index ? a.index < b.index : a.name < b.name;
      });
      const auto expected = o.expected_tasks.find(job);
      if (expected != o.expected_tasks.end()) {
        // Exactly the tasks 0..n-1: one pod each (a pod being replaced may
        // briefly have a twin; the ready one wins).
        std::vector<const PodAddress*> slot(static_cast<size_t>(expected->second), nullptr);
        for (const auto& p : pods) {
          if (p.index < 0 || p.index >= expected->second) continue;
          const PodAddress*& s = slot[static_cast<size_t>(p.index)];
          if (!s || (!s->ready && p.ready)) s = &p;
        }
        for (size_t i = 0; i < slot.size(); ++i) {
          if (!slot[i]) not_ready.push_back(job + " " + std::to_string(i) + " (no pod yet)");
        }
        pods.clear();
        for (const PodAddress* s : slot) {
          if (s) pods.push_back(*s);
        }
      } else if (pods.empty()) {
        not_ready.push_back("(no pod matches " + selector + ")");
      }
      auto& addrs = jobs[job];
      for (const auto& p : pods) {
        if (!p.ready) not_ready.push_back(p.name);
        const bool v6 = p.ip.find(':') != std::string::npos;
        addrs.push_back((v6 ? "[" + p.ip + "]" : p.ip) + ":" + std::to_string(p.port));
      }
    }
    if (not_ready.empty()) return ClusterSpec::FromLists(jobs);
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string names;
      for (const auto& n : not_ready) names += (names.empty() ? "" : ", ") + n;
      return DeadlineExceeded("kubernetes resolver: pods not Running with an IP after " +
                              std::to_string(o.wait_timeout.count() / 1000) + " s: " + names);
    }
    std::this_thread::sleep_for(o.poll_interval);
  }
}

}  // namespace tfjob::cluster::kubernetes
