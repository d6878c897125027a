// The simulated network: when a message sent at some time arrives.
//
// Three models, each stated in simulation.json by describe():
// - star: every message passes the coordinator's link, which carries one
//   message at a time in each direction (a first-come queue on its way in
//   and one on its way out): N contributions of the model's size take N
//   times one, as through a real coordinator's network card. A message
//   costs latency + bytes / bandwidth once it has the link.
// - exchange: the workers sum their contributions among themselves on the
//   schedule the real exchange would run at this member count
//   (exchange/schedule.h, exchange_round_cost below): a member's round
//   takes hops x latency + the messages it sends x the time a message
//   costs its sender + the bytes on its critical path / bandwidth, from
//   the moment it is ready, on its own link, and its report then reaches
//   the coordinator (a small message on the coordinator's queue). The
//   coordinator's answer is a commit, not the update. The round ends for
//   everyone once the last member is ready; so does the coordinator's
//   step, which waits for every report.
// - fitted: every message costs one measured time whatever its bytes
//   (ComputeTrace::message_seconds), on no queue.
#pragma once

#include <cstdint>
#include <string>

#include "exchange/schedule.h"
#include "proto/wire.pb.h"

namespace dctrain {

// What one exchange round costs a member, by schedule (exchange/README.md):
//   direct: 2 hops; 2(N-1) messages per piece of its shard; 2(N-1)/N of
//     the buffer each way;
//   halving: 2 log2(P) hops (2 more for a folded pair); at level j half
//     its range in pieces, twice (in and out); 2(P-1)/P of the buffer, and
//     a folded pair's whole buffer in and the whole sum out.
struct ExchangeRoundCost {
  double hops = 0.0;
  double messages = 0.0;  // sent by the member on the round's longest path
  double bytes = 0.0;     // sent by it, each way
};
ExchangeRoundCost exchange_round_cost(ExchangeSchedule schedule, uint32_t members,
                                      double buffer_bytes, double piece_bytes);

// The exchange's costs besides latency and bandwidth.
struct ExchangeNetworkCosts {
  uint32_t halving_from = kHalvingFromMembers;  // the schedule by member count
  double piece_bytes = 1048576.0;               // ExchangeOptions::piece_bytes
  double message_seconds = 0.0;                 // what one message costs its sender
};

class SimulatedNetwork {
 public:
  enum class Direction { kToCoordinator, kToWorker };

  // `gradient_bytes`: what a contribution, an update or a welcome carries
  // beyond its envelope (the real model's parameters x 4).
  static SimulatedNetwork star(double latency_seconds, double bandwidth_bytes,
                               double gradient_bytes);
  // `members`: the workers in a round.
  static SimulatedNetwork exchange(double latency_seconds, double bandwidth_bytes,
                                   double gradient_bytes, uint32_t members,
                                   const ExchangeNetworkCosts& costs = {});
  static SimulatedNetwork fitted(double seconds_per_message);

  // When `body` (its envelope `envelope_bytes` long) sent at `sent` arrives.
  // Calls come in the order of their send times (the event queue's).
  double arrival(double sent, Direction direction, v1::Envelope::BodyCase body,
                 double envelope_bytes);

  // Exchange: a member's round, from its readiness to its sum.
  double round_seconds() const;

  // Exchange: the schedule its rounds run, and what one costs a member.
  ExchangeSchedule schedule() const;
  ExchangeRoundCost round_cost() const;
  double message_seconds() const { return costs_.message_seconds; }
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
                   uint32_t members, const ExchangeNetworkCosts& costs = {});
  Kind kind_;
  double latency_;
  double bandwidth_;
  double gradient_bytes_;
  uint32_t members_;
  ExchangeNetworkCosts costs_;
  double inbound_free_ = 0.0;   // when the coordinator's link is free of what it receives
  double outbound_free_ = 0.0;  // and of what it sends
};

}  // namespace dctrain
