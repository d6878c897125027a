#include "exchange/connection_cap.h"

#include <fmt/format.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

namespace dctrain {

namespace {

std::string cap_endpoint() {
  static std::atomic<uint64_t> next{0};
  return fmt::format("inproc://exchange-cap-{}", next.fetch_add(1));
}

struct Event {
  uint16_t id = 0;
  int32_t fd = -1;
};

// One monitor event (its first frame: a 16-bit event id and a 32-bit value,
// here the connection's descriptor; its second frame, the endpoint).
bool read_event(zmq::socket_t& monitor, Event& out) {
  zmq::message_t first;
  if (!monitor.recv(first, zmq::recv_flags::dontwait)) return false;
  if (first.size() >= sizeof out.id + sizeof out.fd) {
    std::memcpy(&out.id, first.data(), sizeof out.id);
    std::memcpy(&out.fd, static_cast<const char*>(first.data()) + sizeof out.id, sizeof out.fd);
  }
  while (first.more()) {
    zmq::message_t rest;
    if (!monitor.recv(rest, zmq::recv_flags::dontwait)) break;
    first = std::move(rest);
  }
  return true;
}

// What this side has sent over the TCP connection `fd` (bytes acknowledged
// where the kernel does not count those sent); nothing when `fd` is no TCP
// socket or the kernel says neither.
std::optional<uint64_t> bytes_sent(int fd) {
  tcp_info info{};
  socklen_t length = sizeof info;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return std::nullopt;
  const auto has = [&](size_t offset, size_t size) { return length >= offset + size; };
  if (has(offsetof(tcp_info, tcpi_bytes_sent), sizeof info.tcpi_bytes_sent)) {
    return info.tcpi_bytes_sent;
  }
  if (has(offsetof(tcp_info, tcpi_bytes_acked), sizeof info.tcpi_bytes_acked)) {
    return info.tcpi_bytes_acked;
  }
  return std::nullopt;
}

}  // namespace

ConnectionCap::ConnectionCap(zmq::context_t& context, zmq::socket_t& socket, size_t limit,
                             uint64_t handshake_bytes, std::chrono::milliseconds handshake_deadline)
    : context_(context),
      socket_(socket),
      limit_(limit),
      handshake_bytes_(handshake_bytes),
      handshake_deadline_(handshake_deadline) {
  const std::string endpoint = cap_endpoint();
  if (zmq_socket_monitor(socket_.handle(), endpoint.c_str(),
                         ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0) {
    throw std::runtime_error(fmt::format("exchange: cannot watch the inbox's connections: {}",
                                         zmq_strerror(zmq_errno())));
  }
  thread_ = std::thread([this, endpoint] { watch(endpoint); });
}

ConnectionCap::~ConnectionCap() {
  zmq_socket_monitor(socket_.handle(), nullptr, 0);
  stop_.store(true);
  thread_.join();
}

void ConnectionCap::watch(const std::string& endpoint) {
  using Clock = std::chrono::steady_clock;
  zmq::socket_t monitor(context_, zmq::socket_type::pair);
  monitor.set(zmq::sockopt::linger, 0);
  monitor.set(zmq::sockopt::rcvhwm, 0);  // no event dropped: the counts stay right
  monitor.connect(endpoint);
  std::map<int, Clock::time_point> pending;  // descriptor -> accepted at
  std::set<int> authenticated;
  std::set<int> closing;  // shut down here, until ZeroMQ says it closed them
  const auto shut = [&](int fd) {
    ::shutdown(fd, SHUT_RDWR);  // ZeroMQ sees the end and closes it (an event follows)
    closing.insert(fd);
    refused_.fetch_add(1);
  };
  std::vector<Event> batch;
  while (!stop_.load()) {
    zmq::pollitem_t item{static_cast<void*>(monitor), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(20));  // and the stop flag as often
    batch.clear();
    for (Event e; read_event(monitor, e); e = Event{}) batch.push_back(e);
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < batch.size(); ++i) {
      const Event& e = batch[i];
      if (e.id == ZMQ_EVENT_DISCONNECTED) {
        pending.erase(e.fd);
        authenticated.erase(e.fd);
        closing.erase(e.fd);
        continue;
      }
      if (e.id != ZMQ_EVENT_ACCEPTED) continue;
      // A descriptor closed later in this batch may belong to another
      // connection by now: only the latest of its events is acted on.
      bool closed_later = false;
      for (size_t j = i + 1; j < batch.size() && !closed_later; ++j) {
        closed_later = batch[j].fd == e.fd && batch[j].id == ZMQ_EVENT_DISCONNECTED;
      }
      if (closed_later) continue;
      if (!pending.empty() && pending.size() >= limit_.load()) {
        // The oldest pending one makes room: a flood of new connections
        // does not keep a member's (newer, about to authenticate) out.
        const auto oldest =
            std::min_element(pending.begin(), pending.end(),
                             [](const auto& a, const auto& b) { return a.second < b.second; });
        shut(oldest->first);
        pending.erase(oldest);
      }
      pending[e.fd] = now;
    }
    for (auto it = pending.begin(); it != pending.end();) {
      const std::optional<uint64_t> sent = bytes_sent(it->first);
      if (!sent || *sent > handshake_bytes_) {
        if (authenticated.size() >= limit_.load()) {
          shut(it->first);
        } else {
          authenticated.insert(it->first);
        }
        it = pending.erase(it);
      } else if (now - it->second > handshake_deadline_) {
        shut(it->first);
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
    open_.store(pending.size() + authenticated.size() + closing.size());
    authenticated_.store(authenticated.size());
  }
}

}  // namespace dctrain
