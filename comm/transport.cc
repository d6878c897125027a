#include "comm/transport.h"

#include <fmt/format.h>

#include "comm/framing.h"

namespace dctrain {

bool receive_parts(zmq::socket_t& socket, std::vector<zmq::message_t>& parts, bool wait) {
  parts.clear();
  const auto flags = wait ? zmq::recv_flags::none : zmq::recv_flags::dontwait;
  zmq::message_t part;
  if (!socket.recv(part, flags)) return false;
  bool more = part.more();
  parts.push_back(std::move(part));
  while (more) {
    zmq::message_t next;
    (void)socket.recv(next, zmq::recv_flags::none);  // the rest of a message is already here
    more = next.more();
    parts.push_back(std::move(next));
  }
  return true;
}

namespace {

// Sends every part; returns false (having sent nothing) if the first part
// would block or the peer is unknown.
bool send_parts(zmq::socket_t& socket, std::vector<zmq::message_t>& parts, const std::string* peer) {
  const size_t n = parts.size();
  try {
    if (peer != nullptr) {
      const auto flags = zmq::send_flags::dontwait | zmq::send_flags::sndmore;
      if (!socket.send(zmq::buffer(*peer), flags)) return false;
    }
    for (size_t i = 0; i < n; ++i) {
      auto flags = (i + 1 < n) ? zmq::send_flags::sndmore : zmq::send_flags::none;
      if (peer == nullptr && i == 0) flags = flags | zmq::send_flags::dontwait;
      if (!socket.send(parts[i], flags)) return false;
    }
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) return false;
    throw;
  }
  return true;
}

}  // namespace

RouterTransport::RouterTransport(zmq::context_t& context, const std::string& address,
                                 std::shared_ptr<spdlog::logger> log)
    : socket_(context, zmq::socket_type::router), log_(std::move(log)) {
  socket_.set(zmq::sockopt::router_mandatory, 1);
  socket_.set(zmq::sockopt::linger, 0);
  // A reconnecting worker takes over its name from the dead connection.
  socket_.set(zmq::sockopt::router_handover, 1);
  try {
    socket_.bind(address);
  } catch (const zmq::error_t& e) {
    throw std::runtime_error(fmt::format(
        "coordinator: cannot bind '{}': {} (is the port in use? use tcp://HOST:PORT, or port * "
        "for any free port)",
        address, e.what()));
  }
}

std::string RouterTransport::endpoint() const { return socket_.get(zmq::sockopt::last_endpoint); }

void RouterTransport::set_linger(std::chrono::milliseconds linger) {
  socket_.set(zmq::sockopt::linger, static_cast<int>(linger.count()));
}

bool RouterTransport::receive(Received& out, std::chrono::milliseconds timeout) {
  zmq::pollitem_t item{static_cast<void*>(socket_), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, timeout) == 0) return false;
  std::vector<zmq::message_t> parts;
  if (!receive_parts(socket_, parts, false) || parts.empty()) return false;
  out.peer = parts.front().to_string();
  out.parts.clear();
  for (size_t i = 1; i < parts.size(); ++i) out.parts.push_back(std::move(parts[i]));
  return true;
}

void RouterTransport::send(const std::string& peer, Message message) {
  std::vector<zmq::message_t> parts = encode(std::move(message));
  if (!send_parts(socket_, parts, &peer)) {
    log_->warn("could not send to '{}' (gone or not reading); message dropped", peer);
  }
}

DealerTransport::DealerTransport(zmq::context_t& context, const std::string& address,
                                 const std::string& identity, std::shared_ptr<spdlog::logger> log)
    : socket_(context, zmq::socket_type::dealer), log_(std::move(log)) {
  socket_.set(zmq::sockopt::routing_id, identity);
  socket_.set(zmq::sockopt::linger, 2000);
  try {
    socket_.connect(address);
  } catch (const zmq::error_t& e) {
    throw std::runtime_error(fmt::format(
        "worker: cannot connect to '{}': {} (expected tcp://HOST:PORT)", address, e.what()));
  }
}

void DealerTransport::send(Message message) {
  std::vector<zmq::message_t> parts = encode(std::move(message));
  if (!send_parts(socket_, parts, nullptr)) {
    log_->warn("could not send to the coordinator (queue full); message dropped");
  }
}

bool DealerTransport::try_receive(std::vector<zmq::message_t>& parts) {
  return receive_parts(socket_, parts, false);
}

}  // namespace dctrain
