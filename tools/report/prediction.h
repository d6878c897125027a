// Predicted speedup of a threshold from a tau = inf baseline, with the
// threshold model the coordinator's automatic tau uses
// (dropcompute/threshold_model.h), two ways.
//
// At the baseline's own worker count (predict_speedup): the baseline's
// recorded steps replayed under tau (each worker keeps its rank and its
// measured micro-batch times, injected delay included, and starts none once
// its compute clock has reached tau); a step takes its slowest worker plus
// the baseline's mean time outside compute. So a persistent straggler stays
// one.
//
// At any worker count N (predicted_curve, best_tau_point): N workers drawn
// i.i.d. from the baseline's worker steps pooled over ranks, steps and seeds
// (predict_step_time). A persistent straggler becomes a random worker that
// is slow with the frequency it had in the recording. The time outside
// compute is the baseline's, whatever N.
//
// Speedup here is a ratio (1 at tau = inf), the table's samples/s basis:
// completed micro-batches per second against tau = inf's,
// (1 - drop rate) x baseline step time / step time, overhead in both.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tools/runs/run_folder.h"

namespace dctrain {

struct Prediction {
  double step_seconds_inf = 0.0;    // mean predicted step time at tau = inf
  double step_seconds_tau = 0.0;    // mean predicted step time under tau
  double completed_fraction = 1.0;  // micro-batches started / planned under tau
  double speedup = 1.0;             // completed micro-batches per second, over tau = inf's
  size_t steps = 0;                 // baseline steps replayed
};

// Nothing when the baseline has no step with micro-batch times.
std::optional<Prediction> predict_speedup(const RunFolder& baseline, double tau);

// ------------------------------------------------ other worker counts

// The worker counts of the predicted curves: 1, 2, 4, ..., 256.
std::vector<uint32_t> curve_worker_counts();

// Candidate taus of the best-tau search, as the automatic threshold's
// default (proto/config.proto, auto_tau.grid_points).
inline constexpr int kBestTauGridPoints = 200;
// The automatic threshold's default drop-rate bound (auto_tau.max_drop_rate).
inline constexpr double kDefaultMaxDropRate = 0.1;

// Baseline runs' worker steps pooled for predict_step_time.
struct PooledSteps {
  // Every contributing worker's micro-batch times of every step after
  // warm-up (warmup_steps), of every run given.
  std::vector<std::vector<double>> worker_steps;
  // Mean over those steps of step wall time + update - slowest compute (the
  // overhead o of dropcompute/threshold_model.h).
  double overhead_seconds = 0.0;
  size_t steps = 0;
  size_t runs = 0;
};

PooledSteps pool_baseline_steps(const std::vector<const RunFolder*>& baselines);

struct CurvePoint {
  uint32_t workers = 0;
  double tau = 0.0;        // inf: no threshold (the best tau when none pays)
  double speedup = 1.0;    // (1 - drop_rate) baseline_step_seconds / step_seconds
  double drop_rate = 0.0;  // expected fraction of micro-batches not started
  double step_seconds = 0.0, baseline_step_seconds = 0.0;  // overhead included
};

// predict_step_time at tau for each worker count. `pooled` must hold at
// least one worker step.
std::vector<CurvePoint> predicted_curve(const PooledSteps& pooled, double tau,
                                        const std::vector<uint32_t>& workers);

// The best tau for `workers`: predict_step_time over `grid_points` (>= 2)
// candidates evenly spaced from the smallest first micro-batch time to the
// largest worker step time, as estimate_threshold; among candidates tied at
// the best it takes the middle of the run of ties holding the first best.
// Only candidates whose predicted drop rate is at most `max_drop_rate` can
// win (1: no bound), as the automatic threshold's rule. tau = inf
// (speedup 1) when no candidate gains.
CurvePoint best_tau_point(const PooledSteps& pooled, uint32_t workers,
                          int grid_points = kBestTauGridPoints, double max_drop_rate = 1.0);
// best_tau_point for each of `workers`, the same points, with one
// prediction per candidate for all counts (StepTimePredictor).
std::vector<CurvePoint> best_tau_points(const PooledSteps& pooled,
                                        const std::vector<uint32_t>& workers,
                                        int grid_points = kBestTauGridPoints,
                                        double max_drop_rate = 1.0);

struct SpeedupCurve {
  std::string label;  // "best tau", "best tau, drop rate <= 10%", "tau = p90 (0.0421 s)"
  // The case's ("p90", "0.05", "auto"); "best" for the best tau, "bounded"
  // for the best within the drop-rate bound.
  std::string tau_policy;
  std::vector<CurvePoint> points;
};

// A case to draw: its label and the tau it used.
struct CurveCase {
  std::string label, tau_policy;
  double tau = 0.0;
};

struct PredictedCurves {
  size_t worker_steps = 0, steps = 0, runs = 0;  // what was pooled
  uint32_t recorded_workers = 0;                 // the baseline's worker count
  double overhead_seconds = 0.0;
  // The best tau first; then, when the bound is below 1, the best within
  // it; then the cases in order.
  std::vector<SpeedupCurve> curves;
};

// The best-tau curve, the best within `max_drop_rate` (when below 1) and
// one curve per case, at curve_worker_counts(). Nothing when `pooled` holds
// no worker step.
std::optional<PredictedCurves> predict_curves(const PooledSteps& pooled, uint32_t recorded_workers,
                                              const std::vector<CurveCase>& cases,
                                              double max_drop_rate = 1.0);

// The curve of `curves` with this tau_policy ("best", "bounded"), if any.
const SpeedupCurve* find_curve(const PredictedCurves& curves, const std::string& tau_policy);

// A curve's point at `workers`, if it has one.
const CurvePoint* curve_point(const SpeedupCurve& curve, uint32_t workers);

}  // namespace dctrain
