#include "tools/report/comparison.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace dctrain {
namespace {

// Whether the replay (predict_speedup) models the row's policy: a threshold
// on even shares; not rebalance, backup or the arms.
bool replay_models(const CaseRow& row) {
  return row.policy.empty() || row.policy == "dropcompute" || row.policy == "sync";
}

// The cases' curves: one per tau policy and tau of the rows the replay
// models (requeue does not enter the model), with the first row of each;
// the requeue setting joins the label only when a policy has several taus
// (auto with and without requeue settles differently).
std::vector<CurveCase> curve_cases(const Experiment& e, std::vector<const CaseRow*>& rows) {
  std::vector<CurveCase> cases;
  for (const CaseRow& row : e.rows) {
    if (row.tau_policy == "inf" || !std::isfinite(row.tau_seconds.mean) || !replay_models(row))
      continue;
    bool seen = false;
    for (const CurveCase& c : cases)
      seen = seen || (c.tau_policy == row.tau_policy && c.tau == row.tau_seconds.mean);
    if (seen) continue;
    cases.push_back({"", row.tau_policy, row.tau_seconds.mean});
    rows.push_back(&row);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    CurveCase& c = cases[i];
    size_t same_policy = 0;
    for (const CurveCase& other : cases) same_policy += other.tau_policy == c.tau_policy ? 1 : 0;
    const std::string requeue =
        same_policy > 1 ? (rows[i]->requeue ? ", requeue" : ", no requeue") : "";
    if (c.tau_policy == "auto") {
      c.label = fmt::format("tau = auto{} (median {:.4g} s)", requeue, c.tau);
    } else if (c.tau_policy[0] == 'p') {
      c.label = fmt::format("tau = {}{} ({:.4g} s)", c.tau_policy, requeue, c.tau);
    } else {
      c.label = fmt::format("tau = {} s{}", c.tau_policy, requeue);
    }
  }
  return cases;
}

// Whether two rows ran the same seeds (their runs are in seed order).
bool same_seeds(const Experiment& e, const CaseRow& a, const CaseRow& b) {
  if (a.runs.size() != b.runs.size()) return false;
  for (size_t i = 0; i < a.runs.size(); ++i) {
    if (e.runs[a.runs[i]].info.seed() != e.runs[b.runs[i]].info.seed()) return false;
  }
  return true;
}

// mean(faster) / mean(slower) per seed as a Speedup: paired by seed when
// both rows ran the same seeds (a seed fixes the data order and the
// injected delays, so what the seeds share cancels), else the two means'
// ratio and Welch's test. Nothing when a mean is not positive.
std::optional<Speedup> speedup_between(const std::vector<double>& numerator,
                                       const std::vector<double>& denominator, bool paired,
                                       const std::string& basis) {
  if (numerator.empty() || denominator.empty()) return std::nullopt;
  Speedup out;
  out.basis = basis;
  if (paired) {
    if (const std::optional<PairedRatio> r = paired_ratio(numerator, denominator)) {
      out.ratio = r->ratio.mean;
      out.interval = r->ratio;
      out.test = r->test;
      out.paired = true;
      return out;
    }
  }
  const double below = mean_interval(denominator).mean;
  if (!(below > 0.0)) return std::nullopt;
  out.ratio = mean_interval(numerator).mean / below;
  out.interval = ratio_interval(numerator, denominator);
  out.test = welch_test(numerator, denominator);
  return out;
}

// A case's per-seed figure against the baseline's: paired by seed when
// both ran the same seeds and every seed has the figure, else Welch's.
std::optional<TTest> seed_test(const std::vector<double>& row, const std::vector<double>& base,
                               bool paired, size_t seeds) {
  if (paired && row.size() == seeds && base.size() == seeds) return paired_t_test(row, base);
  return welch_test(row, base);
}

// The replay of the baseline's seeds under the row's tau (see CaseRow).
void predict_row(const Experiment& e, const CaseRow& base, CaseRow& row) {
  CurvePoint point;
  point.workers = e.workers;
  point.tau = row.tau_seconds.mean;
  if (&row == &base) {
    point.tau = std::numeric_limits<double>::infinity();
    row.predicted = point;
    return;
  }
  if (!replay_models(row) || !std::isfinite(row.tau_seconds.mean)) return;
  double speedup = 0.0, dropped = 0.0, step = 0.0, base_step = 0.0;
  size_t replayed = 0;
  for (size_t i : base.runs) {
    const std::optional<Prediction> p = predict_speedup(e.runs[i], row.tau_seconds.mean);
    if (!p) continue;
    speedup += p->speedup;
    dropped += 1.0 - p->completed_fraction;
    step += p->step_seconds_tau;
    base_step += p->step_seconds_inf;
    ++replayed;
  }
  if (replayed == 0) return;
  const double n = static_cast<double>(replayed);
  point.speedup = speedup / n;
  point.drop_rate = dropped / n;
  point.step_seconds = step / n;
  point.baseline_step_seconds = base_step / n;
  row.predicted = point;
}

// The figure of every seed of `row` at `target`, or nothing when
// a seed did not reach it.
std::optional<std::vector<double>> times_to(const Experiment& e, const CaseRow& row,
                                            double target) {
  std::vector<double> out;
  for (size_t i : row.runs) {
    const std::optional<TargetCrossing> c = run_time_to_target(e.runs[i], target);
    if (!c) return std::nullopt;
    out.push_back(c->seconds);
  }
  return out;
}

// The row's speedup on time to target at the targets within 2 points
// (CaseRow::near_target) and the warning when its verdict changes there.
void check_near_target(const Experiment& e, const CaseRow& base, double target, CaseRow& row) {
  const bool paired = same_seeds(e, row, base);
  for (const double shift : {-0.02, -0.01, 0.01, 0.02}) {
    // Rounded, so that 0.4 + 0.02 is the 0.42 an evaluation may report.
    const double near = std::round((target + shift) * 1e6) / 1e6;
    if (near <= 0.0 || near > 1.0) continue;
    const auto base_times = times_to(e, base, near);
    const auto row_times = times_to(e, row, near);
    if (!base_times || !row_times) continue;
    if (auto s = speedup_between(*base_times, *row_times, paired, "time to target"))
      row.near_target.push_back({near, *s});
  }
  const Speedup& main = *row.time_to_target_speedup;
  std::string changes;
  for (const CaseRow::NearTarget& n : row.near_target) {
    if (verdict(n.speedup) == verdict(main)) continue;
    changes +=
        fmt::format(", {:.2f}x at {:.4g} ({})", n.speedup.ratio, n.target, verdict(n.speedup));
  }
  if (changes.empty()) return;
  row.verdict_warning = fmt::format(
      "{}: the verdict changes within 2 points of the target: {:.2f}x at {:.4g} ({}){}; read it "
      "as unsettled",
      row.label, main.ratio, target, verdict(main), changes);
}

// Whether any run of the row injected a co-located load (config slowness).
bool injects_load(const Experiment& e, const CaseRow& row) {
  for (size_t i : row.runs) {
    for (const v1::SlownessConfig& s : e.runs[i].config.slowness())
      if (s.kind() == v1::SLOWNESS_CO_LOCATED_LOAD) return true;
  }
  return false;
}

// The row's host figures over its seeds, and the warning when a seed's
// host load is more than 1 above its baseline seed's or its step times
// spread more than 1.5 times as wide: its speed may be the host's, not the
// case's.
void check_host(const Experiment& e, const CaseRow& base, CaseRow& row) {
  std::vector<double> loads, spreads;
  std::string load_part, spread_part;
  double most_load = 1.0, most_spread = 1.5;
  for (size_t i : row.runs) {
    const RunFolder& run = e.runs[i];
    const std::optional<double> load = mean_host_load(run), spread = step_time_spread(run);
    if (load) loads.push_back(*load);
    if (spread) spreads.push_back(*spread);
    const RunFolder* paired = nullptr;
    for (size_t b : base.runs) {
      if (e.runs[b].info.seed() == run.info.seed()) paired = &e.runs[b];
    }
    if (&row == &base || e.simulated || paired == nullptr) continue;
    const std::optional<double> base_load = mean_host_load(*paired);
    const std::optional<double> base_spread = step_time_spread(*paired);
    if (load && base_load && *load - *base_load > most_load) {
      most_load = *load - *base_load;
      load_part =
          fmt::format("host busier than the baseline's: load {:.1f} against {:.1f} (seed {})",
                      *load, *base_load, run.info.seed());
    }
    if (spread && base_spread && *spread > most_spread * *base_spread) {
      most_spread = *spread / *base_spread;
      spread_part = fmt::format("step times spread {:.1f}x against {:.1f}x (p90 / median, seed {})",
                                *spread, *base_spread, run.info.seed());
    }
  }
  if (!loads.empty()) row.host_load = aggregate(loads);
  if (!spreads.empty()) row.step_spread = aggregate(spreads);
  const std::string parts =
      load_part + (load_part.empty() || spread_part.empty() ? "" : "; ") + spread_part;
  if (parts.empty()) return;
  row.host_warning =
      injects_load(e, row)
          ? fmt::format(
                "{}: {}: the case's own injected load (its config's co-located-load slowness), "
                "not a measurement problem",
                row.label, parts)
          : fmt::format("{}: {}: read this row's speed with care", row.label, parts);
}
// Whether every seed of the row reached the target.
bool reached_everywhere(const CaseRow& row) {
  return row.time_to_target && row.time_to_target->count == row.runs.size();
}

// The replay at the experiment's worker count is the case curves' point
// there, so that the plot's curve and the table's predicted column agree.
void put_replay_on_curves(Experiment& e, const std::vector<const CaseRow*>& rows) {
  std::vector<SpeedupCurve>& curves = e.predicted->curves;
  const size_t first = curves.size() - rows.size();  // after the best-tau curves
  for (size_t k = 0; k < rows.size(); ++k) {
    std::vector<CurvePoint>& points = curves[first + k].points;
    if (!rows[k]->predicted) continue;
    auto at = std::find_if(points.begin(), points.end(),
                           [&](const CurvePoint& p) { return p.workers >= e.workers; });
    if (at != points.end() && at->workers == e.workers) {
      *at = *rows[k]->predicted;
    } else {
      points.insert(at, *rows[k]->predicted);
    }
  }
}

}  // namespace

// Each row against the baseline row (speedups with their intervals, the
// seed tests, the checks near the target and of the host, the predicted
// speedups), and the experiment's predicted curves.
void compare_with_baseline(Experiment& e) {
  const CaseRow& base = e.rows[*e.baseline_row];
  std::vector<double> base_sps;
  for (size_t i : base.runs) base_sps.push_back(e.runs[i].summary.samples_per_second());
  for (CaseRow& row : e.rows) {
    const bool paired = same_seeds(e, row, base);
    std::vector<double> row_sps;
    for (size_t i : row.runs) row_sps.push_back(e.runs[i].summary.samples_per_second());
    // Faster is a shorter time: the baseline's over the case's.
    if (reached_everywhere(row) && reached_everywhere(base)) {
      row.time_to_target_speedup = speedup_between(
          base.time_to_target_values, row.time_to_target_values, paired, "time to target");
    }
    row.samples_speedup = speedup_between(row_sps, base_sps, paired, "samples/s");
    predict_row(e, base, row);
    check_host(e, base, row);
    row.time_to_target_test =
        seed_test(row.time_to_target_values, base.time_to_target_values, paired, row.runs.size());
    row.steady_test = seed_test(row.steady_values, base.steady_values, paired, row.runs.size());
    row.accuracy_at_time_test = seed_test(row.accuracy_at_time_values, base.accuracy_at_time_values,
                                          paired, row.runs.size());
    if (&row == &base) {
      for (std::optional<Speedup>* s : {&row.time_to_target_speedup, &row.samples_speedup}) {
        if (!*s) continue;
        (*s)->interval.reset();
        (*s)->test.reset();
      }
      row.time_to_target_test.reset();
      row.steady_test.reset();
      row.accuracy_at_time_test.reset();
    } else if (e.target && row.time_to_target_speedup) {
      check_near_target(e, base, *e.target, row);
    }
  }
  std::vector<const RunFolder*> baselines;
  for (size_t i : base.runs) baselines.push_back(&e.runs[i]);
  std::vector<const CaseRow*> rows;
  const std::vector<CurveCase> cases = curve_cases(e, rows);
  e.predicted = predict_curves(pool_baseline_steps(baselines), e.workers, cases, e.max_drop_rate);
  if (e.predicted) put_replay_on_curves(e, rows);
}

}  // namespace dctrain
