#include "sim/network.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace dctrain {
namespace {

bool carries_gradient(v1::Envelope::BodyCase body) {
  return body == v1::Envelope::kContribution || body == v1::Envelope::kUpdate ||
         body == v1::Envelope::kWelcome;
}

}  // namespace

SimulatedNetwork::SimulatedNetwork(Kind kind, double latency, double bandwidth,
                                   double gradient_bytes, uint32_t members)
    : kind_(kind),
      latency_(latency),
      bandwidth_(bandwidth),
      gradient_bytes_(gradient_bytes),
      members_(std::max<uint32_t>(members, 1)) {}

SimulatedNetwork SimulatedNetwork::star(double latency_seconds, double bandwidth_bytes,
                                        double gradient_bytes) {
  return SimulatedNetwork(Kind::kStar, latency_seconds, bandwidth_bytes, gradient_bytes, 1);
}

SimulatedNetwork SimulatedNetwork::exchange(double latency_seconds, double bandwidth_bytes,
                                            double gradient_bytes, uint32_t members) {
  return SimulatedNetwork(Kind::kExchange, latency_seconds, bandwidth_bytes, gradient_bytes,
                          members);
}

SimulatedNetwork SimulatedNetwork::fitted(double seconds_per_message) {
  return SimulatedNetwork(Kind::kFitted, seconds_per_message,
                          std::numeric_limits<double>::infinity(), 0.0, 1);
}

double SimulatedNetwork::round_seconds() const {
  const double n = members_;
  return 2.0 * latency_ + 2.0 * (n - 1.0) / n * gradient_bytes_ / bandwidth_;
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
    case Kind::kExchange:
      return fmt::format(
          "exchange among {} workers: a member's round takes 2 x {} s + 2({}-1)/{} x {} bytes / {} "
          "bytes per second = {:.6g} s from its readiness, then its report reaches the "
          "coordinator; other messages {} s + bytes / bandwidth, welcomes through the "
          "coordinator's link; rounds do not fail",
          members_, latency_, members_, members_, gradient_bytes_, bandwidth_, round_seconds(),
          latency_);
    case Kind::kFitted:
      return fmt::format("fitted from the trace: {:.4g} s per message, whatever its bytes",
                         latency_);
  }
  return "";
}

}  // namespace dctrain
