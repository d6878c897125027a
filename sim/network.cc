#include "sim/network.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace dctrain {
namespace {

bool carries_gradient(v1::Envelope::BodyCase body) {
  return body == v1::Envelope::kContribution || body == v1::Envelope::kUpdate ||
         body == v1::Envelope::kWelcome;
}

}  // namespace

ExchangeRoundCost exchange_round_cost(ExchangeSchedule schedule, uint32_t members,
                                      double buffer_bytes, double piece_bytes) {
  const double n = std::max<uint32_t>(members, 1);
  // Pieces of a span of `bytes` cut in `parts` equal parts (at least one each).
  const auto pieces = [piece_bytes](double bytes, double parts) {
    return parts * std::max(1.0, std::ceil(bytes / parts / piece_bytes));
  };
  ExchangeRoundCost c;
  if (n == 1) return c;
  if (schedule == ExchangeSchedule::kDirect) {
    c.hops = 2.0;
    c.messages = 2.0 * (n - 1.0) * pieces(buffer_bytes / n, 1.0);
    c.bytes = 2.0 * (n - 1.0) / n * buffer_bytes;
    return c;
  }
  const HalvingLayout layout(members);
  const double p = static_cast<double>(layout.halvers);
  for (size_t j = 0; j < layout.levels; ++j) {
    // Half of the range before level j, in and out (its pieces go as
    // messages of up to a piece each, whatever blocks they span).
    c.messages += 2.0 * pieces(buffer_bytes / std::ldexp(1.0, static_cast<int>(j) + 1), 1.0);
  }
  c.hops = 2.0 * static_cast<double>(layout.levels);
  c.bytes = 2.0 * (p - 1.0) / p * buffer_bytes;
  if (layout.extra > 0) {
    // The longest path runs through a folded pair: the whole buffer in, the
    // whole sum out.
    c.hops += 2.0;
    c.messages += 2.0 * pieces(buffer_bytes, 1.0);
    c.bytes += 2.0 * buffer_bytes;
  }
  return c;
}

SimulatedNetwork::SimulatedNetwork(Kind kind, double latency, double bandwidth,
                                   double gradient_bytes, uint32_t members,
                                   const ExchangeNetworkCosts& costs)
    : kind_(kind),
      latency_(latency),
      bandwidth_(bandwidth),
      gradient_bytes_(gradient_bytes),
      members_(std::max<uint32_t>(members, 1)),
      costs_(costs) {}

SimulatedNetwork SimulatedNetwork::star(double latency_seconds, double bandwidth_bytes,
                                        double gradient_bytes) {
  return SimulatedNetwork(Kind::kStar, latency_seconds, bandwidth_bytes, gradient_bytes, 1);
}

SimulatedNetwork SimulatedNetwork::exchange(double latency_seconds, double bandwidth_bytes,
                                            double gradient_bytes, uint32_t members,
                                            const ExchangeNetworkCosts& costs) {
  return SimulatedNetwork(Kind::kExchange, latency_seconds, bandwidth_bytes, gradient_bytes,
                          members, costs);
}

SimulatedNetwork SimulatedNetwork::fitted(double seconds_per_message) {
  return SimulatedNetwork(Kind::kFitted, seconds_per_message,
                          std::numeric_limits<double>::infinity(), 0.0, 1);
}

ExchangeSchedule SimulatedNetwork::schedule() const {
  return schedule_for(members_, costs_.halving_from);
}

ExchangeRoundCost SimulatedNetwork::round_cost() const {
  return exchange_round_cost(schedule(), members_, gradient_bytes_, costs_.piece_bytes);
}

double SimulatedNetwork::round_seconds() const {
  const ExchangeRoundCost c = round_cost();
  return c.hops * latency_ + c.messages * costs_.message_seconds + c.bytes / bandwidth_;
}

double SimulatedNetwork::arrival(double sent, Direction direction, v1::Envelope::BodyCase body,
                                 double envelope_bytes) {
  if (kind_ == Kind::kFitted) return sent + latency_;
  double ready = sent;
  if (kind_ == Kind::kExchange && direction == Direction::kToCoordinator &&
      body == v1::Envelope::kContribution) {
    ready += round_seconds();  // the round among the members, then the report
  }
  // Only what carries the model's size waits for the coordinator's link:
  // the small messages' share of it is negligible, and such a message is
  // not held behind a gradient that entered the queue ahead of it.
  const bool queued =
      carries_gradient(body) && (kind_ == Kind::kStar || body == v1::Envelope::kWelcome);
  if (!queued) return ready + latency_ + envelope_bytes / bandwidth_;
  double& free = direction == Direction::kToCoordinator ? inbound_free_ : outbound_free_;
  free = std::max(ready, free) + (envelope_bytes + gradient_bytes_) / bandwidth_;
  return free + latency_;
}

const char* SimulatedNetwork::kind() const {
  switch (kind_) {
    case Kind::kStar:
      return "star";
    case Kind::kExchange:
      return "exchange";
    case Kind::kFitted:
      return "fitted";
  }
  return "?";
}

std::string SimulatedNetwork::describe() const {
  switch (kind_) {
    case Kind::kStar:
      return fmt::format(
          "star: {} s latency + bytes / {} bytes per second per message; contributions, updates "
          "and welcomes ({} bytes of model beyond the envelope) pass the coordinator's link one at "
          "a time each way",
          latency_, bandwidth_, gradient_bytes_);
    case Kind::kExchange: {
      const ExchangeRoundCost c = round_cost();
      return fmt::format(
          "exchange among {} workers on the {} schedule: a member's round takes {} hops x {} s + "
          "{} messages x {} s + {} bytes / {} bytes per second = {:.6g} s from its readiness, "
          "then its report reaches the coordinator; other messages {} s + bytes / bandwidth, "
          "welcomes through the coordinator's link; rounds do not fail",
          members_, schedule() == ExchangeSchedule::kHalving ? "halving" : "direct", c.hops,
          latency_, c.messages, costs_.message_seconds, c.bytes, bandwidth_, round_seconds(),
          latency_);
    }
    case Kind::kFitted:
      return fmt::format("fitted from the trace: {:.4g} s per message, whatever its bytes",
                         latency_);
  }
  return "";
}

}  // namespace dctrain
