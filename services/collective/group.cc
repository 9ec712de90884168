#include "services/collective/group.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <random>

#include "common/time.h"
#include "proto/collective.pb.h"
#include "services/rpc/auth.h"

namespace tfjob::collective {
namespace {

using net::Clock;

// A member has just connected; it sends its hello at once.
constexpr auto kHelloTimeout = std::chrono::milliseconds(2000);
// How often the leader tells waiting members whom it is waiting for.
constexpr auto kWaitingEvery = std::chrono::milliseconds(1000);

uint64_t Fingerprint(const std::vector<Peer>& members) {
  uint64_t h = 1469598103934665603ull;
  for (const Peer& p : members) {
    for (char c : p.name + "=" + p.address + ";") {
      h ^= static_cast<unsigned char>(c);
      h *= 1099511628211ull;
    }
  }
  return h;
}

uint64_t NewIncarnation() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ 1;
}

}  // namespace

StatusOr<std::vector<Peer>> MembersFromCluster(const cluster::ClusterSpec& c) {
  std::vector<Peer> out;
  for (const char* job : {cluster::kChief, cluster::kMaster, cluster::kWorker}) {
    for (int64_t i : c.TaskIndices(job)) {
      ASSIGN_OR_RETURN(std::string address, c.Address(job, i));
      out.push_back({std::string(job) + ":" + std::to_string(i), address});
    }
  }
  if (out.empty())
    return InvalidArgument("TF_CONFIG: the cluster has no \"chief\" or \"worker\" tasks to form a group");
  return out;
}

StatusOr<int> RankOf(const std::vector<Peer>& members, const std::string& type, int64_t index) {
  const std::string name = type + ":" + std::to_string(index);
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].name == name) return static_cast<int>(i);
  }
  return NotFound("task " + name + " is not a member of the collective group");
}

StatusOr<std::unique_ptr<Group>> Group::Create(std::vector<Peer> members, int rank, Options options) {
  if (rank < 0 || rank >= static_cast<int>(members.size())) return InvalidArgument("collective: rank out of range");
  net::Listener listener;
  if (members.size() > 1) {
    ASSIGN_OR_RETURN(net::HostPort hp, net::SplitAddress(members[static_cast<size_t>(rank)].address));
    auto l = net::Listen("", hp.port);
    if (!l.ok()) return l.status().WithContext("collective: " + members[static_cast<size_t>(rank)].name);
    listener = std::move(l).value();
  }
  return Create(std::move(members), rank, options, std::move(listener));
}

StatusOr<std::unique_ptr<Group>> Group::Create(std::vector<Peer> members, int rank, Options options,
                                               net::Listener listener) {
  if (rank < 0 || rank >= static_cast<int>(members.size())) return InvalidArgument("collective: rank out of range");
  for (const Peer& p : members) RETURN_IF_ERROR(net::SplitAddress(p.address).status());
  return std::unique_ptr<Group>(new Group(std::move(members), rank, options, std::move(listener)));
}

Group::Group(std::vector<Peer> members, int rank, Options options, net::Listener listener)
    : members_(std::move(members)),
      rank_(rank),
      options_(options),
      fingerprint_(Fingerprint(members_)),
      incarnation_(NewIncarnation()),
      listener_(std::move(listener)),
      port_(listener_.port) {
  if (listener_.fd.valid()) acceptor_ = std::thread([this] { AcceptLoop(); });
}

Group::~Group() {
  comm_.reset();
  {
    MutexLock l(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (acceptor_.joinable()) acceptor_.join();
}

void Group::AcceptLoop() {
  while (true) {
    {
      MutexLock l(mu_);
      if (stop_) return;
    }
    pollfd p{listener_.fd.get(), POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const int fd = accept4(listener_.fd.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    net::Fd conn(fd);
    if (!net::Configure(conn.get()).ok()) continue;
    HandleConnection(std::move(conn));
  }
}

void Group::HandleConnection(net::Fd fd) {
  if (options_.tls &&
      !net::StartTls(fd, *options_.tls, tls::Role::kServer, Clock::now() + kHelloTimeout, "a connecting member").ok()) {
    return;
  }
  proto::CollectiveHello hello;
  if (!net::RecvMessage(fd, hello, Clock::now() + kHelloTimeout, "a connecting member").ok()) return;
  const bool same_group =
      hello.group_size() == members_.size() && hello.fingerprint() == fingerprint_ && hello.rank() < members_.size();
  // Checked first, and the refusal says nothing else about this group.
  const bool authentic = options_.token.empty() || rpc::TokenMatches(hello.token(), options_.token);
  if (hello.kind() == proto::CollectiveHello::JOIN) {
    std::string refusal;
    Code code = Code::kInvalidArgument;
    if (!authentic) {
      refusal = "collective: " + self().Describe() + " refused the join: missing or wrong task token";
      code = Code::kUnauthenticated;
    } else if (!same_group) {
      refusal = "collective: " + self().Describe() + " leads a group of " + std::to_string(members_.size()) +
                " members with another cluster spec: every member needs the same TF_CONFIG cluster";
    } else if (rank_ != 0) {
      refusal = "collective: " + self().Describe() + " is not the leader (rank 0 is)";
    }
    if (!refusal.empty()) {
      proto::LeaderMessage m;
      m.set_error(refusal);
      m.set_error_code(static_cast<uint32_t>(code));
      (void)net::SendMessage(fd, m, Clock::now() + kHelloTimeout, "");
      return;
    }
    MutexLock l(mu_);
    Join& j = joins_[hello.rank()];
    j = Join{std::move(fd), hello.rank(), hello.generation(), hello.step(), hello.incarnation()};
    cv_.NotifyAll();
    return;
  }
  if (hello.kind() == proto::CollectiveHello::LINK && same_group && authentic) {
    MutexLock l(mu_);
    links_[{hello.generation(), hello.rank()}] = std::move(fd);
    cv_.NotifyAll();
  }
}

std::string Group::Names(const std::vector<int>& ranks) const {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += i + 1 == ranks.size() ? " and " : ", ";
    s += members_[static_cast<size_t>(ranks[i])].Describe();
  }
  return s;
}

StatusOr<Group::Formation> Group::Form(int64_t step) {
  // Closing the old generation tells its neighbours, if they still wait.
  comm_.reset();
  const auto deadline = Clock::now() + options_.rendezvous_timeout;
  if (size() == 1) {
    ++generation_;
    comm_ = std::make_unique<RingCommunicator>(0, members_, generation_, net::Fd(), net::Fd(), options_);
    return Formation{generation_, 0, {step}};
  }
  ASSIGN_OR_RETURN(Formation f, rank_ == 0 ? Lead(step, deadline) : Follow(step, deadline));
  generation_ = f.generation;
  ASSIGN_OR_RETURN(comm_, Connect(f.generation, deadline));
  return f;
}

StatusOr<Group::Formation> Group::Lead(int64_t step, Clock::time_point deadline) {
  MutexLock l(mu_);
  joins_[0] = Join{net::Fd(), 0, generation_, step, incarnation_};
  auto last_waiting = Clock::time_point{};
  size_t told = 0;
  while (true) {
    // A member that hung up after joining died again: wait for its next join.
    for (auto it = joins_.begin(); it != joins_.end();) {
      if (it->second.fd.valid() && net::Readable(it->second.fd)) {
        it = joins_.erase(it);
      } else {
        ++it;
      }
    }
    std::vector<int> missing;
    for (int r = 0; r < size(); ++r) {
      if (!joins_.count(static_cast<uint32_t>(r))) missing.push_back(r);
    }
    if (missing.empty()) break;
    const auto now = Clock::now();
    if (now >= deadline) {
      const std::string why = "collective: " + Names(missing) + (missing.size() == 1 ? " has" : " have") +
                              " not joined the group within " + FormatSeconds(options_.rendezvous_timeout) + " s";
      proto::LeaderMessage m;
      m.set_error(why);
      m.set_error_code(static_cast<uint32_t>(Code::kDeadlineExceeded));
      for (auto& [r, j] : joins_) {
        if (j.fd.valid()) (void)net::SendMessage(j.fd, m, now + kHelloTimeout, "");
      }
      joins_.clear();
      return DeadlineExceeded(why);
    }
    // Tell members whom they wait for at once when someone new joins, then
    // every so often.
    if (now - last_waiting >= kWaitingEvery || joins_.size() != told) {
      told = joins_.size();
      proto::LeaderMessage m;
      m.set_waiting("waiting for " + Names(missing));
      for (auto& [r, j] : joins_) {
        if (j.fd.valid()) (void)net::SendMessage(j.fd, m, now + std::chrono::milliseconds(200), "");
      }
      last_waiting = now;
    }
    cv_.WaitFor(l, std::chrono::milliseconds(50));
  }
  Formation f;
  int64_t newest = 0;
  for (auto& [r, j] : joins_) newest = std::max(newest, j.generation);
  f.generation = newest + 1;
  f.steps.assign(static_cast<size_t>(size()), 0);
  proto::GroupFormed formed;
  formed.set_generation(f.generation);
  for (int r = 0; r < size(); ++r) {
    const Join& j = joins_.at(static_cast<uint32_t>(r));
    f.steps[static_cast<size_t>(r)] = j.step;
    if (j.step > f.steps[static_cast<size_t>(f.source_rank)]) f.source_rank = r;
    formed.add_steps(j.step);
    formed.add_incarnations(j.incarnation);
  }
  formed.set_source_rank(static_cast<uint32_t>(f.source_rank));
  proto::LeaderMessage m;
  *m.mutable_formed() = formed;
  // A member that cannot be told fails its neighbours' links, and the group
  // forms again.
  for (auto& [r, j] : joins_) {
    if (j.fd.valid()) (void)net::SendMessage(j.fd, m, Clock::now() + options_.timeout, members_[r].Describe());
  }
  joins_.clear();
  return f;
}

StatusOr<Group::Formation> Group::Follow(int64_t step, Clock::time_point deadline) {
  const Peer& leader = members_[0];
  proto::CollectiveHello hello;
  hello.set_kind(proto::CollectiveHello::JOIN);
  hello.set_rank(static_cast<uint32_t>(rank_));
  hello.set_group_size(static_cast<uint32_t>(size()));
  hello.set_fingerprint(fingerprint_);
  hello.set_generation(generation_);
  hello.set_step(step);
  hello.set_incarnation(incarnation_);
  hello.set_token(options_.token);
  std::string waiting;
  Status last;
  while (Clock::now() < deadline) {
    auto fd = net::Connect(leader.address, deadline, "the group's leader " + leader.name + " at");
    if (!fd.ok()) {
      last = fd.status();
      break;
    }
    if (options_.tls &&
        !(last = net::StartTls(*fd, *options_.tls, tls::Role::kClient, deadline, leader.Describe())).ok()) {
      continue;
    }
    if (!(last = net::SendMessage(*fd, hello, deadline, leader.Describe())).ok()) continue;
    while (true) {
      proto::LeaderMessage m;
      // The leader gives up at the same deadline and then says why: wait a
      // little longer for that.
      last = net::RecvMessage(*fd, m, deadline + kHelloTimeout, leader.Describe());
      if (!last.ok()) break;  // the leader went away: join again
      if (m.has_formed()) {
        Formation f;
        f.generation = m.formed().generation();
        f.source_rank = static_cast<int>(m.formed().source_rank());
        f.steps.assign(m.formed().steps().begin(), m.formed().steps().end());
        if (f.source_rank < 0 || f.source_rank >= size() || static_cast<int>(f.steps.size()) != size()) {
          return Internal("collective: malformed group formation from " + leader.Describe());
        }
        return f;
      }
      if (m.kind_case() == proto::LeaderMessage::kError) {
        const uint32_t code = m.error_code();
        return Status(code >= 1 && code <= 16 ? static_cast<Code>(code) : Code::kUnknown, m.error());
      }
      waiting = m.waiting();
    }
    if (Clock::now() + std::chrono::milliseconds(100) < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::string why = "collective: no group formed within " + FormatSeconds(options_.rendezvous_timeout) + " s";
  if (!waiting.empty()) {
    why += ": the leader " + leader.Describe() + " was " + waiting;
    return DeadlineExceeded(why);
  }
  if (!last.ok()) why += ": " + last.message();
  return last.code() == Code::kUnavailable ? Unavailable(why) : DeadlineExceeded(why);
}

StatusOr<std::unique_ptr<RingCommunicator>> Group::Connect(int64_t generation, Clock::time_point deadline) {
  const int n = size();
  const Peer& next = members_[static_cast<size_t>((rank_ + 1) % n)];
  const uint32_t prev_rank = static_cast<uint32_t>((rank_ + n - 1) % n);
  // Links of the previous generation are dead.
  {
    MutexLock l(mu_);
    for (auto it = links_.begin(); it != links_.end();) {
      it = it->first.first < generation ? links_.erase(it) : std::next(it);
    }
  }
  // Every member has joined, so its neighbours are up: a link that does not
  // come within the liveness timeout means a member died again.
  deadline = std::min(deadline, Clock::now() + options_.timeout);
  ASSIGN_OR_RETURN(net::Fd to_next, net::Connect(next.address, deadline, "collective: " + next.name + " at"));
  if (options_.tls) {
    RETURN_IF_ERROR(
        net::StartTls(to_next, *options_.tls, tls::Role::kClient, deadline, "collective: " + next.Describe()));
  }
  proto::CollectiveHello hello;
  hello.set_kind(proto::CollectiveHello::LINK);
  hello.set_rank(static_cast<uint32_t>(rank_));
  hello.set_group_size(static_cast<uint32_t>(n));
  hello.set_fingerprint(fingerprint_);
  hello.set_generation(generation);
  hello.set_token(options_.token);
  RETURN_IF_ERROR(net::SendMessage(to_next, hello, deadline, next.Describe()));
  net::Fd from_prev;
  {
    MutexLock l(mu_);
    const auto key = std::make_pair(generation, prev_rank);
    if (!cv_.WaitUntil(l, deadline, [&]() TFJOB_REQUIRES(mu_) { return links_.count(key) > 0; })) {
      return Unavailable("collective: " + members_[prev_rank].Describe() + " did not connect for generation " +
                         std::to_string(generation) + " within " + FormatSeconds(options_.timeout) + " s");
    }
    from_prev = std::move(links_.at(key));
    links_.erase(key);
  }
  return std::make_unique<RingCommunicator>(rank_, members_, generation, std::move(to_next), std::move(from_prev),
                                            options_);
}

}  // namespace tfjob::collective
