#include "services/tls/tls.h"

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace tfjob::tls {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<const Config> NewConfig(const std::string& job, pki::JobPki* out = nullptr) {
  auto p = pki::NewJobPki(job);
  EXPECT_TRUE(p.ok()) << p.status();
  if (out) *out = *p;
  auto c = Config::FromPem(*p);
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

struct Pair {
  int a = -1, b = -1;
  Pair() {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    a = fds[0];
    b = fds[1];
  }
  ~Pair() {
    close(a);
    close(b);
  }
};

struct Both {
  StatusOr<std::unique_ptr<Session>> client = Internal("not run");
  StatusOr<std::unique_ptr<Session>> server = Internal("not run");
};

Both Handshake(const Config& client, const Config& server, const Pair& p) {
  const auto deadline = Clock::now() + 10s;
  auto s = std::async(std::launch::async,
                      [&] { return Session::Handshake(server, p.b, Role::kServer, deadline, "client"); });
  Both out;
  out.client = Session::Handshake(client, p.a, Role::kClient, deadline, "server");
  out.server = s.get();
  return out;
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

// Sends `data` one way while reading it on the other end, both non-blocking
// in one thread as the ring does: every byte arrives, in order.
std::vector<char> Pump(Session& from, int from_fd, Session& to, int to_fd, const std::vector<char>& data) {
  std::vector<char> got(data.size());
  size_t sent = 0, recvd = 0;
  const auto deadline = Clock::now() + 30s;
  while (recvd < data.size() && Clock::now() < deadline) {
    if (sent < data.size()) {
      const ssize_t w = from.Write(data.data() + sent, data.size() - sent);
      if (w > 0)
        sent += static_cast<size_t>(w);
      else
        EXPECT_TRUE(errno == EAGAIN) << std::strerror(errno);
    } else if (from.Unsent()) {
      (void)from.Flush();
    }
    while (recvd < got.size()) {
      const ssize_t r = to.Read(got.data() + recvd, got.size() - recvd);
      if (r <= 0) {
        EXPECT_NE(r, 0) << "end of stream after " << recvd << " bytes";
        if (r == 0) return got;
        break;
      }
      recvd += static_cast<size_t>(r);
    }
    if (!to.Buffered()) {
      pollfd p[2] = {{to_fd, POLLIN, 0}, {from_fd, static_cast<short>(from.Unsent() ? POLLOUT : 0), 0}};
      poll(p, 2, 10);
    }
  }
  return got;
}

TEST(TlsTest, TasksOfOneJobTalkBothWaysOverNonBlockingSockets) {
  auto config = NewConfig("job");
  Pair p;
  Both b = Handshake(*config, *config, p);
  ASSERT_TRUE(b.client.ok()) << b.client.status();
  ASSERT_TRUE(b.server.ok()) << b.server.status();
  SetNonBlocking(p.a);
  SetNonBlocking(p.b);
  // Larger than a socket buffer, a write chunk and the unsent limit.
  std::vector<char> data(5 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
  EXPECT_EQ(Pump(**b.client, p.a, **b.server, p.b, data), data);
  std::reverse(data.begin(), data.end());
  EXPECT_EQ(Pump(**b.server, p.b, **b.client, p.a, data), data);
  EXPECT_FALSE((*b.client)->Unsent());
}

TEST(TlsTest, WritevGathersPiecesInOrder) {
  auto config = NewConfig("job");
  Pair p;
  Both b = Handshake(*config, *config, p);
  ASSERT_TRUE(b.client.ok() && b.server.ok());
  // Blocking sockets, as the PS data plane uses.
  char h1[24], h2[3];
  std::vector<char> big(100000);
  for (size_t i = 0; i < sizeof h1; ++i) h1[i] = static_cast<char>(i);
  for (size_t i = 0; i < sizeof h2; ++i) h2[i] = static_cast<char>(100 + i);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i % 251);
  iovec iov[4] = {{h1, sizeof h1}, {nullptr, 0}, {h2, sizeof h2}, {big.data(), big.size()}};
  std::vector<char> want(h1, h1 + sizeof h1);
  want.insert(want.end(), h2, h2 + sizeof h2);
  want.insert(want.end(), big.begin(), big.end());
  auto reader = std::async(std::launch::async, [&] {
    std::vector<char> got(want.size());
    size_t n = 0;
    while (n < got.size()) {
      const ssize_t r = (*b.server)->Read(got.data() + n, got.size() - n);
      if (r <= 0) break;
      n += static_cast<size_t>(r);
    }
    got.resize(n);
    return got;
  });
  size_t total = 0;
  int first = 0;
  while (first < 4) {
    const ssize_t w = (*b.client)->Writev(iov + first, 4 - first);
    ASSERT_GT(w, 0);
    total += static_cast<size_t>(w);
    size_t left = static_cast<size_t>(w);
    while (first < 4 && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (first < 4) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  EXPECT_EQ(total, want.size());
  EXPECT_EQ((*b.client)->Flush(), 0);
  EXPECT_EQ(reader.get(), want);
}

TEST(TlsTest, AClientWithAnotherJobsCertificateIsRefused) {
  auto mine = NewConfig("job"), theirs = NewConfig("job");
  Pair p;
  Both b = Handshake(*theirs, *mine, p);
  ASSERT_FALSE(b.server.ok());
  EXPECT_EQ(b.server.status().code(), Code::kUnauthenticated) << b.server.status();
  EXPECT_NE(b.server.status().message().find("client"), std::string::npos) << b.server.status();
  // TLS 1.3 tells the client after its own handshake: its first read fails.
  if (b.client.ok()) {
    char c;
    EXPECT_LE((*b.client)->Read(&c, 1), 0);
  } else {
    EXPECT_EQ(b.client.status().code(), Code::kUnauthenticated) << b.client.status();
  }
}

TEST(TlsTest, AServerWithAnotherJobsCertificateIsRefused) {
  auto mine = NewConfig("job"), theirs = NewConfig("job");
  Pair p;
  Both b = Handshake(*mine, *theirs, p);
  ASSERT_FALSE(b.client.ok());
  EXPECT_EQ(b.client.status().code(), Code::kUnauthenticated) << b.client.status();
  EXPECT_NE(b.client.status().message().find("server has no certificate from this job's CA"), std::string::npos)
      << b.client.status();
  EXPECT_FALSE(b.server.ok());
}

TEST(TlsTest, PlainBytesAndSilenceAreErrorsNotHangs) {
  auto config = NewConfig("job");
  {
    Pair p;
    const char junk[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n and more bytes that are not TLS at all";
    ASSERT_EQ(write(p.a, junk, sizeof junk), static_cast<ssize_t>(sizeof junk));
    auto s = Session::Handshake(*config, p.b, Role::kServer, Clock::now() + 5s, "plain client");
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), Code::kUnavailable) << s.status();
    EXPECT_NE(s.status().message().find("plain client"), std::string::npos) << s.status();
  }
  {
    Pair p;
    auto s = Session::Handshake(*config, p.a, Role::kClient, Clock::now() + 200ms, "silent server");
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), Code::kDeadlineExceeded) << s.status();
  }
  {
    Pair p;
    close(p.a);
    p.a = -1;
    auto s = Session::Handshake(*config, p.b, Role::kServer, Clock::now() + 5s, "gone");
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), Code::kUnavailable) << s.status();
  }
}

TEST(TlsTest, ConfigFromADirectoryNamesWhatIsWrong) {
  char tmpl[] = "/tmp/tls_test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  pki::JobPki a, b;
  NewConfig("a", &a);
  NewConfig("b", &b);
  ASSERT_TRUE(pki::WriteTlsDir(dir, a).ok());
  auto ok = Config::FromDir(dir);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->pem().cert_pem, a.cert_pem);

  auto env = [&](const std::string& name) -> std::optional<std::string> {
    if (name == pki::kTlsDirEnv) return dir;
    return std::nullopt;
  };
  auto from_env = Config::FromEnv(env);
  ASSERT_TRUE(from_env.ok());
  EXPECT_NE(*from_env, nullptr);
  auto none = Config::FromEnv([](const std::string&) { return std::nullopt; });
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);

  // Another job's key with this certificate.
  { std::ofstream(dir + "/" + pki::kKeyFile) << b.key_pem; }
  auto mismatched = Config::FromDir(dir);
  ASSERT_FALSE(mismatched.ok());
  EXPECT_EQ(mismatched.status().code(), Code::kInvalidArgument);
  EXPECT_NE(mismatched.status().message().find("tls.key does not belong to tls.crt"), std::string::npos)
      << mismatched.status();

  { std::ofstream(dir + "/" + pki::kCaFile) << "not a certificate"; }
  auto garbage = Config::FromDir(dir);
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.status().message().find("ca.crt holds no certificate"), std::string::npos) << garbage.status();

  std::filesystem::remove(dir + "/" + pki::kCertFile);
  auto missing = Config::FromDir(dir);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kInvalidArgument);
  EXPECT_NE(missing.status().message().find(dir + "/tls.crt"), std::string::npos) << missing.status();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tfjob::tls
