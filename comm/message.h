// One message on the wire: the Protobuf header and the raw tensor frames that
// follow it (little-endian float32, described by envelope.tensors).
#pragma once

#include <string>
#include <vector>
#include <zmq.hpp>

#include "proto/wire.pb.h"

namespace dctrain {

struct Message {
  v1::Envelope envelope;
  std::vector<zmq::message_t> frames;
};

// A message as it arrived on a ROUTER: the peer's identity and every part
// (header first), not yet parsed nor trusted.
struct Received {
  std::string peer;
  std::vector<zmq::message_t> parts;
  // The peer's CURVE public key as the allow-list admitted it (comm/
  // security.h); empty on a plain connection.
  std::string key = {};
};

// Where a message goes: the coordinator's transport (or a test's recorder).
class Outbox {
 public:
  virtual ~Outbox() = default;
  // Queues `message` for `peer`; never blocks. A message that cannot be
  // delivered is logged by the implementation and dropped.
  virtual void send(const std::string& peer, Message message) = 0;
};

}  // namespace dctrain
