#include "coordinator/threshold.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "common/median.h"
#include "common/random.h"

namespace dctrain {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr uint64_t kImputeStream = 0x7461752d66696c6cULL;  // "tau-fill"
constexpr uint64_t kResampleStream = 0x7461752d626f6f74ULL;  // "tau-boot"
constexpr int kResamples = 100;

}  // namespace

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
  return median(known.empty() ? std::move(all) : std::move(known));
}

void Throughput::add(const StepObservation& step) {
  for (const WorkerObservation& w : step.workers)
    micro_batches += static_cast<double>(w.micro_batch_seconds.size());
  seconds += step.cycle_seconds;
  ++steps;
}

std::optional<double> Throughput::rate() const {
  if (!(seconds > 0.0)) return std::nullopt;
  return micro_batches / seconds;
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
  if (trial_) return continue_trial(window_.back());  // no estimate during a trial

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
  const double max_drop_rate = config_.has_max_drop_rate() ? config_.max_drop_rate() : 1.0;
  d.estimate =
      estimate_threshold(steps, overhead, static_cast<int>(config_.grid_points()), max_drop_rate);
  d.in_force = evaluate_threshold(steps, overhead, tau_);
  d.in_force_over_bound = d.in_force.drop_rate > max_drop_rate;
  const double next = d.estimate.tau;
  const bool differs = std::isinf(next) != std::isinf(tau_) ||
                       (!std::isinf(next) && std::abs(next - tau_) > config_.min_change() * tau_);
  d.gain = d.estimate.speedup - d.in_force.speedup;
  bool pays = d.gain > config_.min_gain();
  if (pays && differs) {
    d.gain_spread = gain_interval(steps, overhead, next, tau_, seed_, step_number);
    d.within_noise = !(d.gain_spread.low > 0.0);
    pays = !d.within_noise;
  }
  d.held = pays && differs && !d.in_force_over_bound && observed_ < hold_until_;
  const bool move = differs && ((pays && !d.held) || d.in_force_over_bound);
  // A move for its gain goes on trial when steps are timed and the gain is
  // not sure; one forced by the bound does not (staying would break the
  // bound).
  d.trial = move && !d.in_force_over_bound && window_.back().cycle_seconds > 0.0 &&
            !(d.gain_spread.low > config_.sure_gain());
  if (d.trial) {
    trial_ = Trial{next, {}, {}, true};
  } else if (move) {
    tau_ = next;
    d.changed = true;
  }
  d.new_tau = tau_;
  return d;
}

std::optional<ThresholdDecision> Threshold::continue_trial(const StepObservation& step) {
  Trial& t = *trial_;
  (t.candidate_next ? t.at_candidate : t.at_tau).add(step);
  t.candidate_next = !t.candidate_next;
  if (t.at_candidate.steps < trial_steps() || t.at_tau.steps < trial_steps()) return std::nullopt;
  const Trial ended = t;
  trial_.reset();
  ThresholdDecision d;
  d.step = step.step;
  d.why = "measured";
  d.old_tau = tau_;
  d.measured_before = ended.at_tau.rate().value_or(0.0);
  d.measured_after = ended.at_candidate.rate().value_or(0.0);
  d.changed = *d.measured_after > *d.measured_before;
  if (d.changed) {
    tau_ = ended.candidate;
  } else {
    ++failed_;
    const uint64_t window = std::max<uint64_t>(config_.window_steps(), 1);
    hold_until_ = observed_ + (window << std::min<uint32_t>(failed_ - 1, 4));
  }
  d.new_tau = tau_;
  d.tried_tau = ended.candidate;
  return d;
}

GainInterval gain_interval(const std::vector<RecordedStep>& steps, double overhead_seconds,
                           double tau, double in_force, uint64_t seed, uint64_t step) {
  if (steps.empty()) return {};
  std::vector<double> gains;
  gains.reserve(kResamples);
  std::vector<RecordedStep> resample(steps.size());
  for (int b = 0; b < kResamples; ++b) {
    Rng rng({seed, kResampleStream, step, static_cast<uint64_t>(b)});
    for (RecordedStep& s : resample) s = steps[rng.below(steps.size())];
    gains.push_back(evaluate_threshold(resample, overhead_seconds, tau).speedup -
                    evaluate_threshold(resample, overhead_seconds, in_force).speedup);
  }
  std::sort(gains.begin(), gains.end());
  return {gains[kResamples * 5 / 100], gains[kResamples * 95 / 100]};
}

std::string describe_tau(double tau) {
  return std::isinf(tau) ? std::string("inf") : fmt::format("{:.3g} s", tau);
}

}  // namespace dctrain
