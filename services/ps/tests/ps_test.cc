#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <fstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include "common/files.h"
#include "services/net/net.h"
#include "services/ps/ps_client.h"
#include "services/ps/ps_service.h"
#include "services/ps/shm.h"
#include "services/ps/wire.h"
#include "services/tensor/eigen.h"
#include "tests/support/silent_listener.h"

// The largest aligned array allocation (what tensors use) since the last
// reset: lets a test see that a claimed size was never allocated.
std::atomic<size_t> g_largest_tensor_allocation{0};

void* operator new[](size_t n, std::align_val_t a) {
  size_t seen = g_largest_tensor_allocation.load();
  while (n > seen && !g_largest_tensor_allocation.compare_exchange_weak(seen, n)) {
  }
  const size_t align = static_cast<size_t>(a);
  void* p = std::aligned_alloc(align, (n + align - 1) / align * align);
  if (!p) throw std::bad_alloc();
  return p;
}
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

namespace tfjob::ps {
namespace {

using ::testing::HasSubstr;

// ctest runs this executable twice, the second time with TFJOB_PS_SHM=0
// (CMakeLists.txt): every client then sends payloads inline, as
// tfjob-runtime's clients do under that variable.
const bool kInlineRun = [] {
  const char* v = std::getenv("TFJOB_PS_SHM");
  const bool inline_run = v != nullptr && std::string(v) == "0";
  if (inline_run) SetSharedMemory(false);
  return inline_run;
}();

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
  const uint64_t old_chief = 1000, new_chief = 2000;
  // Before any fence, every chief may push.
  EXPECT_TRUE(client_->Push(1, 0, {add}, old_chief).ok());
  EXPECT_EQ(client_->Fence(old_chief)->previous, 0u);
  EXPECT_TRUE(client_->Push(2, 0, {add}, old_chief).ok());
  // A new chief takes over: the old one's closures are refused, whole.
  EXPECT_EQ(client_->Fence(new_chief)->previous, old_chief);
  auto refused = client_->Push(3, 0, {add}, old_chief);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("fenced off"));
  EXPECT_TRUE(client_->Push(4, 0, {add}, new_chief).ok());
  EXPECT_FLOAT_EQ((*client_->Pull({"c"}))[0].data<float>()[0], 3.f);
  EXPECT_EQ(client_->Fence(0).status().code(), Code::kInvalidArgument);
  // A push that predates generations is told apart by its id's high half.
  EXPECT_FALSE(client_->Push((old_chief << 32) | 5, 0, {add}).ok());
}

// Generations only grow: an older chief can neither take the PS back nor
// save, restore or shut it down; the same generation again is a no-op.
TEST_F(PsTest, AnOlderChiefCanNeitherFenceNorSaveRestoreOrShutDown) {
  ASSERT_TRUE(client_->CreateVariable("c", F({}, {0}), std::nullopt).ok());
  ASSERT_TRUE(client_->Fence(500).ok());
  ASSERT_TRUE(client_->Save(7, 500).ok());
  ASSERT_TRUE(client_->Fence(900).ok());
  EXPECT_EQ(client_->Fence(900)->previous, 900u);  // idempotent
  for (Status s : {client_->Fence(500).status(), client_->Save(7, 500).status(), client_->Restore(7, 500).status(),
                   client_->Shutdown(500)}) {
    EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s;
    EXPECT_THAT(s.message(), HasSubstr("900"));
  }
  EXPECT_EQ(client_->GetStatus()->fence, 900u);
  EXPECT_FALSE(server_->service().completed());
  ASSERT_TRUE(client_->Restore(7, 900).ok());
  ASSERT_TRUE(client_->Shutdown(900).ok());
  EXPECT_TRUE(server_->service().completed());
}

// The first closure namespace proposed is the job's: a restarted chief that
// proposes another learns the first, and so re-issues the same closure ids.
TEST_F(PsTest, TheFirstClosureNamespaceIsKept) {
  auto first = client_->Fence(10, 0xabcd);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->closure_namespace, 0xabcdu);
  auto second = client_->Fence(20, 0x1234);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->closure_namespace, 0xabcdu);
  EXPECT_EQ(second->previous, 10u);
}

// A restore replaces the values the applied closure ids belong to: the same
// closures re-run on the restored state apply again, and the applied-update
// count starts over from the checkpoint.
TEST_F(PsTest, RestoreForgetsTheClosuresAppliedToTheReplacedValues) {
  ASSERT_TRUE(client_->CreateVariable("c", F({}, {0}), std::nullopt).ok());
  Update add{"c", Update::Kind::kAssignAdd, F({}, {1}), {}};
  ASSERT_TRUE(client_->Save(7).ok());
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_EQ(*client_->Push(id, 0, {add}), 0);
  EXPECT_EQ(client_->GetStatus()->applied_updates, 3);
  ASSERT_TRUE(client_->Restore(7).ok());
  EXPECT_EQ(client_->GetStatus()->applied_updates, 0);
  for (uint64_t id = 1; id <= 3; ++id) EXPECT_EQ(*client_->Push(id, 0, {add}), 0) << id;
  EXPECT_EQ(*client_->Push(3, 0, {add}), 1);
  EXPECT_FLOAT_EQ((*client_->Pull({"c"}))[0].data<float>()[0], 3.f);
  EXPECT_EQ(client_->GetStatus()->applied_updates, 3);
}

// Once Fence returns, no push of the chief it replaced lands, even one whose
// bytes were on their way: many old-generation pushes race one Fence, and
// every push that succeeded was applied before it (the count read right
// after the Fence never grows again).
TEST_F(PsTest, NoPushOfTheReplacedChiefLandsAfterFenceReturns) {
  ASSERT_TRUE(client_->CreateVariable("c", F({}, {0}), std::nullopt).ok());
  ASSERT_TRUE(client_->Fence(1).ok());
  Update add{"c", Update::Kind::kAssignAdd, F({}, {1}), {}};
  std::atomic<bool> go{true};
  std::atomic<int> ok{0};
  std::vector<std::thread> pushers;
  for (int t = 0; t < 4; ++t) {
    pushers.emplace_back([&, t] {
      PsClient c("127.0.0.1:" + std::to_string(server_->port()));
      for (uint64_t i = 1; go.load(); ++i) {
        if (c.Push(static_cast<uint64_t>(t) << 40 | i, 0, {add}, 1).ok()) ok.fetch_add(1);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(client_->Fence(2).ok());
  const float at_fence = (*client_->Pull({"c"}))[0].data<float>()[0];
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  go = false;
  for (auto& t : pushers) t.join();
  EXPECT_FLOAT_EQ((*client_->Pull({"c"}))[0].data<float>()[0], at_fence);
  EXPECT_EQ(static_cast<float>(ok.load()), at_fence);
  EXPECT_GT(ok.load(), 0);
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
  Update g{"emb", Update::Kind::kApplyGradient, F({2, 2}, {1, 1, 0.5f, 0.5f}),
           *Tensor::FromVector({2}, std::vector<int64_t>{3, 1})};
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
  auto dtype =
      client_->Push(2, 0, {{"w", Update::Kind::kAssignAdd, *Tensor::FromVector({2}, std::vector<int64_t>{1, 2}), {}}});
  EXPECT_EQ(dtype.status().code(), Code::kInvalidArgument);
  auto row = client_->PullRows("w", {5});
  EXPECT_EQ(row.status().code(), Code::kInvalidArgument);
  auto recreate = client_->CreateVariable("w", F({3}, {1, 2, 3}), std::nullopt);
  EXPECT_EQ(recreate.status().code(), Code::kAlreadyExists);
  // A request with one bad update changes nothing, not even its good updates.
  ASSERT_TRUE(client_->CreateVariable("c", F({}, {0}), std::nullopt).ok());
  auto mixed = client_->Push(
      3, 0, {{"c", Update::Kind::kAssignAdd, F({}, {1}), {}}, {"nope", Update::Kind::kAssignAdd, F({}, {1}), {}}});
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

// A hand-made data-plane client: the frames exactly as the wire carries
// them, so tests can send what PsClient never would.
class RawDataClient {
 public:
  explicit RawDataClient(int port, const std::string& token = "") {
    auto fd = net::Connect("127.0.0.1:" + std::to_string(port), wire::Clock::now() + std::chrono::seconds(5), "ps");
    EXPECT_TRUE(fd.ok()) << fd.status();
    fd_ = std::move(fd).value();
    // Blocking from here on, as the wire helpers expect.
    fcntl(fd_.get(), F_SETFL, fcntl(fd_.get(), F_GETFL, 0) & ~O_NONBLOCK);
    wire::Frame hello{wire::kHelloMagic, wire::kVersion, static_cast<uint32_t>(token.size()), 0, 0};
    Send(&hello, sizeof hello);
    Send(token.data(), token.size());
  }
  void Send(const void* p, size_t n) {
    iovec iov{const_cast<void*>(p), n};
    EXPECT_TRUE(wire::SendAll(fd_, {&iov, 1}, Deadline(), "ps").ok());
  }
  void SendRequest(wire::Op op, const google::protobuf::MessageLite& meta, uint64_t claimed_payload) {
    const std::string m = meta.SerializeAsString();
    wire::Frame f{wire::kRequestMagic, static_cast<uint32_t>(op), static_cast<uint32_t>(m.size()), 0, claimed_payload};
    Send(&f, sizeof f);
    Send(m.data(), m.size());
  }
  // The next response: its code and meta (the message, for errors).
  std::pair<Code, std::string> Answer() {
    wire::Frame f;
    Status s = wire::RecvFrame(fd_, &f, Deadline(), "ps");
    if (!s.ok()) return {s.code(), s.message()};
    EXPECT_EQ(f.magic, wire::kResponseMagic);
    std::string meta(f.meta_bytes, '\0');
    EXPECT_TRUE(wire::RecvAll(fd_, meta.data(), meta.size(), Deadline(), "ps").ok());
    std::string payload(f.payload_bytes, '\0');
    EXPECT_TRUE(wire::RecvAll(fd_, payload.data(), payload.size(), Deadline(), "ps").ok());
    return {static_cast<Code>(f.kind), meta};
  }
  void Close() { fd_.Reset(); }

 private:
  static wire::Clock::time_point Deadline() { return wire::Clock::now() + std::chrono::seconds(10); }
  net::Fd fd_;
};

proto::PushRequest AddRequest(const std::string& name, Shape claimed_shape) {
  proto::PushRequest req;
  req.set_closure_id(0);
  proto::Update* u = req.add_updates();
  u->set_name(name);
  u->set_kind(proto::Update::ASSIGN_ADD);
  u->mutable_value()->set_dtype(proto::DTYPE_FLOAT32);
  for (int64_t d : claimed_shape) u->mutable_value()->add_shape(d);
  return req;
}

// A tensor whose header claims more bytes than the request carries is
// refused before anything of the claimed size is allocated; the bytes that
// did come are skipped, so the same connection keeps working.
TEST_F(PsTest, TensorClaimingMoreBytesThanTheRequestCarriesIsRefused) {
  ASSERT_TRUE(client_->CreateVariable("w", F({2}, {1, 2}), std::nullopt).ok());
  RawDataClient raw(server_->port());
  EXPECT_EQ(raw.Answer().first, Code::kOk);  // hello
  // 32 GiB claimed, 4 bytes sent: too large for the default limit as well.
  raw.SendRequest(wire::Op::kPush, AddRequest("w", {int64_t{1} << 33}), 4);
  raw.Send("\0\0\0\0", 4);
  auto [code, message] = raw.Answer();
  EXPECT_EQ(code, Code::kInvalidArgument) << message;
  EXPECT_THAT(message, HasSubstr("claims 34359738368 bytes"));
  // Within the limit, but more than the request carries.
  raw.SendRequest(wire::Op::kPush, AddRequest("w", {2}), 4);
  raw.Send("\0\0\0\0", 4);
  std::tie(code, message) = raw.Answer();
  EXPECT_EQ(code, Code::kInvalidArgument) << message;
  EXPECT_THAT(message, HasSubstr("need 8 bytes, the request carries 4"));
  // A variable's creation is checked the same way.
  proto::CreateVariableRequest create;
  create.set_name("huge");
  create.mutable_initial_value()->set_dtype(proto::DTYPE_FLOAT32);
  create.mutable_initial_value()->add_shape(int64_t{1} << 20);
  raw.SendRequest(wire::Op::kCreateVariable, create, 4);
  raw.Send("\0\0\0\0", 4);
  std::tie(code, message) = raw.Answer();
  EXPECT_EQ(code, Code::kInvalidArgument) << message;
  EXPECT_THAT(message, HasSubstr("needs 4194304 bytes, the request carries 4"));
  // The same connection still serves, and nothing changed.
  proto::PullRequest pull;
  pull.add_names("w");
  raw.SendRequest(wire::Op::kPull, pull, 0);
  EXPECT_EQ(raw.Answer().first, Code::kOk);
  EXPECT_TRUE(AllClose((*client_->Pull({"w"}))[0], F({2}, {1, 2})));
  EXPECT_EQ(client_->GetStatus()->applied_updates, 0);
  EXPECT_EQ(client_->GetStatus()->variables, std::vector<std::string>{"w"});
}

// The configured maximum: a tensor (or a request) above it is refused
// whole, before its payload is read.
TEST_F(PsTest, TensorAboveTheConfiguredMaximumIsRefused) {
  server_.reset();
  PsOptions o;
  o.max_tensor_bytes = 1 << 20;
  server_ = *PsServer::Start("127.0.0.1:0", o);
  client_ = std::make_unique<PsClient>("127.0.0.1:" + std::to_string(server_->port()));
  Tensor big = Tensor::Zeros(DType::kFloat32, {(1 << 18) + 1});  // 4 bytes over
  auto created = client_->CreateVariable("big", big, std::nullopt);
  EXPECT_EQ(created.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(created.status().message(), HasSubstr("more than the limit of 1048576"));
  ASSERT_TRUE(client_->CreateVariable("w", F({2}, {1, 2}), std::nullopt).ok());
  // A raw client claiming 1 GiB, sending a few bytes and hanging up.
  RawDataClient raw(server_->port());
  EXPECT_EQ(raw.Answer().first, Code::kOk);
  raw.SendRequest(wire::Op::kPush, AddRequest("w", {int64_t{1} << 28}), uint64_t{1} << 30);
  raw.Send("\0\0\0\0", 4);
  auto [code, message] = raw.Answer();
  EXPECT_EQ(code, Code::kInvalidArgument) << message;
  raw.Close();
  // Still serving, unchanged.
  ASSERT_TRUE(client_->Push(1, 0, {{"w", Update::Kind::kAssignAdd, F({2}, {1, 1}), {}}}).ok());
  EXPECT_TRUE(AllClose((*client_->Pull({"w"}))[0], F({2}, {2, 3})));
}

// A push whose payload stops half-way changes nothing (it is received
// whole before it is applied), and the staging buffer grows with what
// arrives, not with what the header claims.
TEST_F(PsTest, APushCutOffMidwayChangesNothing) {
  ASSERT_TRUE(client_->CreateVariable("v", Tensor::Zeros(DType::kFloat32, {1 << 22}), std::nullopt).ok());  // 16 MiB
  {
    RawDataClient raw(server_->port());
    EXPECT_EQ(raw.Answer().first, Code::kOk);
    raw.SendRequest(wire::Op::kPush, AddRequest("v", {1 << 22}), uint64_t{1} << 24);
    std::vector<float> ones(1 << 20, 1.f);  // a quarter of it
    raw.Send(ones.data(), ones.size() * sizeof(float));
    raw.Close();
  }
  // The PS noticed the hang-up and applied nothing.
  auto v = client_->Pull({"v"});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)[0].data<float>()[0], 0.f);
  EXPECT_EQ((*v)[0].data<float>()[(1 << 20) - 1], 0.f);
  EXPECT_EQ(client_->GetStatus()->applied_updates, 0);
}

// A creation claiming 1 GiB whose bytes stop after 1 MiB: the PS allocates
// as the bytes arrive (a few MiB at most), never the claimed size, and when
// the rest does not come in time it answers INVALID_ARGUMENT.
TEST_F(PsTest, AClaimedSizeIsNeverAllocatedBeforeItsBytesArrive) {
  server_.reset();
  PsOptions o;
  o.request_timeout = std::chrono::milliseconds(300);
  server_ = *PsServer::Start("127.0.0.1:0", o);
  client_ = std::make_unique<PsClient>("127.0.0.1:" + std::to_string(server_->port()));
  RawDataClient raw(server_->port());
  EXPECT_EQ(raw.Answer().first, Code::kOk);
  proto::CreateVariableRequest create;
  create.set_name("big");
  create.mutable_initial_value()->set_dtype(proto::DTYPE_FLOAT32);
  create.mutable_initial_value()->add_shape(int64_t{1} << 28);
  g_largest_tensor_allocation = 0;
  raw.SendRequest(wire::Op::kCreateVariable, create, uint64_t{1} << 30);
  std::vector<char> some(1 << 20);
  raw.Send(some.data(), some.size());
  auto [code, message] = raw.Answer();
  EXPECT_EQ(code, Code::kInvalidArgument) << message;
  EXPECT_THAT(message, HasSubstr("claims 1073741824 bytes of tensors; only 1048576 arrived"));
  EXPECT_LT(g_largest_tensor_allocation.load(), size_t{16} << 20);
  // Nothing was created, and the PS serves on.
  EXPECT_TRUE(client_->GetStatus()->variables.empty());
  ASSERT_TRUE(client_->CreateVariable("w", F({2}, {1, 2}), std::nullopt).ok());
}

// Pulls land in the caller's tensors, views included: a variable's shards
// can be pulled straight into the rows of one full tensor.
TEST_F(PsTest, PullIntoWritesTheCallersTensors) {
  ASSERT_TRUE(client_->CreateVariable("a", F({2, 2}, {1, 2, 3, 4}), std::nullopt).ok());
  ASSERT_TRUE(client_->CreateVariable("b", F({1, 2}, {5, 6}), std::nullopt).ok());
  Tensor full = Tensor::Zeros(DType::kFloat32, {3, 2});
  std::vector<Tensor> parts = {*full.Rows(0, 2), *full.Rows(2, 3)};
  ASSERT_TRUE(client_->PullInto({"a", "b"}, parts).ok());
  EXPECT_TRUE(AllClose(full, F({3, 2}, {1, 2, 3, 4, 5, 6})));
  Tensor rows = Tensor::Zeros(DType::kFloat32, {2, 2});
  ASSERT_TRUE(client_->PullRowsInto("a", {1, 1}, rows).ok());
  EXPECT_TRUE(AllClose(rows, F({2, 2}, {3, 4, 3, 4})));
  // A destination of the wrong shape is refused, and the client goes on.
  std::vector<Tensor> wrong = {Tensor::Zeros(DType::kFloat32, {3})};
  EXPECT_EQ(client_->PullInto({"b"}, wrong).code(), Code::kInvalidArgument);
  EXPECT_TRUE(AllClose((*client_->Pull({"b"}))[0], F({1, 2}, {5, 6})));
}

// PushPull applies the push, then pulls, in one exchange: the values seen
// are the pushed ones; a retried push is skipped and still pulls; a pull
// of an unknown variable or a bad push refuses the whole request, with
// nothing applied and the caller's tensors untouched.
TEST_F(PsTest, PushPullPullsWhatItPushed) {
  ASSERT_TRUE(client_->CreateVariable("w", F({2}, {1, 2}), Sgd(0.5)).ok());
  ASSERT_TRUE(client_->CreateVariable("c", F({}, {0}), std::nullopt).ok());
  const std::vector<Update> push{{"w", Update::Kind::kApplyGradient, F({2}, {2, -4}), {}},
                                 {"c", Update::Kind::kAssignAdd, F({}, {1}), {}}};
  std::vector<Tensor> out{Tensor::Zeros(DType::kFloat32, {2}), Tensor::Zeros(DType::kFloat32, {})};
  auto d = client_->PushPullInto(7, 0, push, 0, {"w", "c"}, out);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, 0);
  EXPECT_TRUE(AllClose(out[0], F({2}, {0, 4})));
  EXPECT_FLOAT_EQ(out[1].data<float>()[0], 1.f);
  // The same closure step again: both updates skipped, the values pulled.
  out = {Tensor::Zeros(DType::kFloat32, {2}), Tensor::Zeros(DType::kFloat32, {})};
  EXPECT_EQ(*client_->PushPullInto(7, 0, push, 0, {"w", "c"}, out), 2);
  EXPECT_TRUE(AllClose(out[0], F({2}, {0, 4})));
  EXPECT_FLOAT_EQ(out[1].data<float>()[0], 1.f);

  std::vector<Tensor> one{Tensor::Zeros(DType::kFloat32, {2})};
  auto unknown = client_->PushPullInto(8, 0, push, 0, {"nope"}, std::span<Tensor>(one).first(1));
  EXPECT_EQ(unknown.status().code(), Code::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("nope"));
  auto bad = client_->PushPullInto(9, 0, {{"w", Update::Kind::kApplyGradient, F({3}, {1, 1, 1}), {}}}, 0, {"w"}, one);
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(AllClose(one[0], F({2}, {0, 0})));  // nothing pulled into it
  // Neither refused request changed anything, and the client goes on.
  EXPECT_TRUE(AllClose((*client_->Pull({"w"}))[0], F({2}, {0, 4})));
  EXPECT_FLOAT_EQ((*client_->Pull({"c"}))[0].data<float>()[0], 1.f);
  std::vector<Tensor> two{Tensor::Zeros(DType::kFloat32, {2})};
  EXPECT_EQ(client_->PushPullInto(10, 0, push, 0, {"w", "c"}, two).status().code(), Code::kInvalidArgument);
}

// Started exchanges are answered while the caller does something else,
// and finished in any order; each sees what was applied before it started.
// One dropped unfinished leaves the client working.
TEST_F(PsTest, StartedExchangesFinishInAnyOrder) {
  ASSERT_TRUE(client_->CreateVariable("w", F({2}, {1, 2}), Sgd(0.5)).ok());
  std::vector<Tensor> first{Tensor::Zeros(DType::kFloat32, {2})};
  std::vector<Tensor> second{Tensor::Zeros(DType::kFloat32, {2})};
  auto push_pull =
      client_->StartPushPullInto(3, 0, {{"w", Update::Kind::kApplyGradient, F({2}, {2, -4}), {}}}, 0, {"w"}, first);
  ASSERT_TRUE(push_pull.ok()) << push_pull.status();
  // The PS applies the push without waiting for anyone to read its answer:
  // its value changes while the answer is unread. Polled, not one request:
  // a request on another pooled connection may overtake the push's payload
  // (with TFJOB_PS_SHM=0 it travels inline over TCP), and the closure step's
  // later push below must find it applied.
  bool applied = false;
  for (int i = 0; i < 1000 && !applied; ++i) {
    auto now = client_->Pull({"w"});
    ASSERT_TRUE(now.ok()) << now.status();
    applied = AllClose((*now)[0], F({2}, {0, 4}));
    if (!applied) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(applied) << "the started push-pull was not applied within 10 s";
  auto pull = client_->StartPullInto({"w"}, second);
  ASSERT_TRUE(pull.ok()) << pull.status();
  auto pushed = client_->StartPush(3, 0, {{"w", Update::Kind::kApplyGradient, F({2}, {2, -4}), {}}}, 0);
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  Tensor rows = Tensor::Zeros(DType::kFloat32, {1});
  auto row = client_->StartPullRowsInto("w", {1}, rows);
  ASSERT_TRUE(row.ok()) << row.status();
  auto dropped = client_->StartPullInto({"w"}, second);
  ASSERT_TRUE(dropped.ok());
  dropped->reset();

  EXPECT_EQ(*client_->Finish(std::move(*pushed)), 1);  // the same closure step: skipped
  EXPECT_EQ(*client_->Finish(std::move(*row)), 0);
  EXPECT_EQ(*client_->Finish(std::move(*pull)), 0);
  EXPECT_EQ(*client_->Finish(std::move(*push_pull)), 0);
  EXPECT_TRUE(AllClose(first[0], F({2}, {0, 4})));
  EXPECT_TRUE(AllClose(second[0], F({2}, {0, 4})));
  EXPECT_FLOAT_EQ(rows.data<float>()[0], 4.f);
  EXPECT_TRUE(AllClose((*client_->Pull({"w"}))[0], F({2}, {0, 4})));

  // Refusals come back from Finish, with the caller's tensors untouched.
  std::vector<Tensor> wrong{Tensor::Zeros(DType::kFloat32, {3})};
  auto refused = client_->StartPullInto({"w"}, wrong);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(client_->Finish(std::move(*refused)).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(client_->StartPullInto({"w", "w"}, wrong).status().code(), Code::kInvalidArgument);
}

// An answer nobody reads yet, bigger than what the socket holds, does not
// keep the variable locked: another client's push lands meanwhile.
TEST_F(PsTest, AnUnreadAnswerDoesNotHoldTheVariable) {
  const int64_t n = int64_t{4} << 20;  // 16 MiB: more than the shared region and the socket's buffers
  ASSERT_TRUE(client_->CreateVariable("big", Tensor::Zeros(DType::kFloat32, {n}), Sgd(1)).ok());
  std::vector<Tensor> out{Tensor::Zeros(DType::kFloat32, {n})};
  auto pull = client_->StartPullInto({"big"}, out);
  ASSERT_TRUE(pull.ok()) << pull.status();
  ClientOptions quick;
  quick.timeout = std::chrono::seconds(10);
  PsClient other("127.0.0.1:" + std::to_string(server_->port()), quick);
  Tensor grad = Tensor::Zeros(DType::kFloat32, {n});
  grad.data<float>()[n - 1] = -1;
  auto pushed = other.Push(1, 0, {{"big", Update::Kind::kApplyGradient, grad, {}}});
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  ASSERT_TRUE(client_->Finish(std::move(*pull)).ok());
  // The answer is the value when the pull was served: before the push.
  EXPECT_FLOAT_EQ(out[0].data<float>()[n - 1], 0.f);
  EXPECT_FLOAT_EQ((*other.Pull({"big"}))[0].data<float>()[n - 1], 1.f);
}

// A GetStatus that ran out of time before its channel connected (the PS's
// name still gave the address of a pod that no longer answers: connection
// attempts hang) is retried like UNAVAILABLE, and reaches the PS once one
// listens there; a Save there is not retried (it changes the server), its
// DEADLINE_EXCEEDED is final. The silent address is a TCP listener that
// never accepts: the handshake completes, no HTTP/2 answer ever comes.
TEST(PsClientTest, AStatusCallThatNeverConnectedIsRetried) {
  testing::SilentListener silent;
  const std::string address = silent.address();
  ClientOptions once;
  once.timeout = std::chrono::milliseconds(400);
  once.retry.max_attempts = 2;
  once.retry.initial_backoff = std::chrono::milliseconds(10);
  PsClient saver(address, once);
  EXPECT_EQ(saver.Save(1).status().code(), Code::kDeadlineExceeded);
  PsClient asker(address, once);
  auto status = asker.GetStatus();
  EXPECT_EQ(status.status().code(), Code::kUnavailable);
  EXPECT_THAT(status.status().message(), ::testing::HasSubstr("not connected within 400 ms"));

  ClientOptions patient = once;
  patient.retry.max_attempts = 30;
  patient.retry.max_backoff = std::chrono::milliseconds(200);
  PsClient client(address, patient);
  std::unique_ptr<PsServer> server;
  std::thread comes_up([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(900));
    silent.Close();
    auto s = PsServer::Start(address);
    ASSERT_TRUE(s.ok()) << s.status();
    server = std::move(s).value();
  });
  auto got = client.GetStatus();
  comes_up.join();
  EXPECT_TRUE(got.ok()) << got.status();
}

// A started exchange that could not reach its PS is done whole by Finish,
// with the usual retries: here, once the PS is back.
TEST_F(PsTest, FinishRedoesAnExchangeThatCouldNotStart) {
  const int port = server_->port();
  server_->Stop(std::chrono::milliseconds(0));
  server_.reset();
  std::vector<Tensor> out{Tensor::Zeros(DType::kFloat32, {2})};
  auto pull = client_->StartPullInto({"w"}, out);
  ASSERT_TRUE(pull.ok()) << pull.status();
  auto again = PsServer::Start("127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(again.ok()) << again.status();
  server_ = std::move(again).value();
  ASSERT_TRUE(client_->CreateVariable("w", F({2}, {3, 4}), std::nullopt).ok());
  ASSERT_TRUE(client_->Finish(std::move(*pull)).ok());
  EXPECT_TRUE(AllClose(out[0], F({2}, {3, 4})));
}

// Open fills the pool: the exchanges started next take its connections
// (no new one, so no new shared-memory region), it opens only what is
// missing, and a PS that is down is one error at once, naming it.
TEST_F(PsTest, OpenedConnectionsServeTheNextExchanges) {
  const bool shm = !kInlineRun;
  ASSERT_TRUE(client_->CreateVariable("w", F({2}, {3, 4}), std::nullopt).ok());
  const int before = client_->shared_memory_connections();  // CreateVariable's connection, idle now
  ASSERT_TRUE(client_->Open(3, std::chrono::seconds(5)).ok());
  if (shm) {
    EXPECT_EQ(client_->shared_memory_connections(), before + 2);
  }
  std::vector<std::vector<Tensor>> outs(3, std::vector<Tensor>{Tensor::Zeros(DType::kFloat32, {2})});
  std::vector<std::unique_ptr<PsClient::Pending>> started;
  for (auto& out : outs) {
    auto p = client_->StartPullInto({"w"}, out);
    ASSERT_TRUE(p.ok()) << p.status();
    started.push_back(std::move(p).value());
  }
  for (auto& p : started) ASSERT_TRUE(client_->Finish(std::move(p)).ok());
  for (const auto& out : outs) EXPECT_TRUE(AllClose(out[0], F({2}, {3, 4})));
  ASSERT_TRUE(client_->Open(2, std::chrono::seconds(5)).ok());
  if (shm) {
    EXPECT_EQ(client_->shared_memory_connections(), before + 2);
  }

  const int port = server_->port();
  server_->Stop(std::chrono::milliseconds(0));
  server_.reset();
  PsClient fresh("127.0.0.1:" + std::to_string(port));
  Status down = fresh.Open(2, std::chrono::seconds(5));
  EXPECT_EQ(down.code(), Code::kUnavailable) << down;
  EXPECT_NE(down.message().find("127.0.0.1:" + std::to_string(port)), std::string::npos) << down;
}

// One push to several big shards applies every update (they run on the
// apply pool in parallel), exactly once per shard.
TEST_F(PsTest, APushToManyShardsAppliesEachOnce) {
  std::vector<Update> updates;
  for (int i = 0; i < 6; ++i) {
    const std::string name = std::string("s").append(std::to_string(i));
    ASSERT_TRUE(client_->CreateVariable(name, Tensor::Zeros(DType::kFloat32, {1 << 16}), Sgd(1.0)).ok());
    Tensor g = Tensor::Zeros(DType::kFloat32, {1 << 16});
    for (float& x : g.flat<float>()) x = static_cast<float>(-i);
    updates.push_back({name, Update::Kind::kApplyGradient, g, {}});
  }
  EXPECT_EQ(*client_->Push(9, 0, updates), 0);
  EXPECT_EQ(*client_->Push(9, 0, updates), 6);
  for (int i = 0; i < 6; ++i) {
    Tensor v = (*client_->Pull({std::string("s").append(std::to_string(i))}))[0];
    EXPECT_EQ(v.data<float>()[0], static_cast<float>(i));
    EXPECT_EQ(v.data<float>()[(1 << 16) - 1], static_cast<float>(i));
  }
}

// A big dense update is applied in pieces on several threads; the result is
// exactly one pass of the optimizer (Adam: its step count advances once).
TEST_F(PsTest, ABigDenseUpdateAppliedInPiecesIsExactlyOnePass) {
  server_.reset();
  PsOptions o;
  o.apply_threads = 4;
  server_ = *PsServer::Start("127.0.0.1:0", o);
  client_ = std::make_unique<PsClient>("127.0.0.1:" + std::to_string(server_->port()));
  model::OptimizerSpec adam;
  adam.type = model::OptimizerType::kAdam;
  adam.learning_rate = 0.01;
  const int64_t n = (1 << 20) + 3;  // 4 MiB and a bit: pieces of unequal size
  Tensor w = Tensor::Zeros(DType::kFloat32, {n});
  Tensor g = Tensor::Zeros(DType::kFloat32, {n});
  for (int64_t i = 0; i < n; ++i) {
    w.data<float>()[i] = static_cast<float>(i % 97) * 0.01f;
    g.data<float>()[i] = static_cast<float>(i % 13) - 6.f;
  }
  ASSERT_TRUE(client_->CreateVariable("w", w, adam).ok());
  model::Optimizer local(adam);
  Tensor expect = w.Clone();
  model::SlotState slots = local.CreateSlots(expect);
  for (uint64_t step = 1; step <= 3; ++step) {
    ASSERT_TRUE(client_->Push(step, 0, {{"w", Update::Kind::kApplyGradient, g, {}}}).ok());
    ASSERT_TRUE(local.ApplyDense(expect, g, slots).ok());
  }
  EXPECT_TRUE(Equal((*client_->Pull({"w"}))[0], expect));
  // The same for an add, which the benchmark pushes.
  ASSERT_TRUE(client_->Push(0, 0, {{"w", Update::Kind::kAssignAdd, g, {}}}).ok());
  AsArray(expect) += AsArray(g);
  EXPECT_TRUE(Equal((*client_->Pull({"w"}))[0], expect));
}

// Pooled connections to a PS that restarted are noticed and replaced; gRPC
// and the data plane share the port, before and after.
TEST_F(PsTest, ARestartedServerIsReachedAgainOnTheSamePort) {
  ASSERT_TRUE(client_->CreateVariable("w", F({2}, {1, 2}), std::nullopt).ok());
  ASSERT_TRUE(client_->Pull({"w"}).ok());
  const int port = server_->port();
  const uint64_t before = client_->GetStatus()->incarnation;
  server_->Stop(std::chrono::milliseconds(0));
  server_.reset();
  auto again = PsServer::Start("127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(again.ok()) << again.status();
  server_ = std::move(again).value();
  EXPECT_EQ(client_->Pull({"w"}).status().code(), Code::kNotFound);  // a new, empty PS
  ASSERT_TRUE(client_->CreateVariable("w", F({2}, {3, 4}), std::nullopt).ok());
  EXPECT_TRUE(AllClose((*client_->Pull({"w"}))[0], F({2}, {3, 4})));
  EXPECT_NE(client_->GetStatus()->incarnation, before);
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
  EXPECT_TRUE(server_->service().completed());
}

// A signal (RequestShutdown) ends the wait too, but says nothing about
// training: the PS then exits 143, not 0 (services/runtime).
TEST_F(PsTest, ASignalStopIsNotACompletedShutdown) {
  std::thread waiter([&] { server_->Wait(); });
  server_->service().RequestShutdown();
  waiter.join();
  EXPECT_FALSE(server_->service().completed());
}

// A connection that speaks neither plane's protocol is hung up on at once,
// not left open until the next connection arrives; so is one that breaks
// the data plane's after a valid hello.
TEST_F(PsTest, AConnectionThatBreaksTheProtocolIsClosed) {
  auto eof_within = [](int fd, std::chrono::milliseconds limit) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(limit.count())) != 1) return false;
    char c;
    return recv(fd, &c, 1, 0) <= 0;
  };
  auto garbage =
      net::Connect("127.0.0.1:" + std::to_string(server_->port()), wire::Clock::now() + std::chrono::seconds(5), "ps");
  ASSERT_TRUE(garbage.ok());
  ASSERT_EQ(send(garbage->get(), "GARBAGE!", 8, MSG_NOSIGNAL), 8);
  EXPECT_TRUE(eof_within(garbage->get(), std::chrono::seconds(5)));

  RawDataClient raw(server_->port());
  EXPECT_EQ(raw.Answer().first, Code::kOk);          // hello
  const std::string junk(sizeof(wire::Frame), 'x');  // one frame's worth: nothing left unread
  raw.Send(junk.data(), junk.size());
  auto [code, message] = raw.Answer();
  EXPECT_EQ(code, Code::kInvalidArgument) << message;
  EXPECT_THAT(message, HasSubstr("not a data-plane request frame"));
  EXPECT_EQ(raw.Answer().first, Code::kUnavailable);  // then the connection is closed
  // And the PS still serves everyone else.
  EXPECT_TRUE(client_->GetStatus().ok());
}

// On one host a connection's payloads go through shared memory: the values
// are the same as inline, a payload larger than the region goes inline on
// the same connection, and a client told not to never attaches.
TEST_F(PsTest, PayloadsGoThroughSharedMemoryOnOneHost) {
  if (kInlineRun) {
    GTEST_SKIP() << "TFJOB_PS_SHM=0: this run checks the inline path";
  }
  ClientOptions small;
  small.shared_memory_bytes = 4096;  // 1,024 floats
  PsClient shm("127.0.0.1:" + std::to_string(server_->port()), small);
  ClientOptions none;
  none.shared_memory_bytes = 0;
  PsClient inline_only("127.0.0.1:" + std::to_string(server_->port()), none);
  for (int n : {16, 1024, 4096}) {  // in the region, filling it, larger than it
    SCOPED_TRACE(n);
    const std::string name = "v" + std::to_string(n);
    Tensor init = Tensor::Zeros(DType::kFloat32, {n});
    for (int i = 0; i < n; ++i) init.data<float>()[i] = static_cast<float>(i);
    ASSERT_TRUE(shm.CreateVariable(name, init, Sgd(1.0)).ok());
    Tensor g = Tensor::Zeros(DType::kFloat32, {n});
    for (float& x : g.flat<float>()) x = -1.f;
    std::vector<Tensor> out{Tensor::Zeros(DType::kFloat32, {n})};
    ASSERT_EQ(*shm.PushPullInto(n, 0, {{name, Update::Kind::kApplyGradient, g, {}}}, 0, {name}, out), 0);
    for (int i : {0, n / 2, n - 1}) EXPECT_EQ(out[0].data<float>()[i], static_cast<float>(i + 1));
    Tensor again = (*inline_only.Pull({name}))[0];
    EXPECT_TRUE(AllClose(again, out[0]));
    Tensor rows = (*shm.PullRows(name, {n - 1, 0}));
    EXPECT_EQ(rows.data<float>()[0], static_cast<float>(n));
    EXPECT_EQ(rows.data<float>()[1], 1.f);
  }
  EXPECT_GE(shm.shared_memory_connections(), 1);
  EXPECT_EQ(inline_only.shared_memory_connections(), 0);
}

// The PS applies a push's tensors where they lie in the region when they
// are aligned for their type, and copies them out when not: float32[3], then
// int64[2] at byte 12 (copied), then float32[5] and a sparse update's rows
// (read in place). Both give what the inline path gives.
TEST_F(PsTest, PushesInSharedMemoryApplyAlignedOrNot) {
  if (kInlineRun) {
    GTEST_SKIP() << "TFJOB_PS_SHM=0: this run checks the inline path";
  }
  ClientOptions none;
  none.shared_memory_bytes = 0;
  PsClient shm("127.0.0.1:" + std::to_string(server_->port()));
  PsClient inline_only("127.0.0.1:" + std::to_string(server_->port()), none);
  const Tensor counts = *Tensor::FromVector({2}, std::vector<int64_t>{10, 20});
  for (PsClient* c : {&shm, &inline_only}) {
    const std::string p = c == &shm ? "shm." : "inline.";
    ASSERT_TRUE(c->CreateVariable(p + "f3", F({3}, {1, 2, 3}), std::nullopt).ok());
    ASSERT_TRUE(c->CreateVariable(p + "i2", counts, std::nullopt).ok());
    ASSERT_TRUE(c->CreateVariable(p + "f5", F({5}, {0, 0, 0, 0, 0}), std::nullopt).ok());
    ASSERT_TRUE(c->CreateVariable(p + "t", F({3, 2}, {0, 0, 0, 0, 0, 0}), std::nullopt).ok());
    const std::vector<Update> updates{
        {p + "f3", Update::Kind::kAssignAdd, F({3}, {0.5f, 0.5f, 0.5f}), {}},
        {p + "i2", Update::Kind::kAssignAdd, *Tensor::FromVector({2}, std::vector<int64_t>{1, -2}), {}},
        {p + "f5", Update::Kind::kAssignAdd, F({5}, {1, 2, 3, 4, 5}), {}},
        {p + "t", Update::Kind::kAssignAdd, F({2, 2}, {7, 8, 9, 10}),
         *Tensor::FromVector({2}, std::vector<int64_t>{2, 0})},
    };
    ASSERT_EQ(*c->Push(0, 0, updates), 0);
  }
  EXPECT_GE(shm.shared_memory_connections(), 1);
  for (const std::string v : {"f3", "i2", "f5", "t"}) {
    SCOPED_TRACE(v);
    auto a = inline_only.Pull({"shm." + v}), b = inline_only.Pull({"inline." + v});
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ((*a)[0].DebugString(), (*b)[0].DebugString());
    EXPECT_EQ(std::memcmp((*a)[0].raw(), (*b)[0].raw(), (*a)[0].bytes()), 0);
  }
  auto i2 = inline_only.Pull({"shm.i2"});
  ASSERT_TRUE(i2.ok());
  EXPECT_EQ((*i2)[0].data<int64_t>()[0], 11);
  EXPECT_EQ((*i2)[0].data<int64_t>()[1], 18);
  auto t = inline_only.Pull({"shm.t"});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0].data<float>()[4], 7.f);
  EXPECT_EQ((*t)[0].data<float>()[0], 9.f);
}

// What a client cannot make a PS do with shared memory: use a region it has
// not attached, or attach one that is not a data-plane region on its host.
TEST_F(PsTest, SharedMemoryRequestsThatDoNotFitAreRefused) {
  ASSERT_TRUE(client_->CreateVariable("w", F({2}, {1, 2}), std::nullopt).ok());
  RawDataClient raw(server_->port());
  EXPECT_EQ(raw.Answer().first, Code::kOk);  // hello
  proto::PushRequest push;
  proto::Update* u = push.add_updates();
  u->set_name("w");
  u->set_kind(proto::Update::ASSIGN_ADD);
  wire::HeaderOf(F({2}, {1, 1}), u->mutable_value());
  const std::string m = push.SerializeAsString();
  wire::Frame f{wire::kRequestMagic, static_cast<uint32_t>(wire::Op::kPush), static_cast<uint32_t>(m.size()),
                wire::kPayloadInShm, 8};
  raw.Send(&f, sizeof f);
  raw.Send(m.data(), m.size());
  auto [code, message] = raw.Answer();
  EXPECT_EQ(code, Code::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr("none is attached"));
  proto::AttachShmRequest attach;
  attach.set_name("/etc/passwd");
  attach.set_bytes(4096);
  attach.set_nonce(std::string(shm::kNonceChars, 'a'));
  raw.SendRequest(wire::Op::kAttachShm, attach, 0);
  auto bad_name = raw.Answer();
  EXPECT_EQ(bad_name.first, Code::kInvalidArgument);
  EXPECT_THAT(bad_name.second, HasSubstr("not a data-plane shared-memory name"));
  attach.set_name("/tfjob-ps-" + std::string(32, '0'));  // well formed, never made
  raw.SendRequest(wire::Op::kAttachShm, attach, 0);
  EXPECT_EQ(raw.Answer().first, Code::kFailedPrecondition);
  auto made = shm::Region::Create(4096);
  ASSERT_TRUE(made.ok()) << made.status();
  attach.set_name((*made)->name());
  attach.set_nonce(std::string(shm::kNonceChars, 'b'));  // not the region's
  raw.SendRequest(wire::Op::kAttachShm, attach, 0);
  auto wrong = raw.Answer();
  EXPECT_EQ(wrong.first, Code::kFailedPrecondition);
  EXPECT_THAT(wrong.second, HasSubstr("nonce"));
  // Nothing was applied, and the PS still serves.
  EXPECT_TRUE(AllClose((*client_->Pull({"w"}))[0], F({2}, {1, 2})));
}

TEST(SharedMemoryRegionTest, WhatOneSideWritesTheOtherReadsAndTheNameGoes) {
  auto made = shm::Region::Create(shm::kHeaderBytes + 64);
  ASSERT_TRUE(made.ok()) << made.status();
  shm::Region& a = **made;
  EXPECT_EQ(a.capacity(), 64u);
  auto opened = shm::Region::Open(a.name(), a.bytes(), a.nonce());
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::memcpy(a.payload(), "hello", 5);
  EXPECT_EQ(std::memcmp((*opened)->payload(), "hello", 5), 0);
  EXPECT_EQ(shm::Region::Open(a.name(), a.bytes() + 64, a.nonce()).status().code(), Code::kFailedPrecondition);
  a.Unlink();
  EXPECT_EQ(shm::Region::Open(a.name(), a.bytes(), a.nonce()).status().code(), Code::kFailedPrecondition);
  // Still mapped on both sides.
  std::memcpy((*opened)->payload(), "world", 5);
  EXPECT_EQ(std::memcmp(a.payload(), "world", 5), 0);
  EXPECT_EQ(shm::Region::Create(shm::kMaxRegionBytes + 1).status().code(), Code::kInvalidArgument);
  EXPECT_FALSE(shm::HostKey().empty());
}

TEST(PsClientTest, UnreachablePeerRetriesThenNamesTheAddress) {
  ClientOptions o;
  // Refused connections come back at once; the deadline only has to be
  // longer than a connect attempt takes on a loaded machine under TSan
  // (200 ms was not: DEADLINE_EXCEEDED, which is not retried).
  o.timeout = std::chrono::seconds(10);
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
