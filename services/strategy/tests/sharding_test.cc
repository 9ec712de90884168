#include "services/strategy/sharding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "services/ps/ps_service.h"
#include "services/strategy/variable_store.h"

namespace tfjob::strategy {
namespace {

std::vector<int64_t> Rows(const PlacedVariable& v) {
  std::vector<int64_t> r;
  for (const auto& s : v.shards) r.push_back(s.row_end - s.row_begin);
  return r;
}

TEST(PartitionerTest, FixedShardsUsesTheDivLayout) {
  Placement p(5, Partitioner::FixedShards(5));
  const PlacedVariable* v = *p.Add("v", {13, 4});
  EXPECT_EQ(Rows(*v), (std::vector<int64_t>{3, 3, 3, 2, 2}));
  EXPECT_EQ(v->shards[3].row_begin, 9);
  EXPECT_EQ(v->shards[4].shape, (Shape{2, 4}));
  EXPECT_EQ(DivRows(10, 3), (std::vector<int64_t>{4, 3, 3}));
  // Never more shards than rows.
  EXPECT_EQ(*Partitioner::FixedShards(5).NumShards({3, 7}, DType::kFloat32), 3);
}

TEST(PartitionerTest, MinSizeFormula) {
  // TensorFlow's cases: [6, 1] float32 is 24 bytes.
  EXPECT_EQ(*Partitioner::MinSize(4, 2).NumShards({6, 1}, DType::kFloat32), 2);
  EXPECT_EQ(*Partitioner::MinSize(4, 10).NumShards({6, 1}, DType::kFloat32), 6);
  EXPECT_EQ(*Partitioner::MinSize(1024, 10).NumShards({6, 1}, DType::kFloat32), 1);
  // ceil(24 / 10) = 3 shards.
  EXPECT_EQ(*Partitioner::MinSize(10, 10).NumShards({6, 1}, DType::kFloat32), 3);
  // Default: 256 KiB minimum, at most 1 shard.
  EXPECT_EQ(*Partitioner::MinSize().NumShards({1 << 20, 4}, DType::kFloat32), 1);
  EXPECT_FALSE(Partitioner::MinSize(0, 2).NumShards({6, 1}, DType::kFloat32).ok());
}

TEST(PartitionerTest, MaxSizeFormula) {
  EXPECT_EQ(*Partitioner::MaxSize(4).NumShards({6, 1}, DType::kFloat32), 6);
  EXPECT_EQ(*Partitioner::MaxSize(4, 2).NumShards({6, 1}, DType::kFloat32), 2);
  EXPECT_EQ(*Partitioner::MaxSize(1024).NumShards({6, 1}, DType::kFloat32), 1);
  // 8 bytes per row, 12 bytes max: 1 row per shard (floor), 6 shards.
  EXPECT_EQ(*Partitioner::MaxSize(12).NumShards({6, 2}, DType::kFloat32), 6);
  // A row larger than the limit still gets a shard of its own.
  EXPECT_EQ(*Partitioner::MaxSize(1).NumShards({3, 100}, DType::kFloat32), 3);
  // 16 bytes per row, 40 bytes max: 2 rows per shard -> ceil(5 / 2) = 3.
  EXPECT_EQ(*Partitioner::MaxSize(40).NumShards({5, 4}, DType::kFloat32), 3);
  EXPECT_FALSE(Partitioner::MaxSize(0).NumShards({6, 1}, DType::kFloat32).ok());
}

TEST(PartitionerTest, ParseAndPrintRoundTrip) {
  for (const std::string text : {"none", "fixed:2", "min:1024:4", "max:4096", "max:4096:3"}) {
    auto p = ParsePartitioner(text);
    ASSERT_TRUE(p.ok()) << text << ": " << p.status();
    EXPECT_EQ(PartitionerString(*p), text);
  }
  EXPECT_EQ(PartitionerString(*ParsePartitioner("min:1024")), "min:1024:1");  // TF's default max_shards
  for (const std::string bad : {"", "fixed", "fixed:0", "fixed:x", "min:1:2:3", "range:4", "none:1"}) {
    auto p = ParsePartitioner(bad);
    EXPECT_EQ(p.status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(PlacementTest, RoundRobinOverPsTasksAndTheSeedsEmbedding) {
  Placement p(2, Partitioner::FixedShards(2));
  const PlacedVariable* emb = *p.Add("embedding", {9, 20});
  ASSERT_EQ(emb->shards.size(), 2u);
  EXPECT_EQ(emb->shards[0].shape, (Shape{5, 20}));
  EXPECT_EQ(emb->shards[0].ps, 0);
  EXPECT_EQ(emb->shards[1].shape, (Shape{4, 20}));
  EXPECT_EQ(emb->shards[1].ps, 1);
  const PlacedVariable* bias = *p.Add("bias", {});  // scalars are never sharded
  EXPECT_EQ(bias->shards.size(), 1u);
  EXPECT_EQ(bias->shards[0].ps, 0);
  const PlacedVariable* kernel = *p.Add("kernel", {20, 1});  // 2 shards, continuing the rotation
  EXPECT_EQ(kernel->shards[0].ps, 1);
  EXPECT_EQ(kernel->shards[1].ps, 0);
  EXPECT_EQ(p.Add("bias", {}).status().code(), Code::kAlreadyExists);
  EXPECT_EQ(p.Find("nope").status().code(), Code::kNotFound);
  Placement none(0, Partitioner::None());
  EXPECT_EQ(none.Add("v", {2}).status().code(), Code::kFailedPrecondition);
}

class VariableStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      servers_.push_back(*ps::PsServer::Start("127.0.0.1:0"));
      clients_.push_back(std::make_shared<ps::PsClient>("127.0.0.1:" + std::to_string(servers_.back()->port())));
    }
  }
  std::vector<std::unique_ptr<ps::PsServer>> servers_;
  std::vector<std::shared_ptr<ps::PsClient>> clients_;
};

TEST_F(VariableStoreTest, ShardedPullLookupAndPush) {
  Placement p(2, Partitioner::FixedShards(2));
  ASSERT_TRUE(p.Add("emb", {5, 2}).ok());
  ASSERT_TRUE(p.Add("w", {2}).ok());
  VariableStore store(p, clients_);
  Tensor emb = *Tensor::FromVector({5, 2}, std::vector<float>{0, 0, 1, 1, 2, 2, 3, 3, 4, 4});
  model::OptimizerSpec sgd;
  sgd.learning_rate = 1.0;
  ASSERT_TRUE(store.Create("emb", emb, sgd).ok());
  ASSERT_TRUE(store.Create("w", *Tensor::FromVector({2}, std::vector<float>{1, 1}), sgd).ok());
  // Shards really live on both PS tasks: rows 0..2 on ps 0, rows 3..4 on ps 1.
  EXPECT_EQ((*clients_[0]->Pull({"emb/part_0"}))[0].shape(), (Shape{3, 2}));
  EXPECT_EQ((*clients_[1]->Pull({"emb/part_1"}))[0].shape(), (Shape{2, 2}));

  auto full = store.Pull({"w", "emb"});
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE(Equal((*full)[1], emb));
  auto rows = store.Lookup("emb", {4, 0, 4, 2});
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_TRUE(Equal(*rows, *Tensor::FromVector({4, 2}, std::vector<float>{4, 4, 0, 0, 4, 4, 2, 2})));
  EXPECT_EQ(store.Lookup("emb", {5}).status().code(), Code::kInvalidArgument);

  // Sparse gradient on global rows 1 and 3 (one per shard); dense on w.
  model::Gradient sparse{true,
                         {},
                         *Tensor::FromVector({2}, std::vector<int64_t>{1, 3}),
                         *Tensor::FromVector({2, 2}, std::vector<float>{0.5f, 0.5f, 1, 1})};
  model::Gradient dense{false, *Tensor::FromVector({2}, std::vector<float>{0.25f, 0.5f}), {}, {}};
  ASSERT_EQ(*store.PushGradients(9, 0, {{"emb", sparse}, {"w", dense}}), 0);
  // All four shard updates are deduped: w ([2]) is split in two as well, as
  // TF applies the partitioner to every variable created in the scope.
  EXPECT_EQ(*store.PushGradients(9, 0, {{"emb", sparse}, {"w", dense}}), 4);
  auto after = store.Pull({"emb", "w"});
  EXPECT_TRUE(
      AllClose((*after)[0], *Tensor::FromVector({5, 2}, std::vector<float>{0, 0, 0.5f, 0.5f, 2, 2, 2, 2, 4, 4})));
  EXPECT_TRUE(AllClose((*after)[1], *Tensor::FromVector({2}, std::vector<float>{0.75f, 0.5f})));
}

// PushAndFetch: each PS gets its push and its part of the pull in one
// exchange (whole values), row pulls after it; every value read sees the
// push, on both PS tasks, and a retry is deduped like PushGradients.
TEST_F(VariableStoreTest, PushAndFetchSeesThePushOnEveryShard) {
  Placement p(2, Partitioner::FixedShards(2));
  ASSERT_TRUE(p.Add("emb", {5, 2}).ok());
  ASSERT_TRUE(p.Add("w", {2}).ok());
  VariableStore store(p, clients_);
  model::OptimizerSpec sgd;
  sgd.learning_rate = 1.0;
  ASSERT_TRUE(
      store.Create("emb", *Tensor::FromVector({5, 2}, std::vector<float>{0, 0, 1, 1, 2, 2, 3, 3, 4, 4}), sgd).ok());
  ASSERT_TRUE(store.Create("w", *Tensor::FromVector({2}, std::vector<float>{1, 1}), sgd).ok());
  model::Gradient sparse{true,
                         {},
                         *Tensor::FromVector({2}, std::vector<int64_t>{1, 3}),
                         *Tensor::FromVector({2, 2}, std::vector<float>{0.5f, 0.5f, 1, 1})};
  model::Gradient dense{false, *Tensor::FromVector({2}, std::vector<float>{0.25f, 0.5f}), {}, {}};
  Tensor w, rows;
  std::vector<VariableStore::Item> items{{"w", std::nullopt, &w}, {"emb", std::vector<int64_t>{1, 3, 4}, &rows}};
  auto d = store.PushAndFetch(9, 0, {{"emb", sparse}, {"w", dense}}, 0, items);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, 0);
  EXPECT_TRUE(AllClose(w, *Tensor::FromVector({2}, std::vector<float>{0.75f, 0.5f})));
  EXPECT_TRUE(AllClose(rows, *Tensor::FromVector({3, 2}, std::vector<float>{0.5f, 0.5f, 2, 2, 4, 4})));
  // The same step again: all four shard updates skipped, the values pulled.
  w = Tensor();
  EXPECT_EQ(*store.PushAndFetch(9, 0, {{"emb", sparse}, {"w", dense}}, 0, items), 4);
  EXPECT_TRUE(AllClose(w, *Tensor::FromVector({2}, std::vector<float>{0.75f, 0.5f})));
  // What PushGradients and Fetch refuse, it refuses.
  EXPECT_EQ(store.PushAndFetch(10, 0, {{"nope", dense}}, 0, items).status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace tfjob::strategy
