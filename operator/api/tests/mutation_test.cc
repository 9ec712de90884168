// Seeded random mutations of the example manifests: whatever the API server
// or a user hands us, Decode/Validate/SetDefaults/Encode and the naming
// helpers must return (values or errors), never crash, never throw, and a
// document that decodes must encode back to itself.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "operator/api/codec.h"
#include "operator/api/defaults.h"
#include "operator/api/names.h"
#include "operator/api/tests/test_util.h"
#include "operator/api/validation.h"

namespace tfjob::op::api {
namespace {

using json = nlohmann::json;

// Longer or different runs: TFJOB_MUTATION_SEED=n TFJOB_MUTATION_ITERATIONS=n.
uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

std::string Show(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 2000 ? s.substr(0, 2000) + "..." : s;
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  int Uniform(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

  std::string RandomString() {
    static const std::vector<std::string> kWords = {"",           "Worker",
                                                    "worker",     "WORKER",
                                                    "Chief",      "chief",
                                                    "Master",     "master",
                                                    "PS",         "ps",
                                                    "Evaluator",  "Launcher",
                                                    "tensorflow", "tfjob-port",
                                                    "Never",      "ExitCode",
                                                    "All",        "None",
                                                    "Running",    "AllWorkers",
                                                    "TFJob",      "kubeflow.org/v1",
                                                    "a-b",        "x_Y",
                                                    "\xff\xfe",   "\xc3\x28",
                                                    "name\n\t\"", "2",
                                                    "true",       "null",
                                                    "-1"};
    if (Uniform(4) == 0) {
      std::string s;
      const int n = Uniform(12);
      for (int i = 0; i < n; ++i) s += static_cast<char>(Uniform(256));
      return s;
    }
    return kWords[static_cast<size_t>(Uniform(static_cast<int>(kWords.size())))];
  }

  json RandomValue(int depth) {
    switch (Uniform(depth > 2 ? 12 : 14)) {
      case 0: return nullptr;
      case 1: return Uniform(2) == 0;
      case 2: return Uniform(7) - 3;
      case 3: return std::numeric_limits<int64_t>::min();
      case 4: return std::numeric_limits<uint64_t>::max();
      case 5: return int64_t{1} << 31;
      case 6: return 2.0;
      case 7: return 0.5;
      case 8: return Uniform(2) ? 1e300 : -std::numeric_limits<double>::infinity();
      case 9: return -0.0;
      case 10:
      case 11: return RandomString();
      case 12: {
        json a = json::array();
        const int n = Uniform(3);
        for (int i = 0; i < n; ++i) a.push_back(RandomValue(depth + 1));
        return a;
      }
      default: {
        json o = json::object();
        const int n = Uniform(3);
        for (int i = 0; i < n; ++i) o[RandomString()] = RandomValue(depth + 1);
        return o;
      }
    }
  }

  // One mutation at a random node of `doc`.
  void Mutate(json& doc) {
    std::vector<json::json_pointer> nodes;
    Collect(doc, json::json_pointer(), nodes);
    const json::json_pointer at = nodes[static_cast<size_t>(Uniform(static_cast<int>(nodes.size())))];
    json& node = doc[at];
    switch (Uniform(6)) {
      case 0:  // delete
        if (!at.empty()) {
          json& parent = doc[at.parent_pointer()];
          if (parent.is_object()) {
            parent.erase(at.back());
          } else if (parent.is_array()) {
            parent.erase(static_cast<size_t>(std::stoul(at.back())));
          }
        }
        break;
      case 1:  // replace with a value of any type
        node = RandomValue(0);
        break;
      case 2:  // insert garbage
        if (node.is_object()) {
          node[RandomString()] = RandomValue(0);
        } else if (node.is_array()) {
          node.push_back(RandomValue(0));
        } else {
          node = RandomValue(0);
        }
        break;
      case 3:  // nest
        node = Uniform(2) ? json::array({node}) : json::object({{RandomString(), node}});
        break;
      case 4:  // rename a key (case changes and aliases matter for replica specs)
        if (!at.empty()) {
          json& parent = doc[at.parent_pointer()];
          if (parent.is_object()) {
            json moved = std::move(node);
            parent.erase(at.back());
            parent[RandomString()] = std::move(moved);
          }
        }
        break;
      default:  // duplicate a subtree elsewhere
        node = doc[nodes[static_cast<size_t>(Uniform(static_cast<int>(nodes.size())))]];
        break;
    }
  }

 private:
  static void Collect(const json& j, const json::json_pointer& here, std::vector<json::json_pointer>& out) {
    out.push_back(here);
    if (j.is_object()) {
      for (auto it = j.begin(); it != j.end(); ++it) Collect(*it, here / it.key(), out);
    } else if (j.is_array()) {
      for (size_t i = 0; i < j.size(); ++i) Collect(j[i], here / i, out);
    }
  }

  std::mt19937_64 rng_;
};

// Runs everything on a decodable document; returns false (with a test
// failure) when a property is violated.
void Exercise(const json& doc) {
  auto decoded = Decode(doc);
  if (!decoded.ok()) {
    ASSERT_EQ(decoded.status().code(), Code::kInvalidArgument) << decoded.status() << "\n" << Show(doc);
    ASSERT_FALSE(decoded.status().message().empty());
    return;
  }
  TFJob job = std::move(decoded).value();
  // ASSERT_TRUE, not ASSERT_EQ: gtest would print the documents with a
  // dump() that throws on the invalid UTF-8 the mutator inserts.
  ASSERT_TRUE(Encode(job) == doc) << Show(json::diff(doc, Encode(job))) << "\n" << Show(doc);

  const auto errors = Validate(job);
  const std::string message = ToMessage(errors);
  ASSERT_EQ(errors.empty(), message.empty());

  SetDefaults(job);
  Validate(job);
  const json defaulted = Encode(job);
  auto again = Decode(defaulted);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << Show(defaulted);
  SetDefaults(*again);
  ASSERT_TRUE(Encode(*again) == defaulted) << Show(json::diff(defaulted, Encode(*again)));

  NeedsTfConfig(job);
  for (const ReplicaSpec& s : job.spec.replica_specs) {
    const std::string label = TypeLabel(s);
    TfPort(s);
    Labels(job.metadata.name, label, 0, IsMasterRole(job, s, 0));
    Selector(job.metadata.name, label);
    if (!s.type) continue;
    for (int index : {0, ReplicasOrDefault(s) - 1, ReplicasOrDefault(s)}) {
      auto config = TfConfig(job, job.metadata.namespace_, *s.type, index);
      if (config.ok()) {
        ASSERT_FALSE(config->empty());
      } else {
        ASSERT_EQ(config.status().code(), Code::kInvalidArgument);
      }
    }
  }
}

TEST(MutationTest, JsonMutationsNeverCrashAndRoundTrip) {
  std::vector<json> seeds;
  for (const std::string& f : testing::ValidManifests()) seeds.push_back(testing::LoadJson(f));
  for (const std::string& f : testing::InvalidManifests()) seeds.push_back(testing::LoadJson(f));
  Mutator m(EnvOr("TFJOB_MUTATION_SEED", 20240501));
  int decoded = 0;
  const int kIterations = static_cast<int>(EnvOr("TFJOB_MUTATION_ITERATIONS", 6000));
  for (int i = 0; i < kIterations; ++i) {
    json doc = seeds[static_cast<size_t>(m.Uniform(static_cast<int>(seeds.size())))];
    const int mutations = 1 + m.Uniform(6);
    for (int k = 0; k < mutations; ++k) m.Mutate(doc);
    SCOPED_TRACE("iteration " + std::to_string(i));
    Exercise(doc);
    if (HasFatalFailure()) return;
    decoded += Decode(doc).ok();
  }
  // Both outcomes must be exercised in bulk for the test to mean anything.
  EXPECT_GT(decoded, kIterations / 10);
  EXPECT_LT(decoded, kIterations * 9 / 10);
}

TEST(MutationTest, YamlTextMutationsNeverCrash) {
  std::vector<std::string> texts;
  for (const std::string& f : testing::ValidManifests()) texts.push_back(testing::ReadTestData(f));
  Mutator m(EnvOr("TFJOB_MUTATION_SEED", 7));
  static const std::string kAlphabet = " \n\t:-[]{},#&*!|>'\"%@`?~<=0123456789abcXYZ.\\\xff";
  const int iterations = static_cast<int>(EnvOr("TFJOB_MUTATION_ITERATIONS", 3000));
  for (int i = 0; i < iterations; ++i) {
    std::string text = texts[static_cast<size_t>(m.Uniform(static_cast<int>(texts.size())))];
    const int edits = 1 + m.Uniform(8);
    for (int k = 0; k < edits && !text.empty(); ++k) {
      const size_t pos = static_cast<size_t>(m.Uniform(static_cast<int>(text.size())));
      const char c = kAlphabet[static_cast<size_t>(m.Uniform(static_cast<int>(kAlphabet.size())))];
      switch (m.Uniform(3)) {
        case 0: text[pos] = c; break;
        case 1: text.insert(pos, 1, c); break;
        default: text.erase(pos, 1 + static_cast<size_t>(m.Uniform(20))); break;
      }
    }
    SCOPED_TRACE("iteration " + std::to_string(i));
    auto docs = YamlDocumentsToJson(text, "fuzz.yaml");
    if (!docs.ok()) {
      ASSERT_EQ(docs.status().code(), Code::kInvalidArgument) << docs.status();
      continue;
    }
    for (const json& doc : *docs) {
      Exercise(doc);
      if (HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace tfjob::op::api
