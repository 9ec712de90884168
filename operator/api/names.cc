#include "operator/api/names.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <vector>

#include "contract/tf_config.h"

namespace tfjob::op::api {
namespace {

// An environment variable this large could not be stored in a Pod anyway
// (objects are limited to about 1.5 MiB); refusing early also bounds memory
// for absurd replica counts.
constexpr size_t kMaxTfConfigBytes = 1 << 20;

std::string Address(const TFJob& job, std::string_view ns, const ReplicaSpec& spec, int index,
                    const TfConfigOptions& options) {
  if (options.address) return options.address(spec, index);
  // Headless services give each pod a DNS A record {svc}.{ns}.svc[.domain].
  std::string host = ServiceName(job.metadata.name, TypeLabel(spec), index) + "." + std::string(ns) + ".svc";
  if (!options.cluster_domain.empty()) host += "." + options.cluster_domain;
  return host + ":" + std::to_string(TfPort(spec));
}

struct ClusterEntry {
  const ReplicaSpec* spec;
  std::string label;
  std::vector<std::string> addresses;
};

}  // namespace

std::string TypeLabel(const ReplicaSpec& spec) {
  if (spec.type) return spec.master_alias ? std::string(kJobRoleMaster) : std::string(LowerName(*spec.type));
  std::string lower = spec.key;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

std::string PodName(std::string_view job, std::string_view type_label, int index) {
  return std::string(job) + "-" + std::string(type_label) + "-" + std::to_string(index);
}

std::string AuthSecretName(std::string_view job) { return std::string(job) + "-tfjob-auth"; }
std::string NetworkPolicyName(std::string_view job) { return std::string(job) + "-tfjob"; }

std::string ServiceName(std::string_view job, std::string_view type_label, int index) {
  return PodName(job, type_label, index);
}

std::map<std::string, std::string> JobLabels(std::string_view job) {
  return {{std::string(kJobNameLabel), std::string(job)},
          {std::string(kOperatorNameLabel), std::string(kOperatorName)}};
}

std::map<std::string, std::string> Labels(std::string_view job, std::string_view type_label, int index,
                                          bool is_master) {
  auto labels = JobLabels(job);
  labels[std::string(kReplicaTypeLabel)] = std::string(type_label);
  labels[std::string(kReplicaIndexLabel)] = std::to_string(index);
  if (is_master) labels[std::string(kJobRoleLabel)] = std::string(kJobRoleMaster);
  return labels;
}

bool IsMasterRole(const TFJob& job, const ReplicaSpec& spec, int index) {
  if (job.Find(ReplicaType::kChief)) return spec.type == ReplicaType::kChief;
  return spec.type == ReplicaType::kWorker && index == 0;
}

bool NeedsTfConfig(const TFJob& job) {
  int64_t total = 0;
  for (const ReplicaSpec& s : job.spec.replica_specs) {
    if (s.type) total += ReplicasOrDefault(s);
  }
  return total > 1;
}

int32_t TfPort(const ReplicaSpec& spec) {
  const auto& t = spec.template_json;
  if (!t.is_object()) return kDefaultPort;
  auto pod = t.find("spec");
  if (pod == t.end() || !pod->is_object()) return kDefaultPort;
  auto containers = pod->find("containers");
  if (containers == pod->end() || !containers->is_array()) return kDefaultPort;
  for (const auto& c : *containers) {
    if (!c.is_object()) continue;
    auto name = c.find("name");
    if (name == c.end() || !name->is_string() || *name != kDefaultContainerName) continue;
    auto ports = c.find("ports");
    if (ports == c.end() || !ports->is_array()) continue;
    for (const auto& p : *ports) {
      if (!p.is_object()) continue;
      auto port_name = p.find("name");
      auto number = p.find("containerPort");
      if (port_name != p.end() && port_name->is_string() && *port_name == kDefaultPortName && number != p.end() &&
          number->is_number_integer()) {
        const int64_t n = number->get<int64_t>();
        if (n >= INT32_MIN && n <= INT32_MAX) return static_cast<int32_t>(n);
      }
    }
  }
  return kDefaultPort;
}

StatusOr<std::string> TfConfig(const TFJob& job, std::string_view ns, ReplicaType type, int index,
                               const TfConfigOptions& options) {
  const ReplicaSpec* self = job.Find(type);
  if (!self) return InvalidArgument("TFJob has no " + std::string(CanonicalName(type)) + " replicas");
  if (index < 0 || index >= ReplicasOrDefault(*self)) {
    return InvalidArgument(std::string(CanonicalName(type)) + " index " + std::to_string(index) + " out of range [0, " +
                           std::to_string(ReplicasOrDefault(*self)) + ")");
  }

  // Every replica type makes up "cluster", the evaluator included
  // (training-operator v1.9.0's genClusterSpec; runtimes leave it out of
  // the training cluster themselves), in the order Go's encoding/json
  // writes map keys (sorted by name).
  std::vector<ClusterEntry> cluster;
  size_t estimated_bytes = 0;
  for (ReplicaType t : kReplicaTypes) {
    const ReplicaSpec* s = job.Find(t);
    if (!s) continue;
    // Rough size check before building anything: each entry is the host plus
    // a port, quotes and a comma.
    const size_t per = job.metadata.name.size() + ns.size() + options.cluster_domain.size() + 48;
    estimated_bytes += per * static_cast<size_t>(ReplicasOrDefault(*s));
    if (estimated_bytes > kMaxTfConfigBytes) {
      return InvalidArgument("TF_CONFIG for this job would exceed " + std::to_string(kMaxTfConfigBytes) +
                             " bytes; reduce the number of replicas");
    }
    cluster.push_back({s, TypeLabel(*s), {}});
  }
  for (ClusterEntry& e : cluster) {
    for (int i = 0; i < ReplicasOrDefault(*e.spec); ++i) e.addresses.push_back(Address(job, ns, *e.spec, i, options));
  }

  // The bytes come from the contract's one writer (contract/tf_config.h),
  // the same the runtime's launchers use.
  const contract::TaskId task{TypeLabel(*self), index};
  try {
    if (job.spec.enable_dynamic_worker.value_or(false)) {
      // A worker sees itself and every PS (none: Go's nil slice), a PS only
      // itself, the other types neither.
      std::map<int64_t, std::string> workers;
      std::optional<std::vector<std::string>> ps = std::vector<std::string>();
      if (type == ReplicaType::kPS) {
        ps->push_back(Address(job, ns, *self, index, options));
      } else if (type == ReplicaType::kWorker) {
        workers[index] = Address(job, ns, *self, index, options);
        ps.reset();
        for (const ClusterEntry& e : cluster) {
          if (e.spec->type == ReplicaType::kPS) ps = e.addresses;
        }
      }
      return contract::WriteSparseTfConfig(workers, ps, task);
    }
    // Every replica type, each listing all its replicas; Kubeflow sets
    // "environment" so that old tf.contrib.learn does not assume "local".
    contract::TfConfigDoc doc;
    for (const ClusterEntry& e : cluster) {
      auto& tasks = doc.cluster[e.label];
      for (size_t i = 0; i < e.addresses.size(); ++i) tasks[static_cast<int64_t>(i)] = e.addresses[i];
    }
    doc.task = task;
    doc.environment = "cloud";
    return contract::WriteTfConfig(doc);
  } catch (const std::exception& e) {
    return Internal(std::string("encoding TF_CONFIG: ") + e.what());
  }
}

}  // namespace tfjob::op::api
