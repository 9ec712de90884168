// The fault proxy's HTTP/1.1 server (tests/support/http_server.h) on its
// own, no API server: requests parsed as sent (query, headers, bodies by
// length and chunked, keep-alive), streams chunk by chunk, an aborted stream
// without its terminating chunk, a dropped connection without an answer, a
// gone peer noticed, Stop() cutting every connection at once, and malformed
// or random bytes answered with a 400 or a closed connection while the
// server keeps serving.
#include "tests/support/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tfjob::testing {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// One client connection, raw bytes both ways.
class RawClient {
 public:
  explicit RawClient(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~RawClient() { ::close(fd_); }

  // With half_close the client then shuts its sending side. cpp-httplib
  // takes such a peer for gone (it peeks for end of stream before each
  // write) and answers it nothing, so only cases whose answer is not read
  // half-close.
  void Send(const std::string& bytes, bool half_close = false) {
    for (size_t off = 0; connected_ && off < bytes.size();) {
      const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    if (half_close) ::shutdown(fd_, SHUT_WR);
  }

  // Everything the server writes until it closes, goes quiet for two
  // seconds, or has written something ending in `until`.
  std::string Read(const std::string& until = "") {
    if (!connected_) return "<connect failed>";
    std::string out;
    char buf[4096];
    pollfd p{fd_, POLLIN, 0};
    while ((until.empty() || !out.ends_with(until)) && ::poll(&p, 1, 2000) > 0) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  int fd_;
  bool connected_ = false;
};

// Sends `bytes` on a connection of its own and returns the answer. Requests
// whose answer is read say "Connection: close", so the answer ends with the
// server's close rather than two quiet seconds of keep-alive.
std::string RawExchange(int port, const std::string& bytes, bool half_close = false) {
  RawClient client(port);
  client.Send(bytes, half_close);
  return client.Read();
}

// Echoes what it parsed: "METHOD path q=<watch query> h=<x-probe> body=<body>";
// for /stream two chunks then a clean end, for /abort one chunk then a drop,
// for /drop no answer at all, and for /wait a stream that waits until the
// peer has gone (counted in waits_ended_).
class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = HttpServer::Start({}, [this](const HttpRequest& req, HttpResponse& res) {
      if (req.path == "/drop") {
        res.abort = true;
        return;
      }
      res.code = 200;
      if (req.path == "/stream" || req.path == "/abort" || req.path == "/wait") {
        res.content_type = "application/json";
        res.stream = [this, path = req.path](ChunkSink& out) {
          if (!out.Write("{\"a\":1}\n")) return false;
          if (path == "/abort") return false;
          if (path == "/wait") {
            while (!out.PeerGone()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
            ++waits_ended_;
            return true;
          }
          return out.Write("{\"b\":2}\n");
        };
        return;
      }
      res.content_type = "text/plain";
      res.body = req.method + " " + req.path + " q=" + req.Query("watch") + " h=" + req.Header("x-probe") +
                 " body=" + req.body;
    });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
  }

  std::atomic<int> waits_ended_{0};
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, ParsesRequestsAsSent) {
  EXPECT_THAT(RawExchange(server_->port(),
                          "GET /api/v1/pods?watch=1&x=%41 HTTP/1.1\r\nX-Probe: yes \r\nConnection: close\r\n\r\n"),
              EndsWith("GET /api/v1/pods q=1 h=yes body="));
  EXPECT_THAT(
      RawExchange(server_->port(), "POST /p HTTP/1.1\r\nContent-Length: 7\r\nConnection: close\r\n\r\n{\"a\":1}"),
      EndsWith("POST /p q= h= body={\"a\":1}"));
  EXPECT_THAT(RawExchange(server_->port(),
                          "PUT /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                          "3\r\n{\"a\r\n4\r\n\":1}\r\n0\r\n\r\n"),
              EndsWith("PUT /p q= h= body={\"a\":1}"));
  // Two requests on one connection (keep-alive), answered in order. The
  // second is sent once the first is answered: cpp-httplib 0.11 reads each
  // request with a fresh buffer, so bytes pipelined behind a request are lost.
  RawClient client(server_->port());
  client.Send("GET /one HTTP/1.1\r\n\r\n");
  EXPECT_THAT(client.Read("body="), EndsWith("GET /one q= h= body="));
  client.Send("GET /two HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(client.Read(), EndsWith("GET /two q= h= body="));
}

TEST_F(HttpServerTest, StreamsChunksAndAbortsWithoutTheLastChunk) {
  const std::string clean = RawExchange(server_->port(), "GET /stream HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(clean, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(clean, HasSubstr("Transfer-Encoding: chunked\r\n"));
  EXPECT_THAT(clean, HasSubstr("8\r\n{\"a\":1}\n\r\n8\r\n{\"b\":2}\n\r\n"));
  EXPECT_THAT(clean, EndsWith("0\r\n\r\n"));
  const std::string cut = RawExchange(server_->port(), "GET /abort HTTP/1.1\r\n\r\n");
  EXPECT_THAT(cut, EndsWith("8\r\n{\"a\":1}\n\r\n"));
  EXPECT_THAT(cut, Not(HasSubstr("0\r\n\r\n")));
  // A drop before the answer: the connection closes with nothing written.
  EXPECT_EQ(RawExchange(server_->port(), "GET /drop HTTP/1.1\r\n\r\n"), "");
}

// A stream notices a client that has gone; Stop() ends an open stream
// (without its terminating chunk) and an idle keep-alive connection at once,
// not after the idle timeout.
TEST_F(HttpServerTest, NoticesAGonePeerAndStopCutsEveryConnection) {
  {
    RawClient gone(server_->port());
    gone.Send("GET /wait HTTP/1.1\r\n\r\n");
    EXPECT_THAT(gone.Read("}\n\r\n"), EndsWith("8\r\n{\"a\":1}\n\r\n"));
  }
  for (int i = 0; i < 500 && waits_ended_ == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(waits_ended_, 1);

  RawClient idle(server_->port()), streaming(server_->port());
  idle.Send("GET /one HTTP/1.1\r\n\r\n");
  EXPECT_THAT(idle.Read("body="), EndsWith("GET /one q= h= body="));
  streaming.Send("GET /wait HTTP/1.1\r\n\r\n");
  EXPECT_THAT(streaming.Read("}\n\r\n"), EndsWith("8\r\n{\"a\":1}\n\r\n"));
  const auto start = std::chrono::steady_clock::now();
  server_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(idle.Read(), "") << "closed";
  EXPECT_THAT(streaming.Read(), Not(HasSubstr("0\r\n\r\n")));
}

TEST_F(HttpServerTest, GarbageNeverCrashesTheServer) {
  static const char kBinary[] = "\x00\x01\x02\xff garbage\r\n\r\n";
  const std::vector<std::string> malformed = {
      std::string(kBinary, sizeof kBinary - 1),
      "GET\r\n\r\n",
      "GET / HTTP/9.9\r\n\r\n",
      "GET / HTTP/1.1\r\nno colon here\r\n\r\n",
      "GET / HTTP/1.1\r\nX: " + std::string(100000, 'a') + "\r\n\r\n",
      "GET /" + std::string(8000, 'a') + " HTTP/1.1\r\n\r\n",  // routed by a regex: no stack overflow
      "POST /p HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
      "POST /p HTTP/1.1\r\nContent-Length: 99999999999999\r\n\r\n",
      "POST /p HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"trunc",
      "POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      "POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n0\r\n\r\n",
      "GET /%zz%00%ff?a=%&b=%4 HTTP/1.1\r\n\r\n",
      "GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\nBROKEN\r\n\r\n",
  };
  for (const auto& m : malformed) RawExchange(server_->port(), m, /*half_close=*/true);
  EXPECT_THAT(RawExchange(server_->port(), "GET relative HTTP/1.1\r\nConnection: close\r\n\r\n"),
              StartsWith("HTTP/1.1 400"));
  // cpp-httplib answers a header line over its limit (8 KiB) with 400, not
  // 431 Request Header Fields Too Large.
  EXPECT_THAT(RawExchange(server_->port(), "GET / HTTP/1.1\r\nX: " + std::string(100000, 'a') + "\r\n\r\n"),
              StartsWith("HTTP/1.1 400"));

  std::mt19937 rng(20240501);
  for (int i = 0; i < 50; ++i) {
    std::string bytes(1 + rng() % 4096, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
    RawExchange(server_->port(), bytes, /*half_close=*/true);
  }
  // Still serving.
  EXPECT_THAT(RawExchange(server_->port(), "GET /after HTTP/1.1\r\nConnection: close\r\n\r\n"),
              EndsWith("GET /after q= h= body="));
}

}  // namespace
}  // namespace tfjob::testing
