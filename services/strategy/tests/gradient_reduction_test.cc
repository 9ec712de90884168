// The synchronous strategies' gradient reduction on its own: what a replica
// contributes, what summing replicas gives, and the step sums that travel
// with the gradients. Host tensors only; the all-reduces that sum these
// tensors across replicas and members are the collectives' (their tests),
// and sync_test.cc checks the whole step against one device.
#include "services/strategy/gradient_reduction.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tfjob::strategy {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Tensor Floats(Shape shape, std::vector<float> values) {
  auto t = Tensor::FromVector(std::move(shape), std::move(values));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Tensor();
}

Tensor Ids(std::vector<int64_t> ids) {
  const int64_t n = static_cast<int64_t>(ids.size());
  auto t = Tensor::FromVector({n}, std::move(ids));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Tensor();
}

std::vector<float> Values(const Tensor& t) {
  const float* f = t.data<float>();
  return std::vector<float>(f, f + t.size());
}

model::Gradient Dense(Tensor g) { return model::Gradient(false, std::move(g), Tensor(), Tensor()); }
model::Gradient Sparse(std::vector<int64_t> rows, Tensor values) {
  return model::Gradient(true, Tensor(), Ids(std::move(rows)), std::move(values));
}

// A dense bias [2] and a sparse embedding table [4, 2].
std::vector<VariableInfo> BiasAndTable() {
  return {{.name = "bias", .shape = {2}, .trainable = true, .sparse = false},
          {.name = "table", .shape = {4, 2}, .trainable = true, .sparse = true}};
}

TEST(GradientReductionTest, AReplicasShareIsItsRowsOverTheGlobalBatch) {
  EXPECT_FLOAT_EQ(ReplicaShare(25, 100), 0.25f);
  // Uneven slices still weigh up to the whole batch.
  EXPECT_FLOAT_EQ(ReplicaShare(3, 10) + ReplicaShare(3, 10) + ReplicaShare(4, 10), 1.f);
}

TEST(GradientReductionTest, DenseGradientsAreScaledByTheShareAndHaveNoMask) {
  const std::vector<VariableInfo> vars{{.name = "bias", .shape = {2}}};
  const std::vector<model::Gradient> grads{Dense(Floats({2}, {2.f, -4.f}))};
  auto r = ToReducible(grads, vars, 0.5f, Device::Cpu());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_THAT(Values((*r)[0].dense), ElementsAre(1.f, -2.f));
  EXPECT_EQ((*r)[0].mask.size(), 0);
}

TEST(GradientReductionTest, SparseGradientsBecomeDenseRowsWithAMaskOfTheRowsTouched) {
  const std::vector<VariableInfo> vars = BiasAndTable();
  const std::vector<model::Gradient> grads{Dense(Floats({2}, {0.f, 0.f})),
                                           Sparse({1, 3}, Floats({2, 2}, {2.f, 4.f, 6.f, 8.f}))};
  auto r = ToReducible(grads, vars, 0.5f, Device::Cpu());
  ASSERT_TRUE(r.ok()) << r.status();
  const ReducibleGradient& table = (*r)[1];
  EXPECT_EQ(table.dense.shape(), (Shape{4, 2}));
  EXPECT_THAT(Values(table.dense), ElementsAre(0.f, 0.f, 1.f, 2.f, 0.f, 0.f, 3.f, 4.f));
  EXPECT_THAT(Values(table.mask), ElementsAre(0.f, 1.f, 0.f, 1.f));
}

TEST(GradientReductionTest, AGradientThatChangesBetweenDenseAndSparseIsAnInternalError) {
  const std::vector<VariableInfo> vars = BiasAndTable();
  const std::vector<model::Gradient> grads{Dense(Floats({2}, {0.f, 0.f})),
                                           Dense(Floats({4, 2}, std::vector<float>(8)))};
  auto r = ToReducible(grads, vars, 1.f, Device::Cpu());
  EXPECT_EQ(r.status().code(), Code::kInternal);
  EXPECT_THAT(r.status().message(), HasSubstr("\"table\""));
}

TEST(GradientReductionTest, GradientsForAnotherNumberOfVariablesAreRejected) {
  const std::vector<VariableInfo> vars = BiasAndTable();
  const std::vector<model::Gradient> grads{Dense(Floats({2}, {0.f, 0.f}))};
  EXPECT_EQ(ToReducible(grads, vars, 1.f, Device::Cpu()).status().code(), Code::kInvalidArgument);
}

TEST(GradientReductionTest, AReplicaWithoutRowsSendsZerosOfTheSameTensors) {
  const std::vector<VariableInfo> vars = BiasAndTable();
  const std::vector<model::Gradient> grads{Dense(Floats({2}, {1.f, 1.f})), Sparse({0}, Floats({1, 2}, {1.f, 1.f}))};
  auto some = ToReducible(grads, vars, 1.f, Device::Cpu());
  auto none = ZeroGradients(vars, Device::Cpu());
  ASSERT_TRUE(some.ok()) << some.status();
  ASSERT_TRUE(none.ok()) << none.status();
  const std::vector<Tensor*> a = ReductionTensors(*some), b = ReductionTensors(*none);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]->shape(), b[i]->shape()) << "tensor " << i;
    EXPECT_THAT(Values(*b[i]), ::testing::Each(0.f)) << "tensor " << i;
  }
}

TEST(GradientReductionTest, AnAllReduceSumsEachDenseGradientFollowedByItsMask) {
  const std::vector<VariableInfo> vars = BiasAndTable();
  auto zeros = ZeroGradients(vars, Device::Cpu());
  ASSERT_TRUE(zeros.ok()) << zeros.status();
  const std::vector<Tensor*> p = ReductionTensors(*zeros);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0], &(*zeros)[0].dense);
  EXPECT_EQ(p[1], &(*zeros)[1].dense);
  EXPECT_EQ(p[2], &(*zeros)[1].mask);
}

TEST(GradientReductionTest, SummedSharesOfReplicaMeansAreTheMeanOverTheWholeBatch) {
  // Batch of 4 rows: replica 0 has 1 row with gradient 8, replica 1 has 3
  // rows with mean gradient 4 (rows 2, 4, 6): the batch's mean is 5.
  const std::vector<VariableInfo> vars{{.name = "w", .shape = {1}}};
  const std::vector<model::Gradient> g0{Dense(Floats({1}, {8.f}))}, g1{Dense(Floats({1}, {4.f}))};
  auto r0 = ToReducible(g0, vars, ReplicaShare(1, 4), Device::Cpu());
  auto r1 = ToReducible(g1, vars, ReplicaShare(3, 4), Device::Cpu());
  ASSERT_TRUE(r0.ok() && r1.ok());
  const std::vector<ReplicaGradients> replicas{*r0, *r1};
  auto sum = SumInReplicaOrder(replicas);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_THAT(Values((*sum)[0].dense), ElementsAre(5.f));
}

TEST(GradientReductionTest, SummedMasksMarkEveryRowAnyReplicaTouched) {
  const std::vector<VariableInfo> vars = BiasAndTable();
  const std::vector<model::Gradient> g0{Dense(Floats({2}, {1.f, 0.f})), Sparse({0, 2}, Floats({2, 2}, {1, 1, 1, 1}))};
  const std::vector<model::Gradient> g1{Dense(Floats({2}, {0.f, 1.f})), Sparse({2}, Floats({1, 2}, {1, 1}))};
  auto r0 = ToReducible(g0, vars, 1.f, Device::Cpu());
  auto r1 = ToReducible(g1, vars, 1.f, Device::Cpu());
  ASSERT_TRUE(r0.ok() && r1.ok());
  const std::vector<ReplicaGradients> replicas{*r0, *r1};
  auto sum = SumInReplicaOrder(replicas);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_THAT(Values((*sum)[0].dense), ElementsAre(1.f, 1.f));
  EXPECT_THAT(Values((*sum)[1].dense), ElementsAre(1.f, 1.f, 0.f, 0.f, 2.f, 2.f, 0.f, 0.f));
  EXPECT_THAT(TouchedRows((*sum)[1].mask), ElementsAre(0, 2));
  // The replicas' own gradients are left as they were.
  EXPECT_THAT(Values((*r0)[1].mask), ElementsAre(1.f, 0.f, 1.f, 0.f));
}

TEST(GradientReductionTest, SummingNoReplicasIsAnError) {
  EXPECT_EQ(SumInReplicaOrder({}).status().code(), Code::kInvalidArgument);
}

TEST(GradientReductionTest, ReplicasWithDifferentVariablesCannotBeSummed) {
  const std::vector<VariableInfo> one{{.name = "w", .shape = {1}}};
  auto a = ZeroGradients(one, Device::Cpu());
  auto b = ZeroGradients(BiasAndTable(), Device::Cpu());
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<ReplicaGradients> replicas{*a, *b};
  EXPECT_EQ(SumInReplicaOrder(replicas).status().code(), Code::kInvalidArgument);
}

TEST(GradientReductionTest, AnUntouchedMaskHasNoRows) {
  EXPECT_TRUE(TouchedRows(Floats({3}, {0.f, 0.f, 0.f})).empty());
}

TEST(GradientReductionTest, StepSumsComeBackAsTheyWerePacked) {
  BatchStats stats;
  stats.loss = {12.5, 25};
  stats.metrics = {{20, 25}, {3, 5}};
  auto packed = PackStepSums(stats, 25);
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_THAT(Values(*packed), ElementsAre(12.5f, 25.f, 25.f, 20.f, 25.f, 3.f, 5.f));
  auto back = UnpackStepSums(*packed, 2);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rows, 25);
  EXPECT_EQ(back->stats.loss.total, 12.5);
  EXPECT_EQ(back->stats.loss.count, 25);
  ASSERT_EQ(back->stats.metrics.size(), 2u);
  EXPECT_EQ(back->stats.metrics[1].total, 3);
  EXPECT_EQ(back->stats.metrics[1].count, 5);
}

TEST(GradientReductionTest, StepSumsForAnotherNumberOfMetricsAreRejected) {
  BatchStats stats;
  stats.metrics.resize(1);
  auto packed = PackStepSums(stats, 10);
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(UnpackStepSums(*packed, 2).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace tfjob::strategy
