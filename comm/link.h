// One end of a connection to one peer, as the code above it sees it:
// messages out, messages in (every part, not yet parsed nor trusted: the
// receiver decodes and validates), and what happens to the connection. The
// worker's DEALER to the coordinator is one (comm/transport.h); a link
// between two workers' data planes would be another; a test's recorder is a
// third. Nothing here knows who the peer is or what the messages mean.
#pragma once

#include <optional>
#include <vector>
#include <zmq.hpp>

#include "comm/message.h"

namespace dctrain {

// What happened to a link's connection.
enum class ConnectionEvent {
  kConnected,        // TCP connected and the ZeroMQ handshake succeeded: messages now flow
  kRetried,          // a connection attempt failed (refused, unreachable); ZeroMQ tries again
  kDisconnected,     // an established connection closed
  kHandshakeFailed,  // something answered on the port but did not speak ZeroMQ's protocol
  kAuthRefused       // the server's authentication (CURVE allow-list) refused this peer's key
};

class Link {
 public:
  virtual ~Link() = default;

  // Queues `message` for the peer; never blocks. A message that cannot go
  // (queue full) is logged by the implementation and dropped.
  virtual void send(Message message) = 0;
  // Takes every part of one message if one is waiting; never blocks.
  virtual bool try_receive(std::vector<zmq::message_t>& parts) = 0;
  // The next connection event if one is waiting; never blocks.
  virtual std::optional<ConnectionEvent> try_event() = 0;
  // Appends what a poll loop should watch: one of them is readable when
  // try_receive() or try_event() may have something. A link with nothing to
  // poll (a test's) appends nothing.
  virtual void add_poll_items(std::vector<zmq::pollitem_t>& items) = 0;
};

}  // namespace dctrain
