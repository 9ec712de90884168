// Every TFJob manifest under examples/ decodes and passes the operator's
// validation after defaulting, so `kubectl apply` of an example creates a
// job the operator runs (what the admission webhook of Kubeflow would say).
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "operator/api/codec.h"
#include "operator/api/defaults.h"
#include "operator/api/validation.h"
#include "tests/support/subprocess.h"

namespace tfjob::op::api {
namespace {

namespace fs = std::filesystem;

TEST(ExamplesTest, EveryExampleManifestIsAValidTFJob) {
  int jobs = 0;
  for (const auto& e : fs::recursive_directory_iterator(tfjob::testing::SourceDir() + "/examples")) {
    if (e.path().extension() != ".yaml") continue;
    std::ifstream in(e.path());
    const std::string text(std::istreambuf_iterator<char>(in), {});
    auto docs = YamlDocumentsToJson(text, e.path().string());
    ASSERT_TRUE(docs.ok()) << docs.status();
    for (const auto& doc : *docs) {
      if (doc.value("kind", "") != "TFJob") continue;
      SCOPED_TRACE(e.path().string());
      auto job = Decode(doc);
      ASSERT_TRUE(job.ok()) << job.status();
      SetDefaults(*job);
      const auto errors = Validate(*job);
      EXPECT_TRUE(errors.empty()) << ToMessage(errors);
      ++jobs;
    }
  }
  EXPECT_GE(jobs, 8);
}

}  // namespace
}  // namespace tfjob::op::api
