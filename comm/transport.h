// ZeroMQ sockets for the two sides: the coordinator binds a ROUTER, each
// worker connects a DEALER with its name as identity. Sends never block: a
// message for a peer that is gone or not reading is logged and dropped.
#pragma once

#include <chrono>
#include <memory>
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

 private:
  zmq::socket_t socket_;
  std::shared_ptr<spdlog::logger> log_;
};

class DealerTransport {
 public:
  // Connects to `address` with `identity` (the worker name).
  DealerTransport(zmq::context_t& context, const std::string& address, const std::string& identity,
                  std::shared_ptr<spdlog::logger> log);

  void send(Message message);
  // Receives every part of one message if one is waiting (non-blocking).
  bool try_receive(std::vector<zmq::message_t>& parts);
  zmq::socket_t& socket() { return socket_; }

 private:
  zmq::socket_t socket_;
  std::shared_ptr<spdlog::logger> log_;
};

// Receives all parts of one message from `socket` if one is waiting.
bool receive_parts(zmq::socket_t& socket, std::vector<zmq::message_t>& parts, bool wait);

}  // namespace dctrain
