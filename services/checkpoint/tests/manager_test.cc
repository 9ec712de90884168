#include "services/checkpoint/manager.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/files.h"
#include "services/checkpoint/checkpoint.h"

namespace tfjob::checkpoint {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("mgr-" + std::to_string(::getpid()) + "-" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A checkpoint at `step` whose one PS file holds `value`.
  void Save(Manager& m, int64_t step, float value, bool final = false) {
    auto d = m.Prepare(step);
    ASSERT_TRUE(d.ok()) << d.status();
    Entry e{"w", step, {*Tensor::FromVector({2}, std::vector<float>{value, value})}};
    ASSERT_TRUE(Write(*d + "/ps-0.ckpt", {e}).ok());
    ASSERT_TRUE(m.Commit(step, final, {{"epoch", step / 10}}, {"ps-0.ckpt"}).ok());
  }
  float ValueOf(const Committed& c) {
    auto e = Read(c.files.at(0));
    EXPECT_TRUE(e.ok()) << e.status();
    return (*e)[0].tensors[0].data<float>()[0];
  }
  fs::path dir_;
};

TEST_F(ManagerTest, LatestIsTheNewestCommittedAndOldOnesAreRetired) {
  Manager m(dir_.string(), 2);
  auto none = m.Latest();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  Save(m, 10, 1.f);
  Save(m, 20, 2.f);
  Save(m, 30, 3.f, true);
  auto l = m.Latest();
  ASSERT_TRUE(l.ok() && l->has_value());
  EXPECT_EQ((*l)->step, 30);
  EXPECT_TRUE((*l)->final);
  EXPECT_EQ((*l)->state["epoch"], 3);
  EXPECT_FLOAT_EQ(ValueOf(**l), 3.f);
  EXPECT_FALSE(fs::exists(dir_ / "ckpt-10"));  // keep = 2
  EXPECT_TRUE(fs::exists(dir_ / "ckpt-20"));
}

TEST_F(ManagerTest, AnUncommittedAttemptIsInvisible) {
  Manager m(dir_.string());
  Save(m, 10, 1.f);
  auto d = m.Prepare(20);  // a chief that died before writing meta.json
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(Write(*d + "/ps-0.ckpt", {Entry{"w", 0, {*Tensor::FromVector({2}, std::vector<float>{9, 9})}}}).ok());
  auto l = m.Latest();
  ASSERT_TRUE(l.ok() && l->has_value());
  EXPECT_EQ((*l)->step, 10);
}

// Every truncation and a bit flip in every byte of the newest checkpoint's
// files: the damaged one is never loaded, the previous good one is.
TEST_F(ManagerTest, DamagedNewestFallsBackToThePreviousGoodOne) {
  Manager m(dir_.string(), 5);
  Save(m, 10, 1.f);
  Save(m, 20, 2.f);
  for (const std::string name : {"ps-0.ckpt", "meta.json"}) {
    const std::string path = (dir_ / "ckpt-20" / name).string();
    const std::string good = *ReadFile(path);
    auto check = [&](const std::string& bad, const std::string& what) {
      { std::ofstream(path, std::ios::binary | std::ios::trunc) << bad; }
      std::ostringstream log;
      auto l = m.Latest(&log);
      ASSERT_TRUE(l.ok() && l->has_value()) << what;
      EXPECT_EQ((*l)->step, 10) << name << " " << what;
      EXPECT_FLOAT_EQ(ValueOf(**l), 1.f);
      EXPECT_THAT(log.str(), HasSubstr("skipping")) << what;
    };
    for (size_t n = 0; n < good.size(); n += 7) check(good.substr(0, n), "truncated to " + std::to_string(n));
    for (size_t i = 0; i < good.size(); ++i) {
      std::string bad = good;
      bad[i] ^= 0x10;
      check(bad, "bit flip at " + std::to_string(i));
    }
    { std::ofstream(path, std::ios::binary | std::ios::trunc) << good; }
    auto l = m.Latest();
    ASSERT_TRUE(l.ok() && l->has_value());
    EXPECT_EQ((*l)->step, 20);
  }
}

TEST_F(ManagerTest, AFileFromAnotherCheckpointIsRejected) {
  Manager m(dir_.string(), 5);
  Save(m, 10, 1.f);
  Save(m, 20, 2.f);
  // Valid on its own, but not the file ckpt-20 committed.
  fs::copy_file(dir_ / "ckpt-10" / "ps-0.ckpt", dir_ / "ckpt-20" / "ps-0.ckpt", fs::copy_options::overwrite_existing);
  auto v = m.Verify((dir_ / "ckpt-20").string());
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), Code::kDataLoss);
  EXPECT_THAT(v.status().message(), HasSubstr("checksum differs"));
  auto l = m.Latest();
  ASSERT_TRUE(l.ok() && l->has_value());
  EXPECT_EQ((*l)->step, 10);
}

// Every committed checkpoint damaged: an error naming each, never a silent
// fresh start; a manager told to ignore damage reports none instead.
TEST_F(ManagerTest, WhenEveryCheckpointIsDamagedLatestSaysSoUnlessTold) {
  Manager m(dir_.string(), 5);
  Save(m, 10, 1.f);
  Save(m, 20, 2.f);
  for (const char* step : {"ckpt-10", "ckpt-20"}) {
    const std::string path = (dir_ / step / "ps-0.ckpt").string();
    std::string bytes = *ReadFile(path);
    bytes[bytes.size() / 2] ^= 0x10;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  auto l = m.Latest();
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), Code::kDataLoss);
  EXPECT_THAT(l.status().message(), HasSubstr("every checkpoint in " + dir_.string() + " is damaged: ckpt-20 ("));
  EXPECT_THAT(l.status().message(), HasSubstr("; ckpt-10 ("));
  EXPECT_THAT(l.status().message(), HasSubstr("--ignore-damaged-checkpoints"));
  auto lenient = Manager(dir_.string(), 5, /*ignore_damaged=*/true).Latest();
  ASSERT_TRUE(lenient.ok()) << lenient.status();
  EXPECT_FALSE(lenient->has_value());
  // An attempt that never committed is not damage: nothing there is nothing.
  fs::remove_all(dir_ / "ckpt-10");
  fs::remove_all(dir_ / "ckpt-20");
  ASSERT_TRUE(m.Prepare(30).ok());
  auto empty = m.Latest();
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->has_value());
}

TEST_F(ManagerTest, CheckWritableMakesTheDirectoryOrSaysWhyNot) {
  const fs::path fresh = dir_ / "a" / "b";
  EXPECT_TRUE(CheckWritable(fresh.string()).ok());
  EXPECT_TRUE(fs::is_directory(fresh));
  EXPECT_TRUE(fs::is_empty(fresh));  // the probe file is gone
  // Under a regular file nothing can be made.
  std::ofstream(dir_ / "file") << "x";
  Status s = CheckWritable((dir_ / "file" / "ckpt").string());
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("--checkpoint-dir " + (dir_ / "file" / "ckpt").string() + " cannot be created"));
  if (geteuid() != 0) {  // root writes anywhere
    fs::create_directories(dir_ / "ro");
    fs::permissions(dir_ / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_THAT(CheckWritable((dir_ / "ro").string()).message(), HasSubstr("is not writable"));
    fs::permissions(dir_ / "ro", fs::perms::owner_all);
  }
}

}  // namespace
}  // namespace tfjob::checkpoint
