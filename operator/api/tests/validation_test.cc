#include "operator/api/validation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "operator/api/codec.h"
#include "operator/api/defaults.h"
#include "operator/api/tests/test_util.h"

namespace tfjob::op::api {
namespace {

using ::testing::IsEmpty;
using testing::LoadJob;
using testing::LoadJson;
using json = nlohmann::json;

const std::string kDns1035 =
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (regex used for validation is "
    "'[a-z]([-a-z0-9]*[a-z0-9])?')";

TEST(ValidateTest, ValidManifestsHaveNoErrors) {
  for (const std::string& f : testing::ValidManifests()) {
    SCOPED_TRACE(f);
    TFJob job = LoadJob(f);
    EXPECT_THAT(Validate(job), IsEmpty()) << ToMessage(Validate(job));
    SetDefaults(job);
    EXPECT_THAT(Validate(job), IsEmpty()) << ToMessage(Validate(job));
    EXPECT_EQ(ToMessage(Validate(job)), "");
  }
}

struct InvalidCase {
  std::string file;
  std::string message;
};

void PrintTo(const InvalidCase& c, std::ostream* os) { *os << c.file; }

class InvalidManifestTest : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(InvalidManifestTest, ReportsKubernetesStyleMessage) {
  TFJob job = LoadJob(GetParam().file);
  EXPECT_EQ(ToMessage(Validate(job)), GetParam().message);
  // Defaulting first does not hide the problem.
  SetDefaults(job);
  EXPECT_FALSE(Validate(job).empty());
}

INSTANTIATE_TEST_SUITE_P(
    Rules, InvalidManifestTest,
    ::testing::Values(
        InvalidCase{"invalid_name.yaml", "metadata.name: Invalid value: \"My_Job\": should match: " + kDns1035},
        InvalidCase{"invalid_no_replica_specs.yaml", "spec.tfReplicaSpecs: Required value: must be required"},
        InvalidCase{"invalid_empty_replica_specs.yaml",
                    "spec.tfReplicaSpecs: Required value: must have at least one replica spec"},
        InvalidCase{"invalid_no_containers.yaml",
                    "[spec.tfReplicaSpecs[PS].template.spec.containers: Required value: must be specified, "
                    "spec.tfReplicaSpecs[PS].template.spec.containers: Required value: must have at least one "
                    "container with name tensorflow]"},
        InvalidCase{"invalid_empty_image.yaml",
                    "spec.tfReplicaSpecs[Worker].template.spec.containers[0].image: Required value: must be required"},
        InvalidCase{"invalid_no_tensorflow_container.yaml",
                    "spec.tfReplicaSpecs[Worker].template.spec.containers: Required value: must have at least one "
                    "container with name tensorflow"},
        InvalidCase{"invalid_chief_and_master.yaml",
                    "spec.tfReplicaSpecs: Forbidden: must not have more than 1 Chief or Master role"},
        InvalidCase{"invalid_negative_replicas.yaml",
                    "spec.tfReplicaSpecs[Worker].replicas: Invalid value: -1: must be greater than or equal to 0"},
        InvalidCase{"invalid_restart_policy.yaml",
                    "spec.tfReplicaSpecs[Worker].restartPolicy: Unsupported value: \"Sometimes\": supported values: "
                    "\"Always\", \"OnFailure\", \"Never\", \"ExitCode\""},
        InvalidCase{"invalid_replica_type.yaml",
                    "spec.tfReplicaSpecs[Launcher]: Unsupported value: \"Launcher\": supported values: \"Chief\", "
                    "\"Master\", \"PS\", \"Worker\", \"Evaluator\""},
        InvalidCase{"invalid_two_chiefs.yaml",
                    "spec.tfReplicaSpecs[Chief].replicas: Invalid value: 2: must be no more than 1: a TFJob has a "
                    "single chief"},
        InvalidCase{"invalid_clean_pod_policy.yaml",
                    "spec.runPolicy.cleanPodPolicy: Unsupported value: \"Sometimes\": supported values: \"All\", "
                    "\"Running\", \"None\""},
        InvalidCase{"invalid_negative_run_policy.yaml",
                    "[spec.runPolicy.ttlSecondsAfterFinished: Invalid value: -1: must be greater than or equal to 0, "
                    "spec.runPolicy.activeDeadlineSeconds: Invalid value: -30: must be greater than or equal to 0, "
                    "spec.runPolicy.backoffLimit: Invalid value: -2: must be greater than or equal to 0]"},
        InvalidCase{"invalid_success_policy.yaml",
                    "spec.successPolicy: Unsupported value: \"ChiefOnly\": supported values: \"\", \"AllWorkers\""},
        InvalidCase{"invalid_duplicate_keys.yaml",
                    "spec.tfReplicaSpecs[worker]: Duplicate value: \"worker\": names the same replica type as "
                    "\"Worker\""},
        InvalidCase{"invalid_managed_by.yaml",
                    "spec.runPolicy.managedBy: Unsupported value: \"example.com/other-controller\": supported values: "
                    "\"kubeflow.org/training-operator\", \"kueue.x-k8s.io/multikueue\""}),
    [](const ::testing::TestParamInfo<InvalidCase>& info) {
      return testing::ParamName(info.param.file.substr(0, info.param.file.find('.')));
    });

TEST(ValidateTest, EveryInvalidManifestIsCovered) {
  EXPECT_EQ(testing::InvalidManifests().size(), 16u);
  for (const std::string& f : testing::InvalidManifests()) {
    SCOPED_TRACE(f);
    EXPECT_FALSE(Validate(LoadJob(f)).empty());
  }
}

TEST(ValidateTest, ReportsEveryProblemAtOnce) {
  json doc = LoadJson("chief_ps_worker_evaluator.yaml");
  doc["metadata"]["name"] = "9lives";
  doc["spec"]["runPolicy"]["cleanPodPolicy"] = "Always";
  doc["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = -3;
  doc["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][1]["image"] = "";
  doc["spec"]["tfReplicaSpecs"]["PS"]["restartPolicy"] = "never";
  doc["spec"]["tfReplicaSpecs"]["master"] = doc["spec"]["tfReplicaSpecs"]["Chief"];
  const std::vector<FieldError> errors = Validate(Decode(doc).value());
  ASSERT_EQ(errors.size(), 6u) << ToMessage(errors);
  EXPECT_EQ(errors[0].field, "metadata.name");
  EXPECT_EQ(errors[0].type, ErrorType::kInvalid);
  EXPECT_EQ(errors[0].bad_value, "\"9lives\"");
  EXPECT_EQ(errors[1].field, "spec.runPolicy.cleanPodPolicy");
  EXPECT_EQ(errors[1].type, ErrorType::kNotSupported);
  EXPECT_EQ(errors[2].field, "spec.tfReplicaSpecs[PS].restartPolicy");
  EXPECT_EQ(errors[3].field, "spec.tfReplicaSpecs[Worker].replicas");
  EXPECT_EQ(errors[3].bad_value, "-3");
  EXPECT_EQ(errors[4].field, "spec.tfReplicaSpecs[Worker].template.spec.containers[1].image");
  EXPECT_EQ(errors[4].type, ErrorType::kRequired);
  EXPECT_EQ(errors[5].ToString(), "spec.tfReplicaSpecs: Forbidden: must not have more than 1 Chief or Master role");
  const std::string message = ToMessage(errors);
  EXPECT_EQ(message.front(), '[');
  EXPECT_EQ(message.back(), ']');
}

TEST(ValidateTest, NullReplicaSpecLacksContainers) {
  json doc = LoadJson("single_worker.yaml");
  doc["spec"]["tfReplicaSpecs"]["PS"] = nullptr;
  EXPECT_EQ(ToMessage(Validate(Decode(doc).value())),
            "[spec.tfReplicaSpecs[PS].template.spec.containers: Required value: must be specified, "
            "spec.tfReplicaSpecs[PS].template.spec.containers: Required value: must have at least one container "
            "with name tensorflow]");
}

TEST(ValidateTest, MissingImageAndEmptyValuesThatMeanUnset) {
  json doc = LoadJson("single_worker.yaml");
  doc["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].erase("image");
  doc["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "";
  doc["spec"]["runPolicy"] = json::parse(R"({"cleanPodPolicy": "", "managedBy": "kubeflow.org/training-operator"})");
  doc["spec"]["successPolicy"] = "";
  EXPECT_EQ(ToMessage(Validate(Decode(doc).value())),
            "spec.tfReplicaSpecs[Worker].template.spec.containers[0].image: Required value: must be required");
}

TEST(ValidateTest, ZeroIsAllowedWhereNegativeIsNot) {
  json doc = LoadJson("ps_workers.yaml");
  doc["spec"]["tfReplicaSpecs"]["PS"]["replicas"] = 0;
  doc["spec"]["runPolicy"] = json::parse(R"({"ttlSecondsAfterFinished":0,"activeDeadlineSeconds":0,"backoffLimit":0})");
  EXPECT_THAT(Validate(Decode(doc).value()), IsEmpty());
}

TEST(ValidateTest, JobNames) {
  for (const std::string& ok : std::vector<std::string>{"a", "a1", "abc-123", "x-y-z", std::string(63, 'a')}) {
    EXPECT_THAT(Dns1035LabelErrors(ok), IsEmpty()) << ok;
  }
  for (const std::string& bad : std::vector<std::string>{"", "1abc", "abc-", "-abc", "Abc", "a_b", "a.b", "a b"}) {
    EXPECT_EQ(Dns1035LabelErrors(bad), std::vector<std::string>{kDns1035}) << bad;
  }
  EXPECT_EQ(Dns1035LabelErrors(std::string(64, 'a')), std::vector<std::string>{"must be no more than 63 characters"});
  EXPECT_EQ(Dns1035LabelErrors(std::string(64, 'A')).size(), 2u);

  TFJob job = LoadJob("single_worker.yaml");
  job.metadata.name = std::string(70, 'a');
  EXPECT_EQ(ToMessage(Validate(job)), "metadata.name: Invalid value: \"" + std::string(70, 'a') +
                                          "\": should match: must be no more than 63 characters");
  job.metadata.name = "a\"b\n\x01\xff\xc3\xa9";
  EXPECT_EQ(ToMessage(Validate(job)),
            "metadata.name: Invalid value: \"a\\\"b\\n\\x01\\xff\xc3\xa9\": should match: " + kDns1035);
}

TEST(ValidateTest, ErrorFormatting) {
  EXPECT_EQ((FieldError{ErrorType::kRequired, "f", "", "d"}).ToString(), "f: Required value: d");
  EXPECT_EQ((FieldError{ErrorType::kRequired, "f", "", ""}).ToString(), "f: Required value");
  EXPECT_EQ((FieldError{ErrorType::kForbidden, "f", "", "d"}).ToString(), "f: Forbidden: d");
  EXPECT_EQ((FieldError{ErrorType::kInvalid, "f", "-1", "d"}).ToString(), "f: Invalid value: -1: d");
  EXPECT_EQ((FieldError{ErrorType::kNotSupported, "f", "\"x\"", "d"}).ToString(), "f: Unsupported value: \"x\": d");
  EXPECT_EQ((FieldError{ErrorType::kDuplicate, "f", "\"x\"", ""}).ToString(), "f: Duplicate value: \"x\"");
  EXPECT_EQ(ToMessage({}), "");
  const FieldError e{ErrorType::kRequired, "a", "", "b"};
  EXPECT_EQ(ToMessage({e, e}), "a: Required value: b");  // duplicates collapse, as in Kubernetes
  EXPECT_EQ(ToMessage({e, FieldError{ErrorType::kForbidden, "c", "", ""}}), "[a: Required value: b, c: Forbidden]");
}

TEST(ValidateTest, JobBuiltInCodeWithOddTemplates) {
  TFJob job;
  job.metadata.name = "odd";
  job.spec.has_replica_specs = true;
  for (const char* t : {"5", R"({"spec": 3})", R"({"spec": {"containers": {}}})",
                        R"({"spec": {"containers": [1, {"name": 2, "image": 3}]}})"}) {
    ReplicaSpec s;
    s.key = "Evaluator";
    s.type = ReplicaType::kEvaluator;
    s.template_json = json::parse(t);
    job.spec.replica_specs.push_back(s);
  }
  const auto errors = Validate(job);  // must not throw or crash
  EXPECT_FALSE(errors.empty());
}

}  // namespace
}  // namespace tfjob::op::api
