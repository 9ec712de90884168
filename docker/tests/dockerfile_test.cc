// The Dockerfiles are checked statically against the current build (the
// images themselves are built and run by scripts/images.sh and
// tests/images/smoke.sh): each Dockerfile is parsed (line continuations,
// comments, multi-stage FROM ... AS name, COPY --from=stage) and
//   - every COPY/ADD source from the build context exists in the repository
//     and is not excluded by .dockerignore; in a prebuilt Dockerfile
//     (X.prebuilt.Dockerfile, whose context scripts/images.sh stages as the
//     repository is laid out), a build/bin/<name> source is a binary this
//     build produced, and cuda/ is the GPU image's staged CUDA libraries;
//   - every path copied --from a build stage is accounted for: a build output
//     (<context dir>/build/bin/<name>) is a binary this build produced and is
//     executable, and the stage's `cmake --build --target` list builds it; a
//     context path exists in the repository; anything else is written by a
//     RUN of that stage;
//   - the final stage runs as a numeric non-root USER;
//   - the ENTRYPOINT binary is one of the files the final stage copies in;
//   - a prebuilt Dockerfile's final stage is its source Dockerfile's: the
//     same Debian packages, user, working directory, entrypoint and files
//     in /usr/local/bin and /opt/tfjob;
//   - every /opt/tfjob/examples/... path the example manifests use exists
//     in the examples/ tree the runtime images copy there.
// Failures name Dockerfile:line.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/subprocess.h"

namespace tfjob::docker {
namespace {

namespace fs = std::filesystem;
namespace t = ::tfjob::testing;

struct Instruction {
  int line = 0;         // first physical line
  std::string keyword;  // upper-case
  std::string args;     // continuation lines joined with a space
};

struct Copy {
  int line = 0;
  std::string from;  // --from value, "" for the build context
  std::vector<std::string> sources;
  std::string dest;
};

struct Stage {
  int line = 0;
  std::string image, name;
  std::string workdir = "/";
  std::string context_dir;  // where `COPY . <dir>` put the whole context, if it did
  std::vector<Copy> copies;
  std::vector<Instruction> runs;
  std::optional<Instruction> user, entrypoint;
};

std::string Trim(std::string s) {
  s.erase(0, s.find_first_not_of(" \t\r"));
  s.erase(s.find_last_not_of(" \t\r") + 1);
  return s;
}

std::vector<std::string> Words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// Logical instructions: comments dropped, backslash continuations joined
// (comment lines inside a continuation are skipped, as Docker does).
std::vector<Instruction> Parse(const std::string& path) {
  std::ifstream in(path);
  std::vector<Instruction> out;
  std::string line, pending;
  int lineno = 0, start = 0;
  while (std::getline(in, line)) {
    ++lineno;
    std::string trimmed = Trim(line);
    if (trimmed.empty() || trimmed[0] == '#') continue;
    if (pending.empty()) start = lineno;
    bool continued = !trimmed.empty() && trimmed.back() == '\\';
    if (continued) trimmed.pop_back();
    if (!pending.empty()) pending += ' ';
    pending += Trim(trimmed);
    if (continued) continue;
    size_t sp = pending.find_first_of(" \t");
    Instruction ins;
    ins.line = start;
    ins.keyword = pending.substr(0, sp);
    for (auto& c : ins.keyword) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
    ins.args = sp == std::string::npos ? "" : Trim(pending.substr(sp));
    out.push_back(ins);
    pending.clear();
  }
  return out;
}

std::vector<Stage> Stages(const std::vector<Instruction>& instructions) {
  std::vector<Stage> stages;
  for (const auto& ins : instructions) {
    if (ins.keyword == "FROM") {
      Stage s;
      s.line = ins.line;
      auto w = Words(ins.args);
      size_t i = 0;
      while (i < w.size() && w[i].rfind("--", 0) == 0) ++i;  // --platform=...
      if (i < w.size()) s.image = w[i];
      if (i + 2 < w.size() && (w[i + 1] == "AS" || w[i + 1] == "as")) s.name = w[i + 2];
      stages.push_back(s);
      continue;
    }
    if (stages.empty()) continue;  // ARG before FROM
    Stage& s = stages.back();
    if (ins.keyword == "WORKDIR") {
      s.workdir = fs::path(s.workdir) / ins.args;
    } else if (ins.keyword == "COPY" || ins.keyword == "ADD") {
      Copy c;
      c.line = ins.line;
      std::vector<std::string> w;
      if (!ins.args.empty() && ins.args[0] == '[') {
        for (const auto& v : nlohmann::json::parse(ins.args)) w.push_back(v.get<std::string>());
      } else {
        w = Words(ins.args);
      }
      std::vector<std::string> paths;
      for (const auto& x : w) {
        if (x.rfind("--from=", 0) == 0)
          c.from = x.substr(7);
        else if (x.rfind("--", 0) != 0)
          paths.push_back(x);
      }
      if (paths.size() >= 2) {
        c.dest = paths.back();
        paths.pop_back();
        c.sources = paths;
      }
      if (c.from.empty() && c.sources == std::vector<std::string>{"."}) {
        s.context_dir = c.dest == "." ? s.workdir : c.dest;
      }
      s.copies.push_back(c);
    } else if (ins.keyword == "RUN") {
      s.runs.push_back(ins);
    } else if (ins.keyword == "USER") {
      s.user = ins;
    } else if (ins.keyword == "ENTRYPOINT") {
      s.entrypoint = ins;
    }
  }
  return stages;
}

// Top-level names excluded by .dockerignore (the file only lists those).
std::set<std::string> DockerIgnored() {
  std::set<std::string> out;
  std::ifstream in(t::SourceDir() + "/.dockerignore");
  for (std::string line; std::getline(in, line);) {
    line = Trim(line);
    if (!line.empty() && line[0] != '#') out.insert(line);
  }
  return out;
}

bool Ignored(const std::set<std::string>& patterns, const std::string& rel) {
  std::string top = rel.substr(0, rel.find('/'));
  for (const auto& p : patterns) {
    if (p == top) return true;
    if (p.back() == '*' && top.rfind(p.substr(0, p.size() - 1), 0) == 0) return true;
  }
  return false;
}

bool Executable(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

// The `--target a b c` names of every `cmake --build` in the stage's RUNs.
std::set<std::string> BuiltTargets(const Stage& s) {
  std::set<std::string> out;
  for (const auto& run : s.runs) {
    auto w = Words(run.args);
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i] != "--target") continue;
      for (size_t j = i + 1; j < w.size() && w[j] != "&&" && w[j].rfind("-", 0) != 0; ++j) out.insert(w[j]);
    }
  }
  return out;
}

bool Prebuilt(const std::string& file) { return file.find(".prebuilt.") != std::string::npos; }

// A prebuilt Dockerfile's context source (see the top of this file).
void CheckPrebuiltContextSource(const std::string& where, const std::string& file, const std::string& src) {
  std::string r = src;
  while (r.rfind("./", 0) == 0) r = r.substr(2);
  if (r.rfind("build/bin/", 0) == 0) {
    const std::string name = r.substr(std::string("build/bin/").size());
    EXPECT_TRUE(Executable(t::BinDir() + "/" + name))
        << where << ": copies build output " << name << " but " << t::BinDir() << "/" << name
        << " is not an executable this build produced";
  } else if (r == "cuda/" || r == "cuda") {
    EXPECT_EQ(file, "runtime-gpu.prebuilt.Dockerfile") << where << ": only the GPU image carries cuda/";
  } else {
    EXPECT_TRUE(fs::exists(t::SourceDir() + "/" + r)) << where << ": " << src << " is not in the repository";
  }
}

class Dockerfile : public ::testing::TestWithParam<std::string> {};

TEST_P(Dockerfile, CopiesOnlyWhatExistsAndRunsAsNonRoot) {
  const std::string rel = "docker/" + GetParam();
  const std::string path = t::SourceDir() + "/" + rel;
  ASSERT_TRUE(fs::exists(path)) << path;
  const auto stages = Stages(Parse(path));
  const bool prebuilt = Prebuilt(GetParam());
  if (prebuilt) {
    ASSERT_EQ(stages.size(), 1u) << rel << ": a prebuilt Dockerfile is one stage, copying binaries built already";
  } else {
    ASSERT_GE(stages.size(), 2u) << rel << ": expected a multi-stage build";
  }
  const auto ignored = DockerIgnored();
  std::map<std::string, const Stage*> by_name;
  for (const auto& s : stages) {
    if (!s.name.empty()) by_name[s.name] = &s;
  }
  const std::string bin_dir = t::BinDir();

  for (const auto& s : stages) {
    for (const auto& c : s.copies) {
      const std::string where = rel + ":" + std::to_string(c.line);
      ASSERT_FALSE(c.sources.empty()) << where << ": COPY/ADD without source and destination";
      for (const auto& src : c.sources) {
        if (c.from.empty() && prebuilt) {
          CheckPrebuiltContextSource(where, GetParam(), src);
          continue;
        }
        if (c.from.empty()) {
          std::string r = src;
          while (r.rfind("./", 0) == 0) r = r.substr(2);
          if (r.empty() || r == ".") continue;  // the whole context
          EXPECT_TRUE(fs::exists(t::SourceDir() + "/" + r)) << where << ": " << src << " is not in the repository";
          EXPECT_FALSE(Ignored(ignored, r)) << where << ": " << src << " is excluded by .dockerignore";
          continue;
        }
        auto from = by_name.find(c.from);
        ASSERT_NE(from, by_name.end()) << where << ": --from=" << c.from << " names no earlier stage";
        const Stage& b = *from->second;
        const std::string ctx = b.context_dir.empty() ? "" : fs::path(b.context_dir).lexically_normal().string() + "/";
        if (!ctx.empty() && src.rfind(ctx + "build/bin/", 0) == 0) {
          const std::string name = src.substr((ctx + "build/bin/").size());
          EXPECT_TRUE(Executable(bin_dir + "/" + name))
              << where << ": copies build output " << name << " but " << bin_dir << "/" << name
              << " is not an executable this build produced";
          EXPECT_TRUE(BuiltTargets(b).count(name))
              << where << ": copies " << name << " but stage " << b.name << " (" << rel << ":" << b.line
              << ") does not `cmake --build --target " << name << "`";
        } else if (!ctx.empty() && src.rfind(ctx, 0) == 0) {
          const std::string r = src.substr(ctx.size());
          EXPECT_TRUE(fs::exists(t::SourceDir() + "/" + r)) << where << ": " << src << " is not in the repository";
        } else {
          bool written = false;
          for (const auto& run : b.runs) written |= run.args.find(src) != std::string::npos;
          EXPECT_TRUE(written) << where << ": " << src
                               << " is neither in the build context nor written by a RUN of stage " << c.from;
        }
      }
    }
  }

  const Stage& last = stages.back();
  const std::string last_where = rel + ":" + std::to_string(last.line);
  ASSERT_TRUE(last.user.has_value()) << last_where << ": the final stage has no USER (it would run as root)";
  const std::string user = last.user->args;
  const std::string uid = user.substr(0, user.find(':'));
  EXPECT_TRUE(!uid.empty() && uid.find_first_not_of("0123456789") == std::string::npos && std::stol(uid) != 0)
      << rel << ":" << last.user->line << ": USER " << user << " is not a numeric non-root UID";

  ASSERT_TRUE(last.entrypoint.has_value()) << last_where << ": the final stage has no ENTRYPOINT";
  const std::string where = rel + ":" + std::to_string(last.entrypoint->line);
  auto ep = nlohmann::json::parse(last.entrypoint->args, nullptr, false);
  ASSERT_TRUE(ep.is_array() && !ep.empty() && ep[0].is_string()) << where << ": ENTRYPOINT is not an exec-form array";
  const std::string binary = ep[0];
  bool copied = false;
  for (const auto& c : last.copies) {
    for (const auto& src : c.sources) {
      const std::string dest = c.dest.back() == '/' ? c.dest + fs::path(src).filename().string() : c.dest;
      const bool is_entrypoint =
          dest == binary || (binary.find('/') == std::string::npos && dest == "/usr/local/bin/" + binary);
      copied |= is_entrypoint;
      // A script from the repository (the runtime images' dispatcher) keeps
      // its mode in the image: it must be executable here.
      if (is_entrypoint && c.from.empty() && src.rfind("build/", 0) != 0) {
        EXPECT_TRUE(Executable(t::SourceDir() + "/" + src)) << where << ": " << src << " is not executable";
      }
    }
  }
  EXPECT_TRUE(copied) << where << ": ENTRYPOINT " << binary << " is not among the binaries the final stage copies";
}

INSTANTIATE_TEST_SUITE_P(Images, Dockerfile,
                         ::testing::Values("operator.Dockerfile", "runtime-cpu.Dockerfile", "runtime-gpu.Dockerfile",
                                           "operator.prebuilt.Dockerfile", "runtime-cpu.prebuilt.Dockerfile",
                                           "runtime-gpu.prebuilt.Dockerfile"),
                         [](const auto& info) {
                           std::string n = info.param.substr(0, info.param.rfind(".Dockerfile"));
                           for (auto& c : n) {
                             if (c == '-' || c == '.') c = '_';
                           }
                           return n;
                         });

// The packages of the final stage's `apt-get install` (after its flags, up
// to the next &&), sorted.
std::vector<std::string> AptPackages(const Stage& s) {
  std::vector<std::string> out;
  for (const auto& run : s.runs) {
    auto w = Words(run.args);
    for (size_t i = 0; i + 1 < w.size(); ++i) {
      if (w[i] != "apt-get" || w[i + 1] != "install") continue;
      for (size_t j = i + 2; j < w.size() && w[j] != "&&"; ++j) {
        if (w[j].rfind("-", 0) != 0) out.push_back(w[j]);
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Where the final stage puts what it copies, under /usr/local/bin and
// /opt/tfjob (the layout users and manifests rely on).
std::set<std::string> Layout(const Stage& s) {
  std::set<std::string> out;
  for (const auto& c : s.copies) {
    if (c.dest.rfind("/usr/local/bin/", 0) == 0 || c.dest.rfind("/opt/tfjob/", 0) == 0) out.insert(c.dest);
  }
  return out;
}

// CI builds the images from its own binaries with the prebuilt Dockerfiles;
// users build from source. Both must give the same image: a prebuilt file
// that drifts from its source file (a package, a path, the user) fails here.
TEST(PrebuiltDockerfiles, MatchTheirSourceDockerfiles) {
  for (const std::string image : {"operator", "runtime-cpu", "runtime-gpu"}) {
    SCOPED_TRACE(image);
    const auto source = Stages(Parse(t::SourceDir() + "/docker/" + image + ".Dockerfile"));
    const auto prebuilt = Stages(Parse(t::SourceDir() + "/docker/" + image + ".prebuilt.Dockerfile"));
    ASSERT_FALSE(source.empty());
    ASSERT_FALSE(prebuilt.empty());
    const Stage& a = source.back();
    const Stage& b = prebuilt.back();
    // The GPU source image is Ubuntu's (NVIDIA's CUDA runtime image), whose
    // list is derived with ldd; the prebuilt one is Debian with runtime-cpu's.
    if (image == "runtime-gpu") {
      const auto cpu = Stages(Parse(t::SourceDir() + "/docker/runtime-cpu.Dockerfile"));
      EXPECT_EQ(AptPackages(b), AptPackages(cpu.back()));
    } else {
      EXPECT_EQ(AptPackages(b), AptPackages(a));
    }
    EXPECT_FALSE(AptPackages(b).empty());
    EXPECT_EQ(b.image, "debian:bookworm-slim");
    ASSERT_TRUE(a.user && b.user && a.entrypoint && b.entrypoint);
    EXPECT_EQ(b.user->args, a.user->args);
    EXPECT_EQ(b.entrypoint->args, a.entrypoint->args);
    EXPECT_EQ(b.workdir, a.workdir);
    EXPECT_EQ(Layout(b), Layout(a));
    EXPECT_FALSE(Layout(b).empty());
  }
}

// The manifests run commands such as `fit --config /opt/tfjob/examples/...`:
// those files must be in the examples/ tree the runtime images copy there.
TEST(DockerExamples, ManifestPathsExistInTheCopiedTree) {
  for (const std::string image : {"runtime-cpu.Dockerfile", "runtime-gpu.Dockerfile", "runtime-cpu.prebuilt.Dockerfile",
                                  "runtime-gpu.prebuilt.Dockerfile"}) {
    const auto stages = Stages(Parse(t::SourceDir() + "/docker/" + image));
    bool copies_examples = false;
    for (const auto& c : stages.back().copies) {
      copies_examples |= c.from.empty() && c.sources.size() == 1 &&
                         (c.sources[0] == "examples/" || c.sources[0] == "examples") &&
                         (c.dest == "/opt/tfjob/examples/" || c.dest == "/opt/tfjob/examples");
    }
    EXPECT_TRUE(copies_examples) << "docker/" << image
                                 << ": the final stage does not COPY examples/ /opt/tfjob/examples/";
  }
  const std::regex ref(R"(/opt/tfjob/examples/([A-Za-z0-9_./-]+))");
  int seen = 0;
  for (const auto& e : fs::recursive_directory_iterator(t::SourceDir() + "/examples")) {
    if (e.path().extension() != ".yaml") continue;
    std::ifstream in(e.path());
    int lineno = 0;
    for (std::string line; std::getline(in, line);) {
      ++lineno;
      for (std::sregex_iterator m(line.begin(), line.end(), ref), end; m != end; ++m) {
        ++seen;
        EXPECT_TRUE(fs::exists(t::SourceDir() + "/examples/" + (*m)[1].str()))
            << e.path().string() << ":" << lineno << ": " << (*m)[0] << " is not in examples/";
      }
    }
  }
  EXPECT_GT(seen, 0) << "no manifest references /opt/tfjob/examples (the images' layout changed?)";
}

}  // namespace
}  // namespace tfjob::docker
