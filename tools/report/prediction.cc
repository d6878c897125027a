#include "tools/report/prediction.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "dropcompute/threshold_model.h"

namespace dctrain {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The recorded part of a baseline step: its contributing workers' times,
// and its time outside the slowest worker's compute.
struct UsableStep {
  RecordedStep recorded;
  double overhead_seconds = 0.0;
};

std::optional<UsableStep> usable_step(const v1::StepRecord& step) {
  UsableStep out;
  double slowest = 0.0;
  for (const v1::WorkerStep& w : step.workers()) {
    if (!w.contributed() || w.micro_batch_seconds().empty()) continue;
    out.recorded.workers.emplace_back(w.micro_batch_seconds().begin(),
                                      w.micro_batch_seconds().end());
    slowest = std::max(slowest, w.compute_seconds());
  }
  if (out.recorded.workers.empty()) return std::nullopt;
  out.overhead_seconds = std::max(0.0, step.step_seconds() + step.apply_seconds() - slowest);
  return out;
}

CurvePoint to_point(const StepTimePrediction& p) {
  CurvePoint c;
  c.workers = p.workers;
  c.tau = p.tau;
  c.speedup = 1.0 + p.speedup;  // threshold.h's speedup is the gain over tau = inf
  c.drop_rate = p.drop_rate;
  c.step_seconds = p.step_seconds;
  c.baseline_step_seconds = p.baseline_step_seconds;
  return c;
}

// predict_step_time over the best-tau search's candidates, for every
// worker count at once.
struct GridPredictions {
  std::vector<StepTimePrediction> none;               // tau = inf, by count
  std::vector<std::vector<StepTimePrediction>> grid;  // by candidate, then count
};

GridPredictions predict_over_grid(const PooledSteps& pooled, const std::vector<uint32_t>& workers,
                                  int grid_points) {
  const StepTimePredictor predictor(pooled.worker_steps, workers, pooled.overhead_seconds);
  GridPredictions out;
  out.none = predictor.at(kInf);
  TauSpan span;
  for (const std::vector<double>& w : pooled.worker_steps) span.add(w);
  if (span.empty() || grid_points < 2) return out;
  out.grid.reserve(static_cast<size_t>(grid_points));
  for (double tau : tau_grid(span, grid_points)) out.grid.push_back(predictor.at(tau));
  return out;
}

// Each count's best candidate under the drop-rate bound.
std::vector<CurvePoint> best_points(const GridPredictions& g, double max_drop_rate) {
  std::vector<CurvePoint> points;
  points.reserve(g.none.size());
  for (size_t c = 0; c < g.none.size(); ++c) {
    std::vector<double> speedups;
    speedups.reserve(g.grid.size());
    for (const std::vector<StepTimePrediction>& candidate : g.grid) {
      // Over the bound: out of the running, as in estimate_threshold.
      speedups.push_back(candidate[c].drop_rate <= max_drop_rate ? candidate[c].speedup : 0.0);
    }
    // The automatic threshold's choice among ties (estimate_threshold's).
    const std::optional<size_t> best = best_candidate(speedups);
    points.push_back(to_point(best ? g.grid[*best][c] : g.none[c]));
  }
  return points;
}

}  // namespace

std::optional<Prediction> predict_speedup(const RunFolder& baseline, double tau) {
  std::vector<RecordedStep> steps;
  double outside = 0.0;
  for (size_t s = warmup_steps(baseline.steps.size()); s < baseline.steps.size(); ++s) {
    auto usable = usable_step(baseline.steps[s]);
    if (!usable) continue;
    steps.push_back(std::move(usable->recorded));
    outside += usable->overhead_seconds;
  }
  if (steps.empty()) return std::nullopt;
  const double overhead = outside / static_cast<double>(steps.size());
  const ThresholdCandidate none = evaluate_threshold(steps, overhead, kInf);
  const ThresholdCandidate at = evaluate_threshold(steps, overhead, tau);
  Prediction p;
  p.steps = steps.size();
  p.step_seconds_inf = none.compute_seconds + overhead;
  p.step_seconds_tau = at.compute_seconds + overhead;
  p.completed_fraction = 1.0 - at.drop_rate;
  p.speedup = 1.0 + at.speedup;  // threshold.h's speedup is the gain over tau = inf
  return p;
}

std::vector<uint32_t> curve_worker_counts() {
  return {1, 2, 4, 8, 16, 32, 64, 128, 256};
}

PooledSteps pool_baseline_steps(const std::vector<const RunFolder*>& baselines) {
  PooledSteps pooled;
  double outside = 0.0;
  for (const RunFolder* run : baselines) {
    bool used = false;
    for (size_t s = warmup_steps(run->steps.size()); s < run->steps.size(); ++s) {
      auto usable = usable_step(run->steps[s]);
      if (!usable) continue;
      for (std::vector<double>& w : usable->recorded.workers)
        pooled.worker_steps.push_back(std::move(w));
      outside += usable->overhead_seconds;
      ++pooled.steps;
      used = true;
    }
    if (used) ++pooled.runs;
  }
  if (pooled.steps > 0) pooled.overhead_seconds = outside / static_cast<double>(pooled.steps);
  return pooled;
}

std::vector<CurvePoint> predicted_curve(const PooledSteps& pooled, double tau,
                                        const std::vector<uint32_t>& workers) {
  std::vector<CurvePoint> points;
  points.reserve(workers.size());
  for (const StepTimePrediction& p :
       StepTimePredictor(pooled.worker_steps, workers, pooled.overhead_seconds).at(tau))
    points.push_back(to_point(p));
  return points;
}

std::vector<CurvePoint> best_tau_points(const PooledSteps& pooled,
                                        const std::vector<uint32_t>& workers, int grid_points,
                                        double max_drop_rate) {
  return best_points(predict_over_grid(pooled, workers, grid_points), max_drop_rate);
}

CurvePoint best_tau_point(const PooledSteps& pooled, uint32_t workers, int grid_points,
                          double max_drop_rate) {
  return best_tau_points(pooled, {workers}, grid_points, max_drop_rate).front();
}

std::optional<PredictedCurves> predict_curves(const PooledSteps& pooled, uint32_t recorded_workers,
                                              const std::vector<CurveCase>& cases,
                                              double max_drop_rate) {
  if (pooled.worker_steps.empty()) return std::nullopt;
  PredictedCurves out;
  out.worker_steps = pooled.worker_steps.size();
  out.steps = pooled.steps;
  out.runs = pooled.runs;
  out.recorded_workers = recorded_workers;
  out.overhead_seconds = pooled.overhead_seconds;
  const std::vector<uint32_t> workers = curve_worker_counts();
  // One grid of predictions for both best-tau curves.
  const GridPredictions grid = predict_over_grid(pooled, workers, kBestTauGridPoints);
  out.curves.push_back({"best tau", "best", best_points(grid, 1.0)});
  if (max_drop_rate < 1.0) {
    out.curves.push_back({fmt::format("best tau, drop rate <= {:.3g}%", 100.0 * max_drop_rate),
                          "bounded", best_points(grid, max_drop_rate)});
  }
  for (const CurveCase& c : cases)
    out.curves.push_back({c.label, c.tau_policy, predicted_curve(pooled, c.tau, workers)});
  return out;
}

const SpeedupCurve* find_curve(const PredictedCurves& curves, const std::string& tau_policy) {
  for (const SpeedupCurve& c : curves.curves) {
    if (c.tau_policy == tau_policy) return &c;
  }
  return nullptr;
}

const CurvePoint* curve_point(const SpeedupCurve& curve, uint32_t workers) {
  for (const CurvePoint& p : curve.points) {
    if (p.workers == workers) return &p;
  }
  return nullptr;
}

}  // namespace dctrain
