#include "dropcompute/threshold_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace dctrain {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

double effective_speedup(double drop_rate, double time_saved) {
  // (1 - d) (T_inf + o) / (T_tau + o) - 1, written as the rule states it.
  const double remaining = 1.0 - time_saved;
  return remaining > 0.0 ? (1.0 - drop_rate) / remaining - 1.0 : 0.0;
}

void TauSpan::add(const std::vector<double>& micro_batch_seconds) {
  if (micro_batch_seconds.empty()) return;
  lo = std::min(lo, micro_batch_seconds.front());
  hi = std::max(hi, truncate_at(micro_batch_seconds, kInf).seconds);
}

std::vector<double> tau_grid(const TauSpan& span, int points) {
  std::vector<double> taus;
  taus.reserve(static_cast<size_t>(std::max(points, 0)));
  for (int i = 0; i < points; ++i) {
    taus.push_back(span.lo +
                   (span.hi - span.lo) * static_cast<double>(i) / static_cast<double>(points - 1));
  }
  return taus;
}

std::optional<size_t> best_candidate(const std::vector<double>& speedups) {
  if (speedups.empty()) return std::nullopt;
  size_t first = 0;
  for (size_t i = 1; i < speedups.size(); ++i) {
    if (speedups[i] > speedups[first]) first = i;
  }
  const double best = speedups[first];
  if (!(best > 0.0)) return std::nullopt;
  const double tolerance = 1e-12 * std::max(1.0, std::abs(best));
  size_t last = first;
  while (last + 1 < speedups.size() && std::abs(speedups[last + 1] - best) <= tolerance) ++last;
  return (first + last) / 2;
}

Truncation truncate_at(const std::vector<double>& micro_batch_seconds, double tau) {
  Truncation out;
  for (double t : micro_batch_seconds) {
    // The worker's check before each micro-batch: once its clock is >= tau
    // it starts no more (worker/compute_loop.cc).
    if (out.seconds >= tau) break;
    out.seconds += t;
    ++out.started;
  }
  return out;
}

namespace {

// The mean over the steps of the slowest worker's compute with no
// threshold: T_inf, the same for every candidate tau.
double mean_full_compute(const std::vector<RecordedStep>& steps) {
  double sum = 0.0;
  for (const RecordedStep& step : steps) {
    double slowest = 0.0;
    for (const std::vector<double>& w : step.workers) {
      slowest = std::max(slowest, truncate_at(w, kInf).seconds);
    }
    sum += slowest;
  }
  return sum / static_cast<double>(steps.size());
}

// evaluate_threshold with T_inf computed once for all the candidates.
ThresholdCandidate evaluate_against(const std::vector<RecordedStep>& steps, double t_inf,
                                    double overhead_seconds, double tau) {
  ThresholdCandidate c;
  c.tau = tau;
  uint64_t planned = 0, dropped = 0;
  double truncated_sum = 0.0;
  for (const RecordedStep& step : steps) {
    double truncated_max = 0.0;
    for (const std::vector<double>& w : step.workers) {
      const Truncation truncated = truncate_at(w, tau);
      truncated_max = std::max(truncated_max, truncated.seconds);
      planned += w.size();
      dropped += w.size() - truncated.started;
    }
    truncated_sum += truncated_max;
  }
  c.compute_seconds = truncated_sum / static_cast<double>(steps.size());
  c.drop_rate = planned == 0 ? 0.0 : static_cast<double>(dropped) / static_cast<double>(planned);
  const double baseline = t_inf + overhead_seconds;
  c.time_saved = baseline > 0.0 ? (t_inf - c.compute_seconds) / baseline : 0.0;
  c.speedup = effective_speedup(c.drop_rate, c.time_saved);
  return c;
}

}  // namespace

ThresholdCandidate evaluate_threshold(const std::vector<RecordedStep>& steps,
                                      double overhead_seconds, double tau) {
  if (steps.empty()) {
    ThresholdCandidate c;
    c.tau = tau;
    return c;
  }
  return evaluate_against(steps, mean_full_compute(steps), overhead_seconds, tau);
}

ThresholdEstimate estimate_threshold(const std::vector<RecordedStep>& steps,
                                     double overhead_seconds, int grid_points,
                                     double max_drop_rate) {
  ThresholdEstimate e;
  e.tau = kInf;
  e.overhead_seconds = overhead_seconds;
  e.steps = steps.size();
  const ThresholdCandidate none = evaluate_threshold(steps, overhead_seconds, kInf);
  e.step_seconds = e.baseline_step_seconds = none.compute_seconds + overhead_seconds;
  TauSpan span;
  for (const RecordedStep& step : steps) {
    for (const std::vector<double>& w : step.workers) span.add(w);
  }
  if (steps.empty() || span.empty() || grid_points < 2) return e;

  e.grid.reserve(static_cast<size_t>(grid_points));
  std::vector<double> speedups;
  speedups.reserve(static_cast<size_t>(grid_points));
  const double t_inf = mean_full_compute(steps);
  for (double tau : tau_grid(span, grid_points)) {
    e.grid.push_back(evaluate_against(steps, t_inf, overhead_seconds, tau));
    // A candidate over the bound is out of the running: it cannot be the
    // best (best_candidate takes positive speedups only).
    const bool allowed = e.grid.back().drop_rate <= max_drop_rate;
    speedups.push_back(allowed ? e.grid.back().speedup : 0.0);
  }
  const std::optional<size_t> best = best_candidate(speedups);
  if (!best) return e;
  const ThresholdCandidate& chosen = e.grid[*best];
  e.tau = chosen.tau;
  e.drop_rate = chosen.drop_rate;
  e.time_saved = chosen.time_saved;
  e.speedup = chosen.speedup;
  e.step_seconds = chosen.compute_seconds + overhead_seconds;
  return e;
}

double expected_maximum(std::vector<double> values, uint32_t n) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double k = static_cast<double>(values.size());
  const double power = static_cast<double>(n);
  double sum = 0.0, below = 0.0;  // below = ((i-1)/k)^n
  for (size_t i = 0; i < values.size(); ++i) {
    const double at = std::pow(static_cast<double>(i + 1) / k, power);
    sum += values[i] * (at - below);
    below = at;
  }
  return sum;
}

StepTimePrediction predict_step_time(const std::vector<std::vector<double>>& worker_steps,
                                     uint32_t workers, double tau, double overhead_seconds) {
  return StepTimePredictor(worker_steps, {workers}, overhead_seconds).at(tau).front();
}

StepTimePredictor::StepTimePredictor(const std::vector<std::vector<double>>& worker_steps,
                                     std::vector<uint32_t> workers, double overhead_seconds)
    : worker_steps_(worker_steps),
      workers_(std::move(workers)),
      overhead_seconds_(overhead_seconds) {
  // The same operations as expected_maximum, so the same bits.
  const double k = static_cast<double>(worker_steps_.size());
  for (uint32_t n : workers_) {
    std::vector<double>& powers = powers_.emplace_back();
    powers.reserve(worker_steps_.size());
    const double power = static_cast<double>(n);
    for (size_t i = 0; i < worker_steps_.size(); ++i)
      powers.push_back(std::pow(static_cast<double>(i + 1) / k, power));
  }
  std::vector<double> full;
  full.reserve(worker_steps_.size());
  for (const std::vector<double>& w : worker_steps_) full.push_back(truncate_at(w, kInf).seconds);
  std::sort(full.begin(), full.end());
  for (size_t c = 0; c < workers_.size(); ++c)
    baseline_compute_.push_back(expected_maximum_sorted(full, c));
}

double StepTimePredictor::expected_maximum_sorted(const std::vector<double>& values,
                                                  size_t count) const {
  const std::vector<double>& powers = powers_[count];
  double sum = 0.0, below = 0.0;
  for (size_t i = 0; i < values.size(); ++i) {
    sum += values[i] * (powers[i] - below);
    below = powers[i];
  }
  return sum;
}

std::vector<StepTimePrediction> StepTimePredictor::at(double tau) const {
  std::vector<double> truncated;
  truncated.reserve(worker_steps_.size());
  uint64_t planned = 0, dropped = 0;
  for (const std::vector<double>& w : worker_steps_) {
    const Truncation t = truncate_at(w, tau);
    truncated.push_back(t.seconds);
    planned += w.size();
    dropped += w.size() - t.started;
  }
  std::sort(truncated.begin(), truncated.end());
  const double drop_rate =
      planned == 0 ? 0.0 : static_cast<double>(dropped) / static_cast<double>(planned);
  std::vector<StepTimePrediction> out;
  out.reserve(workers_.size());
  for (size_t c = 0; c < workers_.size(); ++c) {
    StepTimePrediction& p = out.emplace_back();
    p.workers = workers_[c];
    p.tau = tau;
    p.baseline_compute_seconds = baseline_compute_[c];
    p.compute_seconds = expected_maximum_sorted(truncated, c);
    p.baseline_step_seconds = p.baseline_compute_seconds + overhead_seconds_;
    p.step_seconds = p.compute_seconds + overhead_seconds_;
    p.drop_rate = drop_rate;
    p.speedup = p.step_seconds > 0.0
                    ? (1.0 - p.drop_rate) * p.baseline_step_seconds / p.step_seconds - 1.0
                    : 0.0;
  }
  return out;
}

}  // namespace dctrain
