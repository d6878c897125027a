// A peer's clock offset to this process's clock, estimated from round trips
// as NTP does (RFC 5905): this side sends at t0 (its clock), the peer
// receives at t1 and answers at t2 (the peer's clock), this side receives
// the answer at t3. With one-way delays d1 and d2,
//   offset = ((t1 - t0) + (t2 - t3)) / 2 = true offset + (d1 - d2) / 2
//   delay  = (t3 - t0) - (t2 - t1)      = d1 + d2,
// so the estimate is off by at most delay / 2, whatever the asymmetry. The
// estimator keeps the round trip with the smallest delay (the tightest
// bound; queueing only ever adds delay). Clock drift between two samples is
// taken as negligible: a few parts per million over a run's seconds.
#pragma once

#include <cstdint>
#include <optional>

namespace dctrain {

struct RoundTrip {
  double sent = 0.0;           // t0, this side's clock
  double peer_received = 0.0;  // t1, the peer's clock
  double peer_sent = 0.0;      // t2, the peer's clock
  double received = 0.0;       // t3, this side's clock
};

struct ClockEstimate {
  double offset = 0.0;      // peer clock minus this clock, seconds
  double round_trip = 0.0;  // the delay of the round trip it came from
  // The most the offset can be wrong by (one-way delays are not negative).
  double error_bound() const { return round_trip / 2.0; }
};

class ClockOffsetEstimator {
 public:
  // Takes one round trip. A sample whose timestamps are not finite, run
  // backwards, or give a negative delay cannot come from real clocks: it is
  // refused (false) and changes nothing.
  bool add(const RoundTrip& r);

  // The estimate from the round trip with the smallest delay so far.
  std::optional<ClockEstimate> estimate() const { return best_; }
  uint64_t samples() const { return samples_; }

  // A time on the peer's clock on this side's clock (the offset taken away);
  // the time unchanged before any sample.
  double to_local(double peer_time) const { return best_ ? peer_time - best_->offset : peer_time; }

 private:
  std::optional<ClockEstimate> best_;
  uint64_t samples_ = 0;
};

}  // namespace dctrain
