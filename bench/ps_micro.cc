// Google Benchmark microbenchmarks that take the PS push/pull path apart, to
// say where the time of bench_ps_throughput goes:
//   Memcpy            the floor: one copy of the tensor's bytes
//   TensorToProto     client Push / server Pull: tensor -> proto bytes field
//   TensorFromProto   server Push / client Pull: proto bytes -> new tensor
//   ProtoWire         SerializeToString + ParseFromString of a PushRequest
//                     with the tensor in a bytes field: what carrying tensors
//                     in protobuf over gRPC would cost per message (the PS
//                     data plane does not; the worker's closure tensors do)
//   PushPullLoopback  PsClient Push(ASSIGN_ADD) + Pull against a PsServer in
//                     this process on 127.0.0.1 (the data plane, one process)
//   PushPullIntoLoopback  the same, pulling into a reused tensor (PullInto)
// Bytes/s are per tensor moved (PushPullLoopback counts 2 per iteration).
// Sizes 4 KiB, 256 KiB and 4 MiB keep the whole run to a few seconds; each
// benchmark's loop is bounded by Google Benchmark's --benchmark_min_time
// (0.2 s here unless overridden). Traffic goes to 127.0.0.1 only.
#include <cstdlib>
#include <algorithm>
#include <iostream>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "services/runtime/config.h"
#include "bench/cli.h"
#include "services/ps/ps_client.h"
#include "services/ps/ps_service.h"
#include "services/rpc/rpc.h"

namespace tfjob::bench {
namespace {

Tensor Ones(int64_t bytes) {
  Tensor t = Tensor::Zeros(DType::kFloat32, {bytes / 4});
  for (float& x : t.flat<float>()) x = 1.0f;
  return t;
}

void BM_Memcpy(benchmark::State& state) {
  const Tensor a = Ones(state.range(0));
  Tensor b = Tensor::Zeros(DType::kFloat32, a.shape());
  for (auto _ : state) {
    std::memcpy(b.raw(), a.raw(), a.bytes());
    benchmark::DoNotOptimize(b.raw());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_TensorToProto(benchmark::State& state) {
  const Tensor a = Ones(state.range(0));
  proto::Tensor p;
  for (auto _ : state) {
    rpc::TensorToProto(a, &p);
    benchmark::DoNotOptimize(p.data().data());
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_TensorFromProto(benchmark::State& state) {
  proto::Tensor p;
  rpc::TensorToProto(Ones(state.range(0)), &p);
  for (auto _ : state) {
    auto t = rpc::TensorFromProto(p);
    if (!t.ok()) {
      state.SkipWithError(t.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(t->raw());
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

proto::PushRequest MakePush(const std::string& name, const Tensor& delta) {
  proto::PushRequest req;
  proto::Update* u = req.add_updates();
  u->set_name(name);
  u->set_kind(proto::Update::ASSIGN_ADD);
  rpc::TensorToProto(delta, u->mutable_value());
  return req;
}

void BM_ProtoWire(benchmark::State& state) {
  const proto::PushRequest req = MakePush("v", Ones(state.range(0)));
  std::string wire;
  proto::PushRequest back;
  for (auto _ : state) {
    req.SerializeToString(&wire);
    if (!back.ParseFromString(wire)) {
      state.SkipWithError("parse failed");
      break;
    }
    benchmark::DoNotOptimize(back.updates(0).value().data().data());
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_PushPullLoopback(benchmark::State& state) {
  auto server = ps::PsServer::Start("127.0.0.1:0");
  if (!server.ok()) {
    state.SkipWithError(server.status().ToString().c_str());
    return;
  }
  ps::PsClient client("127.0.0.1:" + std::to_string((*server)->port()));
  const Tensor delta = Ones(state.range(0));
  if (auto c = client.CreateVariable("v", Tensor::Zeros(DType::kFloat32, delta.shape()), std::nullopt); !c.ok()) {
    state.SkipWithError(c.status().ToString().c_str());
    return;
  }
  const std::vector<ps::Update> updates{{"v", ps::Update::Kind::kAssignAdd, delta, std::nullopt}};
  for (auto _ : state) {
    auto pushed = client.Push(0, 0, updates);
    auto pulled = client.Pull({"v"});
    if (!pushed.ok() || !pulled.ok()) {
      state.SkipWithError("push or pull failed");
      break;
    }
  }
  state.SetBytesProcessed(2 * state.iterations() * state.range(0));
}

void BM_PushPullIntoLoopback(benchmark::State& state) {
  auto server = ps::PsServer::Start("127.0.0.1:0");
  if (!server.ok()) {
    state.SkipWithError(server.status().ToString().c_str());
    return;
  }
  ps::PsClient client("127.0.0.1:" + std::to_string((*server)->port()));
  const Tensor delta = Ones(state.range(0));
  if (auto c = client.CreateVariable("v", Tensor::Zeros(DType::kFloat32, delta.shape()), std::nullopt); !c.ok()) {
    state.SkipWithError(c.status().ToString().c_str());
    return;
  }
  const std::vector<ps::Update> updates{{"v", ps::Update::Kind::kAssignAdd, delta, std::nullopt}};
  std::vector<Tensor> into{Tensor::Zeros(DType::kFloat32, delta.shape())};
  const std::vector<std::string> names{std::string(1, 'v')};
  for (auto _ : state) {
    auto pushed = client.Push(0, 0, updates);
    Status pulled = client.PullInto(names, into);
    if (!pushed.ok() || !pulled.ok()) {
      state.SkipWithError("push or pull failed");
      break;
    }
  }
  state.SetBytesProcessed(2 * state.iterations() * state.range(0));
}

#define SIZES Arg(4 << 10)->Arg(256 << 10)->Arg(4 << 20)->MinTime(0.2)
BENCHMARK(BM_Memcpy)->SIZES;
BENCHMARK(BM_TensorToProto)->SIZES;
BENCHMARK(BM_TensorFromProto)->SIZES;
BENCHMARK(BM_ProtoWire)->SIZES;
BENCHMARK(BM_PushPullLoopback)->SIZES->UseRealTime();
BENCHMARK(BM_PushPullIntoLoopback)->SIZES->UseRealTime();

}  // namespace
}  // namespace tfjob::bench

// BENCHMARK_MAIN's body, with --version answered first: Google Benchmark
// answers --help itself (its flags) and refuses --version.
int main(int argc, char** argv) {
  // The runtime's process-wide switches, read as tfjob-runtime reads them
  // (services/runtime/config.h): TFJOB_PS_SHM=0 makes this process's
  // clients send payloads inline, as the runtime's do under it.
  auto settings = tfjob::runtime::ReadProcessSettings(tfjob::runtime::ProcessEnv());
  if (!settings.ok()) {
    std::cerr << "error: " << settings.status().message() << std::endl;
    return 2;
  }
  tfjob::runtime::ApplyProcessSettings(*settings);
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (std::find(args.begin(), args.end(), "--version") != args.end()) {
    return *tfjob::bench::AnswerHelpOrVersion({"--version"}, "bench_ps_micro", "");
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
