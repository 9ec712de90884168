// collective_member: one member of a group in its own process, for the tests
// that kill, stop or restart a member (tests/failure_test.cc). Its state is a
// step count and one float vector; each step every member adds rank+1 to
// every element through an all-reduce, so after S steps of a group of n
// members each element is S * n(n+1)/2 exactly, whatever failed on the way.
//
//   collective_member --rank R --members NAME=ADDR,... --listen-fd FD --steps S
//                     [--timeout-ms T] [--rendezvous-ms T] [--rejoin] [--size N]
//
// The listening socket is inherited (the test listens on port 0 and keeps
// it), so a restarted member gets the same port. Prints "step K" lines,
// "regrouped generation G from rank R at step K" after re-forming, and finally
// "done step S value V generation G", or "error: ..." and exits 1.
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include "services/collective/group.h"

using namespace tfjob;
using namespace tfjob::collective;

namespace {

std::string Arg(int argc, char** argv, const std::string& name, const std::string& def = "") {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == "--" + name) return argv[i + 1];
  }
  return def;
}

bool Has(int argc, char** argv, const std::string& name) {
  for (int i = 1; i < argc; ++i) {
    if (argv[i] == "--" + name) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = std::stoi(Arg(argc, argv, "rank", "0"));
  const int64_t steps = std::stoll(Arg(argc, argv, "steps", "100"));
  const int64_t size = std::stoll(Arg(argc, argv, "size", "1000"));
  const bool rejoin = Has(argc, argv, "rejoin");
  std::vector<Peer> members;
  std::stringstream ss(Arg(argc, argv, "members"));
  for (std::string item; std::getline(ss, item, ',');) {
    const auto eq = item.find('=');
    members.push_back({item.substr(0, eq), item.substr(eq + 1)});
  }
  Options o;
  o.timeout = std::chrono::milliseconds(std::stoll(Arg(argc, argv, "timeout-ms", "2000")));
  o.rendezvous_timeout = std::chrono::milliseconds(std::stoll(Arg(argc, argv, "rendezvous-ms", "20000")));
  o.chunk_bytes = 1024;
  net::Listener listener;
  listener.fd = net::Fd(std::stoi(Arg(argc, argv, "listen-fd")));
  auto group = Group::Create(members, rank, o, std::move(listener));
  if (!group.ok()) {
    std::cout << "error: " << group.status().message() << std::endl;
    return 1;
  }
  Group& g = **group;

  int64_t step = 0;
  Tensor value = Tensor::Zeros(DType::kFloat32, {size});
  auto form = [&]() -> Status {
    ASSIGN_OR_RETURN(Group::Formation f, g.Form(step));
    Tensor s = *Tensor::FromVector({1}, std::vector<int64_t>{step});
    Tensor* state[] = {&s, &value};
    RETURN_IF_ERROR(g.comm()->Broadcast(state, f.source_rank));
    step = s.data<int64_t>()[0];
    std::cout << "regrouped generation " << f.generation << " from rank " << f.source_rank << " at step " << step
              << std::endl;
    return Status::Ok();
  };
  Status s = form();
  while (s.ok() || (rejoin && IsRecoverable(s))) {
    if (!s.ok()) {
      std::cout << "recovering: " << s.message() << std::endl;
      s = form();
      continue;
    }
    if (step == steps) {
      s = g.comm()->Barrier();
      if (s.ok()) break;
      continue;
    }
    Tensor add = Tensor::Zeros(DType::kFloat32, {size});
    for (float& x : add.flat<float>()) x = static_cast<float>(rank + 1);
    s = g.comm()->AllReduce(add, ReduceOp::kSum);
    if (!s.ok()) continue;
    for (int64_t i = 0; i < size; ++i) value.data<float>()[i] += add.data<float>()[i];
    ++step;
    std::cout << "step " << step << std::endl;
    // Paces the steps so that a kill lands between two of them: the test's
    // subject, not a wait.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!s.ok()) {
    std::cout << "error: " << s.message() << " [" << CodeName(s.code()) << "]" << std::endl;
    return 1;
  }
  float lo = value.data<float>()[0], hi = lo;
  for (float x : value.flat<float>()) lo = std::min(lo, x), hi = std::max(hi, x);
  std::cout << "done step " << step << " value " << (lo == hi ? std::to_string(static_cast<int64_t>(lo)) : "uneven")
            << " generation " << g.comm()->generation() << std::endl;
  return 0;
}
