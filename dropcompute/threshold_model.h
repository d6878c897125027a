// The DropCompute threshold model as pure functions: what a worker starts
// under a threshold tau, the drop rate, the step time and the effective
// speedup over recorded micro-batch times, the best tau on a grid, and the
// expected step time for N workers. No policy and no state: the
// coordinator's automatic threshold (coordinator/threshold.h) decides with
// it, and dctrain-report (tools/report/prediction.h) predicts with it.
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
//   coordinator's sliding window (coordinator/threshold.h) fills each with
//   a time drawn from the same worker's completed micro-batches in the
//   window (counter-based, reproducible). By Wald's identity the completed
//   times of a stopped sequence are an unbiased sample of its micro-batch
//   times when they are independent.
// - Predictions for another worker count N (predict_step_time) draw each
//   worker's step independently from the pooled recorded worker steps
//   (i.i.d. workers): E[max of N draws] is computed exactly from the
//   empirical distribution. Persistent stragglers count only in the
//   proportion they had in the recording.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

namespace dctrain {

// DropCompute's effective speedup of a threshold over tau = inf:
// (1 - drop_rate) / (1 - time_saved) - 1; 0 when nothing would remain.
double effective_speedup(double drop_rate, double time_saved);

// Where candidate taus lie: from the smallest first micro-batch time to the
// largest worker step time of the worker steps added.
struct TauSpan {
  double lo = std::numeric_limits<double>::infinity();
  double hi = 0.0;
  void add(const std::vector<double>& micro_batch_seconds);
  bool empty() const { return std::isinf(lo); }
};

// `points` (>= 2) candidate taus evenly spaced over `span` (not empty).
std::vector<double> tau_grid(const TauSpan& span, int points);

// The candidate the rule takes among `speedups` (one per grid point, in
// increasing tau): the prediction is piecewise constant in tau, so among
// candidates tied at the best it takes the middle of the run of ties that
// holds the first best, the point farthest from the edges where the
// prediction changes. Nothing when no candidate has a positive speedup.
std::optional<size_t> best_candidate(const std::vector<double>& speedups);

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

// The rule over `grid_points` (>= 2) candidates evenly spaced (tau_grid)
// from the smallest first micro-batch time to the largest worker step time;
// among candidates tied at the best speedup it takes best_candidate's.
// Only candidates whose drop rate is at most `max_drop_rate` may be taken
// (the grid still lists every one): a larger drop rate shrinks the
// effective batch, which changes the optimisation, whatever it saves in
// time. Empty `steps`: tau = inf and nothing else.
ThresholdEstimate estimate_threshold(const std::vector<RecordedStep>& steps,
                                     double overhead_seconds, int grid_points,
                                     double max_drop_rate = 1.0);

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

// predict_step_time for several worker counts and many taus over the same
// steps, with the same figures bit for bit: what does not depend on tau
// (the full steps' expected maxima, each count's (i/k)^n) is computed
// once, and each tau truncates and sorts the steps once for every count.
// A report's curves over a 1,024-worker run's steps took minutes one call
// at a time. Keeps a reference to `worker_steps`.
class StepTimePredictor {
 public:
  StepTimePredictor(const std::vector<std::vector<double>>& worker_steps,
                    std::vector<uint32_t> workers, double overhead_seconds = 0.0);
  // One prediction per worker count, in the order given.
  std::vector<StepTimePrediction> at(double tau) const;

 private:
  // expected_maximum of sorted `values` for the count at `count`.
  double expected_maximum_sorted(const std::vector<double>& values, size_t count) const;

  const std::vector<std::vector<double>>& worker_steps_;
  std::vector<uint32_t> workers_;
  double overhead_seconds_;
  std::vector<std::vector<double>> powers_;  // by count: ((i+1)/k)^n for i < k
  std::vector<double> baseline_compute_;     // by count
};

}  // namespace dctrain
