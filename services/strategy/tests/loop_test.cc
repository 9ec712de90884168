// The training loop against a strategy that records what it is told:
// which chunks it runs and when it may start the next one early (Ahead).
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "services/strategy/loop.h"
#include "services/strategy/strategy.h"

namespace tfjob::strategy {
namespace {

class RecordingStrategy : public Strategy {
 public:
  struct Chunk {
    int64_t from = 0, end = 0;
    int64_t ahead = 0;  // what Ahead said before this Run (0: nothing)
  };

  std::string_view name() const override { return "recording"; }
  int64_t num_replicas_in_sync() const override { return 1; }
  Status Start(TrainState&) override { return Status::Ok(); }
  void Ahead(int64_t next_end) override { ahead_ = next_end; }
  Status Run(TrainState& st, int64_t end) override {
    chunks.push_back({st.step, end, ahead_});
    ahead_ = 0;
    st.examples += end - st.step;
    st.partial_steps += end - st.step;
    st.step = end;
    return Status::Ok();
  }
  Status Recover(const Status& cause, TrainState&) override { return cause; }
  Status Checkpoint(const TrainState&, bool) override {
    ++checkpoints;
    return Status::Ok();
  }
  StatusOr<std::vector<Tensor>> Values() override { return std::vector<Tensor>{}; }
  nlohmann::json SummaryJson() const override { return nlohmann::json::object(); }

  std::vector<Chunk> chunks;
  int checkpoints = 0;

 private:
  int64_t ahead_ = 0;
};

// Without checkpoints each chunk but the last is told the next one's end.
TEST(TrainingLoopTest, WithoutCheckpointsEachChunkIsToldTheNext) {
  RecordingStrategy s;
  LoopOptions o;
  o.epochs = 3;
  o.steps_per_epoch = 10;
  auto summary = RunTrainingLoop(s, o);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->steps, 30);
  ASSERT_EQ(s.chunks.size(), 3u);
  EXPECT_EQ(s.chunks[0].ahead, 20);
  EXPECT_EQ(s.chunks[1].ahead, 30);
  EXPECT_EQ(s.chunks[2].ahead, 0);
  EXPECT_EQ(summary->history.size(), 3u);
}

// With checkpoints the state must be exact at every chunk's end: no Ahead.
TEST(TrainingLoopTest, WithCheckpointsNoChunkIsToldTheNext) {
  RecordingStrategy s;
  LoopOptions o;
  o.epochs = 3;
  o.steps_per_epoch = 10;
  o.checkpoints.dir = (std::filesystem::temp_directory_path() / "loop_test_unused").string();
  o.checkpoints.every_steps = 10;
  auto summary = RunTrainingLoop(s, o);
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_EQ(s.chunks.size(), 3u);
  for (const auto& c : s.chunks) EXPECT_EQ(c.ahead, 0) << "chunk to " << c.end;
  EXPECT_EQ(s.checkpoints, 3);
}

}  // namespace
}  // namespace tfjob::strategy
