#include "services/data/dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>

namespace tfjob::data {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// One int64 component holding 0..n-1.
Dataset Range(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  auto t = Tensor::FromVector({n}, v);
  EXPECT_TRUE(t.ok());
  return Dataset::FromTensors({*t});
}

// Drains `it`, expecting no errors, and returns the elements.
std::vector<Element> Drain(Iterator& it, size_t limit = 100000) {
  std::vector<Element> out;
  while (out.size() < limit) {
    auto r = it.Next();
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok() || !r->has_value()) break;
    out.push_back(std::move(**r));
  }
  return out;
}

std::vector<Element> Collect(const Dataset& ds, size_t limit = 100000) {
  auto it = ds.MakeIterator();
  EXPECT_TRUE(it.ok()) << it.status();
  if (!it.ok()) return {};
  return Drain(**it, limit);
}

// Scalar int64 first components, for datasets built on Range.
std::vector<int64_t> Values(const Dataset& ds, size_t limit = 100000) {
  std::vector<int64_t> out;
  for (const Element& e : Collect(ds, limit)) {
    EXPECT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].rank(), 0);
    out.push_back(e[0].data<int64_t>()[0]);
  }
  return out;
}

std::vector<int64_t> Iota(int64_t begin, int64_t end, int64_t step = 1) {
  std::vector<int64_t> v;
  for (int64_t i = begin; i < end; i += step) v.push_back(i);
  return v;
}

// Multiplies scalar int64 elements by 10 and fails on the value `bad`.
std::function<StatusOr<Element>(Element)> TimesTenFailingOn(int64_t bad) {
  return [bad](Element e) -> StatusOr<Element> {
    int64_t v = e[0].data<int64_t>()[0];
    if (v == bad) return InvalidArgument("bad value " + std::to_string(v));
    Tensor out = Tensor::Zeros(DType::kInt64, {});
    out.data<int64_t>()[0] = v * 10;
    return Element{out};
  };
}

// Next() results as values, an error as -1000 - code, to compare whole
// sequences that interleave elements and errors.
std::vector<int64_t> ValuesAndErrors(const Dataset& ds, size_t limit = 1000) {
  std::vector<int64_t> out;
  auto it = ds.MakeIterator();
  EXPECT_TRUE(it.ok()) << it.status();
  if (!it.ok()) return out;
  while (out.size() < limit) {
    auto r = (*it)->Next();
    if (!r.ok()) {
      out.push_back(-1000 - static_cast<int64_t>(r.status().code()));
      continue;
    }
    if (!r->has_value()) break;
    out.push_back((**r)[0].data<int64_t>()[0]);
  }
  return out;
}
constexpr int64_t kInvalidMark = -1000 - static_cast<int64_t>(Code::kInvalidArgument);

// ------------------------------------------------------------------ FromTensors

TEST(FromTensorsTest, SlicesEveryComponentWithoutCopying) {
  auto x = Tensor::FromVector({4, 3}, std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  auto y = Tensor::FromVector({4}, std::vector<int64_t>{7, 8, 9, 6});
  ASSERT_TRUE(x.ok() && y.ok());
  Dataset ds = Dataset::FromTensors({*x, *y});
  ASSERT_TRUE(ds.status().ok());
  EXPECT_EQ(ds.Cardinality(), 4);
  std::vector<Element> elems = Collect(ds);
  ASSERT_EQ(elems.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(elems[i].size(), 2u);
    EXPECT_EQ(elems[i][0].shape(), Shape({3}));
    EXPECT_EQ(elems[i][1].shape(), Shape({}));
    EXPECT_EQ(elems[i][0].dtype(), DType::kFloat32);
    EXPECT_EQ(elems[i][1].dtype(), DType::kInt64);
    // A view into the source buffer, not a copy.
    EXPECT_EQ(elems[i][0].data<float>(), x->data<float>() + 3 * i);
    EXPECT_EQ(elems[i][1].data<int64_t>(), y->data<int64_t>() + i);
    EXPECT_EQ(elems[i][0].data<float>()[2], static_cast<float>(3 * i + 2));
  }
  EXPECT_EQ(elems[3][1].data<int64_t>()[0], 6);
}

TEST(FromTensorsTest, EndOfSequenceIsSticky) {
  auto it = Range(2).MakeIterator();
  ASSERT_TRUE(it.ok());
  EXPECT_EQ(Drain(**it).size(), 2u);
  for (int i = 0; i < 3; ++i) {
    auto r = (*it)->Next();
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->has_value());
  }
}

TEST(FromTensorsTest, RejectsBadComponents) {
  Tensor four = Tensor::Zeros(DType::kFloat32, {4, 2});
  Tensor three = Tensor::Zeros(DType::kInt64, {3});
  Dataset mismatched = Dataset::FromTensors({four, three});
  EXPECT_EQ(mismatched.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(mismatched.status().message(), HasSubstr("component 1 has 3 rows"));

  Dataset scalar = Dataset::FromTensors({four, Tensor::Scalar(1)});
  EXPECT_EQ(scalar.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(scalar.status().message(), HasSubstr("component 1 is a scalar"));

  EXPECT_EQ(Dataset::FromTensors({}).status().code(), Code::kInvalidArgument);
}

TEST(FromTensorsTest, IteratorOutlivesDataset) {
  std::unique_ptr<Iterator> it;
  {
    auto made = Range(3).Map(TimesTenFailingOn(-1)).MakeIterator();
    ASSERT_TRUE(made.ok());
    it = std::move(made).value();
  }
  std::vector<int64_t> got;
  for (const Element& e : Drain(*it)) got.push_back(e[0].data<int64_t>()[0]);
  EXPECT_THAT(got, ElementsAre(0, 10, 20));
}

// -------------------------------------------------------------------------- Map

TEST(MapTest, AppliesFunctionAndKeepsCardinality) {
  Dataset ds = Range(5).Map(TimesTenFailingOn(-1));
  EXPECT_EQ(ds.Cardinality(), 5);
  EXPECT_THAT(Values(ds), ElementsAre(0, 10, 20, 30, 40));
}

TEST(MapTest, FunctionErrorSurfacesFromNextAndIterationContinues) {
  Dataset ds = Range(5).Map(TimesTenFailingOn(2));
  auto it = ds.MakeIterator();
  ASSERT_TRUE(it.ok());
  ASSERT_TRUE((*it)->Next().ok());
  ASSERT_TRUE((*it)->Next().ok());
  auto r = (*it)->Next();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "bad value 2");
  EXPECT_THAT(ValuesAndErrors(ds), ElementsAre(0, 10, kInvalidMark, 30, 40));
}

TEST(MapTest, ThrowingFunctionBecomesInternalError) {
  Dataset ds = Range(2).Map([](Element) -> StatusOr<Element> { throw std::runtime_error("boom"); });
  auto it = ds.MakeIterator();
  ASSERT_TRUE(it.ok());
  auto r = (*it)->Next();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInternal);
  EXPECT_THAT(r.status().message(), HasSubstr("boom"));
}

TEST(MapTest, EmptyFunctionIsDeferredError) {
  Dataset ds = Range(2).Map(nullptr);
  EXPECT_EQ(ds.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(ds.status().message(), HasSubstr("map"));
}

// ---------------------------------------------------------------------- Shuffle

TEST(ShuffleTest, IsADeterministicPermutation) {
  std::vector<int64_t> a = Values(Range(100).Shuffle(100, 42));
  std::vector<int64_t> b = Values(Range(100).Shuffle(100, 42));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, Iota(0, 100));
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, Iota(0, 100));
  EXPECT_EQ(Range(100).Shuffle(10, 1).Cardinality(), 100);
}

TEST(ShuffleTest, DifferentSeedsGiveDifferentOrders) {
  EXPECT_NE(Values(Range(100).Shuffle(100, 1)), Values(Range(100).Shuffle(100, 2)));
}

TEST(ShuffleTest, ReshufflesEachIterationButDeterministically) {
  Dataset a = Range(50).Shuffle(50, 7);
  Dataset b = Range(50).Shuffle(50, 7);
  std::vector<int64_t> a1 = Values(a), a2 = Values(a);
  std::vector<int64_t> b1 = Values(b), b2 = Values(b);
  EXPECT_NE(a1, a2);
  EXPECT_EQ(a1, b1);
  EXPECT_EQ(a2, b2);
  std::sort(a2.begin(), a2.end());
  EXPECT_EQ(a2, Iota(0, 50));
}

// Batch copies the rows of FromTensors (and of Shuffle over it) straight
// into its batches; Map in between makes it stack built elements instead.
// Both must give the same batches, bit for bit, in the same order, for any
// buffer, batch size, remainder rule and epoch.
TEST(BatchTest, RowsCopiedStraightGiveTheBatchesStackedElementsGive) {
  const int64_t n = 37;
  std::vector<float> f(static_cast<size_t>(n * 6));
  std::iota(f.begin(), f.end(), 0.5f);
  std::vector<int64_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 100);
  const Dataset source = Dataset::FromTensors({*Tensor::FromVector({n, 2, 3}, f), *Tensor::FromVector({n}, ids)});
  const Dataset elements = source.Map([](Element e) -> StatusOr<Element> { return e; });
  struct Case {
    int64_t shuffle;  // 0: none
    int64_t batch;
    bool drop;
  };
  for (const Case k : {Case{0, 5, false}, Case{0, 5, true}, Case{0, 37, false}, Case{1, 4, false}, Case{8, 6, true},
                       Case{37, 10, false}, Case{100, 64, false}}) {
    SCOPED_TRACE("shuffle " + std::to_string(k.shuffle) + " batch " + std::to_string(k.batch));
    auto pipeline = [&](const Dataset& in) {
      Dataset d = k.shuffle ? in.Shuffle(k.shuffle, 7) : in;
      return d.Batch(k.batch, k.drop).Repeat(3);
    };
    const std::vector<Element> fast = Collect(pipeline(source));
    const std::vector<Element> slow = Collect(pipeline(elements));
    ASSERT_EQ(fast.size(), slow.size());
    ASSERT_FALSE(fast.empty());
    for (size_t i = 0; i < fast.size(); ++i) {
      ASSERT_EQ(fast[i].size(), 2u);
      for (size_t c = 0; c < 2; ++c) {
        ASSERT_EQ(fast[i][c].shape(), slow[i][c].shape()) << "batch " << i;
        ASSERT_EQ(fast[i][c].dtype(), slow[i][c].dtype());
        EXPECT_EQ(std::memcmp(fast[i][c].raw(), slow[i][c].raw(), fast[i][c].bytes()), 0) << "batch " << i;
      }
    }
  }
}

TEST(ShuffleTest, WithoutReshuffleEveryIterationRepeatsTheOrder) {
  Dataset ds = Range(50).Shuffle(50, 7, /*reshuffle_each_iteration=*/false);
  std::vector<int64_t> first = Values(ds);
  EXPECT_NE(first, Iota(0, 50));
  EXPECT_EQ(Values(ds), first);
  EXPECT_EQ(Values(ds), first);
}

TEST(ShuffleTest, RepeatDrawsANewOrderPerEpoch) {
  std::vector<int64_t> all = Values(Range(30).Shuffle(30, 3).Repeat(2));
  ASSERT_EQ(all.size(), 60u);
  std::vector<int64_t> e1(all.begin(), all.begin() + 30), e2(all.begin() + 30, all.end());
  EXPECT_NE(e1, e2);
  std::sort(e1.begin(), e1.end());
  std::sort(e2.begin(), e2.end());
  EXPECT_EQ(e1, Iota(0, 30));
  EXPECT_EQ(e2, Iota(0, 30));
}

TEST(ShuffleTest, SmallBufferOnlyMixesNearbyElements) {
  // With a buffer of b, output position i can only hold one of the first
  // i + b inputs; a full shuffle would violate this.
  const int64_t b = 5;
  std::vector<int64_t> out = Values(Range(200).Shuffle(b, 9));
  ASSERT_EQ(out.size(), 200u);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_LT(out[i], static_cast<int64_t>(i) + b) << "position " << i;
  EXPECT_NE(out, Iota(0, 200));
  EXPECT_EQ(Values(Range(20).Shuffle(1, 9)), Iota(0, 20));
}

TEST(ShuffleTest, BadBufferSizeIsDeferredError) {
  Dataset ds = Range(5).Shuffle(0, 1);
  EXPECT_EQ(ds.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(ds.status().message(), HasSubstr("shuffle: buffer_size 0"));
}

// ------------------------------------------------------------------------ Batch

TEST(BatchTest, StacksComponentsAndKeepsRemainder) {
  auto x = Tensor::FromVector({5, 2}, std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto y = Tensor::FromVector({5}, std::vector<int64_t>{10, 11, 12, 13, 14});
  ASSERT_TRUE(x.ok() && y.ok());
  Dataset ds = Dataset::FromTensors({*x, *y}).Batch(2);
  EXPECT_EQ(ds.Cardinality(), 3);
  std::vector<Element> batches = Collect(ds);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0][0].shape(), Shape({2, 2}));
  EXPECT_EQ(batches[0][1].shape(), Shape({2}));
  EXPECT_EQ(batches[2][0].shape(), Shape({1, 2}));
  EXPECT_EQ(batches[2][1].shape(), Shape({1}));
  auto expect_x = Tensor::FromVector({2, 2}, std::vector<float>{4, 5, 6, 7});
  auto expect_y = Tensor::FromVector({2}, std::vector<int64_t>{12, 13});
  EXPECT_TRUE(Equal(batches[1][0], *expect_x));
  EXPECT_TRUE(Equal(batches[1][1], *expect_y));
  EXPECT_EQ(batches[2][1].data<int64_t>()[0], 14);
}

TEST(BatchTest, DropRemainder) {
  Dataset ds = Range(10).Batch(4, /*drop_remainder=*/true);
  EXPECT_EQ(ds.Cardinality(), 2);
  std::vector<Element> batches = Collect(ds);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[1][0].shape(), Shape({4}));
  EXPECT_EQ(batches[1][0].data<int64_t>()[3], 7);
  EXPECT_EQ(Range(10).Batch(4).Cardinality(), 3);
  EXPECT_EQ(Range(8).Batch(4).Cardinality(), 2);
  EXPECT_EQ(Range(3).Batch(4, true).Cardinality(), 0);
  EXPECT_TRUE(Collect(Range(3).Batch(4, true)).empty());
}

TEST(BatchTest, MismatchedShapesAreAnIteratorError) {
  // Element 1 becomes [2] while element 0 stays a scalar.
  Dataset ragged = Range(4).Map([](Element e) -> StatusOr<Element> {
    if (e[0].data<int64_t>()[0] != 1) return e;
    return Element{Tensor::Zeros(DType::kInt64, {2})};
  });
  auto it = ragged.Batch(2).MakeIterator();
  ASSERT_TRUE(it.ok());
  auto r = (*it)->Next();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("batch: component 0 of element 1"));
  auto next = (*it)->Next();
  ASSERT_TRUE(next.ok());
  ASSERT_TRUE(next->has_value());
  EXPECT_EQ((**next)[0].shape(), Shape({2}));
}

TEST(BatchTest, UpstreamErrorDropsThePartialBatch) {
  std::vector<int64_t> seq = ValuesAndErrors(Range(6).Map(TimesTenFailingOn(1)).Batch(2).Map([](Element e) {
    // Reduce each batch to its first value so the helper can read it.
    Tensor first = Tensor::Zeros(DType::kInt64, {});
    first.data<int64_t>()[0] = e[0].data<int64_t>()[0];
    return StatusOr<Element>(Element{first});
  }));
  // [0, err) -> error; [20, 30]; [40, 50].
  EXPECT_THAT(seq, ElementsAre(kInvalidMark, 20, 40));
}

TEST(BatchTest, BadBatchSizeIsDeferredError) {
  Dataset ds = Range(5).Batch(0);
  EXPECT_EQ(ds.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ds.status().message(), "batch: batch_size 0 must be >= 1");
}

// ----------------------------------------------------------------- Repeat/Take

TEST(RepeatTest, RepeatsCountTimes) {
  Dataset ds = Range(3).Repeat(3);
  EXPECT_EQ(ds.Cardinality(), 9);
  EXPECT_THAT(Values(ds), ElementsAre(0, 1, 2, 0, 1, 2, 0, 1, 2));
  EXPECT_EQ(Range(3).Repeat(0).Cardinality(), 0);
  EXPECT_TRUE(Values(Range(3).Repeat(0)).empty());
}

TEST(RepeatTest, ForeverIsInfiniteAndTakeBoundsIt) {
  Dataset forever = Range(3).Repeat();
  EXPECT_EQ(forever.Cardinality(), kInfiniteCardinality);
  EXPECT_THAT(Values(forever, 7), ElementsAre(0, 1, 2, 0, 1, 2, 0));
  Dataset seven = forever.Take(7);
  EXPECT_EQ(seven.Cardinality(), 7);
  EXPECT_THAT(Values(seven), ElementsAre(0, 1, 2, 0, 1, 2, 0));
}

TEST(RepeatTest, ForeverOverEmptyInputEnds) {
  Dataset ds = Range(3).Take(0).Repeat();
  EXPECT_EQ(ds.Cardinality(), 0);
  EXPECT_TRUE(Values(ds).empty());
  EXPECT_TRUE(Values(Range(0).Repeat()).empty());
  EXPECT_TRUE(Values(Range(4).Shard(8, 5).Repeat()).empty());
}

TEST(RepeatTest, BadCountIsDeferredError) {
  EXPECT_EQ(Range(3).Repeat(-2).status().code(), Code::kInvalidArgument);
  EXPECT_THAT(Range(3).Repeat(-2).status().message(), HasSubstr("repeat: count -2"));
}

TEST(TakeTest, TakesPrefix) {
  EXPECT_THAT(Values(Range(5).Take(2)), ElementsAre(0, 1));
  EXPECT_THAT(Values(Range(5).Take(-1)), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_TRUE(Values(Range(5).Take(0)).empty());
  EXPECT_THAT(Values(Range(5).Take(100)), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(Range(5).Take(2).Cardinality(), 2);
  EXPECT_EQ(Range(5).Take(100).Cardinality(), 5);
  EXPECT_EQ(Range(5).Take(-1).Cardinality(), 5);
  EXPECT_EQ(Range(5).Take(-3).status().code(), Code::kInvalidArgument);
}

TEST(TakeTest, ErrorOccupiesAPosition) {
  EXPECT_THAT(ValuesAndErrors(Range(5).Map(TimesTenFailingOn(1)).Take(3)), ElementsAre(0, kInvalidMark, 20));
}

// ------------------------------------------------------------------------ Shard

TEST(ShardTest, SplitsByPositionModulo) {
  Dataset ds = Range(10);
  EXPECT_THAT(Values(ds.Shard(3, 0)), ElementsAre(0, 3, 6, 9));
  EXPECT_THAT(Values(ds.Shard(3, 1)), ElementsAre(1, 4, 7));
  EXPECT_THAT(Values(ds.Shard(3, 2)), ElementsAre(2, 5, 8));
  EXPECT_EQ(ds.Shard(3, 0).Cardinality(), 4);
  EXPECT_EQ(ds.Shard(3, 1).Cardinality(), 3);
  EXPECT_EQ(ds.Shard(3, 2).Cardinality(), 3);
  EXPECT_THAT(Values(ds.Shard(1, 0)), ElementsAreArray(Iota(0, 10)));
  EXPECT_TRUE(Values(Range(2).Shard(4, 3)).empty());
  EXPECT_EQ(Range(2).Shard(4, 3).Cardinality(), 0);
}

TEST(ShardTest, CombinesWithRepeatTakeAndBatch) {
  Dataset ds = Range(5).Repeat(2).Shard(2, 1);  // positions 1,3,5,7,9 of 0..4,0..4
  EXPECT_EQ(ds.Cardinality(), 5);
  EXPECT_THAT(Values(ds), ElementsAre(1, 3, 0, 2, 4));
  Dataset head = Range(100).Take(5).Shard(2, 0);
  EXPECT_EQ(head.Cardinality(), 3);
  EXPECT_THAT(Values(head), ElementsAre(0, 2, 4));
  Dataset forever = Range(4).Repeat().Shard(2, 1);
  EXPECT_EQ(forever.Cardinality(), kInfiniteCardinality);
  EXPECT_THAT(Values(forever.Take(4)), ElementsAre(1, 3, 1, 3));
  std::vector<Element> batches = Collect(Range(10).Shard(2, 0).Batch(2));
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[1][0].data<int64_t>()[1], 6);
}

TEST(ShardTest, ErrorGoesOnlyToTheOwningShard) {
  Dataset mapped = Range(6).Map(TimesTenFailingOn(4));
  EXPECT_THAT(ValuesAndErrors(mapped.Shard(2, 0)), ElementsAre(0, 20, kInvalidMark));
  EXPECT_THAT(ValuesAndErrors(mapped.Shard(2, 1)), ElementsAre(10, 30, 50));
}

TEST(ShardTest, BadArgumentsAreDeferredErrors) {
  Dataset out_of_range = Range(10).Shard(2, 3);
  EXPECT_EQ(out_of_range.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(out_of_range.status().message(), "shard: index 3 is outside [0, 2)");
  EXPECT_EQ(Range(10).Shard(2, -1).status().message(), "shard: index -1 is outside [0, 2)");
  EXPECT_THAT(Range(10).Shard(0, 0).status().message(), HasSubstr("shard: num_shards 0"));
}

// --------------------------------------------------------------------- Prefetch

TEST(PrefetchTest, DeliversTheSameSequence) {
  Dataset base = Range(500).Map(TimesTenFailingOn(-1)).Shuffle(50, 5, false).Batch(7);
  std::vector<Element> plain = Collect(base);
  for (int64_t buffer : {1, 3, 64}) {
    Dataset pre = base.Prefetch(buffer);
    EXPECT_EQ(pre.Cardinality(), base.Cardinality());
    std::vector<Element> got = Collect(pre);
    ASSERT_EQ(got.size(), plain.size()) << "buffer " << buffer;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(Equal(got[i][0], plain[i][0])) << "batch " << i;
  }
}

TEST(PrefetchTest, ErrorsArriveInOrder) {
  Dataset ds = Range(5).Map(TimesTenFailingOn(2)).Prefetch(2);
  EXPECT_THAT(ValuesAndErrors(ds), ElementsAre(0, 10, kInvalidMark, 30, 40));
}

TEST(PrefetchTest, EndOfSequenceIsSticky) {
  auto it = Range(3).Prefetch(2).MakeIterator();
  ASSERT_TRUE(it.ok());
  EXPECT_EQ(Drain(**it).size(), 3u);
  for (int i = 0; i < 3; ++i) {
    auto r = (*it)->Next();
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->has_value());
  }
}

TEST(PrefetchTest, DestroyingAHalfConsumedIteratorStopsTheThread) {
  std::atomic<int64_t> produced{0};
  Dataset ds = Range(10).Repeat().Map([&produced](Element e) -> StatusOr<Element> {
    produced.fetch_add(1);
    return e;
  });
  {
    auto it = ds.Prefetch(4).MakeIterator();
    ASSERT_TRUE(it.ok());
    EXPECT_EQ(Drain(**it, 3).size(), 3u);
  }  // must return: the producer is blocked on a full buffer of an infinite input
  int64_t after = produced.load();
  // Bounded by what was consumed, the buffer, and one element in flight.
  EXPECT_LE(after, 3 + 4 + 1);
  {
    auto it = ds.Prefetch(4).MakeIterator();  // destroyed before any Next()
    ASSERT_TRUE(it.ok());
  }
  // Nested prefetches, half consumed.
  auto nested = ds.Prefetch(2).Map(TimesTenFailingOn(-1)).Prefetch(2).MakeIterator();
  ASSERT_TRUE(nested.ok());
  EXPECT_EQ(Drain(**nested, 5).size(), 5u);
  nested->reset();
}

TEST(PrefetchTest, TakeOverInfinitePrefetchFinishes) {
  Dataset ds = Range(3).Repeat().Prefetch(8).Take(5);
  EXPECT_THAT(Values(ds), ElementsAre(0, 1, 2, 0, 1));
}

TEST(PrefetchTest, BadBufferSizeIsDeferredError) {
  EXPECT_EQ(Range(3).Prefetch(0).status().code(), Code::kInvalidArgument);
  EXPECT_THAT(Range(3).Prefetch(0).status().message(), HasSubstr("prefetch: buffer_size 0"));
}

// -------------------------------------------------------------- Errors, sharing

TEST(ErrorPropagationTest, FirstArgumentErrorSurvivesLaterTransformations) {
  Dataset ds = Range(10).Batch(0).Shard(2, 5).Shuffle(10, 1).Map(TimesTenFailingOn(-1)).Repeat().Take(3).Prefetch(2);
  EXPECT_EQ(ds.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ds.status().message(), "batch: batch_size 0 must be >= 1");
  EXPECT_EQ(ds.Cardinality(), kUnknownCardinality);
  auto it = ds.MakeIterator();
  ASSERT_FALSE(it.ok());
  EXPECT_EQ(it.status(), ds.status());
}

TEST(ErrorPropagationTest, FromErrorCarriesTheStatus) {
  Dataset ds = Dataset::FromError(NotFound("no such table")).Batch(2);
  EXPECT_EQ(ds.status(), NotFound("no such table"));
  EXPECT_EQ(ds.MakeIterator().status(), NotFound("no such table"));
  EXPECT_EQ(Dataset::FromError(Status::Ok()).status().code(), Code::kInternal);
}

TEST(SharingTest, ConcurrentIteratorsOverOneDataset) {
  Dataset ds = Range(1000).Shuffle(100, 11, false).Map(TimesTenFailingOn(-1)).Batch(10).Prefetch(2);
  std::vector<int64_t> sums(4, 0);
  std::vector<std::vector<int64_t>> firsts(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto it = ds.MakeIterator();
      if (!it.ok()) return;
      while (true) {
        auto r = (*it)->Next();
        if (!r.ok() || !r->has_value()) break;
        const Tensor& b = (**r)[0];
        firsts[t].push_back(b.data<int64_t>()[0]);
        for (int64_t v : b.flat<int64_t>()) sums[t] += v;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(sums[t], 10 * 999 * 1000 / 2) << "thread " << t;
    EXPECT_EQ(firsts[t], firsts[0]) << "thread " << t;
    EXPECT_EQ(firsts[t].size(), 100u);
  }
}

}  // namespace
}  // namespace tfjob::data
