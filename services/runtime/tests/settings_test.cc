// The process-wide switches read once from the environment
// (services/runtime/settings.h): defaults, each value, and a bad one as
// tfjob-runtime reports it (one line, exit 2, before any work).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/runtime/settings.h"
#include "services/runtime/tests/bad_input.h"
#include "tests/support/subprocess.h"

namespace tfjob::runtime {
namespace {

namespace t = ::tfjob::testing;
using ::testing::HasSubstr;

TEST(ProcessSettingsTest, DefaultsWhenUnsetOrEmpty) {
  for (const auto& vars :
       {std::map<std::string, std::string>{}, std::map<std::string, std::string>{{"TFJOB_CPU_KERNELS", ""},
                                                                                 {"TFJOB_FLOAT16_EMULATION", ""},
                                                                                 {"TFJOB_PS_SHM", ""},
                                                                                 {"TFJOB_RUNTIME_SELF", ""}}}) {
    auto s = ReadProcessSettings(cluster::FixedEnv(vars));
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_FALSE(s->eigen_kernels);
    EXPECT_FALSE(s->float16_emulation);
    EXPECT_TRUE(s->ps_shared_memory);
    EXPECT_EQ(s->self_exe, "");
  }
}

TEST(ProcessSettingsTest, EachVariableSetsItsSwitch) {
  auto s = ReadProcessSettings(cluster::FixedEnv({{"TFJOB_CPU_KERNELS", "eigen"},
                                                  {"TFJOB_FLOAT16_EMULATION", "1"},
                                                  {"TFJOB_PS_SHM", "0"},
                                                  {"TFJOB_RUNTIME_SELF", "/opt/bundle/bin/tfjob-runtime"}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->eigen_kernels);
  EXPECT_TRUE(s->float16_emulation);
  EXPECT_FALSE(s->ps_shared_memory);
  EXPECT_EQ(s->self_exe, "/opt/bundle/bin/tfjob-runtime");
  s = ReadProcessSettings(cluster::FixedEnv({{"TFJOB_FLOAT16_EMULATION", "0"}, {"TFJOB_PS_SHM", "1"}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->float16_emulation);
  EXPECT_TRUE(s->ps_shared_memory);
}

TEST(ProcessSettingsTest, AValueOutsideTheListIsNamed) {
  for (const auto& [name, value] : std::map<std::string, std::string>{
           {"TFJOB_CPU_KERNELS", "mkl"}, {"TFJOB_FLOAT16_EMULATION", "yes"}, {"TFJOB_PS_SHM", "off"}}) {
    auto s = ReadProcessSettings(cluster::FixedEnv({{name, value}}));
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr(name + ": \"" + value + "\""));
  }
}

TEST(ProcessSettingsTest, TheRuntimeRefusesABadValueBeforeAnyWork) {
  auto r = t::Run({t::RuntimeBinary(), "counter"}, {{"TFJOB_PS_SHM", "maybe"}});
  t::ExpectBadInput(r, "TFJOB_PS_SHM: \"maybe\" is not 0 or 1");
}

}  // namespace
}  // namespace tfjob::runtime
