// The configuration read once from the environment (services/runtime/
// config.h): the process-wide switches and a role's settings, defaults, each
// value, and a bad one as tfjob-runtime reports it (one line, exit 2, before
// any work).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/runtime/config.h"
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
    EXPECT_FALSE(s->direct_convolutions);
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
  EXPECT_FALSE(s->direct_convolutions);
  EXPECT_TRUE(s->float16_emulation);
  EXPECT_FALSE(s->ps_shared_memory);
  EXPECT_EQ(s->self_exe, "/opt/bundle/bin/tfjob-runtime");
  s = ReadProcessSettings(
      cluster::FixedEnv({{"TFJOB_CPU_KERNELS", "direct"}, {"TFJOB_FLOAT16_EMULATION", "0"}, {"TFJOB_PS_SHM", "1"}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->eigen_kernels);
  EXPECT_TRUE(s->direct_convolutions);
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

TEST(ProcessEnvTest, ReadsTheLiveEnvironment) {
  const char* name = "TFJOB_CONFIG_TEST_PROCESS_ENV";
  ::unsetenv(name);
  cluster::Env env = ProcessEnv();
  EXPECT_EQ(env(name), std::nullopt);
  ASSERT_EQ(::setenv(name, "value", 1), 0);
  EXPECT_EQ(env(name), std::optional<std::string>("value"));
  ::unsetenv(name);
}

TEST(RoleConfigTest, DefaultsWithoutAnyVariable) {
  auto c = ReadRoleConfig(cluster::FixedEnv({}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->timeouts.connect, std::chrono::seconds(300));
  EXPECT_EQ(c->timeouts.ps, std::chrono::seconds(30));
  EXPECT_FALSE(c->resolver.resolved.has_value());  // no TF_CONFIG: run alone
  EXPECT_FALSE(c->resolver.kubernetes.has_value());
  EXPECT_EQ(cluster::ResolveCluster(c->resolver).status().code(), Code::kNotFound);
  EXPECT_FALSE(c->credentials.enabled());
  EXPECT_EQ(c->listen_fd, std::nullopt);
  EXPECT_EQ(c->ps_max_tensor_bytes, std::nullopt);
}

TEST(RoleConfigTest, EveryVariableIsReadIntoItsField) {
  const std::string token(32, 'k');
  auto c = ReadRoleConfig(cluster::FixedEnv({
      {"TF_CONFIG", R"({"cluster":{"chief":["c:1"],"ps":["p:2"],"worker":["w:3"]},"task":{"type":"ps","index":0}})"},
      {"TFJOB_CONNECT_TIMEOUT_SECONDS", "1.5"},
      {"TFJOB_PS_TIMEOUT_SECONDS", "7"},
      {"TFJOB_AUTH_TOKEN", token},
      {"TFJOB_LISTEN_FD", "3"},
      {"TFJOB_PS_MAX_TENSOR_BYTES", "4096"},
      {"TFJOB_POD_CREATED_MS", "1795262400000"},
  }));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->timeouts.connect, std::chrono::milliseconds(1500));
  EXPECT_EQ(c->timeouts.ps, std::chrono::seconds(7));
  ASSERT_TRUE(c->resolver.resolved.has_value());
  EXPECT_EQ(c->resolver.resolved->config.task->type, "ps");
  EXPECT_EQ(c->resolver.resolved->config.cluster.Address("worker", 0).value(), "w:3");
  EXPECT_EQ(c->credentials.token, token);
  EXPECT_EQ(c->listen_fd, std::optional<int>(3));
  EXPECT_EQ(c->ps_max_tensor_bytes, std::optional<uint64_t>(4096));
  EXPECT_EQ(c->pod_created_ms, 1795262400000u);
  // Unset (local runs, Slurm): 0, the wall clock's generations.
  EXPECT_EQ(ReadRoleConfig(cluster::FixedEnv({}))->pod_created_ms, 0u);
}

TEST(RoleConfigTest, EachBadValueIsNamed) {
  const std::map<std::string, std::string> bad = {
      {"TFJOB_CONNECT_TIMEOUT_SECONDS", "soon"}, {"TFJOB_PS_TIMEOUT_SECONDS", "0"}, {"TFJOB_PS_MAX_TENSOR_BYTES", "-1"},
      {"TFJOB_POD_CREATED_MS", "yesterday"},     {"TFJOB_LISTEN_FD", "three"},      {"TFJOB_AUTH_TOKEN", "short"},
      {"TFJOB_CLUSTER_RESOLVER", "mpi"},         {"TF_CONFIG", "{not json"},
  };
  for (const auto& [name, value] : bad) {
    auto c = ReadRoleConfig(cluster::FixedEnv({{name, value}}));
    ASSERT_FALSE(c.ok()) << name;
    EXPECT_EQ(c.status().code(), Code::kInvalidArgument) << name;
    EXPECT_THAT(c.status().message(), HasSubstr(name == "TFJOB_AUTH_TOKEN" ? "shorter than 16" : name)) << name;
  }
}

// A stamp that does not fit the generation's bits (or is no time at all)
// is refused, not wrapped.
TEST(RoleConfigTest, APodStampOutOfRangeIsRefused) {
  for (const char* v : {"0", "-5", "8796093022208", "99999999999999999999", "12ms", ""}) {
    auto c = ReadRoleConfig(cluster::FixedEnv({{"TFJOB_POD_CREATED_MS", v}}));
    ASSERT_FALSE(c.ok()) << v;
    EXPECT_THAT(c.status().message(), HasSubstr("TFJOB_POD_CREATED_MS: \"")) << v;
  }
  EXPECT_TRUE(ReadRoleConfig(cluster::FixedEnv({{"TFJOB_POD_CREATED_MS", "8796093022207"}})).ok());
}

TEST(RoleConfigTest, TheRuntimeRefusesABadRoleValueBeforeAnyWork) {
  auto r = t::Run({t::RuntimeBinary(), "counter"}, {{"TFJOB_PS_MAX_TENSOR_BYTES", "lots"}});
  t::ExpectBadInput(r, "TFJOB_PS_MAX_TENSOR_BYTES: \"lots\" is not a positive number of bytes");
}

}  // namespace
}  // namespace tfjob::runtime
