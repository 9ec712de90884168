// Listening sockets: port 0 gets a port the kernel keeps for us, a socket
// passed to a child is found there through TFJOB_LISTEN_FD, and anything
// else behind that variable is refused with a clear error.
#include "services/base/ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tfjob::base {
namespace {

using ::testing::HasSubstr;

EnvFn Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

TEST(ListeningSocket, PortZeroIsTheKernelsPickAndStaysTaken) {
  auto s = ListeningSocket::Listen("127.0.0.1", 0);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_GT(s->port(), 0);
  // Held: nobody else can listen there while we keep it.
  auto again = ListeningSocket::Listen("127.0.0.1", s->port());
  EXPECT_EQ(again.status().code(), Code::kUnavailable);
  EXPECT_THAT(again.status().message(), HasSubstr("127.0.0.1:" + std::to_string(s->port())));
  // A client connects (the kernel queues it until someone accepts), and
  // accepting it on the kept socket works.
  const int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(s->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  const int accepted = accept(s->fd(), nullptr, nullptr);
  EXPECT_GE(accepted, 0);
  close(accepted);
  close(c);
}

TEST(ListeningSocket, EveryInterfaceAndIpv6) {
  auto any = ListeningSocket::Listen("", 0);
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_GT(any->port(), 0);
  auto v6 = ListeningSocket::Listen("::1", 0);
  if (v6.ok()) {
    EXPECT_GT(v6->port(), 0);  // hosts without IPv6 loopback skip this half
  }
  EXPECT_EQ(ListeningSocket::Listen("localhost", 0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ListeningSocket::Listen("127.0.0.1", 70000).status().code(), Code::kInvalidArgument);
}

TEST(InheritedListener, UnsetIsNoneAndGarbageIsInvalid) {
  auto none = InheritedListener(Env({}));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  auto bad = InheritedListener(Env({{kListenFdEnv, "three"}}));
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("TFJOB_LISTEN_FD: \"three\" is not a file descriptor number"));
  // An fd that is open but not a listening socket: a pipe, a bound but
  // unconnected socket.
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  auto pipe_fd = InheritedListener(Env({{kListenFdEnv, std::to_string(p[0])}}));
  EXPECT_EQ(pipe_fd.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(pipe_fd.status().message(), HasSubstr("is not an open socket"));
  close(p[0]);
  close(p[1]);
  const int unlistened = socket(AF_INET, SOCK_STREAM, 0);
  auto not_listening = InheritedListener(Env({{kListenFdEnv, std::to_string(unlistened)}}));
  EXPECT_THAT(not_listening.status().message(), HasSubstr("is not a listening TCP socket"));
  close(unlistened);
  EXPECT_THAT(InheritedListener(Env({{kListenFdEnv, "999"}})).status().message(), HasSubstr("not an open socket"));
}

// The launcher's side and the child's side, across a real fork and exec:
// the child (sh) sees fd 3 open and TFJOB_LISTEN_FD=3, and a listener
// adopted from it has the launcher's port.
TEST(PassListenerToChild, TheChildFindsTheSocketAtFdThree) {
  auto s = ListeningSocket::Listen("127.0.0.1", 0);
  ASSERT_TRUE(s.ok()) << s.status();
  ChildOptions c;
  c.argv = {"/bin/sh", "-c", "test \"$TFJOB_LISTEN_FD\" = 3 && test -e /proc/self/fd/3"};
  c.output = ChildOptions::Output::kInherit;
  PassListenerToChild(s->fd(), c);
  auto child = SpawnChild(c);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(WaitForExit(child->pid), 0);

  // In this process: adopt a duplicate as a child would adopt fd 3.
  const int dup = ::dup(s->fd());
  auto adopted = InheritedListener(Env({{kListenFdEnv, std::to_string(dup)}}));
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  ASSERT_TRUE(adopted->has_value());
  EXPECT_EQ((*adopted)->port(), s->port());
}

}  // namespace
}  // namespace tfjob::base
