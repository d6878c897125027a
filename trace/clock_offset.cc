#include "trace/clock_offset.h"

#include <cmath>

namespace dctrain {

bool ClockOffsetEstimator::add(const RoundTrip& r) {
  if (!std::isfinite(r.sent) || !std::isfinite(r.peer_received) || !std::isfinite(r.peer_sent) ||
      !std::isfinite(r.received)) {
    return false;
  }
  if (r.received < r.sent || r.peer_sent < r.peer_received) return false;
  const double delay = (r.received - r.sent) - (r.peer_sent - r.peer_received);
  if (delay < 0.0) return false;
  ++samples_;
  if (!best_ || delay < best_->round_trip) {
    best_ = ClockEstimate{((r.peer_received - r.sent) + (r.peer_sent - r.received)) / 2.0, delay};
  }
  return true;
}

}  // namespace dctrain
