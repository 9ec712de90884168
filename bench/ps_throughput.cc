// Measures push+pull throughput through ONE parameter server, in GB/s
// (1 GB = 1e9 bytes), for large float32 tensors, beside the ceiling that the
// same loopback path allows: a plain-TCP request/response of the same size.
//
// Why this way:
//  - The PS is the real deployed binary in its own process: `tfjob-runtime
//    counter` started with a TF_CONFIG that makes it task ps:0, serving on
//    a listening socket this process bound on 127.0.0.1:0 and hands down
//    (TFJOB_LISTEN_FD; services/runtime/roles.cc, ServePs).
//    The client is this process, using the public PsClient API over the
//    PS's data plane: Push(ASSIGN_ADD of the whole tensor, closure id 0 = no
//    dedup) and then PullInto of the same variable into a tensor kept across
//    iterations (as a worker's prefetch buffers are). Each iteration moves
//    the tensor twice over the wire, so GB/s = 2 * bytes * iterations /
//    seconds. Everything a worker pays on its side is included.
//  - The raw-TCP peer is this same binary re-executed with the hidden flag
//    --raw-server: one process that reads an 8-byte length N, reads N bytes
//    and writes N bytes back. The client sends N, then reads N, so the bytes
//    on the wire and the request/response shape match the PS case, with no
//    serialisation, copies or arithmetic. That is the loopback ceiling.
//  - Implementations alternate within each repetition (ours, raw, ours, ...),
//    so machine noise hits both alike. Every timed loop stops at
//    --max-iters iterations or --seconds, whichever comes first, after
//    --warmup untimed iterations. Traffic goes to 127.0.0.1 only.
//
// Output: one JSON object per line per (repetition, implementation, size);
// bench/ps_throughput.sh turns them into a table with the PyTorch RPC peer.
//
// usage: bench_ps_throughput --runtime build/bin/tfjob-runtime
//          [--sizes-mib 4,64] [--reps 3] [--seconds 1.0] [--max-iters 2000]
//          [--warmup 2] [--impls ours,raw] [--tls]
#include <cstdlib>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "services/runtime/config.h"
#include "bench/child.h"
#include "bench/cli.h"
#include "common/pki.h"
#include "common/flags.h"
#include "services/net/net.h"
#include "services/ps/ps_client.h"

namespace tfjob::bench {
namespace {

using Clock = std::chrono::steady_clock;

Status WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Unavailable(Errno("write"));
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

// OUT_OF_RANGE on a clean end of stream before any byte.
Status ReadAll(int fd, char* p, size_t n) {
  const size_t want = n;
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && n == want) return OutOfRange("end of stream");
    if (r <= 0) return Unavailable(Errno("read"));
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

// --raw-server: echo requests on 127.0.0.1:<ephemeral>, one connection at a
// time, until a connection sends length 0 ("stop"); the parent kills it by
// pid if it is still there after that.
int RunRawServer() {
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0) return 1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(lfd, 4) != 0 ||
      getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::cerr << Errno("raw server: bind/listen") << "\n";
    return 1;
  }
  std::cout << "port " << ntohs(addr.sin_port) << std::endl;
  std::vector<char> buf;
  while (true) {
    const int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    while (true) {
      uint64_t n = 0;
      if (!ReadAll(fd, reinterpret_cast<char*>(&n), sizeof n).ok()) break;
      if (n == 0) {
        close(fd);
        close(lfd);
        return 0;
      }
      if (n > (uint64_t{1} << 31)) break;
      if (buf.size() < n) buf.resize(n);
      if (!ReadAll(fd, buf.data(), n).ok()) break;
      if (!WriteAll(fd, buf.data(), n).ok()) break;
    }
    close(fd);
  }
}

struct Measurement {
  int64_t iterations = 0;
  double seconds = 0;
};

struct Limits {
  int warmup = 2;
  int64_t max_iters = 2000;
  double seconds = 1.0;
};

// Runs `one` warmup times, then until max_iters or the time budget.
template <typename Fn>
StatusOr<Measurement> TimeLoop(const Limits& lim, Fn one) {
  for (int i = 0; i < lim.warmup; ++i) RETURN_IF_ERROR(one());
  Measurement m;
  const auto t0 = Clock::now();
  while (m.iterations < lim.max_iters) {
    RETURN_IF_ERROR(one());
    ++m.iterations;
    m.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (m.seconds >= lim.seconds) break;
  }
  return m;
}

class RawClient {
 public:
  static StatusOr<std::unique_ptr<RawClient>> Connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Unavailable(Errno("socket"));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close(fd);
      return Unavailable(Errno("connect 127.0.0.1:" + std::to_string(port)));
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return std::unique_ptr<RawClient>(new RawClient(fd));
  }
  ~RawClient() { close(fd_); }

  Status RoundTrip(std::vector<char>& out, std::vector<char>& in) {
    const uint64_t n = out.size();
    RETURN_IF_ERROR(WriteAll(fd_, reinterpret_cast<const char*>(&n), sizeof n));
    RETURN_IF_ERROR(WriteAll(fd_, out.data(), out.size()));
    in.resize(out.size());
    return ReadAll(fd_, in.data(), in.size());
  }
  Status Stop() {
    const uint64_t zero = 0;
    return WriteAll(fd_, reinterpret_cast<const char*>(&zero), sizeof zero);
  }

 private:
  explicit RawClient(int fd) : fd_(fd) {}
  int fd_;
};

void Print(const std::string& impl, int64_t rep, size_t bytes, const Measurement& m) {
  const double gbps =
      m.seconds > 0 ? 2.0 * static_cast<double>(bytes) * static_cast<double>(m.iterations) / m.seconds / 1e9 : 0;
  nlohmann::json j{{"impl", impl},         {"rep", rep},  {"bytes", bytes}, {"iterations", m.iterations},
                   {"seconds", m.seconds}, {"gbps", gbps}};
  std::cout << j.dump() << std::endl;
}

StatusOr<std::vector<int64_t>> ParseSizes(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 512) {
      return InvalidArgument("flag --sizes-mib: \"" + item + "\" is not a size in 1..512");
    }
    out.push_back(v);
  }
  if (out.empty()) return InvalidArgument("flag --sizes-mib: no sizes");
  return out;
}

Status Run(const Flags& flags) {
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes, ParseSizes(flags.Get("sizes-mib")));
  Limits lim;
  ASSIGN_OR_RETURN(int64_t reps, flags.GetInt("reps"));
  ASSIGN_OR_RETURN(lim.max_iters, flags.GetInt("max-iters"));
  ASSIGN_OR_RETURN(lim.seconds, flags.GetDouble("seconds"));
  ASSIGN_OR_RETURN(int64_t warmup, flags.GetInt("warmup"));
  lim.warmup = static_cast<int>(std::clamp<int64_t>(warmup, 0, 100));
  reps = std::clamp<int64_t>(reps, 1, 20);
  lim.max_iters = std::clamp<int64_t>(lim.max_iters, 1, 1000000);
  lim.seconds = std::clamp(lim.seconds, 0.01, 20.0);
  const std::string impls = flags.Get("impls");
  const bool want_ours = impls.find("ours") != std::string::npos;
  const bool want_raw = impls.find("raw") != std::string::npos;

  // Our PS: the runtime binary as task ps:0.
  std::unique_ptr<Child> ps_proc;
  std::unique_ptr<ps::PsClient> ps;
  std::unique_ptr<pki::TempTlsDir> tls;
  ps::ClientOptions client_options;
  if (flags.GetBool("tls")) {
    ASSIGN_OR_RETURN(tls, pki::TempTlsDir::Make("bench"));
    ASSIGN_OR_RETURN(client_options.credentials.tls, tls::Config::FromDir(tls->path()));
  }
  const std::string ours_name = tls ? "tfjob-ps-tls" : "tfjob-ps";
  if (want_ours) {
    // The PS serves on a socket bound here and inherited (TFJOB_LISTEN_FD),
    // so no port is picked, released and raced for.
    ASSIGN_OR_RETURN(net::Listener listener, net::Listen("127.0.0.1", 0));
    const std::string address = "127.0.0.1:" + std::to_string(listener.port);
    const nlohmann::json tf_config{{"cluster", {{"ps", {address}}}}, {"task", {{"type", "ps"}, {"index", 0}}}};
    fcntl(listener.fd.get(), F_SETFD, 0);
    std::vector<std::string> env = {"TF_CONFIG=" + tf_config.dump(),
                                    "TFJOB_LISTEN_FD=" + std::to_string(listener.fd.get())};
    if (tls) env.push_back(std::string(pki::kTlsDirEnv) + "=" + tls->path());
    auto spawned = Child::Spawn({flags.Get("runtime"), "counter"}, env);
    listener.fd.Reset();  // the PS has its own copy
    ASSIGN_OR_RETURN(ps_proc, std::move(spawned));
    // Its first lines say how it serves (TLS, metrics), then where.
    while (true) {
      ASSIGN_OR_RETURN(std::string line, ps_proc->ReadLine(std::chrono::milliseconds(15000)));
      if (line.find("serving on") != std::string::npos) break;
      if (line.find("mutual TLS") == std::string::npos) return Internal("ps process printed \"" + line + "\"");
    }
    ps = std::make_unique<ps::PsClient>(address, client_options);
  }
  // The raw-TCP echo server: this binary, re-executed.
  std::unique_ptr<Child> raw_proc;
  std::unique_ptr<RawClient> raw;
  if (want_raw) {
    ASSIGN_OR_RETURN(raw_proc, Child::Spawn({SelfExe(), "--raw-server"}, {}));
    ASSIGN_OR_RETURN(std::string line, raw_proc->ReadLine(std::chrono::milliseconds(15000)));
    if (line.rfind("port ", 0) != 0) return Internal("raw server printed \"" + line + "\"");
    ASSIGN_OR_RETURN(raw, RawClient::Connect(std::stoi(line.substr(5))));
  }

  std::vector<Tensor> deltas;
  for (int64_t mib : sizes) {
    const int64_t elems = mib * (1 << 20) / 4;
    Tensor d = Tensor::Zeros(DType::kFloat32, {elems});
    for (float& x : d.flat<float>()) x = 1.0f;
    if (ps)
      RETURN_IF_ERROR(
          ps->CreateVariable("bench/v" + std::to_string(mib), Tensor::Zeros(DType::kFloat32, {elems}), std::nullopt)
              .status());
    deltas.push_back(std::move(d));
  }

  Status result;
  for (int64_t rep = 0; rep < reps && result.ok(); ++rep) {
    for (size_t i = 0; i < sizes.size() && result.ok(); ++i) {
      const Tensor& d = deltas[i];
      const std::string name = "bench/v" + std::to_string(sizes[i]);
      if (ps) {
        const std::vector<ps::Update> updates{{name, ps::Update::Kind::kAssignAdd, d, std::nullopt}};
        // Pulled into one tensor kept across iterations, as a worker does.
        const std::vector<std::string> names{name};
        std::vector<Tensor> got{Tensor::Zeros(DType::kFloat32, d.shape())};
        auto m = TimeLoop(lim, [&]() -> Status {
          RETURN_IF_ERROR(ps->Push(0, 0, updates).status());
          return ps->PullInto(names, got);
        });
        if (!m.ok()) {
          result = m.status();
          break;
        }
        Print(ours_name, rep, d.bytes(), *m);
      }
      if (raw) {
        std::vector<char> out(d.bytes()), in;
        std::memcpy(out.data(), d.raw(), d.bytes());
        auto m = TimeLoop(lim, [&]() { return raw->RoundTrip(out, in); });
        if (!m.ok()) {
          result = m.status();
          break;
        }
        Print("raw-tcp", rep, d.bytes(), *m);
      }
    }
  }

  if (ps) {
    if (result.ok()) {
      // Sanity: every push added 1.0 to every element of the variable.
      auto v = ps->Pull({"bench/v" + std::to_string(sizes[0])});
      if (!v.ok())
        result = v.status();
      else if ((*v)[0].data<float>()[0] < 1.0f)
        result = Internal("the PS did not apply the pushes");
    }
    (void)ps->Shutdown();
    ps_proc->Reap(std::chrono::milliseconds(5000));
  }
  if (raw) {
    (void)raw->Stop();
    raw.reset();
    raw_proc->Reap(std::chrono::milliseconds(3000));
  }
  return result;
}

}  // namespace
}  // namespace tfjob::bench

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
  if (args.size() == 1 && args[0] == "--raw-server") return tfjob::bench::RunRawServer();
  signal(SIGPIPE, SIG_IGN);
  tfjob::Flags flags;
  flags.Value("runtime", "path of the tfjob-runtime binary (runs the PS)", "build/bin/tfjob-runtime")
      .Value("sizes-mib", "tensor sizes in MiB, comma-separated", "4,64")
      .Value("reps", "repetitions (implementations alternate within each)", "3")
      .Value("seconds", "time budget per timed loop", "1.0")
      .Value("max-iters", "iteration cap per timed loop", "2000")
      .Value("warmup", "untimed iterations before each timed loop", "2")
      .Value("impls", "which of ours,raw to run", "ours,raw")
      .Bool("tls", "ours: mutual TLS between client and PS, with a CA and certificate made for the run");
  const std::string usage =
      "usage: bench_ps_throughput [flags] (bench/ps_throughput.sh runs it beside its peer)\n" + flags.Usage();
  if (auto code = tfjob::bench::AnswerHelpOrVersion(args, "bench_ps_throughput", usage)) return *code;
  if (tfjob::Status s = flags.Parse(args); !s.ok()) {
    std::cerr << "bench_ps_throughput: " << s << "\n" << usage;
    return 2;
  }
  if (tfjob::Status s = tfjob::bench::Run(flags); !s.ok()) {
    std::cerr << "bench_ps_throughput: " << s << "\n";
    return 1;
  }
  return 0;
}
