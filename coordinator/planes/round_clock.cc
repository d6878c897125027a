#include "coordinator/planes/round_clock.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace dctrain {

void RoundClock::plan(double now, double tau, double grace, bool redo) {
  const double earlier_bound_end = compute_bound_end();
  planned_at_ = now;
  redo_ = redo;
  arrivals_.clear();
  first_arrival_.reset();
  heard_from_all_ = 0;
  corroborated_at_.reset();
  if (redo) {
    // Members that still compute the step keep the first round's bound.
    compute_bound_ = std::max(0.0, earlier_bound_end - now);
  } else if (std::isfinite(tau)) {
    compute_bound_ = std::max(0.0, tau) + std::max(0.0, grace);
  } else {
    double longest = 0.0;
    for (double span : spans_) longest = std::max(longest, span);
    compute_bound_ = spans_.empty() ? std::numeric_limits<double>::infinity()
                                    : std::max(timeout_, 2.0 * longest);
  }
}

void RoundClock::arrived(uint32_t rank, double now, double compute_seconds, bool heard_from_all) {
  if (arrivals_.contains(rank)) return;  // its first report of the round counts
  if (!first_arrival_) first_arrival_ = now;
  if (heard_from_all && ++heard_from_all_ == 2) corroborated_at_ = now;
  const double since_plan = std::max(0.0, now - planned_at_);
  // A redo's members computed before it was planned: its time is the round's.
  double compute = redo_ || !std::isfinite(compute_seconds) ? 0.0 : compute_seconds;
  compute = std::clamp(compute, 0.0, since_plan);
  arrivals_[rank] = Arrival{now, compute};
}

std::optional<double> RoundClock::overdue_at(double round_deadline) const {
  const double bound_end = compute_bound_end();
  std::optional<double> at;
  if (std::isfinite(bound_end)) {
    at = std::max(first_arrival_.value_or(bound_end), bound_end) + round_deadline;
  }
  if (corroborated_at_) {
    const double corroborated = *corroborated_at_ + round_deadline;
    at = at ? std::min(*at, corroborated) : corroborated;
  }
  return at;
}

std::optional<double> RoundClock::round_seconds() const {
  if (arrivals_.empty()) return std::nullopt;
  std::vector<double> times;
  times.reserve(arrivals_.size());
  for (const auto& [rank, a] : arrivals_) times.push_back(a.at - planned_at_ - a.compute);
  std::sort(times.begin(), times.end());
  // The lower median: with two members, the smaller of the two.
  return std::max(0.0, times[(times.size() - 1) / 2]);
}

void RoundClock::committed() {
  if (redo_ || arrivals_.empty()) return;
  double last = planned_at_;
  for (const auto& [rank, a] : arrivals_) last = std::max(last, a.at);
  spans_.push_back(last - planned_at_);
  if (spans_.size() > kSpanWindow) spans_.pop_front();
}

}  // namespace dctrain
