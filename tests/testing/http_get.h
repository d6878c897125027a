// A minimal HTTP/1.0 GET for the tests that scrape the coordinator's
// metrics: one request on a fresh connection to 127.0.0.1, read to the end.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>

namespace dctrain::testing {

struct HttpReply {
  int status = 0;
  std::string headers;  // the status line and the headers
  std::string body;
};

// Nothing when the connection fails or the reply is not HTTP; every read
// and write gives up after 10 s.
inline std::optional<HttpReply> http_get(uint16_t port, const std::string& path,
                                         const std::string& method = "GET") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::nullopt;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  timeval timeout{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0)
    return std::nullopt;
  const std::string request = method + " " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size()))
    return std::nullopt;
  std::string raw;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) raw.append(buffer, n);
  const size_t split = raw.find("\r\n\r\n");
  if (!raw.starts_with("HTTP/1.") || split == std::string::npos || raw.size() < 12)
    return std::nullopt;
  HttpReply reply;
  reply.status = std::stoi(raw.substr(9, 3));
  reply.headers = raw.substr(0, split);
  reply.body = raw.substr(split + 4);
  return reply;
}

}  // namespace dctrain::testing
