// The simulated network: when a message sent at some time arrives.
//
// Three models, each stated in simulation.json by describe():
// - star: every message passes the coordinator's link, which carries one
//   message at a time in each direction (a first-come queue on its way in
//   and one on its way out): N contributions of the model's size take N
//   times one, as through a real coordinator's network card. A message
//   costs latency + bytes / bandwidth once it has the link.
// - exchange: the workers sum their contributions among themselves
//   (exchange/README.md, direct reduce-scatter then all-gather): a
//   member's round takes 2 latencies + 2(N-1)/N x the gradient's bytes /
//   bandwidth from the moment it is ready, on its own link, and its report
//   then reaches the coordinator (a small message on the coordinator's
//   queue). The coordinator's answer is a commit, not the update. The
//   round ends for everyone once the last member is ready; so does the
//   coordinator's step, which waits for every report.
// - fitted: every message costs one measured time whatever its bytes
//   (ComputeTrace::message_seconds), on no queue.
#pragma once

#include <cstdint>
#include <string>

#include "proto/wire.pb.h"

namespace dctrain {

class SimulatedNetwork {
 public:
  enum class Direction { kToCoordinator, kToWorker };

  // `gradient_bytes`: what a contribution, an update or a welcome carries
  // beyond its envelope (the real model's parameters x 4).
  static SimulatedNetwork star(double latency_seconds, double bandwidth_bytes,
                               double gradient_bytes);
  // `members`: the workers in a round.
  static SimulatedNetwork exchange(double latency_seconds, double bandwidth_bytes,
                                   double gradient_bytes, uint32_t members);
  static SimulatedNetwork fitted(double seconds_per_message);

  // When `body` (its envelope `envelope_bytes` long) sent at `sent` arrives.
  // Calls come in the order of their send times (the event queue's).
  double arrival(double sent, Direction direction, v1::Envelope::BodyCase body,
                 double envelope_bytes);

  // Exchange: a member's round, from its readiness to its sum.
  double round_seconds() const;

  // Its figures: a fitted network's latency is its time per message, its
  // bandwidth infinite.
  double latency_seconds() const { return latency_; }
  double bandwidth_bytes_per_second() const { return bandwidth_; }
  // The model in words, with its figures.
  std::string describe() const;
  // "star", "exchange" or "fitted".
  const char* kind() const;

 private:
  enum class Kind { kStar, kExchange, kFitted };
  SimulatedNetwork(Kind kind, double latency, double bandwidth, double gradient_bytes,
                   uint32_t members);
  Kind kind_;
  double latency_;
  double bandwidth_;
  double gradient_bytes_;
  uint32_t members_;
  double inbound_free_ = 0.0;   // when the coordinator's link is free of what it receives
  double outbound_free_ = 0.0;  // and of what it sends
};

}  // namespace dctrain
