#include <filesystem>
#include <fstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/files.h"
#include "services/ps/ps_client.h"
#include "services/ps/ps_service.h"

namespace tfjob::ps {
namespace {

using ::testing::HasSubstr;

Tensor F(Shape s, std::vector<float> v) { return *Tensor::FromVector(std::move(s), std::move(v)); }

class PsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ckpt_dir_ = ::testing::TempDir() + "/ps-test-" + std::to_string(::getpid());
    std::filesystem::create_directories(ckpt_dir_ + "/ckpt-7");
    PsOptions o;
    o.checkpoint_dir = ckpt_dir_;
    o.checkpoint_file = "ps-3.ckpt";
    auto s = PsServer::Start("127.0.0.1:0", o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
    client_ = std::make_unique<PsClient>("127.0.0.1:" + std::to_string(server_->port()));
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    std::filesystem::remove_all(ckpt_dir_);
  }
  model::OptimizerSpec Sgd(double lr) {
    model::OptimizerSpec o;
    o.learning_rate = lr;
    return o;
  }
  std::unique_ptr<PsServer> server_;
  std::unique_ptr<PsClient> client_;
  std::string ckpt_dir_;
};

TEST_F(PsTest, AppliesGradientsWithTheShardsOptimizer) {
  ASSERT_TRUE(*client_->CreateVariable("w", F({2}, {1, 2}), Sgd(0.5)));
  EXPECT_FALSE(*client_->CreateVariable("w", F({2}, {9, 9}), Sgd(0.5)));  // idempotent, keeps value
  ASSERT_TRUE(client_->Push(1, 0, {{"w", Update::Kind::kApplyGradient, F({2}, {2, -4}), {}}}).ok());
  auto v = client_->Pull({"w"});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(AllClose((*v)[0], F({2}, {0, 4})));
}

TEST_F(PsTest, ExactlyOncePerClosureAndSequence) {
  ASSERT_TRUE(client_->CreateVariable("c", F({}, {0}), std::nullopt).ok());
  Update add{"c", Update::Kind::kAssignAdd, F({}, {5}), {}};
  EXPECT_EQ(*client_->Push(42, 0, {add}), 0);
  EXPECT_EQ(*client_->Push(42, 0, {add}), 1);  // a re-run of closure 42 step 0
  EXPECT_EQ(*client_->Push(42, 1, {add}), 0);  // its next step is new
  EXPECT_EQ(*client_->Push(0, 0, {add}), 0);   // id 0: no dedup
  EXPECT_EQ(*client_->Push(0, 0, {add}), 0);
  EXPECT_FLOAT_EQ((*client_->Pull({"c"}))[0].data<float>()[0], 20.f);
}

TEST_F(PsTest, FencedOffCoordinatorCannotPush) {
  ASSERT_TRUE(client_->CreateVariable("c", F({}, {0}), std::nullopt).ok());
  Update add{"c", Update::Kind::kAssignAdd, F({}, {1}), {}};
  const uint64_t old_chief = 0x1111111100000000ULL, new_chief = 0x2222222200000000ULL;
  // Before any fence, every coordinator may push.
  EXPECT_TRUE(client_->Push(old_chief | 1, 0, {add}).ok());
  EXPECT_EQ(*client_->Fence(old_chief | 7), 0u);
  EXPECT_TRUE(client_->Push(old_chief | 2, 0, {add}).ok());
  // A new chief takes over: the old one's closures are refused, whole.
  EXPECT_EQ(*client_->Fence(new_chief | 9), old_chief | 7);
  auto refused = client_->Push(old_chief | 3, 0, {add});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("fenced off"));
  EXPECT_TRUE(client_->Push(new_chief | 1, 0, {add}).ok());
  EXPECT_FLOAT_EQ((*client_->Pull({"c"}))[0].data<float>()[0], 3.f);
  EXPECT_EQ(client_->Fence(0).status().code(), Code::kInvalidArgument);
}

TEST_F(PsTest, DedupMemoryIsBounded) {
  server_.reset();
  PsOptions o;
  o.dedup_window = 4;
  server_ = *PsServer::Start("127.0.0.1:0", o);
  client_ = std::make_unique<PsClient>("127.0.0.1:" + std::to_string(server_->port()));
  ASSERT_TRUE(client_->CreateVariable("c", F({}, {0}), std::nullopt).ok());
  Update add{"c", Update::Kind::kAssignAdd, F({}, {1}), {}};
  for (uint64_t id = 1; id <= 6; ++id) ASSERT_EQ(*client_->Push(id, 0, {add}), 0);
  EXPECT_EQ(*client_->Push(6, 0, {add}), 1);  // still remembered
  EXPECT_EQ(*client_->Push(1, 0, {add}), 0);  // forgotten: outside the window of 4
}

TEST_F(PsTest, SparseUpdatesTouchOnlyTheRowsSent) {
  ASSERT_TRUE(client_->CreateVariable("emb", F({4, 2}, {1, 1, 2, 2, 3, 3, 4, 4}), Sgd(1.0)).ok());
  Update g{"emb", Update::Kind::kApplyGradient, F({2, 2}, {1, 1, 0.5f, 0.5f}), *Tensor::FromVector({2}, std::vector<int64_t>{3, 1})};
  ASSERT_TRUE(client_->Push(7, 0, {g}).ok());
  EXPECT_TRUE(AllClose((*client_->Pull({"emb"}))[0], F({4, 2}, {1, 1, 1.5f, 1.5f, 3, 3, 3, 3})));
  auto rows = client_->PullRows("emb", {3, 0});
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_TRUE(AllClose(*rows, F({2, 2}, {3, 3, 1, 1})));
}

TEST_F(PsTest, ConcurrentPushesAreAllApplied) {
  ASSERT_TRUE(client_->CreateVariable("sum", F({3}, {0, 0, 0}), std::nullopt).ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        auto r = client_->Push(static_cast<uint64_t>(t * 1000 + i + 1), 0,
                               {{"sum", Update::Kind::kAssignAdd, F({3}, {1, 2, 3}), {}}});
        ASSERT_TRUE(r.ok()) << r.status();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_TRUE(AllClose((*client_->Pull({"sum"}))[0], F({3}, {400, 800, 1200})));
}

TEST_F(PsTest, BadRequestsAreRejectedAndTheServerKeepsServing) {
  ASSERT_TRUE(client_->CreateVariable("w", F({2}, {1, 2}), Sgd(0.1)).ok());
  auto missing = client_->Pull({"nope"});
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("no variable \"nope\""));
  auto shape = client_->Push(1, 0, {{"w", Update::Kind::kApplyGradient, F({3}, {1, 2, 3}), {}}});
  EXPECT_EQ(shape.status().code(), Code::kInvalidArgument);
  auto dtype = client_->Push(2, 0, {{"w", Update::Kind::kAssignAdd, *Tensor::FromVector({2}, std::vector<int64_t>{1, 2}), {}}});
  EXPECT_EQ(dtype.status().code(), Code::kInvalidArgument);
  auto row = client_->PullRows("w", {5});
  EXPECT_EQ(row.status().code(), Code::kInvalidArgument);
  auto recreate = client_->CreateVariable("w", F({3}, {1, 2, 3}), std::nullopt);
  EXPECT_EQ(recreate.status().code(), Code::kAlreadyExists);
  // A request with one bad update changes nothing, not even its good updates.
  ASSERT_TRUE(client_->CreateVariable("c", F({}, {0}), std::nullopt).ok());
  auto mixed = client_->Push(3, 0, {{"c", Update::Kind::kAssignAdd, F({}, {1}), {}}, {"nope", Update::Kind::kAssignAdd, F({}, {1}), {}}});
  EXPECT_EQ(mixed.status().code(), Code::kNotFound);
  EXPECT_FLOAT_EQ((*client_->Pull({"c"}))[0].data<float>()[0], 0.f);
  // Still serving.
  EXPECT_TRUE(AllClose((*client_->Pull({"w"}))[0], F({2}, {1, 2})));
}

TEST_F(PsTest, TensorsLargerThanGrpcsDefaultLimit) {
  Tensor big = Tensor::Zeros(DType::kFloat32, {16 << 20});  // 64 MiB
  for (int64_t i = 0; i < big.size(); i += 4096) big.data<float>()[i] = static_cast<float>(i);
  ASSERT_TRUE(client_->CreateVariable("big", big, std::nullopt).ok());
  ASSERT_TRUE(client_->Push(1, 0, {{"big", Update::Kind::kAssignAdd, big, {}}}).ok());
  auto v = client_->Pull({"big"});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)[0].data<float>()[4096 * 100], 2.f * 4096 * 100);
}

TEST_F(PsTest, SaveAndRestoreIncludingOptimizerSlots) {
  model::OptimizerSpec adam;
  adam.type = model::OptimizerType::kAdam;
  adam.learning_rate = 0.1;
  ASSERT_TRUE(client_->CreateVariable("w", F({2}, {1, 2}), adam).ok());
  ASSERT_TRUE(client_->Push(1, 0, {{"w", Update::Kind::kApplyGradient, F({2}, {1, 1}), {}}}).ok());
  // The request names a step; the PS picks the file in its own directory.
  const std::string path = ckpt_dir_ + "/ckpt-7/ps-3.ckpt";
  ASSERT_TRUE(client_->Save(7).ok());
  ASSERT_TRUE(std::filesystem::exists(path));
  Tensor saved = (*client_->Pull({"w"}))[0];
  ASSERT_TRUE(client_->Push(2, 0, {{"w", Update::Kind::kApplyGradient, F({2}, {1, 1}), {}}}).ok());
  Tensor after_second = (*client_->Pull({"w"}))[0];
  ASSERT_EQ(*client_->Restore(7), 1);
  EXPECT_TRUE(Equal((*client_->Pull({"w"}))[0], saved));
  // Re-applying the same gradient from the restored slots reproduces the same step.
  ASSERT_TRUE(client_->Push(3, 0, {{"w", Update::Kind::kApplyGradient, F({2}, {1, 1}), {}}}).ok());
  EXPECT_TRUE(Equal((*client_->Pull({"w"}))[0], after_second));
  // A damaged file is refused and the variable is untouched.
  std::string bytes = *ReadFile(path);
  bytes[bytes.size() - 10] ^= 1;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_EQ(client_->Restore(7).status().code(), Code::kDataLoss);
  EXPECT_TRUE(Equal((*client_->Pull({"w"}))[0], after_second));
}

// A tensor whose header claims far more than arrives is refused before the
// claimed size is allocated (32 GiB here), and the server keeps serving.
TEST_F(PsTest, TensorClaimingMoreBytesThanSentIsRefusedWithoutAllocating) {
  auto stub = proto::ParameterServer::NewStub(rpc::MakeChannel("127.0.0.1:" + std::to_string(server_->port())));
  proto::CreateVariableRequest req;
  req.set_name("huge");
  req.mutable_initial_value()->set_dtype(proto::DTYPE_FLOAT32);
  req.mutable_initial_value()->add_shape(int64_t{1} << 33);
  req.mutable_initial_value()->set_data(std::string(4, '\0'));
  proto::CreateVariableResponse resp;
  auto ctx = rpc::Context(std::chrono::milliseconds(5000), {});
  const grpc::Status st = stub->CreateVariable(ctx.get(), req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("does not match its 4 bytes of data"));
  ASSERT_TRUE(client_->CreateVariable("w", F({2}, {1, 2}), Sgd(0.1)).ok());
}

TEST_F(PsTest, CheckpointsStayInTheCheckpointDirectory) {
  ASSERT_TRUE(client_->CreateVariable("w", F({2}, {1, 2}), Sgd(0.1)).ok());
  EXPECT_EQ(client_->Save(-1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(client_->Restore(-1).status().code(), Code::kInvalidArgument);
  // A step never saved: nothing to read, nothing changed.
  EXPECT_EQ(client_->Restore(8).status().code(), Code::kNotFound);
  EXPECT_TRUE(Equal((*client_->Pull({"w"}))[0], F({2}, {1, 2})));
  // A PS started without a checkpoint directory says so.
  auto bare = PsServer::Start("127.0.0.1:0");
  ASSERT_TRUE(bare.ok());
  PsClient c("127.0.0.1:" + std::to_string((*bare)->port()));
  auto r = c.Save(1);
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("started without --checkpoint-dir"));
}

TEST_F(PsTest, StatusAndShutdown) {
  auto st = client_->GetStatus();
  ASSERT_TRUE(st.ok());
  EXPECT_NE(st->incarnation, 0u);
  EXPECT_EQ(st->incarnation, server_->service().incarnation());
  std::thread waiter([&] { server_->Wait(); });
  ASSERT_TRUE(client_->Shutdown().ok());
  waiter.join();  // returns because of the RPC
}

TEST(PsClientTest, UnreachablePeerRetriesThenNamesTheAddress) {
  ClientOptions o;
  o.timeout = std::chrono::milliseconds(200);
  o.retry.max_attempts = 3;
  o.retry.initial_backoff = std::chrono::milliseconds(10);
  PsClient c("127.0.0.1:1", o);  // nothing listens on port 1
  auto r = c.GetStatus();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr("127.0.0.1:1 unreachable after 3 attempts"));
}

}  // namespace
}  // namespace tfjob::ps
