// ZeroMQ sockets for the two sides: the coordinator binds a ROUTER, each
// worker connects a DEALER with its name as identity. Sends never block: a
// message for a peer that is gone or not reading is logged and dropped.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include <spdlog/logger.h>
#include <zmq.hpp>

#include "comm/message.h"

namespace dctrain {

class RouterTransport : public Outbox {
 public:
  // Binds `address` (tcp://HOST:PORT, port may be '*'). Throws with the
  // address and ZeroMQ's reason when it cannot.
  RouterTransport(zmq::context_t& context, const std::string& address,
                  std::shared_ptr<spdlog::logger> log);

  // The bound endpoint with the real port, e.g. tcp://127.0.0.1:41234.
  std::string endpoint() const;

  // Waits up to `timeout` for one message; false when none came.
  bool receive(Received& out, std::chrono::milliseconds timeout);

  void send(const std::string& peer, Message message) override;

  // Lets queued messages go out for at most `linger` when the socket closes.
  void set_linger(std::chrono::milliseconds linger);

  // Connections open now (workers, and anything else that connected).
  size_t connections();

  ~RouterTransport();
  RouterTransport(const RouterTransport&) = delete;
  RouterTransport& operator=(const RouterTransport&) = delete;

 private:
  zmq::socket_t socket_;
  zmq::socket_t monitor_;
  std::set<int> open_;  // file descriptors of open connections
  std::shared_ptr<spdlog::logger> log_;
};

// What happened to the DEALER's connection, read from ZeroMQ's socket monitor.
enum class ConnectionEvent {
  kConnected,       // TCP connected and the ZeroMQ handshake succeeded: messages now flow
  kRetried,         // a connection attempt failed (refused, unreachable); ZeroMQ tries again
  kDisconnected,    // an established connection closed
  kHandshakeFailed  // something answered on the port but did not speak ZeroMQ's protocol
};

class DealerTransport {
 public:
  // Connects to `address` with `identity` (the worker name). The connection
  // is watched from the start, so no event of the first attempt is missed.
  DealerTransport(zmq::context_t& context, const std::string& address, const std::string& identity,
                  std::shared_ptr<spdlog::logger> log);
  ~DealerTransport();
  DealerTransport(const DealerTransport&) = delete;
  DealerTransport& operator=(const DealerTransport&) = delete;

  void send(Message message);
  // Receives every part of one message if one is waiting (non-blocking).
  bool try_receive(std::vector<zmq::message_t>& parts);
  // The next connection event if one is waiting (non-blocking).
  std::optional<ConnectionEvent> try_event();
  zmq::socket_t& socket() { return socket_; }
  // Readable when try_event() has something; for a poll loop.
  zmq::socket_t& events() { return monitor_; }

 private:
  zmq::socket_t socket_;
  zmq::socket_t monitor_;
  std::shared_ptr<spdlog::logger> log_;
};

// Receives all parts of one message from `socket` if one is waiting.
bool receive_parts(zmq::socket_t& socket, std::vector<zmq::message_t>& parts, bool wait);

}  // namespace dctrain
