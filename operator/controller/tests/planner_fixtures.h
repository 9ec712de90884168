// What the planner's table tests build their cases from: a TFJob decoded
// from its spec as the API server would hand it over, and the pod and
// service views of objects this operator made for it. One job, "j" in "ns"
// with uid "uid-1"; every object owned by it. Header-only; the test files
// that include it wrap these in their own short helpers.
#pragma once

#include <optional>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/time.h"
#include "operator/api/codec.h"
#include "operator/controller/planner.h"

namespace tfjob::op::controller::fixtures {

// The planner's "now" in every table test.
inline const Time kNow = *ParseRfc3339("2026-11-21T12:00:00Z");

// The tensorflow container of the runtime's CPU image; `extra` adds fields.
inline nlohmann::json TensorflowContainer(const nlohmann::json& extra = nlohmann::json::object()) {
  nlohmann::json c{{"name", "tensorflow"}, {"image", "tfjob/runtime-cpu:0.1.0"}};
  for (auto it = extra.begin(); it != extra.end(); ++it) c[it.key()] = it.value();
  return c;
}

// The TFJob "j" with these tfReplicaSpecs and runPolicy; `metadata` adds to
// (or overrides) its name, namespace and uid, `extra_spec` adds spec fields.
// A spec the decoder refuses fails the test.
inline api::TFJob DecodeJob(const nlohmann::json& specs, const nlohmann::json& run_policy = nlohmann::json::object(),
                            const nlohmann::json& metadata = nlohmann::json::object(),
                            const nlohmann::json& extra_spec = nlohmann::json::object()) {
  nlohmann::json doc{{"apiVersion", "kubeflow.org/v1"},
                     {"kind", "TFJob"},
                     {"metadata", {{"name", "j"}, {"namespace", "ns"}, {"uid", "uid-1"}}},
                     {"spec", {{"tfReplicaSpecs", specs}, {"runPolicy", run_policy}}}};
  for (auto it = metadata.begin(); it != metadata.end(); ++it) doc["metadata"][it.key()] = it.value();
  for (auto it = extra_spec.begin(); it != extra_spec.end(); ++it) doc["spec"][it.key()] = it.value();
  auto job = api::Decode(doc);
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : api::TFJob{};
}

// The pod of replica `type` (lower-case) `index`, with Kubeflow's labels,
// owned by the job and made by this operator (its task token, as with
// --task-auth, the default). `exit` is the container's last exit code.
inline PodView OwnedPod(const std::string& type, int index, const std::string& phase,
                        std::optional<int> exit = std::nullopt) {
  PodView p;
  p.name = "j-" + type + "-" + std::to_string(index);
  p.uid = "pod-" + p.name;
  p.labels = {{"training.kubeflow.org/job-name", "j"},
              {"training.kubeflow.org/operator-name", "tfjob-controller"},
              {"training.kubeflow.org/replica-type", type},
              {"training.kubeflow.org/replica-index", std::to_string(index)}};
  p.phase = phase;
  p.exit_code = exit;
  p.controller_uid = "uid-1";
  p.task_token = true;
  return p;
}

// The headless service of replica `type` `index`, owned by the job.
inline ServiceView OwnedService(const std::string& type, int index) {
  ServiceView s;
  s.name = "j-" + type + "-" + std::to_string(index);
  s.labels = {{"training.kubeflow.org/replica-type", type},
              {"training.kubeflow.org/replica-index", std::to_string(index)}};
  s.controller_uid = "uid-1";
  return s;
}

}  // namespace tfjob::op::controller::fixtures
