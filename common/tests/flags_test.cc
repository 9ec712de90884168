#include "common/flags.h"

#include <gtest/gtest.h>

namespace tfjob {
namespace {

Flags Make() {
  Flags f;
  f.Value("config", "job file", "", true).Value("epochs", "epochs", "3").Bool("verbose", "chatty");
  return f;
}

TEST(FlagsTest, ParsesBothForms) {
  Flags f = Make();
  ASSERT_TRUE(f.Parse({"--config", "a.json", "--epochs=5", "--verbose", "pos", "--", "--x", "y"}).ok());
  EXPECT_EQ(f.Get("config"), "a.json");
  EXPECT_EQ(*f.GetInt("epochs"), 5);
  EXPECT_TRUE(f.GetBool("verbose"));
  EXPECT_TRUE(f.Has("epochs"));
  EXPECT_EQ(f.positional(), std::vector<std::string>{"pos"});
  EXPECT_EQ(f.rest(), (std::vector<std::string>{"--x", "y"}));
}

TEST(FlagsTest, IsBoolTellsWhichFlagsTakeNoValue) {
  Flags f = Make();
  EXPECT_TRUE(f.IsBool("verbose"));
  EXPECT_FALSE(f.IsBool("config"));
  EXPECT_FALSE(f.IsBool("no-such-flag"));
}

TEST(FlagsTest, DefaultsAndErrors) {
  Flags f = Make();
  ASSERT_TRUE(f.Parse({"--config=x"}).ok());
  EXPECT_EQ(*f.GetInt("epochs"), 3);
  EXPECT_FALSE(f.Has("epochs"));
  EXPECT_EQ(Make().Parse({"--config", "x", "--epoch", "3"}).message(), "unknown flag --epoch");
  EXPECT_EQ(Make().Parse({}).message(), "missing required flag --config");
  EXPECT_EQ(Make().Parse({"--config"}).message(), "flag --config needs a value");
  Flags g = Make();
  ASSERT_TRUE(g.Parse({"--config", "x", "--epochs", "3x"}).ok());
  EXPECT_EQ(g.GetInt("epochs").status().message(), "flag --epochs: not an integer: \"3x\"");
}

}  // namespace
}  // namespace tfjob
