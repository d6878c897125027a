// The step threshold tau: fixed, or chosen from measured micro-batch times
// (DropCompute's rule, re-estimated on a sliding window). The model behind
// the choice, with its assumptions, is dropcompute/threshold_model.h (pure
// functions, which a report also uses to put a predicted speedup beside the
// measured one); this file holds the policy: what the coordinator observes,
// how dropped micro-batches' times are filled in, and when tau moves.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dropcompute/threshold_model.h"
#include "proto/config.pb.h"

namespace dctrain {

// What the coordinator observed in a step. A worker that missed the deadline
// or died is observed with no completed micro-batch and its whole plan as
// dropped, so its times are filled like any drop's.
struct WorkerObservation {
  uint32_t rank = 0;
  std::vector<double> micro_batch_seconds;  // completed, in the order they ran
  uint32_t dropped = 0;                     // planned, never started (they follow the completed)
};

struct StepObservation {
  uint64_t step = 0;
  std::vector<WorkerObservation> workers;
  double overhead_seconds = 0.0;  // plans out to update applied - slowest compute, >= 0
  bool overhead_known = true;     // false when the step waited for a missed worker's deadline
  double cycle_seconds = 0.0;     // plans out to update applied; 0: not measured
};

// Completed micro-batches over the step cycles they took: what a threshold
// is for, measured rather than predicted.
struct Throughput {
  double micro_batches = 0.0;
  double seconds = 0.0;
  uint64_t steps = 0;
  void add(const StepObservation& step);
  // Micro-batches per second; nothing when no cycle was measured.
  std::optional<double> rate() const;
};

// Completes observed steps for the model: every dropped micro-batch gets a
// time drawn from the same rank's completed micro-batches in `window` (from
// every rank's when it has none), keyed by (seed, step, rank, index).
std::vector<RecordedStep> complete_observations(const std::vector<StepObservation>& window,
                                                uint64_t seed);

// The median overhead of `window`'s steps whose overhead is known (of all
// its steps when none is); 0 for an empty window.
double median_overhead(const std::vector<StepObservation>& window);

// The spread of the predicted gain of `tau` over `in_force` on `steps`: the
// 5th and 95th percentiles of the gain over resamples of the steps (drawn
// with replacement, keyed by `seed` and `step`). A gain whose low end is
// not above 0 cannot be told from the noise of the window.
struct GainInterval {
  double low = 0.0, high = 0.0;
};
GainInterval gain_interval(const std::vector<RecordedStep>& steps, double overhead_seconds,
                           double tau, double in_force, uint64_t seed, uint64_t step);

// A threshold for the log: "inf", or seconds to 3 significant digits.
std::string describe_tau(double tau);

// An estimate run by the automatic threshold, and what came of it.
struct ThresholdDecision {
  uint64_t step = 0;  // estimated after this step; applies from the next
  std::string why;    // "warm-up" or "re-estimate"
  double old_tau = 0.0;
  double new_tau = 0.0;  // == old_tau when kept
  bool changed = false;
  ThresholdEstimate estimate;
  ThresholdCandidate in_force;  // the prediction at old_tau on the same window
  // The tau in force would drop more than max_drop_rate on this window: it
  // moves to the estimate even when that does not pay more.
  bool in_force_over_bound = false;
  // The estimate's gain over the tau in force, with its spread over the
  // window (gain_interval); within_noise: its low end is not above 0, so
  // tau stays.
  double gain = 0.0;
  GainInterval gain_spread;
  bool within_noise = false;
  // why == "measured": the end of a trial (the candidate in new_tau when it
  // won, changed), with the throughputs it measured at the tau in force and
  // at the candidate. No estimate ran.
  std::optional<double> measured_before, measured_after;
  double tried_tau = 0.0;
  // An estimate that put its tau on trial (old_tau stays in force between
  // the candidate's steps until the trial ends).
  bool trial = false;
  // A move the estimate would make, not tried: the last trial failed, and
  // the threshold holds back (steps_held()).
  bool held = false;
};

// The threshold in force. Policy "fixed": step.tau, always. Policy "auto":
// the first skip_steps observed steps are not recorded (start-up: data
// loading, cold caches, as the DropCompute authors skip theirs); inf during
// the next warmup_steps; then the estimate over them; then, every
// reestimate_every_steps recorded steps, an estimate over the last
// window_steps. The overhead o is the median over the window's steps whose
// overhead is known (all of them when none is), robust to the odd slow one.
// tau moves when the new tau differs from the old by more than min_change
// (relative; inf against a finite tau always differs) and either the
// estimate's speedup beats the prediction at the tau in force by more than
// min_gain, beyond the window's noise (the gain's resampled 5th percentile
// above 0: an automatic threshold must not cost), or the tau in force would
// drop more than max_drop_rate on the window (the bound is a constraint: a tau chosen under it
// stops meeting it when the workers' times change, e.g. a straggler slowing down further).
//
// A move for its predicted gain whose resampled 5th percentile is not above
// sure_gain (0.15) is first put on trial: the next steps alternate between
// the candidate and the tau in force (the candidate first), and once each has run max(reestimate_every_steps, warmup_steps)
// steps their measured throughputs (Throughput: completed micro-batches
// over step cycles) decide. The candidate becomes tau only if it measured
// more; otherwise tau stays, and no move for gain is tried for the next
// window_steps steps, twice as many after each further failed trial (up to
// 16 windows). Alternating steps see the same host: a drift over the run
// (a neighbour's job, a CPU's clock) falls on both, as it would not on a
// before-and-after comparison. The model's assumptions fail on real hosts
// (workers sharing cores run faster while others stop early; the argmax is
// chosen on the data it is judged on), and the measurement is the judge: a
// wrong move costs half a trial, not the run. Steps without a measured
// cycle (cycle_seconds 0) are not put on trial: the move is made at once;
// so is a gain beyond sure_gain, more than the model was seen to miss by.
class Threshold {
 public:
  // `step` finalized (runtime/run_config.h); `seed` keys the imputation.
  Threshold(const v1::StepConfig& step, uint64_t seed);

  bool automatic() const { return automatic_; }
  // The tau of the next step: during a trial, the candidate every other step.
  double tau() const { return trial_ && trial_->candidate_next ? trial_->candidate : tau_; }
  bool warming_up() const {
    return automatic_ && (skipped_ < config_.skip_steps() || observed_ < config_.warmup_steps());
  }

  // Steps each tau runs in a trial.
  uint64_t trial_steps() const {
    return std::max<uint64_t>({config_.reestimate_every_steps(), config_.warmup_steps(), 1});
  }
  // Recorded steps before a move for gain may be tried again (after a lost
  // trial); 0 when none is held back.
  uint64_t steps_held() const { return hold_until_ > observed_ ? hold_until_ - observed_ : 0; }

  // Records a step (policy "auto"); returns the decision when an estimate
  // ran or a trial ended.
  std::optional<ThresholdDecision> observe(StepObservation step);

 private:
  bool automatic_ = false;
  v1::AutoTauConfig config_;
  uint64_t seed_ = 0;
  double tau_ = 0.0;
  uint64_t skipped_ = 0;   // start-up steps seen and not recorded
  uint64_t observed_ = 0;  // steps recorded
  std::vector<StepObservation> window_;

  // Counts the step just recorded into the trial in progress; once both
  // taus have run their steps, the decision that ends it.
  std::optional<ThresholdDecision> continue_trial(const StepObservation& step);

  struct Trial {
    double candidate = 0.0;
    Throughput at_tau, at_candidate;
    bool candidate_next = true;
  };
  std::optional<Trial> trial_;
  uint64_t hold_until_ = 0;  // no move for gain before this many recorded steps
  uint32_t failed_ = 0;      // trials the candidate lost
};

}  // namespace dctrain
