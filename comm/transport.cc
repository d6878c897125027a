#include "comm/transport.h"

#include <fmt/format.h>

#include <atomic>
#include <cstring>

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

// A name for a socket monitor's inproc endpoint that no other monitor in the
// process has had. An address such as the transport's own would be reused
// by the next transport built in the same place, and ZeroMQ unbinds a
// closed monitor's endpoint in the background: "Address already in use".
std::string monitor_endpoint(const char* kind) {
  static std::atomic<uint64_t> next{0};
  return fmt::format("inproc://{}-monitor-{}", kind, next.fetch_add(1));
}

// Sends every part; returns false (having sent nothing) if the first part
// would block or the peer is unknown.
bool send_parts(zmq::socket_t& socket, std::vector<zmq::message_t>& parts,
                const std::string* peer) {
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
                                 std::shared_ptr<spdlog::logger> log, const TransportLimits& limits,
                                 const SocketSecurity& security)
    : socket_(context, zmq::socket_type::router),
      monitor_(context, zmq::socket_type::pair),
      log_(std::move(log)) {
  const std::string monitor = monitor_endpoint("router");
  if (zmq_socket_monitor(socket_.handle(), monitor.c_str(),
                         ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0) {
    throw std::runtime_error(
        fmt::format("coordinator: cannot watch connections: {}", zmq_strerror(zmq_errno())));
  }
  monitor_.set(zmq::sockopt::linger, 0);
  monitor_.connect(monitor);
  socket_.set(zmq::sockopt::router_mandatory, 1);
  socket_.set(zmq::sockopt::linger, 0);
  // A name belongs to its connection while that connection is open: a
  // second connection with the name of a connected worker is held by
  // ZeroMQ, unheard, and can neither take the worker's place nor receive
  // its messages. A restarted worker gets its name back once the old
  // connection has closed (at once after a crash; after the heartbeat
  // timeout below for a host that vanished).
  socket_.set(zmq::sockopt::router_handover, 0);
  if (limits.max_frame_bytes > 0) socket_.set(zmq::sockopt::maxmsgsize, limits.max_frame_bytes);
  if (limits.max_queued_messages > 0) socket_.set(zmq::sockopt::sndhwm, limits.max_queued_messages);
  if (limits.heartbeat.count() > 0 && limits.heartbeat_timeout.count() > 0) {
    socket_.set(zmq::sockopt::heartbeat_ivl, static_cast<int>(limits.heartbeat.count()));
    socket_.set(zmq::sockopt::heartbeat_timeout,
                static_cast<int>(limits.heartbeat_timeout.count()));
  }
  // CURVE server: with it every Received carries the peer's authenticated key.
  secure_socket(socket_, SocketRole::kServer, security);
  try {
    socket_.bind(address);
  } catch (const zmq::error_t& e) {
    throw std::runtime_error(fmt::format(
        "coordinator: cannot bind '{}': {} (is the port in use? use tcp://HOST:PORT, or port * "
        "for any free port)",
        address, e.what()));
  }
}

std::string RouterTransport::endpoint() const {
  return socket_.get(zmq::sockopt::last_endpoint);
}

void RouterTransport::set_linger(std::chrono::milliseconds linger) {
  socket_.set(zmq::sockopt::linger, static_cast<int>(linger.count()));
}

RouterTransport::~RouterTransport() {
  zmq_socket_monitor(socket_.handle(), nullptr, 0);
}

size_t RouterTransport::connections() {
  std::vector<zmq::message_t> parts;
  while (receive_parts(monitor_, parts, false)) {
    // Frame 1: 16-bit event id and 32-bit value (here the connection's fd).
    if (parts.empty() || parts[0].size() < sizeof(uint16_t) + sizeof(int32_t)) continue;
    uint16_t event = 0;
    int32_t fd = 0;
    std::memcpy(&event, parts[0].data(), sizeof event);
    std::memcpy(&fd, static_cast<const char*>(parts[0].data()) + sizeof event, sizeof fd);
    if (event == ZMQ_EVENT_ACCEPTED) open_.insert(fd);
    if (event == ZMQ_EVENT_DISCONNECTED) {
      open_.erase(fd);
      for (auto it = peer_connection_.begin(); it != peer_connection_.end();) {
        if (it->second == fd) {
          disconnected_.push_back(it->first);
          it = peer_connection_.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
  return open_.size();
}

std::vector<std::string> RouterTransport::take_disconnected() {
  connections();
  std::vector<std::string> out;
  out.swap(disconnected_);
  return out;
}

bool RouterTransport::receive(Received& out, std::chrono::milliseconds timeout) {
  connections();  // keeps the monitor's queue short
  zmq::pollitem_t item{static_cast<void*>(socket_), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, timeout) == 0) return false;
  std::vector<zmq::message_t> parts;
  if (!receive_parts(socket_, parts, false) || parts.empty()) return false;
  out.peer = parts.front().to_string();
  if (parts.size() > 1) {
    // The connection the message came on (ZMQ_SRCFD, on a frame the peer
    // sent; the identity frame is the ROUTER's own), so that a closed
    // connection names its peer.
    const int fd = zmq_msg_get(parts.back().handle(), ZMQ_SRCFD);
    // The monitor reports a connection as accepted before the first message
    // on it can arrive, but that report may still be queued: read it first.
    if (fd >= 0 && !open_.contains(fd)) connections();
    if (fd >= 0 && open_.contains(fd)) {
      peer_connection_[out.peer] = fd;
      // Back on an open connection: a close of its old one, not yet taken,
      // is no longer its.
      std::erase(disconnected_, out.peer);
    }
  }
  // The routing-id frame is made by the ROUTER; the next came off the wire
  // and carries the connection's properties.
  out.key = parts.size() > 1 ? authenticated_key(parts[1]) : std::string();
  out.parts.clear();
  for (size_t i = 1; i < parts.size(); ++i) out.parts.push_back(std::move(parts[i]));
  return true;
}

void RouterTransport::send(const std::string& peer, Message message) {
  std::vector<zmq::message_t> parts = encode(std::move(message));
  if (send_parts(socket_, parts, &peer)) return;
  ++dropped_sends_;
  // A peer that stopped reading fails every send: one line per period.
  constexpr auto kPeriod = std::chrono::seconds(10);
  const auto now = std::chrono::steady_clock::now();
  auto [it, first] = send_failures_.try_emplace(peer);
  SendFailures& f = it->second;
  ++f.since;
  if (first || now - f.logged >= kPeriod) {
    log_->warn(
        "could not send to '{}' (gone, or its queue of unread messages is full); {} "
        "message{} dropped",
        peer, f.since, f.since == 1 ? "" : "s");
    f.logged = now;
    f.since = 0;
  }
  // Forget peers that stopped failing, so the table stays small.
  if (send_failures_.size() > 1024) {
    for (auto i = send_failures_.begin(); i != send_failures_.end();) {
      i = now - i->second.logged >= kPeriod ? send_failures_.erase(i) : std::next(i);
    }
  }
}

DealerTransport::DealerTransport(zmq::context_t& context, const std::string& address,
                                 const std::string& identity, std::shared_ptr<spdlog::logger> log,
                                 const SocketSecurity& security)
    : socket_(context, zmq::socket_type::dealer),
      monitor_(context, zmq::socket_type::pair),
      log_(std::move(log)) {
  socket_.set(zmq::sockopt::routing_id, identity);
  socket_.set(zmq::sockopt::linger, 2000);
  // Before the welcome the model's size is unknown, and ZeroMQ applies a
  // limit set later only to later connections: the bound is the largest
  // frame the protocol ever sends (tensor frames are at most 16 MiB).
  socket_.set(zmq::sockopt::maxmsgsize, max_frame_bytes(kMaxFrameFloats, 0));
  // Retry a refused or unreachable address after 0.1, 0.2, 0.4, ... s, at
  // most every second.
  socket_.set(zmq::sockopt::reconnect_ivl_max, 1000);
  secure_socket(socket_, SocketRole::kClient, security);
  // The monitor's reader is connected before the DEALER connects: ZeroMQ
  // drops events that nobody reads.
  const std::string monitor = monitor_endpoint("dealer");
  if (zmq_socket_monitor(socket_.handle(), monitor.c_str(),
                         ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_CONNECT_RETRIED |
                             ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                             ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0) {
    throw std::runtime_error(
        fmt::format("worker: cannot watch the connection: {}", zmq_strerror(zmq_errno())));
  }
  monitor_.set(zmq::sockopt::linger, 0);
  monitor_.connect(monitor);
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

DealerTransport::~DealerTransport() {
  zmq_socket_monitor(socket_.handle(), nullptr, 0);
}

bool DealerTransport::try_receive(std::vector<zmq::message_t>& parts) {
  return receive_parts(socket_, parts, false);
}

void DealerTransport::add_poll_items(std::vector<zmq::pollitem_t>& items) {
  items.push_back({static_cast<void*>(socket_), 0, ZMQ_POLLIN, 0});
  items.push_back({static_cast<void*>(monitor_), 0, ZMQ_POLLIN, 0});
}

std::optional<ConnectionEvent> DealerTransport::try_event() {
  std::vector<zmq::message_t> parts;
  while (receive_parts(monitor_, parts, false)) {
    // Frame 1: 16-bit event id and 32-bit value; frame 2: the address.
    if (parts.empty() || parts[0].size() < sizeof(uint16_t)) continue;
    uint16_t event = 0;
    std::memcpy(&event, parts[0].data(), sizeof event);
    switch (event) {
      case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        return ConnectionEvent::kConnected;
      case ZMQ_EVENT_CONNECT_RETRIED:
        return ConnectionEvent::kRetried;
      case ZMQ_EVENT_DISCONNECTED:
        return ConnectionEvent::kDisconnected;
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        return ConnectionEvent::kHandshakeFailed;
      case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        return ConnectionEvent::kAuthRefused;
      default:
        continue;
    }
  }
  return std::nullopt;
}

}  // namespace dctrain
