#include "common/shared_library.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

namespace tfjob {
namespace {

using ::testing::HasSubstr;

// The C math library: present on every glibc system, and not linked by name
// here, so opening it goes through the dynamic loader's search.
TEST(SharedLibraryTest, OpensTheFirstNameThatLoadsAndFindsItsSymbols) {
  SharedLibrary lib("the C math library", {"libtfjob-no-such-library.so.1", "libm.so.6"}, "");
  ASSERT_TRUE(lib.Load().ok()) << lib.Load();
  auto cos_fn = reinterpret_cast<double (*)(double)>(lib.Symbol("cos"));
  ASSERT_NE(cos_fn, nullptr);
  EXPECT_DOUBLE_EQ(cos_fn(0.5), std::cos(0.5));
  EXPECT_TRUE(lib.SymbolStatus("cos").ok());
  EXPECT_EQ(lib.Symbol("tfjob_no_such_function"), nullptr);
  Status missing = lib.SymbolStatus("tfjob_no_such_function");
  EXPECT_EQ(missing.code(), Code::kFailedPrecondition);
  EXPECT_THAT(missing.message(), HasSubstr("the C math library has no tfjob_no_such_function"));
}

TEST(SharedLibraryTest, AMissingLibraryNamesEveryFileTriedAndStaysAnError) {
  SharedLibrary lib("cuFoo", {"libcufoo.so.9"}, "/nonexistent-dir");
  Status s = lib.Load();
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("cuFoo could not be loaded ("));
  EXPECT_THAT(s.message(), HasSubstr("libcufoo.so.9: cannot open shared object file"));
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent-dir/libcufoo.so.9"));
  EXPECT_EQ(lib.Symbol("anything"), nullptr);
  EXPECT_EQ(lib.Load().message(), s.message());  // tried once; the answer stays
}

}  // namespace
}  // namespace tfjob
