// Measures scheduling overhead: no-op closures per second that one
// ClusterCoordinator drives through 2 workers, for several
// inflight_per_worker settings.
//
// Why this way:
//  - The workers are separate processes (this binary re-executed with the
//    hidden flag --serve-worker): a WorkerServer on 127.0.0.1:<ephemeral>
//    whose registry holds one closure, "bench/noop", that does nothing and
//    returns nothing. `tfjob-runtime` itself cannot serve as the worker here
//    because its built-in programs register no no-op closure. Processes are
//    more honest than threads: the coordinator and the workers do not share
//    an allocator or gRPC's thread pools. (--mode threads runs the same
//    workers in this process instead, for comparison.)
//  - Per setting, a fresh coordinator first runs --warmup closures and Joins
//    (connections up, threads started), then the clock starts, --closures
//    closures are scheduled and we wait until all are done. Schedule() is
//    inside the timed region: a program pays for it too. The wait polls
//    Done() every 200 us with a deadline of --seconds; if the deadline
//    passes, the closures completed so far are counted and the coordinator
//    is destroyed (which cancels the rest), so the loop is bounded in time.
//  - Settings alternate within each repetition (1, 4, 16, 1, 4, 16, ...).
//
// Output: one JSON object per line; bench/closures.sh prints the table.
//
// usage: bench_closures [--workers 2] [--closures 20000] [--inflight 1,4,16]
//          [--reps 1] [--seconds 15] [--warmup 500] [--mode processes|threads]
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/child.h"
#include "bench/cli.h"
#include "common/flags.h"
#include "services/coordinator/coordinator.h"
#include "services/worker/worker.h"

namespace tfjob::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kNoop = "bench/noop";

Status RegisterNoop(worker::Registry& r) {
  return r.AddClosure(
      kNoop,
      [](worker::ClosureContext&, const nlohmann::json&,
         const std::vector<Tensor>&) -> StatusOr<worker::ClosureResult> { return worker::ClosureResult{}; });
}

// --serve-worker: one worker until a Shutdown RPC arrives.
int ServeWorker() {
  worker::Registry registry;
  if (Status s = RegisterNoop(registry); !s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  auto server = worker::WorkerServer::Start("127.0.0.1:0", registry, {});
  if (!server.ok()) {
    std::cerr << server.status() << "\n";
    return 1;
  }
  std::cout << "port " << (*server)->port() << std::endl;
  (*server)->Wait();
  return 0;
}

StatusOr<std::vector<int64_t>> ParseList(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 256) {
      return InvalidArgument("flag --" + flag + ": \"" + item + "\" is not in 1..256");
    }
    out.push_back(v);
  }
  if (out.empty()) return InvalidArgument("flag --" + flag + ": empty");
  return out;
}

struct Measurement {
  int64_t completed = 0;
  double seconds = 0;
  bool timed_out = false;
};

StatusOr<Measurement> MeasureOne(const std::vector<std::string>& addresses, int64_t inflight, int64_t closures,
                                 int64_t warmup, double budget_seconds) {
  coordinator::Options opt;
  opt.inflight_per_worker = static_cast<int>(inflight);
  opt.rpc_timeout = std::chrono::milliseconds(10000);
  coordinator::ClusterCoordinator coord(addresses, opt);
  for (int64_t i = 0; i < warmup; ++i) coord.Schedule(kNoop);
  RETURN_IF_ERROR(coord.Join());
  const int64_t before = coord.stats().completed;

  Measurement m;
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration<double>(budget_seconds);
  for (int64_t i = 0; i < closures; ++i) coord.Schedule(kNoop);
  while (!coord.Done()) {
    if (Clock::now() > deadline) {
      m.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  m.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto st = coord.stats();
  m.completed = st.completed - before;
  if (st.failed > 0) return Internal(std::to_string(st.failed) + " no-op closures failed");
  if (!m.timed_out) RETURN_IF_ERROR(coord.Join());
  return m;  // the coordinator's destructor cancels anything left after a timeout
}

Status Run(const Flags& flags) {
  ASSIGN_OR_RETURN(int64_t nworkers, flags.GetInt("workers"));
  ASSIGN_OR_RETURN(int64_t closures, flags.GetInt("closures"));
  ASSIGN_OR_RETURN(int64_t reps, flags.GetInt("reps"));
  ASSIGN_OR_RETURN(int64_t warmup, flags.GetInt("warmup"));
  ASSIGN_OR_RETURN(double seconds, flags.GetDouble("seconds"));
  ASSIGN_OR_RETURN(std::vector<int64_t> inflights, ParseList("inflight", flags.Get("inflight")));
  nworkers = std::clamp<int64_t>(nworkers, 1, 16);
  closures = std::clamp<int64_t>(closures, 1, 1000000);
  reps = std::clamp<int64_t>(reps, 1, 20);
  warmup = std::clamp<int64_t>(warmup, 0, 100000);
  seconds = std::clamp(seconds, 0.1, 50.0);
  const std::string mode = flags.Get("mode");
  if (mode != "processes" && mode != "threads") return InvalidArgument("flag --mode: processes or threads");

  std::vector<std::unique_ptr<Child>> procs;
  worker::Registry registry;  // for --mode threads; outlives the servers below
  RETURN_IF_ERROR(RegisterNoop(registry));
  std::vector<std::unique_ptr<worker::WorkerServer>> threads;
  std::vector<std::string> addresses;
  for (int64_t i = 0; i < nworkers; ++i) {
    if (mode == "processes") {
      ASSIGN_OR_RETURN(auto c, Child::Spawn({SelfExe(), "--serve-worker"}, {}));
      ASSIGN_OR_RETURN(std::string line, c->ReadLine(std::chrono::milliseconds(15000)));
      if (line.rfind("port ", 0) != 0) return Internal("worker printed \"" + line + "\"");
      addresses.push_back("127.0.0.1:" + line.substr(5));
      procs.push_back(std::move(c));
    } else {
      ASSIGN_OR_RETURN(auto s, worker::WorkerServer::Start("127.0.0.1:0", registry, {}));
      addresses.push_back("127.0.0.1:" + std::to_string(s->port()));
      threads.push_back(std::move(s));
    }
  }

  Status result;
  for (int64_t rep = 0; rep < reps && result.ok(); ++rep) {
    for (int64_t k : inflights) {
      auto m = MeasureOne(addresses, k, closures, warmup, seconds);
      if (!m.ok()) {
        result = m.status();
        break;
      }
      nlohmann::json j{{"mode", mode},
                       {"workers", nworkers},
                       {"inflight_per_worker", k},
                       {"rep", rep},
                       {"closures", m->completed},
                       {"seconds", m->seconds},
                       {"timed_out", m->timed_out},
                       {"closures_per_second", m->seconds > 0 ? static_cast<double>(m->completed) / m->seconds : 0.0}};
      std::cout << j.dump() << std::endl;
    }
  }

  if (!procs.empty()) {
    for (const auto& a : addresses) {
      auto stub = proto::Worker::NewStub(grpc::CreateChannel(a, grpc::InsecureChannelCredentials()));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      proto::WorkerShutdownRequest req;
      proto::WorkerShutdownResponse resp;
      (void)stub->Shutdown(&ctx, req, &resp);  // best effort: Reap kills what is left
    }
    for (auto& p : procs) p->Reap(std::chrono::milliseconds(5000));
  }
  return result;
}

}  // namespace
}  // namespace tfjob::bench

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && args[0] == "--serve-worker") return tfjob::bench::ServeWorker();
  signal(SIGPIPE, SIG_IGN);
  tfjob::Flags flags;
  flags.Value("workers", "worker count", "2")
      .Value("closures", "no-op closures per timed run", "20000")
      .Value("inflight", "inflight_per_worker settings, comma-separated", "1,4,16")
      .Value("reps", "repetitions (settings alternate within each)", "1")
      .Value("seconds", "time budget per timed run", "15")
      .Value("warmup", "untimed closures before each timed run", "500")
      .Value("mode", "processes or threads", "processes");
  const std::string usage = "usage: bench_closures [flags] (bench/closures.sh runs it)\n" + flags.Usage();
  if (auto code = tfjob::bench::AnswerHelpOrVersion(args, "bench_closures", usage)) return *code;
  if (tfjob::Status s = flags.Parse(args); !s.ok()) {
    std::cerr << "bench_closures: " << s << "\n" << usage;
    return 2;
  }
  if (tfjob::Status s = tfjob::bench::Run(flags); !s.ok()) {
    std::cerr << "bench_closures: " << s << "\n";
    return 1;
  }
  return 0;
}
