#include "coordinator/threshold.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "common/random.h"

namespace dctrain {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr uint64_t kImputeStream = 0x7461752d66696c6cULL;  // "tau-fill"

// (1 - d) (T_inf + o) / (T_tau + o) - 1, written as the rule states it.
double effective_speedup(double drop_rate, double time_saved) {
  const double remaining = 1.0 - time_saved;
  return remaining > 0.0 ? (1.0 - drop_rate) / remaining - 1.0 : 0.0;
}

}  // namespace

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

ThresholdCandidate evaluate_threshold(const std::vector<RecordedStep>& steps,
                                      double overhead_seconds, double tau) {
  ThresholdCandidate c;
  c.tau = tau;
  if (steps.empty()) return c;
  uint64_t planned = 0, dropped = 0;
  double full_sum = 0.0, truncated_sum = 0.0;
  for (const RecordedStep& step : steps) {
    double full_max = 0.0, truncated_max = 0.0;
    for (const std::vector<double>& w : step.workers) {
      const Truncation full = truncate_at(w, kInf);
      const Truncation truncated = truncate_at(w, tau);
      full_max = std::max(full_max, full.seconds);
      truncated_max = std::max(truncated_max, truncated.seconds);
      planned += w.size();
      dropped += w.size() - truncated.started;
    }
    full_sum += full_max;
    truncated_sum += truncated_max;
  }
  const double count = static_cast<double>(steps.size());
  const double t_inf = full_sum / count;
  c.compute_seconds = truncated_sum / count;
  c.drop_rate = planned == 0 ? 0.0 : static_cast<double>(dropped) / static_cast<double>(planned);
  const double baseline = t_inf + overhead_seconds;
  c.time_saved = baseline > 0.0 ? (t_inf - c.compute_seconds) / baseline : 0.0;
  c.speedup = effective_speedup(c.drop_rate, c.time_saved);
  return c;
}

ThresholdEstimate estimate_threshold(const std::vector<RecordedStep>& steps,
                                     double overhead_seconds, int grid_points) {
  ThresholdEstimate e;
  e.tau = kInf;
  e.overhead_seconds = overhead_seconds;
  e.steps = steps.size();
  const ThresholdCandidate none = evaluate_threshold(steps, overhead_seconds, kInf);
  e.step_seconds = e.baseline_step_seconds = none.compute_seconds + overhead_seconds;
  double lo = kInf, hi = 0.0;
  for (const RecordedStep& step : steps) {
    for (const std::vector<double>& w : step.workers) {
      if (w.empty()) continue;
      lo = std::min(lo, w.front());
      hi = std::max(hi, truncate_at(w, kInf).seconds);
    }
  }
  if (steps.empty() || std::isinf(lo) || grid_points < 2) return e;

  e.grid.reserve(static_cast<size_t>(grid_points));
  for (int i = 0; i < grid_points; ++i) {
    const double tau =
        lo + (hi - lo) * static_cast<double>(i) / static_cast<double>(grid_points - 1);
    e.grid.push_back(evaluate_threshold(steps, overhead_seconds, tau));
  }
  size_t first = 0;
  for (size_t i = 1; i < e.grid.size(); ++i) {
    if (e.grid[i].speedup > e.grid[first].speedup) first = i;
  }
  const double best = e.grid[first].speedup;
  if (!(best > 0.0)) return e;
  // The prediction is piecewise constant in tau: take the middle of the run
  // of tied candidates, away from the edges where it changes.
  const double tolerance = 1e-12 * std::max(1.0, std::abs(best));
  size_t last = first;
  while (last + 1 < e.grid.size() && std::abs(e.grid[last + 1].speedup - best) <= tolerance) ++last;
  const ThresholdCandidate& chosen = e.grid[(first + last) / 2];
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
  StepTimePrediction p;
  p.workers = workers;
  p.tau = tau;
  std::vector<double> full, truncated;
  full.reserve(worker_steps.size());
  truncated.reserve(worker_steps.size());
  uint64_t planned = 0, dropped = 0;
  for (const std::vector<double>& w : worker_steps) {
    const Truncation t = truncate_at(w, tau);
    full.push_back(truncate_at(w, kInf).seconds);
    truncated.push_back(t.seconds);
    planned += w.size();
    dropped += w.size() - t.started;
  }
  p.baseline_compute_seconds = expected_maximum(full, workers);
  p.compute_seconds = expected_maximum(truncated, workers);
  p.baseline_step_seconds = p.baseline_compute_seconds + overhead_seconds;
  p.step_seconds = p.compute_seconds + overhead_seconds;
  p.drop_rate = planned == 0 ? 0.0 : static_cast<double>(dropped) / static_cast<double>(planned);
  p.speedup = p.step_seconds > 0.0
                  ? (1.0 - p.drop_rate) * p.baseline_step_seconds / p.step_seconds - 1.0
                  : 0.0;
  return p;
}

std::vector<RecordedStep> complete_observations(const std::vector<StepObservation>& window,
                                                uint64_t seed) {
  std::map<uint32_t, std::vector<double>> by_rank;
  std::vector<double> everyone;
  for (const StepObservation& s : window) {
    for (const WorkerObservation& w : s.workers) {
      std::vector<double>& pool = by_rank[w.rank];
      pool.insert(pool.end(), w.micro_batch_seconds.begin(), w.micro_batch_seconds.end());
      everyone.insert(everyone.end(), w.micro_batch_seconds.begin(), w.micro_batch_seconds.end());
    }
  }
  std::vector<RecordedStep> out;
  out.reserve(window.size());
  for (const StepObservation& s : window) {
    RecordedStep step;
    for (const WorkerObservation& w : s.workers) {
      std::vector<double> times = w.micro_batch_seconds;
      const std::vector<double>& own = by_rank[w.rank];
      const std::vector<double>& pool = own.empty() ? everyone : own;
      for (uint32_t i = 0; i < w.dropped && !pool.empty(); ++i) {
        Rng rng({seed, kImputeStream, s.step, w.rank, i});
        times.push_back(pool[rng.below(pool.size())]);
      }
      step.workers.push_back(std::move(times));
    }
    out.push_back(std::move(step));
  }
  return out;
}

double median_overhead(const std::vector<StepObservation>& window) {
  std::vector<double> known, all;
  for (const StepObservation& s : window) {
    all.push_back(s.overhead_seconds);
    if (s.overhead_known) known.push_back(s.overhead_seconds);
  }
  std::vector<double>& values = known.empty() ? all : known;
  if (values.empty()) return 0.0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<ptrdiff_t>(mid), values.end());
  if (values.size() % 2 == 1) return values[mid];
  const double upper = values[mid];
  const double lower = *std::max_element(values.begin(), values.begin() + static_cast<ptrdiff_t>(mid));
  return 0.5 * (lower + upper);
}

Threshold::Threshold(const v1::StepConfig& step, uint64_t seed)
    : automatic_(step.tau_policy() == v1::TAU_POLICY_AUTO),
      config_(step.auto_tau()),
      seed_(seed),
      tau_(automatic_ ? kInf : step.tau()) {}

std::optional<ThresholdDecision> Threshold::observe(StepObservation step) {
  if (!automatic_) return std::nullopt;
  if (skipped_ < config_.skip_steps()) {
    ++skipped_;
    return std::nullopt;
  }
  const uint64_t step_number = step.step;
  window_.push_back(std::move(step));
  const size_t capacity = std::max<size_t>(config_.window_steps(), 1);
  if (window_.size() > capacity)
    window_.erase(window_.begin(), window_.end() - static_cast<ptrdiff_t>(capacity));
  ++observed_;

  const uint64_t warmup = config_.warmup_steps();
  const uint64_t every = config_.reestimate_every_steps();
  std::string why;
  if (observed_ == warmup) {
    why = "warm-up";
  } else if (observed_ > warmup && every > 0 && (observed_ - warmup) % every == 0) {
    why = "re-estimate";
  } else {
    return std::nullopt;
  }

  const double overhead = median_overhead(window_);
  const std::vector<RecordedStep> steps = complete_observations(window_, seed_);

  ThresholdDecision d;
  d.step = step_number;
  d.why = why;
  d.old_tau = tau_;
  d.estimate = estimate_threshold(steps, overhead, static_cast<int>(config_.grid_points()));
  d.in_force = evaluate_threshold(steps, overhead, tau_);
  const double next = d.estimate.tau;
  const bool differs = std::isinf(next) != std::isinf(tau_) ||
                       (!std::isinf(next) && std::abs(next - tau_) > config_.min_change() * tau_);
  const bool pays = d.estimate.speedup - d.in_force.speedup > config_.min_gain();
  d.changed = differs && pays;
  if (d.changed) tau_ = next;
  d.new_tau = tau_;
  return d;
}

}  // namespace dctrain
