// Shared helpers for the operator API tests: test data lives in
// operator/api/tests/testdata under the source tree ($TFJOB_SOURCE_DIR).
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "operator/api/codec.h"
#include "tests/support/subprocess.h"

namespace tfjob::op::api::testing {

// A gtest-safe parameter name: letters and digits of `s`, others as '_'.
inline std::string ParamName(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out.empty() ? "root" : out;
}

inline std::string TestDataPath(const std::string& name) {
  return tfjob::testing::SourceDir() + "/operator/api/tests/testdata/" + name;
}

inline std::string ReadTestData(const std::string& name) {
  auto text = ReadFile(TestDataPath(name));
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

// The first TFJob document of a YAML file, or a JSON file, as JSON.
inline nlohmann::json LoadJson(const std::string& name) {
  auto doc = YamlToJson(ReadTestData(name), name);
  EXPECT_TRUE(doc.ok()) << doc.status();
  return doc.ok() ? *doc : nlohmann::json();
}

inline TFJob LoadJob(const std::string& name) {
  auto job = Decode(LoadJson(name));
  EXPECT_TRUE(job.ok()) << name << ": " << job.status();
  return job.ok() ? *job : TFJob{};
}

inline const std::vector<std::string>& ValidManifests() {
  static const std::vector<std::string> kFiles = {
      "ps_workers.yaml",     "chief_ps_worker_evaluator.yaml",
      "exit_code.yaml",      "clean_pod_all_ttl.yaml",
      "suspend.yaml",        "master_alias.yaml",
      "lowercase_keys.yaml", "single_worker.yaml",
      "dynamic_worker.yaml", "multi_document.yaml",
      "full_object.json",
  };
  return kFiles;
}

inline const std::vector<std::string>& InvalidManifests() {
  static const std::vector<std::string> kFiles = {
      "invalid_name.yaml",
      "invalid_no_replica_specs.yaml",
      "invalid_empty_replica_specs.yaml",
      "invalid_no_containers.yaml",
      "invalid_empty_image.yaml",
      "invalid_no_tensorflow_container.yaml",
      "invalid_chief_and_master.yaml",
      "invalid_negative_replicas.yaml",
      "invalid_restart_policy.yaml",
      "invalid_replica_type.yaml",
      "invalid_two_chiefs.yaml",
      "invalid_clean_pod_policy.yaml",
      "invalid_negative_run_policy.yaml",
      "invalid_success_policy.yaml",
      "invalid_duplicate_keys.yaml",
      "invalid_managed_by.yaml",
  };
  return kFiles;
}

}  // namespace tfjob::op::api::testing
