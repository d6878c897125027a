#include "coordinator/step/contribution_record.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/median.h"

namespace dctrain {

namespace {

constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

double per_sample(double norm, uint64_t samples) {
  return norm / static_cast<double>(samples);
}

// The lower median of the finite values of `values` (NaN when none).
double finite_lower_median(const std::vector<double>& values) {
  std::vector<double> finite;
  for (double v : values) {
    if (std::isfinite(v)) finite.push_back(v);
  }
  return finite.empty() ? kNone : lower_median(std::move(finite));
}

// Each member's norm per sample over the lower median of the others' in the
// same step (NaN with fewer than two others).
std::map<uint32_t, double> ratios_to_the_others(const std::map<uint32_t, double>& per) {
  std::map<uint32_t, double> out;
  for (const auto& [rank, norm] : per) {
    std::vector<double> others;
    for (const auto& [r, n] : per) {
      if (r != rank) others.push_back(n);
    }
    out[rank] = others.size() < 2 ? kNone : norm / finite_lower_median(others);
  }
  return out;
}

}  // namespace

std::vector<Refused> ContributionRecord::judge(uint64_t step,
                                               const std::map<uint32_t, Measured>& measured,
                                               bool remember) {
  std::vector<Refused> out;
  std::map<uint32_t, double> gradient, statistics;
  for (const auto& [rank, m] : measured) {
    if (m.samples > 0) {
      gradient[rank] = per_sample(m.gradient, m.samples);
      statistics[rank] = per_sample(m.statistics, m.samples);
    } else if (m.gradient != 0.0 || m.statistics != 0.0) {
      out.push_back(
          {rank, fmt::format("it computed no samples, yet its contribution holds a "
                             "gradient of norm {:.4g} and batch statistics of norm {:.4g}",
                             m.gradient, m.statistics)});
    }
  }
  const std::map<uint32_t, double> gradient_ratio = ratios_to_the_others(gradient);
  const std::map<uint32_t, double> statistics_ratio = ratios_to_the_others(statistics);

  // The window's contributions, this step's in place of any earlier entry
  // of the same step.
  Pooled now{step, {}, {}};
  for (const auto& [rank, g] : gradient) {
    now.gradient.push_back(g);
    now.statistics.push_back(statistics.at(rank));
  }
  std::vector<double> window_gradient = now.gradient, window_statistics = now.statistics;
  size_t kept = 0;
  for (auto it = pooled_.rbegin(); it != pooled_.rend() && kept + 1 < kWindow; ++it) {
    if (it->step == step) continue;
    window_gradient.insert(window_gradient.end(), it->gradient.begin(), it->gradient.end());
    window_statistics.insert(window_statistics.end(), it->statistics.begin(), it->statistics.end());
    ++kept;
  }
  // Fewer than three contributions say nothing about which is wrong.
  const Typical typical{
      window_gradient.size() < 3 ? kNone : finite_lower_median(window_gradient),
      window_statistics.size() < 3 ? kNone : finite_lower_median(window_statistics)};

  static const std::deque<Entry> kNoHistory;
  std::map<uint32_t, Entry> entries;
  for (const auto& [rank, g] : gradient) {
    const Measured& m = measured.at(rank);
    const Entry e{step, gradient_ratio.at(rank), statistics_ratio.at(rank),
                  m.has_cosine ? m.cosine : kNone};
    entries[rank] = e;
    const auto history = entries_.find(rank);
    const std::deque<Entry>& h = history == entries_.end() ? kNoHistory : history->second;
    if (auto why = why_refused(m, e, h, typical)) out.push_back({rank, std::move(*why)});
  }
  std::sort(out.begin(), out.end(),
            [](const Refused& a, const Refused& b) { return a.rank < b.rank; });
  if (!remember) return out;

  if (!pooled_.empty() && pooled_.back().step == step) pooled_.pop_back();
  pooled_.push_back(std::move(now));
  while (pooled_.size() > kWindow) pooled_.pop_front();
  for (const auto& [rank, e] : entries) {
    std::deque<Entry>& h = entries_[rank];
    if (!h.empty() && h.back().step == step) h.pop_back();
    h.push_back(e);
    while (h.size() > kWindow) h.pop_front();
  }
  return out;
}

std::optional<std::string> ContributionRecord::why_refused(const Measured& m, const Entry& now,
                                                           const std::deque<Entry>& history,
                                                           const Typical& typical) const {
  const double spike = kSpikeFactor * multiple_;
  auto spiked = [&](double norm, double typical_norm,
                    const char* what) -> std::optional<std::string> {
    const double value = per_sample(norm, m.samples);
    if (std::isfinite(value) && (!std::isfinite(typical_norm) || value <= spike * typical_norm)) {
      return std::nullopt;
    }
    return fmt::format(
        "its per-sample {} norm {:.4g} is more than {:g} times the median {:.4g} of the "
        "contributions of the last {} steps ({:g} x guard.norm_multiple)",
        what, value, spike, typical_norm, kWindow, kSpikeFactor);
  };
  if (auto why = spiked(m.gradient, typical.gradient, "gradient")) return why;
  if (auto why = spiked(m.statistics, typical.statistics, "batch statistics")) return why;

  // Its last kWindow contributions, this one included.
  std::vector<double> gradient_ratios, statistics_ratios, cosines;
  auto add = [&](const Entry& e) {
    if (!std::isnan(e.gradient_ratio)) gradient_ratios.push_back(e.gradient_ratio);
    if (!std::isnan(e.statistics_ratio)) statistics_ratios.push_back(e.statistics_ratio);
    if (!std::isnan(e.cosine)) cosines.push_back(e.cosine);
  };
  size_t taken = 1;
  add(now);
  for (auto it = history.rbegin(); it != history.rend() && taken < kWindow; ++it) {
    if (it->step == now.step) continue;
    add(*it);
    ++taken;
  }
  auto persistent = [&](const std::vector<double>& ratios,
                        const char* what) -> std::optional<std::string> {
    if (ratios.size() < kLeastSteps) return std::nullopt;
    const double typical_ratio = finite_lower_median(ratios);
    if (!(typical_ratio > multiple_)) return std::nullopt;
    return fmt::format(
        "over its last {} contributions its per-sample {} norm was a median {:.3g} "
        "times the median of the others' in the same step, more than "
        "guard.norm_multiple {:g}: a scaled gradient",
        ratios.size(), what, typical_ratio, multiple_);
  };
  if (auto why = persistent(gradient_ratios, "gradient")) return why;
  if (auto why = persistent(statistics_ratios, "batch statistics")) return why;
  if (cosines.size() >= kLeastSteps) {
    double mean = 0.0;
    for (double c : cosines) mean += c;
    mean /= static_cast<double>(cosines.size());
    if (mean < kFlippedCosine) {
      return fmt::format(
          "over its last {} contributions its gradient pointed against the sum of "
          "the others' (a mean cosine of {:.3f}, below {:g}): a flipped gradient",
          cosines.size(), mean, kFlippedCosine);
    }
  }
  return std::nullopt;
}

}  // namespace dctrain
