#include "charts/tests/chart_render.h"

#include <sstream>
#include <stdexcept>

#include "operator/api/codec.h"
#include "tests/support/envtest.h"

namespace tfjob::charts {

using json = nlohmann::json;
namespace t = ::tfjob::testing;

std::string ChartDir() { return t::SourceDir() + "/charts/tfjob-operator"; }

std::vector<const Doc*> Rendered::Kind(const std::string& kind) const {
  std::vector<const Doc*> out;
  for (const auto& d : docs) {
    if (d.obj.value("kind", "") == kind) out.push_back(&d);
  }
  return out;
}

const json& Rendered::One(const std::string& kind) const {
  auto k = Kind(kind);
  if (k.size() != 1) throw std::runtime_error("expected one " + kind + ", got " + std::to_string(k.size()));
  return k[0]->obj;
}

const std::string& Helm() {
  static const std::string path = t::ToolPath("helm");
  return path;
}

t::RunResult RunHelm(const std::vector<std::string>& args) {
  static const std::string home = t::MakeTempDir("helm-home");
  std::vector<std::string> argv{Helm()};
  argv.insert(argv.end(), args.begin(), args.end());
  return t::Run(argv, {{"HELM_CACHE_HOME", home + "/cache"},
                       {"HELM_CONFIG_HOME", home + "/config"},
                       {"HELM_DATA_HOME", home + "/data"}});
}

std::vector<std::string> SetFlags(const std::vector<std::string>& sets) {
  std::vector<std::string> out;
  for (const auto& s : sets) {
    out.push_back("--set");
    out.push_back(s);
  }
  return out;
}

t::RunResult RunRender(const std::vector<std::string>& sets, const std::vector<std::string>& extra,
                       const std::string& release_namespace) {
  std::vector<std::string> args{"template", "tfjob", ChartDir(), "--namespace", release_namespace};
  for (const auto& s : SetFlags(sets)) args.push_back(s);
  args.insert(args.end(), extra.begin(), extra.end());
  return RunHelm(args);
}

Rendered Render(const std::vector<std::string>& sets, const std::vector<std::string>& extra,
                const std::string& release_namespace) {
  Rendered out;
  t::RunResult r = RunRender(sets, extra, release_namespace);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return out;
  // helm template writes "---\n# Source: <chart>/<file>\n<document>" per document.
  std::istringstream in(r.out);
  std::string line, source, body;
  auto flush = [&] {
    if (source.empty()) return;
    auto docs = op::api::YamlDocumentsToJson(body, source);
    EXPECT_TRUE(docs.ok()) << docs.status() << "\n" << body;
    if (docs.ok()) {
      EXPECT_EQ(docs->size(), 1u) << source;
      for (auto& d : *docs) out.docs.push_back({source, d});
    }
    body.clear();
  };
  while (std::getline(in, line)) {
    if (line == "---") {
      flush();
      source.clear();
      continue;
    }
    if (source.empty() && line.rfind("# Source: ", 0) == 0) {
      source = line.substr(10);
      continue;
    }
    body += line + "\n";
  }
  flush();
  return out;
}

std::vector<std::string> Args(const json& dep) {
  std::vector<std::string> out;
  for (const auto& a : dep["spec"]["template"]["spec"]["containers"][0]["args"]) out.push_back(a.get<std::string>());
  return out;
}

void HelmTest::SetUp() {
  if (Helm().empty()) {
    GTEST_FAIL() << "helm not found in " << t::SourceDir()
                 << "/.tools/bin: run `bash scripts/setup.sh` (it installs Helm v3.17)";
  }
}

}  // namespace tfjob::charts
