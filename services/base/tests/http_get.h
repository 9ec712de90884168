// A minimal blocking HTTP/1.0 GET for tests (no curl needed): returns the
// status code and body, or status 0 when nothing answers.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>

namespace tfjob::testing {

struct HttpReply {
  int status = 0;
  std::string body;
};

inline HttpReply HttpGet(int port, const std::string& path_and_query) {
  HttpReply r;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return r;
  timeval tv{10, 0};  // a hung server fails the test instead of hanging it
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return r;
  }
  const std::string req = "GET " + path_and_query + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return r;
  }
  std::string all;
  char buf[8192];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) all.append(buf, static_cast<size_t>(n));
  close(fd);
  const auto sp = all.find(' ');
  const auto end = all.find("\r\n\r\n");
  if (all.rfind("HTTP/", 0) != 0 || sp == std::string::npos || end == std::string::npos) return r;
  r.status = std::atoi(all.c_str() + sp + 1);
  r.body = all.substr(end + 4);
  return r;
}

}  // namespace tfjob::testing
