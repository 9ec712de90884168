#include "common/child_process.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tfjob {
namespace {

using ::testing::HasSubstr;

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

TEST(SpawnChildTest, MergedOutputCarriesStdoutAndStderrAndTheExitCode) {
  ChildOptions o;
  o.argv = {"sh", "-c", "echo out; echo err >&2; exit 7"};
  auto c = SpawnChild(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->err_fd, -1);
  const std::string text = ReadAll(c->out_fd);
  EXPECT_THAT(text, HasSubstr("out\n"));
  EXPECT_THAT(text, HasSubstr("err\n"));
  EXPECT_EQ(WaitForExit(c->pid), 7);
}

TEST(SpawnChildTest, SeparateOutputKeepsTheStreamsApart) {
  ChildOptions o;
  o.argv = {"sh", "-c", "echo out; echo err >&2"};
  o.output = ChildOptions::Output::kSeparate;
  auto c = SpawnChild(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(ReadAll(c->out_fd), "out\n");
  EXPECT_EQ(ReadAll(c->err_fd), "err\n");
  EXPECT_EQ(WaitForExit(c->pid), 0);
}

TEST(SpawnChildTest, EnvironmentIsTheParentsLessUnsetWithSetOverIt) {
  setenv("TFJOB_CHILD_TEST_KEEP", "kept", 1);
  setenv("TFJOB_CHILD_TEST_DROP", "dropped", 1);
  setenv("TFJOB_CHILD_TEST_OVER", "old", 1);
  ChildOptions o;
  o.argv = {"sh", "-c", "echo \"$TFJOB_CHILD_TEST_KEEP/${TFJOB_CHILD_TEST_DROP-unset}/$TFJOB_CHILD_TEST_OVER\""};
  o.unset_env = {"TFJOB_CHILD_TEST_DROP"};
  o.env = {{"TFJOB_CHILD_TEST_OVER", "new"}};
  auto c = SpawnChild(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(ReadAll(c->out_fd), "kept/unset/new\n");
  EXPECT_EQ(WaitForExit(c->pid), 0);
  EXPECT_STREQ(std::getenv("TFJOB_CHILD_TEST_OVER"), "old");  // the parent's is untouched
}

TEST(SpawnChildTest, AProgramThatCannotRunIsAnErrorNotAnExitCode) {
  ChildOptions o;
  o.argv = {"/nonexistent/tfjob-no-such-program"};
  auto missing = SpawnChild(o);
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot execute \"/nonexistent/tfjob-no-such-program\""));
  o.argv = {"/dev/null"};
  EXPECT_EQ(SpawnChild(o).status().code(), Code::kPermissionDenied);
  o.argv = {};
  EXPECT_EQ(SpawnChild(o).status().code(), Code::kFailedPrecondition);
  o.argv = {"sh", "-c", "true"};
  o.cwd = "/nonexistent-directory";
  EXPECT_EQ(SpawnChild(o).status().code(), Code::kNotFound);
}

TEST(SpawnChildTest, PassedDescriptorsArriveAtTheirNumbers) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  ChildOptions o;
  o.argv = {"sh", "-c", "echo through-five >&5"};
  o.output = ChildOptions::Output::kInherit;
  o.pass_fds = {{p[1], 5}};
  auto c = SpawnChild(o);
  ASSERT_TRUE(c.ok()) << c.status();
  close(p[1]);
  EXPECT_EQ(ReadAll(p[0]), "through-five\n");
  EXPECT_EQ(WaitForExit(c->pid), 0);
}

// Whatever descriptor numbers the pipes got, a program that cannot run is
// still reported after descriptors are moved onto low numbers.
TEST(SpawnChildTest, AFailedExecIsReportedWhateverTheDescriptorsMoved) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  ChildOptions o;
  o.argv = {"/nonexistent/tfjob-no-such-program"};
  for (int fd = 3; fd < 16; ++fd) o.pass_fds.emplace_back(p[1], fd);
  EXPECT_EQ(SpawnChild(o).status().code(), Code::kNotFound);
  close(p[0]);
  close(p[1]);
}

TEST(SpawnChildTest, StdinFromDevNullAndTheWorkingDirectory) {
  ChildOptions o;
  o.argv = {"sh", "-c", "cat; pwd"};
  o.null_stdin = true;
  o.cwd = "/";
  auto c = SpawnChild(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(ReadAll(c->out_fd), "/\n");
  EXPECT_EQ(WaitForExit(c->pid), 0);
}

TEST(SpawnChildTest, ASignalledChildExitsWith128PlusTheSignal) {
  ChildOptions o;
  o.argv = {"sh", "-c", "kill -9 $$"};
  o.output = ChildOptions::Output::kInherit;
  auto c = SpawnChild(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(WaitForExit(c->pid), 137);
}

TEST(ForEachLineTest, EveryLineOnceAndTheLastWithoutANewline) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  const std::string text = "one\n\ntwo\nthree";
  ASSERT_EQ(write(p[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(p[1]);
  std::vector<std::string> lines;
  ForEachLine(p[0], [&](const std::string& l) { lines.push_back(l); });
  close(p[0]);
  EXPECT_EQ(lines, (std::vector<std::string>{"one", "", "two", "three"}));
}

}  // namespace
}  // namespace tfjob
