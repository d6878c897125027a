// The exchange's round deadline, from measured rounds, as tau follows
// measured compute: how long a member of a round may wait, once every other
// member has been heard from, before it gives up on the round; and how long
// the coordinator waits for a member's report (or a sum, or a sketch) once
// a round is due. Both are one figure: the recent rounds' own time (as the
// coordinator's clock measures it: coordinator/planes/round_clock.h) times a
// multiple, at least a floor, at most the configured timeout.
//
//   seconds() = clamp(multiple x p95(last kWindow rounds), floor, ceiling)
//
// From the first measured round on (the 95th percentile of fewer than 20
// rounds is their slowest); before any, the ceiling: nothing is known of
// this run's rounds yet.
#pragma once

#include <cstddef>
#include <deque>

#include "proto/config.pb.h"

namespace dctrain {

class RoundDeadline {
 public:
  static constexpr size_t kWindow = 50;  // rounds kept
  static constexpr double kQuantile = 0.95;

  RoundDeadline(double multiple, double floor_seconds, double ceiling_seconds);
  // From a finalized run config: data_plane's multiple, floor and timeout.
  explicit RoundDeadline(const v1::DataPlaneConfig& config);

  // One successful round: the slowest member's round time. Not finite or
  // negative: ignored.
  void observe(double round_seconds);
  // The limit in force.
  double seconds() const;
  // The same, or before any round was observed, the multiple of
  // `this_round` (the round in flight, as measured so far) within the floor
  // and the ceiling: what the coordinator waits for a member's answer in a
  // run's first round, rather than the ceiling.
  double seconds_given(double this_round) const;
  size_t observed() const { return recent_.size(); }
  // The high percentile the limit is a multiple of (0 before any round).
  double percentile() const;

 private:
  // multiple x `round_seconds`, within the floor and the ceiling.
  double limit_for(double round_seconds) const;

  double multiple_;
  double floor_;
  double ceiling_;
  std::deque<double> recent_;
};

}  // namespace dctrain
