// What the coordinator's own clock says about an exchange round, so that no
// member's word about its own timing (or about the round's) moves a
// deadline or gets another member cut (docs/security.md):
//
// - The plan's compute bound: a member may compute until the round was
//   planned + tau + grace (finite tau); with tau = inf, until twice the
//   longest span (plan to last report, this clock) of the recent committed
//   rounds, at least the data plane's timeout; before any round was
//   committed, no bound (a run's first steps wait for their reports). A
//   redo keeps what is left of the first round's bound (members may still
//   compute), nothing more.
// - When the members that have not reported are overdue (asked to end the
//   round): the round deadline after the later of the first report's
//   arrival and the compute bound; with a finite bound, also without any
//   report (a member that holds the round past tau is late by this clock,
//   whatever it reports). One member reporting early ("failed", "heard
//   from all") moves nothing: the others are inside the plan's bounds
//   until the bound has passed. Two or more reports that heard from every
//   member corroborate each other (the members not yet reported sent their
//   parts, so their compute is done): then the round deadline after the
//   second of them, if sooner. A member taken out before the bound has
//   passed is cut from the step on that word, never counted late
//   (past_bound()).
// - The round's own time, for the round deadline: for each member, its
//   report's arrival less the plan and its compute (the compute it claims,
//   held within [0, the arrival]); the round's time is the lower median of
//   those, so one member (or any minority) cannot widen the deadline, and
//   can narrow it only to what the honest majority measured.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>

namespace dctrain {

class RoundClock {
 public:
  static constexpr size_t kSpanWindow = 50;  // committed rounds whose spans bound tau = inf

  // `timeout`: the data plane's (the least compute bound with tau = inf).
  explicit RoundClock(double timeout_seconds) : timeout_(timeout_seconds) {}

  // A round planned at `now` under `tau` (+ `grace`): the step's first
  // round when `redo` is false, else a redo among members that computed.
  void plan(double now, double tau, double grace, bool redo);
  // A member's report arrived at `now`, claiming `compute_seconds` of
  // compute and, with `heard_from_all`, that every member's parts came.
  void arrived(uint32_t rank, double now, double compute_seconds, bool heard_from_all);

  double planned_at() const { return planned_at_; }
  // The end of the plan's compute bound, on this clock.
  double compute_bound_end() const { return planned_at_ + compute_bound_; }
  // When the members that have not reported are overdue under
  // `round_deadline`; none without a finite compute bound and a report.
  std::optional<double> overdue_at(double round_deadline) const;
  // Whether `now` is past the plan's compute bound and `round_deadline`
  // after it: a member not reported then is late by this clock alone.
  bool past_bound(double now, double round_deadline) const {
    return now > compute_bound_end() + round_deadline;
  }
  // The round's time as measured here (see above); none without a report.
  std::optional<double> round_seconds() const;
  // A committed round: its span (plan to last report) joins those that
  // bound the compute of a round under tau = inf.
  void committed();

 private:
  struct Arrival {
    double at = 0.0;
    double compute = 0.0;  // as claimed, held within [0, at - planned_at]
  };
  double timeout_;
  double planned_at_ = 0.0;
  double compute_bound_ = 0.0;
  bool redo_ = false;
  std::map<uint32_t, Arrival> arrivals_;
  std::optional<double> first_arrival_;
  size_t heard_from_all_ = 0;              // reports that say so
  std::optional<double> corroborated_at_;  // the second of those
  std::deque<double> spans_;               // committed first rounds, plan to last report
};

}  // namespace dctrain
