#include "coordinator/planes/round_deadline.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace dctrain {

RoundDeadline::RoundDeadline(double multiple, double floor_seconds, double ceiling_seconds)
    : multiple_(multiple),
      floor_(std::min(floor_seconds, ceiling_seconds)),
      ceiling_(ceiling_seconds) {}

RoundDeadline::RoundDeadline(const v1::DataPlaneConfig& config)
    : RoundDeadline(config.round_deadline_multiple(), config.round_deadline_floor_seconds(),
                    config.timeout_seconds()) {}

void RoundDeadline::observe(double round_seconds) {
  if (!std::isfinite(round_seconds) || round_seconds < 0.0) return;
  recent_.push_back(round_seconds);
  if (recent_.size() > kWindow) recent_.pop_front();
}

double RoundDeadline::percentile() const {
  if (recent_.empty()) return 0.0;
  std::vector<double> sorted(recent_.begin(), recent_.end());
  std::sort(sorted.begin(), sorted.end());
  // The nearest rank: the smallest value with at least 95% of the rounds at
  // or below it.
  const auto rank = static_cast<size_t>(std::ceil(kQuantile * static_cast<double>(sorted.size())));
  return sorted[std::max<size_t>(rank, 1) - 1];
}

double RoundDeadline::limit_for(double round_seconds) const {
  return std::clamp(multiple_ * round_seconds, floor_, ceiling_);
}

double RoundDeadline::seconds_given(double this_round) const {
  if (!recent_.empty() || !std::isfinite(this_round) || this_round < 0.0) return seconds();
  return limit_for(this_round);
}

double RoundDeadline::seconds() const {
  return recent_.empty() ? ceiling_ : limit_for(percentile());
}

}  // namespace dctrain
