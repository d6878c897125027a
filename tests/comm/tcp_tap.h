// An eavesdropper for tests: a TCP relay on 127.0.0.1 that forwards every
// connection it accepts to a target address and keeps a copy of every byte
// that crosses it, both ways, as a wiretap on the link would see them.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace dctrain::testing {

class TcpTap {
 public:
  // Relays to 127.0.0.1:`target_port`; listens on an ephemeral port.
  explicit TcpTap(uint16_t target_port) : target_port_(target_port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = loopback(0);
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener_, 16) != 0) {
      throw std::runtime_error("tcp tap: cannot listen on 127.0.0.1");
    }
    socklen_t len = sizeof a;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { relay(); });
  }
  ~TcpTap() {
    stop_ = true;
    thread_.join();
    for (auto& [a, b] : pairs_) {
      ::close(a);
      ::close(b);
    }
    ::close(listener_);
  }
  TcpTap(const TcpTap&) = delete;
  TcpTap& operator=(const TcpTap&) = delete;

  // tcp://127.0.0.1:PORT, to connect to instead of the target.
  std::string endpoint() const { return "tcp://127.0.0.1:" + std::to_string(port_); }
  // Every byte relayed so far, both directions, in arrival order.
  std::string captured() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return captured_;
  }

 private:
  static sockaddr_in loopback(uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
  }

  void relay() {
    char buffer[65536];
    while (!stop_) {
      std::vector<pollfd> fds{{listener_, POLLIN, 0}};
      for (auto& [a, b] : pairs_) {
        fds.push_back({a, POLLIN, 0});
        fds.push_back({b, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 50) <= 0) continue;
      if (fds[0].revents & POLLIN) accept_one();
      for (size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const size_t pair = (i - 1) / 2;
        if (pair >= pairs_.size()) continue;
        const int from = fds[i].fd;
        const int to = (i % 2 == 1) ? pairs_[pair].second : pairs_[pair].first;
        const ssize_t n = ::read(from, buffer, sizeof buffer);
        if (n <= 0) {  // one side closed: close both, as a cut link would
          ::close(pairs_[pair].first);
          ::close(pairs_[pair].second);
          pairs_[pair] = {-1, -1};
          continue;
        }
        {
          std::lock_guard<std::mutex> lock(mutex_);
          captured_.append(buffer, static_cast<size_t>(n));
        }
        for (ssize_t done = 0; done < n;) {
          const ssize_t w = ::write(to, buffer + done, static_cast<size_t>(n - done));
          if (w <= 0) break;
          done += w;
        }
      }
      std::erase_if(pairs_, [](const auto& p) { return p.first < 0; });
    }
  }

  void accept_one() {
    const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) return;
    const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = loopback(target_port_);
    if (server < 0 || ::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(client);
      if (server >= 0) ::close(server);
      return;
    }
    pairs_.emplace_back(client, server);
  }

  uint16_t target_port_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::vector<std::pair<int, int>> pairs_;  // (accepted, to the target); relay thread only
  mutable std::mutex mutex_;
  std::string captured_;
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last
};

}  // namespace dctrain::testing
