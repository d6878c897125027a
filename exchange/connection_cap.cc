#include "exchange/connection_cap.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <atomic>
#include <cstring>
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

}  // namespace

ConnectionCap::ConnectionCap(zmq::context_t& context, zmq::socket_t& socket, size_t limit)
    : context_(context), socket_(socket), limit_(limit) {
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
  zmq::socket_t monitor(context_, zmq::socket_type::pair);
  monitor.set(zmq::sockopt::linger, 0);
  monitor.set(zmq::sockopt::rcvhwm, 0);  // no event dropped: the counts stay right
  monitor.connect(endpoint);
  std::set<int> open;
  std::vector<Event> batch;
  while (!stop_.load()) {
    zmq::pollitem_t item{static_cast<void*>(monitor), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(20));  // and the stop flag as often
    batch.clear();
    for (Event e; read_event(monitor, e); e = Event{}) batch.push_back(e);
    for (size_t i = 0; i < batch.size(); ++i) {
      const Event& e = batch[i];
      if (e.id == ZMQ_EVENT_DISCONNECTED) {
        open.erase(e.fd);
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
      if (open.size() >= limit_.load()) {
        ::shutdown(e.fd, SHUT_RDWR);  // ZeroMQ sees the end and closes it (an event follows)
        refused_.fetch_add(1);
      }
      open.insert(e.fd);
    }
    open_.store(open.size());
  }
}

}  // namespace dctrain
