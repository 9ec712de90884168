#include "services/tensor/tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "services/tensor/tests/tensor_testing.h"

namespace tfjob {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using ::tfjob::testing::F;
using ::tfjob::testing::Floats;
using ::tfjob::testing::Ints;

// 0, 1, 2, ... as float32 of the given shape.
Tensor Iota(Shape s) {
  Tensor t = Tensor::Zeros(DType::kFloat32, std::move(s));
  for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

TEST(DTypeTest, NamesAndSizes) {
  EXPECT_EQ(DTypeName(DType::kFloat32), "float32");
  EXPECT_EQ(DTypeName(DType::kInt64), "int64");
  EXPECT_EQ(DTypeSize(DType::kFloat32), 4u);
  EXPECT_EQ(DTypeSize(DType::kInt64), 8u);
  EXPECT_EQ(DTypeOf<float>(), DType::kFloat32);
  EXPECT_EQ(DTypeOf<int64_t>(), DType::kInt64);
}

TEST(ShapeTest, ShapeStringAndNumElements) {
  EXPECT_EQ(ShapeString({}), "[]");
  EXPECT_EQ(ShapeString({7}), "[7]");
  EXPECT_EQ(ShapeString({2, 3, 4}), "[2, 3, 4]");
  EXPECT_EQ(NumElements({}), 1);
  EXPECT_EQ(NumElements({2, 3, 4}), 24);
  EXPECT_EQ(NumElements({5, 0, 3}), 0);
  EXPECT_EQ(NumElements({2, -1}), -1);
  const int64_t big = int64_t{1} << 40;
  EXPECT_EQ(NumElements({big, big}), -1);  // 2^80 overflows
  EXPECT_EQ(NumElements({0, big, big}), 0);
}

TEST(TensorTest, DefaultIsEmptyFloatVector) {
  Tensor t;
  EXPECT_EQ(t.dtype(), DType::kFloat32);
  EXPECT_EQ(t.shape(), Shape({0}));
  EXPECT_EQ(t.size(), 0);
  EXPECT_EQ(t.bytes(), 0u);
}

TEST(TensorTest, CreateIsZeroFilled) {
  auto f = Tensor::Create(DType::kFloat32, {2, 3});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->dtype(), DType::kFloat32);
  EXPECT_EQ(f->shape(), Shape({2, 3}));
  EXPECT_EQ(f->rank(), 2);
  EXPECT_EQ(f->size(), 6);
  EXPECT_EQ(f->bytes(), 24u);
  EXPECT_EQ(f->dim(0), 2);
  EXPECT_EQ(f->dim(-1), 3);
  EXPECT_THAT(Floats(*f), ElementsAre(0, 0, 0, 0, 0, 0));

  auto i = Tensor::Create(DType::kInt64, {4});
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(i->bytes(), 32u);
  EXPECT_THAT(Ints(*i), ElementsAre(0, 0, 0, 0));

  auto empty = Tensor::Create(DType::kFloat32, {3, 0});
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->size(), 0);

  Tensor scalar = Tensor::Zeros(DType::kInt64, {});
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.size(), 1);
  EXPECT_EQ(scalar.data<int64_t>()[0], 0);
}

TEST(TensorTest, CreateRejectsNegativeDims) {
  auto t = Tensor::Create(DType::kFloat32, {2, -1});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("[2, -1]"));
}

TEST(TensorTest, CreateRejectsOverflowingAndHugeShapes) {
  const int64_t big = int64_t{1} << 40;
  auto overflow = Tensor::Create(DType::kFloat32, {big, big});
  ASSERT_FALSE(overflow.ok());
  EXPECT_EQ(overflow.status().code(), Code::kInvalidArgument);

  // 2^36 float32 elements = 256 GiB, above the 64 GiB cap.
  auto huge = Tensor::Create(DType::kFloat32, {int64_t{1} << 36});
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), Code::kResourceExhausted);
  // 2^33 int64 elements = 64 GiB exactly is allowed by size but 2^34 is not.
  auto huge64 = Tensor::Create(DType::kInt64, {int64_t{1} << 34});
  ASSERT_FALSE(huge64.ok());
  EXPECT_EQ(huge64.status().code(), Code::kResourceExhausted);
}

TEST(TensorTest, FromVectorCopiesValues) {
  std::vector<float> v{1, 2, 3, 4, 5, 6};
  auto t = Tensor::FromVector({3, 2}, v);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->shape(), Shape({3, 2}));
  EXPECT_THAT(Floats(*t), ElementsAre(1, 2, 3, 4, 5, 6));

  auto i = Tensor::FromVector({2}, std::vector<int64_t>{-7, int64_t{1} << 50});
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(i->dtype(), DType::kInt64);
  EXPECT_THAT(Ints(*i), ElementsAre(-7, int64_t{1} << 50));

  auto s = Tensor::FromVector({}, std::vector<float>{2.5f});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->rank(), 0);
  EXPECT_EQ(s->data<float>()[0], 2.5f);

  auto e = Tensor::FromVector({0, 4}, std::vector<float>{});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->size(), 0);
}

TEST(TensorTest, FromVectorRejectsWrongCount) {
  auto t = Tensor::FromVector({2, 3}, std::vector<float>{1, 2, 3, 4, 5});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("needs 6 values, got 5"));

  auto too_many = Tensor::FromVector({2}, std::vector<int64_t>{1, 2, 3});
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), Code::kInvalidArgument);

  auto scalar = Tensor::FromVector({}, std::vector<float>{});
  ASSERT_FALSE(scalar.ok());
  EXPECT_EQ(scalar.status().code(), Code::kInvalidArgument);
}

TEST(TensorTest, FromVectorRejectsNegativeDims) {
  auto t = Tensor::FromVector({-2, -3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
  auto i = Tensor::FromVector({-1}, std::vector<int64_t>{});
  ASSERT_FALSE(i.ok());
  EXPECT_EQ(i.status().code(), Code::kInvalidArgument);
}

TEST(TensorTest, ScalarHoldsValue) {
  Tensor s = Tensor::Scalar(-3.25f);
  EXPECT_EQ(s.dtype(), DType::kFloat32);
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.size(), 1);
  EXPECT_EQ(s.data<float>()[0], -3.25f);
}

TEST(TensorTest, CopiesShareTheBuffer) {
  Tensor a = F({2, 2}, {1, 2, 3, 4});
  Tensor b = a;
  EXPECT_TRUE(b.SameBuffer(a));
  b.data<float>()[3] = 40;
  EXPECT_EQ(a.data<float>()[3], 40);
  Tensor c;
  c = a;
  c.data<float>()[0] = 10;
  EXPECT_EQ(a.data<float>()[0], 10);
}

TEST(TensorTest, CloneIsIndependent) {
  Tensor a = F({2, 2}, {1, 2, 3, 4});
  Tensor c = a.Clone();
  EXPECT_FALSE(c.SameBuffer(a));
  EXPECT_TRUE(Equal(a, c));
  c.data<float>()[0] = 100;
  EXPECT_EQ(a.data<float>()[0], 1);
  a.data<float>()[1] = -5;
  EXPECT_EQ(c.data<float>()[1], 2);

  Tensor ids = Tensor::FromVector({3}, std::vector<int64_t>{5, 6, 7}).value();
  Tensor idc = ids.Clone();
  EXPECT_EQ(idc.dtype(), DType::kInt64);
  idc.data<int64_t>()[2] = 0;
  EXPECT_THAT(Ints(ids), ElementsAre(5, 6, 7));
}

TEST(TensorTest, CloneOfRowSliceCopiesOnlyTheSlice) {
  Tensor a = Iota({4, 3});
  Tensor mid = a.Rows(1, 3).value();
  Tensor c = mid.Clone();
  EXPECT_EQ(c.shape(), Shape({2, 3}));
  EXPECT_THAT(Floats(c), ElementsAre(3, 4, 5, 6, 7, 8));
  c.data<float>()[0] = -1;
  EXPECT_EQ(a.data<float>()[3], 3);
}

TEST(TensorTest, ReshapeSharesBufferAndKeepsOrder) {
  Tensor a = Iota({2, 3});
  auto r = a.Reshape({3, 2});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->shape(), Shape({3, 2}));
  EXPECT_THAT(Floats(*r), ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_TRUE(r->SameBuffer(a));
  r->data<float>()[5] = 50;
  EXPECT_EQ(a.data<float>()[5], 50);
  EXPECT_EQ(a.shape(), Shape({2, 3}));  // the original keeps its shape
}

TEST(TensorTest, ReshapeInfersOneDim) {
  Tensor a = Iota({2, 3, 4});
  EXPECT_EQ(a.Reshape({-1}).value().shape(), Shape({24}));
  EXPECT_EQ(a.Reshape({-1, 4}).value().shape(), Shape({6, 4}));
  EXPECT_EQ(a.Reshape({2, -1}).value().shape(), Shape({2, 12}));
  EXPECT_EQ(a.Reshape({3, -1, 2}).value().shape(), Shape({3, 4, 2}));
  EXPECT_EQ(a.Reshape({24, 1, -1}).value().shape(), Shape({24, 1, 1}));
  Tensor s = Tensor::Scalar(1);
  EXPECT_EQ(s.Reshape({1, 1}).value().shape(), Shape({1, 1}));
  EXPECT_FALSE(a.Reshape({4, 6}).value().Reshape({}).ok());
  EXPECT_EQ(Tensor::Scalar(2).Reshape({}).value().shape(), Shape{});
}

TEST(TensorTest, ReshapeErrors) {
  Tensor a = Iota({2, 3});
  for (const Shape& bad :
       {Shape{4, 2}, Shape{-1, -1}, Shape{4, -1}, Shape{-2, 3}, Shape{0, -1}, Shape{7}, Shape{2, 3, 2}, Shape{}}) {
    auto r = a.Reshape(bad);
    ASSERT_FALSE(r.ok()) << ShapeString(bad);
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << ShapeString(bad);
  }
  auto r = a.Reshape({4, 2});
  EXPECT_THAT(r.status().message(), HasSubstr("[2, 3]"));
  EXPECT_THAT(r.status().message(), HasSubstr("[4, 2]"));
}

TEST(TensorTest, RowsShareBuffer) {
  Tensor a = Iota({4, 3});
  auto r = a.Rows(1, 3);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->shape(), Shape({2, 3}));
  EXPECT_EQ(r->size(), 6);
  EXPECT_THAT(Floats(*r), ElementsAre(3, 4, 5, 6, 7, 8));
  r->data<float>()[0] = 30;
  EXPECT_EQ(a.data<float>()[3], 30);
  EXPECT_EQ(a.shape(), Shape({4, 3}));

  // A slice of a slice composes offsets.
  auto rr = r->Rows(1, 2);
  ASSERT_TRUE(rr.ok()) << rr.status();
  EXPECT_THAT(Floats(*rr), ElementsAre(6, 7, 8));

  // Empty ranges are allowed, at either end.
  EXPECT_EQ(a.Rows(0, 0).value().size(), 0);
  EXPECT_EQ(a.Rows(4, 4).value().shape(), Shape({0, 3}));
  EXPECT_TRUE(Equal(a.Rows(0, 4).value(), a));

  Tensor ids = Tensor::FromVector({3, 2}, std::vector<int64_t>{1, 2, 3, 4, 5, 6}).value();
  EXPECT_THAT(Ints(ids.Rows(2, 3).value()), ElementsAre(5, 6));

  Tensor cube = Iota({3, 2, 2});
  EXPECT_THAT(Floats(cube.Rows(2, 3).value()), ElementsAre(8, 9, 10, 11));
}

TEST(TensorTest, RowsOutOfRange) {
  Tensor a = Iota({4, 3});
  for (auto [b, e] : std::vector<std::pair<int64_t, int64_t>>{{-1, 2}, {0, 5}, {3, 2}, {5, 5}}) {
    auto r = a.Rows(b, e);
    ASSERT_FALSE(r.ok()) << b << " " << e;
    EXPECT_EQ(r.status().code(), Code::kOutOfRange) << b << " " << e;
  }
  EXPECT_THAT(a.Rows(0, 5).status().message(), HasSubstr("[4, 3]"));
  auto s = Tensor::Scalar(1).Rows(0, 1);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
}

TEST(TensorTest, DebugString) {
  EXPECT_EQ(Tensor::Zeros(DType::kFloat32, {2, 3}).DebugString(), "float32[2, 3]");
  EXPECT_EQ(Tensor::Zeros(DType::kInt64, {}).DebugString(), "int64[]");
}

TEST(TensorTest, Equal) {
  Tensor a = F({2}, {1, 2});
  EXPECT_TRUE(Equal(a, F({2}, {1, 2})));
  EXPECT_FALSE(Equal(a, F({2}, {1, 2.0001f})));
  EXPECT_FALSE(Equal(a, F({2, 1}, {1, 2})));
  EXPECT_FALSE(Equal(a, Tensor::FromVector({2}, std::vector<int64_t>{1, 2}).value()));
}

TEST(TensorTest, AllClose) {
  Tensor a = F({3}, {1, 100, -2});
  EXPECT_TRUE(AllClose(a, a));
  // Within atol + rtol * |b| elementwise.
  EXPECT_TRUE(AllClose(F({3}, {1.0000005f, 100.0008f, -2}), a));
  EXPECT_FALSE(AllClose(F({3}, {1.00002f, 100, -2}), a));
  EXPECT_FALSE(AllClose(F({3}, {1, 100.01f, -2}), a));
  EXPECT_TRUE(AllClose(F({3}, {1.05f, 100, -2}), a, 0.f, 0.06f));
  EXPECT_FALSE(AllClose(F({3}, {1.05f, 100, -2}), a, 0.f, 0.04f));
  EXPECT_TRUE(AllClose(F({3}, {1, 105, -2}), a, 0.06f, 0.f));
  EXPECT_FALSE(AllClose(F({3}, {1, 105, -2}), a, 0.04f, 0.f));
  // Shape, dtype and NaN.
  EXPECT_FALSE(AllClose(F({3, 1}, {1, 100, -2}), a));
  EXPECT_FALSE(AllClose(F({3}, {1, std::nanf(""), -2}), a));
  EXPECT_FALSE(AllClose(a, F({3}, {1, std::nanf(""), -2})));
  Tensor i = Tensor::FromVector({2}, std::vector<int64_t>{1, 2}).value();
  EXPECT_FALSE(AllClose(i, F({2}, {1, 2})));
  EXPECT_TRUE(AllClose(i, i.Clone()));
  EXPECT_FALSE(AllClose(i, Tensor::FromVector({2}, std::vector<int64_t>{1, 3}).value(), 1.f, 10.f));
}

}  // namespace
}  // namespace tfjob
