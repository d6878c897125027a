// The step threshold tau: fixed, or chosen from measured micro-batch times
// (DropCompute's rule, re-estimated on a sliding window), and the model
// behind the choice as pure functions, so a report can put a predicted
// speedup beside the measured one.
//
// The model. A worker whose plan has micro-batches of compute times
// t_1..t_m (cumulative c_k = t_1 + ... + t_k, c_0 = 0) starts micro-batch k
// under tau iff c_{k-1} < tau, exactly as worker/compute_loop.cc reads its
// step compute clock before each micro-batch and starts none once the clock
// is >= tau. It stops at c_j, j the last started (micro-batch 1 always
// starts); the other m - j are dropped. A step's compute time is the maximum
// over its workers; its wall time adds an overhead o (plans, contributions,
// reduce, broadcast, the coordinator's update), measured as step wall time
// plus update time minus the slowest worker's compute.
//
// For a candidate tau, over recorded steps s = 1..S:
//   drop rate   d = micro-batches not started / micro-batches planned
//   T_inf       = mean_s max_w c_{w,m}           (no threshold)
//   T_tau       = mean_s max_w c_{w,j(tau)}      (truncated)
//   time saved  r = (T_inf - T_tau) / (T_inf + o)
//   speedup     (1 - d) / (1 - r) - 1 = (1 - d) (T_inf + o) / (T_tau + o) - 1,
// the throughput of completed micro-batches against tau = inf. The rule
// takes the argmax over a grid between the fastest and the slowest
// cumulative time; inf when no candidate has a positive speedup.
//
// Assumptions (what a prediction rests on):
// - A micro-batch takes as long whether or not others are dropped, and the
//   overhead o does not depend on tau.
// - The recorded steps stand for the steps to come (the times are stationary
//   over the window).
// - The argmax is evaluated on the data it was chosen from, so its predicted
//   speedup is optimistic by selection; the measured one is the judge.
// - Requeued micro-batches cost the same as fresh ones; the throughput
//   counts completed micro-batches, whichever step they were planned in.
// - Under a finite tau the dropped micro-batches' times are unknown; the
//   sliding window fills each with a time drawn from the same worker's
//   completed micro-batches in the window (counter-based, reproducible). By
//   Wald's identity the completed times of a stopped sequence are an
//   unbiased sample of its micro-batch times when they are independent.
// - Predictions for another worker count N (predict_step_time) draw each
//   worker's step independently from the pooled recorded worker steps
//   (i.i.d. workers): E[max of N draws] is computed exactly from the
//   empirical distribution. Persistent stragglers count only in the
//   proportion they had in the recording.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proto/config.pb.h"

namespace dctrain {

// One step as the model sees it: each worker's micro-batch compute times in
// seconds (injected delay included), in plan order, for its whole plan.
struct RecordedStep {
  std::vector<std::vector<double>> workers;
};

// Micro-batches a worker starts under `tau` (c_{k-1} < tau), and the compute
// time it reports: c_j for the last started j. tau = inf starts them all.
struct Truncation {
  size_t started = 0;
  double seconds = 0.0;
};
Truncation truncate_at(const std::vector<double>& micro_batch_seconds, double tau);

// The prediction at one tau.
struct ThresholdCandidate {
  double tau = 0.0;
  double drop_rate = 0.0;        // d
  double compute_seconds = 0.0;  // T_tau (T_inf at tau = inf)
  double time_saved = 0.0;       // r, relative to T_inf + o
  double speedup = 0.0;          // (1 - d) / (1 - r) - 1
};

struct ThresholdEstimate {
  double tau = 0.0;                      // the argmax; inf when no candidate pays
  double drop_rate = 0.0;                // at tau
  double time_saved = 0.0;               // at tau, relative
  double speedup = 0.0;                  // at tau; 0 at inf
  double step_seconds = 0.0;             // predicted at tau: T_tau + o
  double baseline_step_seconds = 0.0;    // predicted at inf: T_inf + o
  double overhead_seconds = 0.0;         // o, as given
  size_t steps = 0;                      // recorded steps used
  std::vector<ThresholdCandidate> grid;  // every candidate, in increasing tau
};

// The rule at one tau, over `steps` (each with at least one worker).
ThresholdCandidate evaluate_threshold(const std::vector<RecordedStep>& steps,
                                      double overhead_seconds, double tau);

// The rule over `grid_points` (>= 2) candidates evenly spaced from the
// smallest first micro-batch time to the largest worker step time. Among
// candidates tied at the best speedup (the prediction is piecewise constant
// in tau) it takes the middle of the run of ties that holds the first best,
// the point farthest from the edges where the prediction changes. Empty
// `steps`: tau = inf and nothing else.
ThresholdEstimate estimate_threshold(const std::vector<RecordedStep>& steps,
                                     double overhead_seconds, int grid_points);

// E[max of n independent draws] from the empirical distribution of `values`
// (non-empty): sum over sorted v_(i) of v_(i) ((i/k)^n - ((i-1)/k)^n), k
// values.
double expected_maximum(std::vector<double> values, uint32_t n);

// The model for N workers drawn i.i.d. from recorded worker steps.
struct StepTimePrediction {
  uint32_t workers = 0;
  double tau = 0.0;
  double compute_seconds = 0.0;           // E[max over N of the truncated compute]
  double baseline_compute_seconds = 0.0;  // E[max over N of the full compute]
  double step_seconds = 0.0;              // compute_seconds + overhead
  double baseline_step_seconds = 0.0;     // baseline_compute_seconds + overhead
  double drop_rate = 0.0;                 // expected fraction of micro-batches not started
  double speedup = 0.0;                   // (1 - d) baseline_step / step - 1
};

// `worker_steps`: recorded worker steps (each a whole plan's micro-batch
// times, non-empty), pooled over workers and steps; `workers` >= 1.
StepTimePrediction predict_step_time(const std::vector<std::vector<double>>& worker_steps,
                                     uint32_t workers, double tau, double overhead_seconds = 0.0);

// ---------------------------------------------------------------- runtime

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
};

// Completes observed steps for the model: every dropped micro-batch gets a
// time drawn from the same rank's completed micro-batches in `window` (from
// every rank's when it has none), keyed by (seed, step, rank, index).
std::vector<RecordedStep> complete_observations(const std::vector<StepObservation>& window,
                                                uint64_t seed);

// The median overhead of `window`'s steps whose overhead is known (of all
// its steps when none is); 0 for an empty window.
double median_overhead(const std::vector<StepObservation>& window);

// An estimate run by the automatic threshold, and what came of it.
struct ThresholdDecision {
  uint64_t step = 0;  // estimated after this step; applies from the next
  std::string why;    // "warm-up" or "re-estimate"
  double old_tau = 0.0;
  double new_tau = 0.0;  // == old_tau when kept
  bool changed = false;
  ThresholdEstimate estimate;
  ThresholdCandidate in_force;  // the prediction at old_tau on the same window
};

// The threshold in force. Policy "fixed": step.tau, always. Policy "auto":
// the first skip_steps observed steps are not recorded (start-up: data
// loading, cold caches, as the DropCompute authors skip theirs); inf during
// the next warmup_steps; then the estimate over them; then, every
// reestimate_every_steps recorded steps, an estimate over the last
// window_steps. The overhead o is the median over the window's steps whose
// overhead is known (all of them when none is), robust to the odd slow one. tau moves only when the estimate's speedup beats
// the prediction at the tau in force by more than min_gain and the new tau
// differs from the old by more than min_change (relative; inf against a
// finite tau always differs).
class Threshold {
 public:
  // `step` finalized (runtime/run_config.h); `seed` keys the imputation.
  Threshold(const v1::StepConfig& step, uint64_t seed);

  bool automatic() const { return automatic_; }
  double tau() const { return tau_; }
  bool warming_up() const {
    return automatic_ && (skipped_ < config_.skip_steps() || observed_ < config_.warmup_steps());
  }

  // Records a step (policy "auto"); returns the decision when an estimate ran.
  std::optional<ThresholdDecision> observe(StepObservation step);

 private:
  bool automatic_ = false;
  v1::AutoTauConfig config_;
  uint64_t seed_ = 0;
  double tau_ = 0.0;
  uint64_t skipped_ = 0;   // start-up steps seen and not recorded
  uint64_t observed_ = 0;  // steps recorded
  std::vector<StepObservation> window_;
};

}  // namespace dctrain
