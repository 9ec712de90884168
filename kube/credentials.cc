#include "kube/credentials.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/child_process.h"
#include "common/files.h"
#include "common/mutex.h"
#include "common/time.h"

namespace tfjob::kube {

namespace {

using SysTime = std::chrono::system_clock::time_point;

// client-go re-reads a token file once its cached copy is a minute old.
constexpr std::chrono::seconds kTokenFileMaxAge{60};
// How much of an exec credential's lifetime is left when it is renewed: a
// tenth, at most a minute, so a request never leaves with a credential that
// expires in flight.
constexpr std::chrono::seconds kMaxExecMargin{60};
// More output than any credential needs: a broken plugin cannot exhaust memory.
constexpr size_t kMaxPluginOutput = 1 << 20;

std::string Trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::string FirstLine(const std::string& s) {
  std::string t = Trimmed(s);
  const size_t nl = t.find('\n');
  if (nl != std::string::npos) t = t.substr(0, nl);
  if (t.size() > 300) t = t.substr(0, 300) + "...";
  return t;
}

struct PluginResult {
  int exit_code = 0;  // 128 + signal when killed by one
  std::string out, err;
};

// Runs the plugin with its environment added to ours, stdin from /dev/null,
// and signals unblocked (the operator blocks SIGTERM/SIGINT in every thread,
// and a blocked mask is inherited across exec).
StatusOr<PluginResult> RunPlugin(const ExecConfig& x, const std::string& exec_info, std::chrono::seconds timeout) {
  const std::string what = "exec plugin \"" + x.command + "\" (" + x.where + ")";
  ChildOptions c;
  c.argv = {x.command};
  c.argv.insert(c.argv.end(), x.args.begin(), x.args.end());
  for (const auto& [k, v] : x.env) c.env[k] = v;
  c.env["KUBERNETES_EXEC_INFO"] = exec_info;
  c.output = ChildOptions::Output::kSeparate;
  c.null_stdin = true;
  c.default_signals = true;
  auto spawned = SpawnChild(c);
  if (!spawned.ok()) {
    // The reason alone ("No such file or directory"): `what` names the plugin.
    const std::string why = spawned.status().message();
    std::string m = what + ": cannot run it: " + why.substr(why.rfind(": ") + 2);
    if (!x.install_hint.empty()) m += " (" + FirstLine(x.install_hint) + ")";
    return Status(Code::kUnauthenticated, m);
  }
  const pid_t pid = spawned->pid;
  PluginResult r;
  pollfd fds[2] = {{spawned->out_fd, POLLIN, 0}, {spawned->err_fd, POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    const int n = poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      const ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        if (sinks[i]->size() < kMaxPluginOutput) sinks[i]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  if (timed_out) kill(pid, SIGKILL);
  const int exit_code = WaitForExit(pid);
  if (timed_out) {
    return Status(Code::kUnauthenticated, what + ": no answer within " + std::to_string(timeout.count()) + " s");
  }
  r.exit_code = exit_code;
  return r;
}

std::string ExecInfo(const ClusterConfig& c) {
  nlohmann::json spec{{"interactive", false}};
  if (c.exec->provide_cluster_info) {
    nlohmann::json cluster{{"server", c.server}};
    if (!c.ca_pem.empty()) cluster["certificate-authority-data"] = Base64Encode(c.ca_pem);
    if (c.insecure_skip_tls_verify) cluster["insecure-skip-tls-verify"] = true;
    spec["cluster"] = std::move(cluster);
  }
  return nlohmann::json{{"kind", "ExecCredential"}, {"apiVersion", c.exec->api_version}, {"spec", spec}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

Credentials::Credentials(ClusterConfig config, Options options)
    : config_(std::move(config)), options_(std::move(options)) {
  state_.bearer_token = config_.token;
  if (!config_.client_cert_pem.empty()) {
    state_.client_cert_pem = config_.client_cert_pem;
    state_.client_key_pem = config_.client_key_pem;
    state_.client_cert_origin = config_.client_cert_origin;
    state_.client_key_origin = config_.client_key_origin;
    state_.cert_generation = 1;
  }
}

int64_t Credentials::exec_runs() const {
  MutexLock g(mu_);
  return exec_runs_;
}

void Credentials::Invalidate() {
  MutexLock g(mu_);
  invalid_ = true;
}

Status Credentials::RefreshTokenFile(SysTime now) {
  struct stat st {};
  FileStamp stamp;
  if (stat(config_.token_file.c_str(), &st) == 0) {
    stamp = {st.st_dev, st.st_ino, st.st_size,
             static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  }
  const bool stale = !read_at_ || now - *read_at_ >= kTokenFileMaxAge || now < *read_at_;
  if (!invalid_ && !stale && stamp == stamp_) return Status::Ok();
  auto text = ReadFile(config_.token_file);
  // client-go keeps the last good token when a re-read fails: the kubelet
  // may be between writes.
  if (!text.ok() || Trimmed(*text).empty()) {
    if (!state_.bearer_token.empty()) return Status::Ok();
    return Status(Code::kUnauthenticated, "token file " + config_.token_file + ": " +
                                              (text.ok() ? std::string("empty") : text.status().message()));
  }
  state_.bearer_token = Trimmed(*text);
  stamp_ = stamp;
  read_at_ = now;
  return Status::Ok();
}

Status Credentials::RunExec(SysTime now) {
  const ExecConfig& x = *config_.exec;
  const std::string what = "exec plugin \"" + x.command + "\" (" + x.where + ")";
  ++exec_runs_;
  ASSIGN_OR_RETURN(PluginResult r, RunPlugin(x, ExecInfo(config_), options_.exec_timeout));
  if (r.exit_code != 0) {
    std::string m = what + ": exit code " + std::to_string(r.exit_code);
    if (!FirstLine(r.err).empty()) m += ": " + FirstLine(r.err);
    return Status(Code::kUnauthenticated, m);
  }
  auto doc = nlohmann::json::parse(r.out, nullptr, false);
  if (!doc.is_object()) return InvalidArgument(what + ": output is not a JSON ExecCredential: " + FirstLine(r.out));
  auto top = [&](const char* key) {
    auto it = doc.find(key);
    return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const std::string kind = top("kind"), version = top("apiVersion");
  if (kind != "ExecCredential") return InvalidArgument(what + ": output has kind \"" + kind + "\", not ExecCredential");
  if (version != x.api_version) {
    return InvalidArgument(what + ": configured for " + x.api_version + " but returned apiVersion \"" + version + "\"");
  }
  const auto status = doc.find("status");
  if (status == doc.end() || !status->is_object()) return InvalidArgument(what + ": the ExecCredential has no status");
  auto str = [&](const char* key) {
    auto it = status->find(key);
    return it != status->end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const std::string token = str("token"), cert = str("clientCertificateData"), key = str("clientKeyData"),
                    expiry = str("expirationTimestamp");
  if (cert.empty() != key.empty()) {
    return InvalidArgument(what + ": returned only one of clientCertificateData and clientKeyData");
  }
  if (token.empty() && cert.empty()) {
    return InvalidArgument(what + ": returned neither a token nor a client certificate and key");
  }
  std::optional<SysTime> expires;
  if (!expiry.empty()) {
    expires = ParseRfc3339(expiry);
    if (!expires) return InvalidArgument(what + ": expirationTimestamp \"" + expiry + "\" is not an RFC 3339 time");
  }
  state_.bearer_token = token;
  if (cert != state_.client_cert_pem || key != state_.client_key_pem) {
    state_.client_cert_pem = cert;
    state_.client_key_pem = key;
    state_.client_cert_origin = what + " status.clientCertificateData";
    state_.client_key_origin = what + " status.clientKeyData";
    ++state_.cert_generation;
  }
  have_exec_ = true;
  expires_at_ = expires;
  refresh_at_.reset();
  if (expires) {
    const auto lifetime = *expires - now;
    const auto margin = std::min<std::chrono::system_clock::duration>(kMaxExecMargin, lifetime / 10);
    refresh_at_ = lifetime.count() > 0 ? *expires - margin : now;
  }
  return Status::Ok();
}

StatusOr<AuthState> Credentials::Current() {
  MutexLock g(mu_);
  const SysTime now = options_.clock ? options_.clock() : std::chrono::system_clock::now();
  if (config_.exec) {
    if (!have_exec_ || invalid_ || (refresh_at_ && now >= *refresh_at_)) {
      Status s = RunExec(now);
      // A failed early renewal keeps a credential that is still valid.
      const bool still_valid = have_exec_ && !invalid_ && (!expires_at_ || now < *expires_at_);
      if (!s.ok() && !still_valid) return s;
    }
  } else if (!config_.token_file.empty()) {
    RETURN_IF_ERROR(RefreshTokenFile(now));
  }
  invalid_ = false;
  return state_;
}

}  // namespace tfjob::kube
