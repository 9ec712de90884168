#include "services/base/exposition.h"
#include "common/mutex.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <prometheus/text_serializer.h>

namespace tfjob::base {

std::string Serialize(const prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

prometheus::Histogram::BucketBoundaries ExponentialBuckets(double start, double factor, int count) {
  prometheus::Histogram::BucketBoundaries b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

HttpHandler MetricsHandler(const prometheus::Registry& registry, std::function<void()> before_scrape) {
  return [&registry, before = std::move(before_scrape)] {
    if (before) before();
    return HttpResponse{200, Serialize(registry), kExpositionContentType};
  };
}

ProcessMetrics::ProcessMetrics(prometheus::Registry& r)
    : cpu_(prometheus::BuildCounter()
               .Name("process_cpu_seconds_total")
               .Help("Total user and system CPU time spent in seconds.")
               .Register(r)
               .Add({})),
      resident_(prometheus::BuildGauge()
                    .Name("process_resident_memory_bytes")
                    .Help("Resident memory size in bytes.")
                    .Register(r)
                    .Add({})),
      virtual_(prometheus::BuildGauge()
                   .Name("process_virtual_memory_bytes")
                   .Help("Virtual memory size in bytes.")
                   .Register(r)
                   .Add({})),
      open_fds_(prometheus::BuildGauge()
                    .Name("process_open_fds")
                    .Help("Number of open file descriptors.")
                    .Register(r)
                    .Add({})),
      max_fds_(prometheus::BuildGauge()
                   .Name("process_max_fds")
                   .Help("Maximum number of open file descriptors.")
                   .Register(r)
                   .Add({})),
      start_time_(prometheus::BuildGauge()
                      .Name("process_start_time_seconds")
                      .Help("Start time of the process since unix epoch in seconds.")
                      .Register(r)
                      .Add({})) {
  Refresh();
}

void ProcessMetrics::Refresh() {
  MutexLock g(mu_);
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  std::ifstream stat("/proc/self/stat");
  std::string line;
  if (std::getline(stat, line)) {
    // Fields after "(comm)": state is field 3; utime 14, stime 15, starttime
    // 22, vsize 23, rss 24 (proc(5)).
    const size_t close = line.rfind(')');
    std::istringstream rest(close == std::string::npos ? "" : line.substr(close + 2));
    std::vector<std::string> f{"", "", ""};  // fields 1..2 (pid, comm) and a pad, so f[n] is field n
    for (std::string v; rest >> v;) f.push_back(v);
    auto field = [&](size_t n) { return n < f.size() ? std::strtod(f[n].c_str(), nullptr) : 0.0; };
    const double cpu = (field(14) + field(15)) / tick;
    if (cpu > cpu_seen_) {
      cpu_.Increment(cpu - cpu_seen_);
      cpu_seen_ = cpu;
    }
    virtual_.Set(field(23));
    resident_.Set(field(24) * page);
    std::ifstream uptime_stat("/proc/stat");
    for (std::string l; std::getline(uptime_stat, l);) {
      if (l.rfind("btime ", 0) == 0) start_time_.Set(std::strtod(l.c_str() + 6, nullptr) + field(22) / tick);
    }
  }
  std::error_code ec;
  double fds = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++fds;
  }
  open_fds_.Set(fds);
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) max_fds_.Set(static_cast<double>(limit.rlim_cur));
}

}  // namespace tfjob::base
