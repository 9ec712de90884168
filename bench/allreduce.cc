// All-reduce bus bandwidth of our RING (services/collective) between N
// member processes on this machine, over 127.0.0.1, for float32 buffers of
// several sizes. bench/allreduce.sh runs it beside PyTorch gloo
// (torch_allreduce.py) and OpenMPI (mpi_allreduce.c), which measure the same
// way and print the same JSON lines.
//
// How:
//  - The parent listens on 127.0.0.1 port 0 once per member and keeps those
//    sockets; each member is this binary re-executed with --member and
//    inherits only its own listening socket (FD_CLOEXEC cleared around the
//    fork), so the members' addresses are ports the parent holds. The group
//    is formed by Group::Form as in training.
//  - Each member, per size: one all-reduce of known values (member r
//    contributes (i % 1024) + r at element i, so every sum is an exact
//    integer in float32), checked element by element on every member; then
//    one more, timed, to pick the iteration count K so the size runs for
//    about --seconds (at least 3; every member gets the same K from an
//    all-gather of those times); then the buffer is zeroed, Barrier(), K
//    timed all-reduces of kSum in place, and the slowest member's elapsed
//    time (an all-gather of everyone's) is the time of the K operations.
//  - Rank 0 prints one JSON line per (n, size):
//      {"impl":"tfjob-ring","n":N,"bytes":B,"iters":K,"seconds_per_op":t,
//       "algbw_gbps":B/t/1e9,"busbw_gbps":algbw*2*(N-1)/N}
//    (busbw as nccl-tests define it; 1 GB = 1e9 bytes). A wrong sum is
//    printed as "error: ..." and the run exits 1.
//
// usage: bench_allreduce [--procs 2,4] [--sizes-mib 1,4,16,64] [--seconds 1.0]
//          [--max-iters 100000] [--chunk-kib K] [--bucket-mib M] [--tls]
//        (--chunk-kib / --bucket-mib override Options::chunk_bytes and
//         bucket_bytes; by default the library's defaults are used. --tls:
//         every link is mutual TLS with a CA and certificate made for the
//         run, and the lines say "tfjob-ring-tls")
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/child.h"
#include "bench/cli.h"
#include "common/pki.h"
#include "common/flags.h"
#include "services/collective/group.h"
#include "services/net/net.h"

namespace tfjob::bench {
namespace {

using Clock = std::chrono::steady_clock;
using collective::Group;
using collective::Options;
using collective::Peer;
using collective::ReduceOp;
namespace net = net;

StatusOr<std::vector<int64_t>> ParseList(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    try {
      size_t used = 0;
      const int64_t v = std::stoll(item, &used);
      if (used != item.size() || v <= 0) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      return InvalidArgument(what + ": \"" + item + "\" is not a positive integer");
    }
  }
  if (out.empty()) return InvalidArgument(what + " is empty");
  return out;
}

double Elapsed(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The largest of every member's `seconds`: an all-gather, so all members get
// the same answer.
StatusOr<double> Slowest(collective::Communicator& comm, double seconds) {
  ASSIGN_OR_RETURN(Tensor all, comm.AllGather(Tensor::Scalar(static_cast<float>(seconds))));
  float worst = 0;
  for (float v : all.flat<float>()) worst = std::max(worst, v);
  return static_cast<double>(worst);
}

// One member: forms the group, then measures every size.
Status RunMember(const Flags& f) {
  ASSIGN_OR_RETURN(int64_t rank, f.GetInt("rank"));
  ASSIGN_OR_RETURN(int64_t fd, f.GetInt("listen-fd"));
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes, ParseList(f.Get("sizes-mib"), "--sizes-mib"));
  ASSIGN_OR_RETURN(double seconds, f.GetDouble("seconds"));
  ASSIGN_OR_RETURN(int64_t max_iters, f.GetInt("max-iters"));
  std::vector<Peer> members;
  std::stringstream ss(f.Get("members"));
  for (std::string item; std::getline(ss, item, ',');) {
    const auto eq = item.find('=');
    members.push_back({item.substr(0, eq), item.substr(eq + 1)});
  }
  const int n = static_cast<int>(members.size());
  Options o;
  o.rendezvous_timeout = std::chrono::milliseconds(60000);
  if (f.Has("chunk-kib")) {
    ASSIGN_OR_RETURN(int64_t kib, f.GetInt("chunk-kib"));
    o.chunk_bytes = static_cast<size_t>(kib) << 10;
  }
  if (f.Has("bucket-mib")) {
    ASSIGN_OR_RETURN(int64_t mib, f.GetInt("bucket-mib"));
    o.bucket_bytes = static_cast<size_t>(mib) << 20;
  }
  if (f.Has("tls-dir")) {
    ASSIGN_OR_RETURN(o.tls, tls::Config::FromDir(f.Get("tls-dir")));
  }
  const char* impl = o.tls ? "tfjob-ring-tls" : "tfjob-ring";
  net::Listener listener;
  listener.fd = net::Fd(static_cast<int>(fd));
  ASSIGN_OR_RETURN(std::unique_ptr<Group> group,
                   Group::Create(members, static_cast<int>(rank), o, std::move(listener)));
  RETURN_IF_ERROR(group->Form(0).status());
  collective::Communicator& comm = *group->comm();

  // Warm-up: connections, page faults of the library's staging buffers.
  {
    Tensor w = Tensor::Zeros(DType::kFloat32, {int64_t{1} << 20});
    for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(comm.AllReduce(w, ReduceOp::kSum));
  }

  for (int64_t mib : sizes) {
    const int64_t count = mib * (int64_t{1} << 20) / static_cast<int64_t>(sizeof(float));
    const size_t bytes = static_cast<size_t>(count) * sizeof(float);
    Tensor t = Tensor::Zeros(DType::kFloat32, {count});
    float* d = t.data<float>();

    // Check once: exact integer sums, identical on every member.
    for (int64_t i = 0; i < count; ++i) d[i] = static_cast<float>((i % 1024) + rank);
    RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kSum));
    const int64_t ranks_sum = int64_t{n} * (n - 1) / 2;
    for (int64_t i = 0; i < count; ++i) {
      const float want = static_cast<float>(int64_t{n} * (i % 1024) + ranks_sum);
      if (d[i] != want) {
        return DataLoss("wrong all-reduce result on rank " + std::to_string(rank) + " at element " + std::to_string(i) +
                        " of " + std::to_string(count) + ": got " + std::to_string(d[i]) + ", want " +
                        std::to_string(want));
      }
    }

    // Pick K from one timed operation (the slowest member's).
    std::fill(d, d + count, 0.0f);
    RETURN_IF_ERROR(comm.Barrier());
    auto t0 = Clock::now();
    RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kSum));
    ASSIGN_OR_RETURN(double one, Slowest(comm, Elapsed(t0)));
    const int64_t iters = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(seconds / std::max(one, 1e-6))), 3,
                                              std::max<int64_t>(3, max_iters));

    RETURN_IF_ERROR(comm.Barrier());
    t0 = Clock::now();
    for (int64_t k = 0; k < iters; ++k) RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kSum));
    ASSIGN_OR_RETURN(double total, Slowest(comm, Elapsed(t0)));

    if (rank == 0) {
      const double per_op = total / static_cast<double>(iters);
      const double algbw = static_cast<double>(bytes) / per_op / 1e9;
      const double busbw = algbw * 2.0 * (n - 1) / n;
      char line[512];
      std::snprintf(line, sizeof line,
                    "{\"impl\":\"%s\",\"n\":%d,\"bytes\":%zu,\"iters\":%lld,\"seconds_per_op\":%.9g,"
                    "\"algbw_gbps\":%.6g,\"busbw_gbps\":%.6g}",
                    impl, n, bytes, static_cast<long long>(iters), per_op, algbw, busbw);
      std::cout << line << std::endl;
    }
  }
  RETURN_IF_ERROR(comm.Barrier());
  std::cout << "done" << std::endl;
  return Status::Ok();
}

// Runs one group of n members and relays rank 0's lines.
Status RunGroup(int n, const Flags& f, const std::string& tls_dir) {
  std::vector<net::Listener> listeners;
  std::string list;
  for (int r = 0; r < n; ++r) {
    ASSIGN_OR_RETURN(net::Listener l, net::Listen("127.0.0.1", 0));
    if (r > 0) list += ",";
    list += "worker:" + std::to_string(r) + "=127.0.0.1:" + std::to_string(l.port);
    listeners.push_back(std::move(l));
  }
  const std::string exe = SelfExe();
  std::vector<std::unique_ptr<Child>> children;
  for (int r = 0; r < n; ++r) {
    const int fd = listeners[static_cast<size_t>(r)].fd.get();
    std::vector<std::string> argv = {
        exe,         "--member",       "--rank",           std::to_string(r), "--members",
        list,        "--listen-fd",    std::to_string(fd), "--sizes-mib",     f.Get("sizes-mib"),
        "--seconds", f.Get("seconds"), "--max-iters",      f.Get("max-iters")};
    for (const std::string opt : {"chunk-kib", "bucket-mib"}) {
      if (f.Has(opt)) {
        argv.push_back("--" + opt);
        argv.push_back(f.Get(opt));
      }
    }
    if (!tls_dir.empty()) {
      argv.push_back("--tls-dir");
      argv.push_back(tls_dir);
    }
    // Only this member inherits its own listening socket.
    fcntl(fd, F_SETFD, 0);
    auto c = Child::Spawn(argv, {});
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    if (!c.ok()) return c.status();
    children.push_back(std::move(c).value());
  }
  // Every member prints "done" last, or "error: ..." and exits 1.
  const auto patience = std::chrono::milliseconds(600000);
  for (int r = 0; r < n; ++r) {
    while (true) {
      auto line = children[static_cast<size_t>(r)]->ReadLine(patience);
      if (!line.ok()) {
        return Internal("member " + std::to_string(r) + " of " + std::to_string(n) +
                        " ended without finishing: " + line.status().message());
      }
      if (*line == "done") break;
      if (line->rfind("error:", 0) == 0)
        return Internal("member " + std::to_string(r) + " of " + std::to_string(n) + ": " + *line);
      if (r == 0) std::cout << *line << std::endl;
    }
  }
  return Status::Ok();
}

int Main(int argc, char** argv) {
  Flags f;
  f.Bool("member", "internal: run as one member of the group")
      .Value("rank", "internal: this member's rank", "0")
      .Value("members", "internal: NAME=ADDR,... of every member")
      .Value("listen-fd", "internal: the inherited listening socket", "-1")
      .Value("procs", "group sizes to measure", "2,4")
      .Value("sizes-mib", "buffer sizes in MiB of float32", "1,4,16,64")
      .Value("seconds", "about how long each size runs", "1.0")
      .Value("max-iters", "at most this many timed operations per size", "100000")
      .Value("chunk-kib", "Options::chunk_bytes in KiB (default: the library's)")
      .Value("bucket-mib", "Options::bucket_bytes in MiB (default: the library's)")
      .Bool("tls", "mutual TLS on every link, with a CA and certificate made for the run")
      .Value("tls-dir", "internal: the run's TLS material");
  const std::vector<std::string> args(argv + 1, argv + argc);
  const std::string usage =
      "usage: bench_allreduce [flags] (bench/allreduce.sh runs it beside its peers)\n" + f.Usage();
  if (auto code = AnswerHelpOrVersion(args, "bench_allreduce", usage)) return *code;
  if (Status s = f.Parse(args); !s.ok()) {
    std::cerr << s.message() << "\n" << usage;
    return 2;
  }
  if (f.GetBool("member")) {
    Status s = RunMember(f);
    if (!s.ok()) {
      std::cout << "error: " << s.message() << std::endl;
      std::cerr << "bench_allreduce member " << f.Get("rank") << ": " << s.message() << std::endl;
      return 1;
    }
    return 0;
  }
  auto procs = ParseList(f.Get("procs"), "--procs");
  Status s = procs.status();
  if (s.ok()) {
    for (int64_t n : *procs) {
      if (n < 2) {
        s = InvalidArgument("--procs: a group needs at least 2 members");
        break;
      }
    }
  }
  if (s.ok()) s = ParseList(f.Get("sizes-mib"), "--sizes-mib").status();
  if (!s.ok()) {
    std::cerr << s.message() << "\n" << f.Usage();
    return 2;
  }
  std::unique_ptr<pki::TempTlsDir> tls;
  if (f.GetBool("tls")) {
    auto made = pki::TempTlsDir::Make("bench");
    if (!made.ok()) {
      std::cerr << "bench_allreduce: " << made.status().message() << std::endl;
      return 1;
    }
    tls = std::move(made).value();
  }
  for (int64_t n : *procs) {
    if (Status g = RunGroup(static_cast<int>(n), f, tls ? tls->path() : ""); !g.ok()) {
      std::cerr << "bench_allreduce: " << g.message() << std::endl;
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace tfjob::bench

int main(int argc, char** argv) { return tfjob::bench::Main(argc, argv); }
