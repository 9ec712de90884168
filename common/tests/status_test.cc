#include "common/status.h"

#include <gtest/gtest.h>

namespace tfjob {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

StatusOr<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  RETURN_IF_ERROR(Half(x).status());
  return Status::Ok();
}

TEST(StatusTest, CodesMatchGrpcNumbering) {
  EXPECT_EQ(static_cast<int>(Code::kInvalidArgument), 3);
  EXPECT_EQ(static_cast<int>(Code::kUnavailable), 14);
  EXPECT_EQ(static_cast<int>(Code::kUnauthenticated), 16);
  EXPECT_EQ(CodeName(Code::kFailedPrecondition), "FAILED_PRECONDITION");
}

TEST(StatusTest, OkHasNoMessage) {
  Status s(Code::kOk, "ignored");
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, ContextIsPrepended) {
  Status s = NotFound("no such file").WithContext("reading a.gz");
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: reading a.gz: no such file");
}

TEST(StatusOrTest, PropagatesFirstError) {
  EXPECT_EQ(*Quarter(8), 2);
  auto r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "odd: 3");
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(CheckEven(5).code(), Code::kInvalidArgument);
}

TEST(StatusOrTest, MoveOnlyValues) {
  StatusOr<std::unique_ptr<int>> p = std::make_unique<int>(7);
  ASSERT_TRUE(p.ok());
  std::unique_ptr<int> v = std::move(p).value();
  EXPECT_EQ(*v, 7);
}

TEST(ElideTest, ShortValuesStayWholeLongOnesAreCutWithTheirLength) {
  EXPECT_EQ(Elide("host:2222"), "host:2222");
  const std::string big(120 * 1024, 'a');
  const std::string cut = Elide(big);
  EXPECT_EQ(cut, std::string(200, 'a') + "... (122880 bytes)");
  // Never half of a UTF-8 character: "é" is two bytes, the cut backs off.
  const std::string accents = std::string(199, 'x') + "\xc3\xa9" + std::string(50, 'y');
  EXPECT_EQ(Elide(accents), std::string(199, 'x') + "... (251 bytes)");
}

}  // namespace
}  // namespace tfjob
