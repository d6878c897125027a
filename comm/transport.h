// ZeroMQ sockets for the two sides: the coordinator binds a ROUTER, each
// worker connects a DEALER with its name as identity. Sends never block: a
// message for a peer that is gone or not reading is logged and dropped.
#pragma once

#include <spdlog/logger.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "comm/link.h"
#include "comm/message.h"
#include "comm/security.h"
#include "comm/transport_limits.h"

namespace dctrain {

class RouterTransport : public Outbox {
 public:
  // Binds `address` (tcp://HOST:PORT, port may be '*'). Throws with the
  // address and ZeroMQ's reason when it cannot.
  // `limits` hold for every connection (comm/transport_limits.h). With
  // `security.curve` the ROUTER is a CURVE server: the context must hold a
  // ZapHandler already, and every Received carries the peer's authenticated key.
  RouterTransport(zmq::context_t& context, const std::string& address,
                  std::shared_ptr<spdlog::logger> log, const TransportLimits& limits = {},
                  const SocketSecurity& security = {});

  // The bound endpoint with the real port, e.g. tcp://127.0.0.1:41234.
  std::string endpoint() const;

  // Waits up to `timeout` for one message; false when none came.
  bool receive(Received& out, std::chrono::milliseconds timeout);

  void send(const std::string& peer, Message message) override;

  // Lets queued messages go out for at most `linger` when the socket closes.
  void set_linger(std::chrono::milliseconds linger);

  // Connections open now (workers, and anything else that connected).
  size_t connections();

  // Peers whose connection closed since the last call (the socket monitor
  // saw it), each named once: a peer is known by the connection its last
  // message came on (one heard since on an open connection is not named).
  std::vector<std::string> take_disconnected();
  // Messages dropped because their peer was gone or its queue was full.
  uint64_t dropped_sends() const { return dropped_sends_; }

  ~RouterTransport();
  RouterTransport(const RouterTransport&) = delete;
  RouterTransport& operator=(const RouterTransport&) = delete;

 private:
  zmq::socket_t socket_;
  zmq::socket_t monitor_;
  std::set<int> open_;  // file descriptors of open connections
  std::shared_ptr<spdlog::logger> log_;
  std::map<std::string, int> peer_connection_;  // peer -> fd its last message came on
  std::vector<std::string> disconnected_;
  uint64_t dropped_sends_ = 0;
  // Failed sends are logged once per peer per period, with the count since.
  struct SendFailures {
    std::chrono::steady_clock::time_point logged;
    uint64_t since = 0;
  };
  std::map<std::string, SendFailures> send_failures_;
};

// The worker's link to the coordinator. Connection events are read from
// ZeroMQ's socket monitor.
class DealerTransport : public Link {
 public:
  // Connects to `address` with `identity` (the worker name). The connection
  // is watched from the start, so no event of the first attempt is missed.
  // With `security.curve` the DEALER is a CURVE client of the server key
  // in `security`.
  DealerTransport(zmq::context_t& context, const std::string& address, const std::string& identity,
                  std::shared_ptr<spdlog::logger> log, const SocketSecurity& security = {});
  ~DealerTransport();
  DealerTransport(const DealerTransport&) = delete;
  DealerTransport& operator=(const DealerTransport&) = delete;

  void send(Message message) override;
  bool try_receive(std::vector<zmq::message_t>& parts) override;
  std::optional<ConnectionEvent> try_event() override;
  // The DEALER and its monitor.
  void add_poll_items(std::vector<zmq::pollitem_t>& items) override;

 private:
  zmq::socket_t socket_;
  zmq::socket_t monitor_;
  std::shared_ptr<spdlog::logger> log_;
};

// Receives all parts of one message from `socket` if one is waiting.
bool receive_parts(zmq::socket_t& socket, std::vector<zmq::message_t>& parts, bool wait);

}  // namespace dctrain
