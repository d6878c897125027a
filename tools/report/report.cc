#include "tools/report/report.h"

#include <fmt/format.h>
#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>

#include "metrics/metrics_json.h"
#include "runtime/text_format.h"

namespace dctrain {

namespace {

Aggregate aggregate(const std::vector<double>& values) {
  Aggregate a;
  a.count = values.size();
  if (values.empty()) return a;
  double sum = 0.0;
  for (double v : values) sum += v;
  a.mean = sum / static_cast<double>(values.size());
  if (values.size() > 1) {
    double squares = 0.0;
    for (double v : values) squares += (v - a.mean) * (v - a.mean);
    a.spread = std::sqrt(squares / static_cast<double>(values.size() - 1));
  }
  return a;
}

bool is_baseline(const CaseRow& row) {
  return row.tau_policy == "inf" && (row.policy.empty() || row.policy == "sync");
}

// Order of rows: the baseline; then by policy (the config's or
// "dropcompute", "rebalance", "rebalance+dropcompute", "backup"), each by
// inf, fixed seconds, percentiles, auto; requeue first.
std::tuple<int, int, int, double, int> row_order(const CaseRow& row) {
  const std::string& p = row.tau_policy;
  const int requeue = row.requeue ? 0 : 1;
  const int first = is_baseline(row) ? 0 : 1;
  int policy = 0;
  if (row.policy == "rebalance") policy = 1;
  if (row.policy == "rebalance+dropcompute") policy = 2;
  if (row.policy == "backup") policy = 3;
  if (p == "inf") return {first, policy, 0, 0.0, requeue};
  if (p == "auto") return {first, policy, 3, 0.0, requeue};
  if (!p.empty() && p[0] == 'p') return {first, policy, 2, std::atof(p.c_str() + 1), requeue};
  return {first, policy, 1, std::atof(p.c_str()), requeue};
}

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

// The first evaluation at or above `target`, interpolated with the one
// before it (below the target), on the clock from the process's start.
std::optional<TargetCrossing> crossing(const RunFolder& run, double target) {
  for (size_t i = 0; i < run.evals.size(); ++i) {
    const v1::EvalRecord& at = run.evals[i];
    if (at.eval_accuracy() < target) continue;
    // The first evaluation: somewhere since the training started.
    TargetCrossing c{at.wall_seconds(), at.wall_seconds()};
    if (i > 0) {
      const v1::EvalRecord& before = run.evals[i - 1];
      c.resolution = at.wall_seconds() - before.wall_seconds();
      c.seconds = before.wall_seconds() + *c.resolution * (target - before.eval_accuracy()) /
                                              (at.eval_accuracy() - before.eval_accuracy());
    }
    c.seconds += run.summary.startup_seconds();
    return c;
  }
  return std::nullopt;
}

}  // namespace

std::optional<TargetCrossing> run_time_to_target(const RunFolder& run,
                                                 std::optional<double> target) {
  // On the clock from the process's start, as MLPerf measures it: the
  // start-up (workers joining, loading data) counts.
  if (!run.evals.empty()) return target ? crossing(run, *target) : std::nullopt;
  const std::optional<double> measured_at = optional_number(run.summary.target_accuracy());
  const std::optional<double> t = optional_number(run.summary.time_to_target_seconds());
  if (!t || (target && measured_at != target)) return std::nullopt;
  return TargetCrossing{*t + run.summary.startup_seconds(), std::nullopt};
}

std::string verdict(const Speedup& speedup) {
  const double low = speedup.interval ? speedup.interval->low : speedup.ratio;
  const double high = speedup.interval ? speedup.interval->high : speedup.ratio;
  if (low > 1.0) return "faster";
  if (high < 1.0) return "slower";
  return "cannot be told";
}

std::optional<double> mean_host_load(const RunFolder& run) {
  double sum = 0.0;
  size_t read = 0;
  for (const v1::StepRecord& s : run.steps) {
    if (s.host_load() <= 0.0) continue;
    sum += s.host_load();
    ++read;
  }
  if (read == 0) return std::nullopt;
  return sum / static_cast<double>(read);
}

std::optional<double> step_time_spread(const RunFolder& run) {
  std::vector<double> times;
  for (size_t i = run.steps.size() / 4; i < run.steps.size(); ++i)
    times.push_back(run.steps[i].step_seconds());
  if (times.empty()) return std::nullopt;
  const double median = percentile(times, 50);
  if (!(median > 0.0)) return std::nullopt;
  return percentile(times, 90) / median;
}

std::string slowness_label(const Experiment& e) {
  const bool real = !e.runs.empty() && e.runs.front().config.slowness_size() > 0;
  return e.delay + (real ? " (real slowness)" : " delays");
}

double run_tau(const RunFolder& run) {
  if (run.info.tau_policy() != "auto") return run.config.step().tau();
  std::vector<double> taus;
  for (const v1::StepRecord& s : run.steps) {
    const double tau = tau_seconds(s.tau());
    if (std::isfinite(tau)) taus.push_back(tau);
  }
  return taus.empty() ? std::numeric_limits<double>::infinity() : percentile(taus, 50);
}

namespace {

// What must match for two runs to be seeds of one case: the config with its
// seed (and the data's and delays' seeds where they follow it), name, run id
// and threshold left out (a percentile or automatic tau is each seed's own),
// the budget included.
v1::RunConfig pooled_part(const v1::RunConfig& config) {
  v1::RunConfig c = config;
  if (c.dataset().seed() == c.seed()) c.mutable_dataset()->clear_seed();
  if (c.delay().seed() == c.seed()) c.mutable_delay()->clear_seed();
  c.clear_seed();
  c.clear_name();  // a sweep names each seed's case
  c.clear_run_id();
  c.mutable_step()->clear_tau();
  return c;
}

// Why the runs of `row` cannot be pooled as seeds of one case: two with the
// same seed, or two whose configs differ in more than the seed.
std::optional<std::string> pooling_problem(const Experiment& e, const CaseRow& row) {
  std::map<uint64_t, size_t> by_seed;
  for (size_t i : row.runs) {
    const RunFolder& run = e.runs[i];
    const auto [it, fresh] = by_seed.emplace(run.info.seed(), i);
    if (!fresh) {
      return fmt::format(
          "'{}' and '{}' are the same case with the same seed ({}): a duplicate is not a second "
          "seed. Pass one of them",
          e.runs[it->second].dir.string(), run.dir.string(), run.info.seed());
    }
  }
  const RunFolder& first = e.runs[row.runs.front()];
  const v1::RunConfig reference = pooled_part(first.config);
  for (size_t i : row.runs) {
    const RunFolder& run = e.runs[i];
    if (run.summary.code_version() != first.summary.code_version()) {
      return fmt::format(
          "'{}' and '{}' look like seeds of one case but were run by different code ('{}' and "
          "'{}'), so their figures cannot be pooled. Report them apart, or run the case again "
          "with one build",
          first.dir.string(), run.dir.string(), first.summary.code_version(),
          run.summary.code_version());
    }
    std::string differences;
    google::protobuf::util::MessageDifferencer differ;
    differ.ReportDifferencesToString(&differences);
    if (differ.Compare(reference, pooled_part(run.config))) continue;
    if (differences.size() > 600) differences = differences.substr(0, 600) + "...";
    return fmt::format(
        "'{}' and '{}' look like seeds of one case but their configs differ in more than the "
        "seed (a different budget, model or recipe), so their figures cannot be pooled:\n{}"
        "Report them apart, or run the case again with the same config",
        first.dir.string(), run.dir.string(), differences);
  }
  return std::nullopt;
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

// The figure of every seed of `row` at `target` (crossing), or nothing when
// a seed did not reach it.
std::optional<std::vector<double>> times_to(const Experiment& e, const CaseRow& row,
                                            double target) {
  std::vector<double> out;
  for (size_t i : row.runs) {
    const std::optional<TargetCrossing> c = crossing(e.runs[i], target);
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

}  // namespace

namespace {

// The runs grouped into experiments (the same model, workers, delay and
// real or simulated), in the report's order.
std::vector<Experiment> group_experiments(std::vector<RunFolder> runs) {
  std::vector<Experiment> out;
  std::map<std::tuple<std::string, uint32_t, std::string, bool>, size_t> index;
  for (RunFolder& run : runs) {
    const auto key = std::make_tuple(run.info.model(), run.info.workers(), run.info.delay(),
                                     run.info.simulated());
    auto it = index.find(key);
    if (it == index.end()) {
      Experiment e;
      e.model = run.info.model();
      e.workers = run.info.workers();
      e.delay = run.info.delay();
      e.simulated = run.info.simulated();
      e.slug = fmt::format("{}_w{}_{}{}", e.model, e.workers, e.delay, e.simulated ? "_sim" : "");
      it = index.emplace(key, out.size()).first;
      out.push_back(std::move(e));
    }
    out[it->second].runs.push_back(std::move(run));
  }
  std::sort(out.begin(), out.end(), [](const Experiment& a, const Experiment& b) {
    return std::tie(a.model, a.delay, a.simulated, a.workers) <
           std::tie(b.model, b.delay, b.simulated, b.workers);
  });
  return out;
}

// An experiment's runs grouped into its cases' rows (policy, tau policy,
// requeue), in the table's order. Throws when a row's runs are not seeds of
// one config (pooling_problem).
void group_rows(Experiment& e) {
  std::map<std::tuple<std::string, std::string, bool>, size_t> rows;
  for (size_t i = 0; i < e.runs.size(); ++i) {
    const v1::CaseInfo& info = e.runs[i].info;
    const bool requeue = info.tau_policy() == "inf" ? true : info.requeue();
    const auto key = std::make_tuple(info.policy(), info.tau_policy(), requeue);
    auto it = rows.find(key);
    if (it == rows.end()) {
      CaseRow row;
      row.tau_policy = info.tau_policy();
      row.policy = info.policy();
      row.requeue = requeue;
      it = rows.emplace(key, e.rows.size()).first;
      e.rows.push_back(row);
    }
    e.rows[it->second].runs.push_back(i);
  }
  std::sort(e.rows.begin(), e.rows.end(),
            [](const CaseRow& a, const CaseRow& b) { return row_order(a) < row_order(b); });
  for (const CaseRow& row : e.rows) {
    if (const std::optional<std::string> problem = pooling_problem(e, row)) {
      throw std::runtime_error(*problem);
    }
  }
}

// What the experiment's runs share: auto tau's drop-rate bound, and the
// equal wall time at which the cases' accuracies are compared (the
// shortest run's last evaluation).
void set_shared_bounds(Experiment& e) {
  for (const RunFolder& run : e.runs) {
    const v1::StepConfig& step = run.config.step();
    if (step.tau_policy() == v1::TAU_POLICY_AUTO && step.auto_tau().has_max_drop_rate())
      e.max_drop_rate = step.auto_tau().max_drop_rate();
  }
  for (const RunFolder& run : e.runs) {
    if (run.evals.empty()) continue;
    const double last = run.evals.back().wall_seconds() + run.summary.startup_seconds();
    e.equal_time = e.equal_time ? std::min(*e.equal_time, last) : last;
  }
}

// A row's figures over its seeds (its runs put in seed order).
void aggregate_row(const Experiment& e, CaseRow& row) {
  std::sort(row.runs.begin(), row.runs.end(),
            [&](size_t a, size_t b) { return e.runs[a].info.seed() < e.runs[b].info.seed(); });
  std::vector<double> accuracy, ttt, resolution, sps, drop, lost, tau, mfu, achieved;
  for (size_t i : row.runs) {
    const RunFolder& run = e.runs[i];
    if (run.summary.mean_mfu() > 0.0) {
      mfu.push_back(run.summary.mean_mfu());
      achieved.push_back(run.summary.mean_achieved_flops_per_second());
      row.training_flops_per_sample = run.summary.training_flops_per_sample();
    }
    if (auto a = optional_number(run.summary.final_eval_accuracy())) accuracy.push_back(*a);
    if (const std::optional<TargetCrossing> t = run_time_to_target(run, e.target)) {
      ttt.push_back(t->seconds);
      if (t->resolution) resolution.push_back(*t->resolution);
    }
    row.steady_values.push_back(steady_samples_per_second(run));
    if (e.equal_time) {
      if (auto a = accuracy_at(run, *e.equal_time)) row.accuracy_at_time_values.push_back(*a);
    }
    sps.push_back(run.summary.samples_per_second());
    drop.push_back(run.summary.drop_rate());
    lost.push_back(static_cast<double>(run.summary.samples_lost()));
    tau.push_back(run_tau(run));
  }
  if (!accuracy.empty()) row.accuracy = aggregate(accuracy);
  if (!ttt.empty()) row.time_to_target = aggregate(ttt);
  row.time_to_target_values = ttt;
  if (!resolution.empty()) row.target_resolution = aggregate(resolution).mean;
  row.samples_per_second = aggregate(sps);
  row.drop_rate = aggregate(drop);
  row.samples_lost = aggregate(lost);
  row.tau_seconds = aggregate(tau);
  if (!mfu.empty()) {
    row.mfu = aggregate(mfu);
    row.achieved_flops_per_second = aggregate(achieved);
  }
}

// The settings an async or local-sgd arm ran with, for its label: the
// report says what each arm was ("S = 4, lr 0.0125"); empty for the others.
std::string arm_settings(const v1::RunConfig& config) {
  const v1::StepConfig& step = config.step();
  const double lr = config.optimizer().lr();
  if (step.policy() == v1::POLICY_ASYNC) {
    return fmt::format("async, S = {}, lr {:.4g}", step.max_staleness(), lr);
  }
  if (step.policy() == v1::POLICY_LOCAL_SGD) {
    const v1::OptimizerConfig& outer = step.outer_optimizer();
    return fmt::format(
        "local-sgd, H = {}, inner {} lr {:.4g}, outer {} lr {:.4g}{}{}", step.local_steps(),
        word(config.optimizer().kind()), lr, word(outer.kind()), outer.lr(),
        outer.momentum() > 0 ? fmt::format(" momentum {:.3g}", outer.momentum()) : "",
        outer.nesterov() ? " nesterov" : "");
  }
  return "";
}

// The case's name in the tables ("sync, tau = auto (median 0.035 s),
// requeue").
std::string row_label(const Experiment& e, const CaseRow& row) {
  const std::string settings = arm_settings(e.runs[row.runs.front()].config);
  if (!settings.empty()) {
    const std::string arm = row.policy == settings.substr(0, row.policy.size())
                                ? settings
                                : fmt::format("{} ({})", row.policy, settings);
    return row.tau_policy == "inf" ? arm : fmt::format("{}, tau = {} s", arm, row.tau_policy);
  }
  if (is_baseline(row)) {
    return row.policy.empty() ? "tau = inf (baseline)" : "sync, tau = inf (baseline)";
  }
  if (row.tau_policy == "inf") {
    return row.policy == "backup"
               ? fmt::format("backup workers (b = {}), requeue",
                             e.runs[row.runs.front()].config.step().backup_workers())
               : row.policy + ", tau = inf";
  }
  std::string tau_label = row.tau_policy + " s";
  if (row.tau_policy == "auto") {
    tau_label = std::isfinite(row.tau_seconds.mean)
                    ? fmt::format("auto (median {:.4g} s)", row.tau_seconds.mean)
                    : std::string("auto (stayed inf)");
  } else if (row.tau_policy[0] == 'p') {
    tau_label = fmt::format("{} ({:.4g} s)", row.tau_policy, row.tau_seconds.mean);
  }
  const std::string policy = row.policy.empty() ? "" : row.policy + ", ";
  return fmt::format("{}tau = {}, {}", policy, tau_label, row.requeue ? "requeue" : "no requeue");
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

}  // namespace

Report build_report(std::vector<RunFolder> runs, std::optional<double> target) {
  Report report;
  report.target = target;
  if (!report.target) {
    for (const RunFolder& r : runs) {
      if (auto t = optional_number(r.summary.target_accuracy())) report.target = t;
    }
  }
  report.experiments = group_experiments(std::move(runs));
  for (Experiment& e : report.experiments) {
    e.target = report.target;
    group_rows(e);
    set_shared_bounds(e);
    for (size_t r = 0; r < e.rows.size(); ++r) {
      CaseRow& row = e.rows[r];
      aggregate_row(e, row);
      row.label = row_label(e, row);
      if (is_baseline(row) && !e.baseline_row) e.baseline_row = r;
    }
    if (e.baseline_row) compare_with_baseline(e);
  }
  return report;
}

std::vector<uint32_t> reported_worker_counts() {
  return {4, 16, 64};
}

double steady_samples_per_second(const RunFolder& run) {
  double samples = 0.0, seconds = 0.0;
  // Async steps overlap (each is one worker's round trip): the wall time
  // between the first quarter's end and the last step is theirs.
  if (run.config.step().policy() == v1::POLICY_ASYNC) {
    const size_t first = run.steps.size() / 4;
    if (first == 0 || first >= run.steps.size()) return 0.0;
    for (size_t i = first; i < run.steps.size(); ++i) samples += run.steps[i].samples();
    seconds = run.steps.back().wall_seconds() - run.steps[first - 1].wall_seconds();
    return seconds > 0.0 ? samples / seconds : 0.0;
  }
  for (size_t i = run.steps.size() / 4; i < run.steps.size(); ++i) {
    const v1::StepRecord& s = run.steps[i];
    samples += s.samples();
    seconds += s.step_seconds() + s.reduce_seconds() + s.apply_seconds();
  }
  return seconds > 0.0 ? samples / seconds : 0.0;
}

std::optional<double> accuracy_at(const RunFolder& run, double wall_seconds) {
  std::optional<double> out;
  for (const v1::EvalRecord& e : run.evals) {
    if (e.wall_seconds() + run.summary.startup_seconds() <= wall_seconds + 1e-9)
      out = e.eval_accuracy();
  }
  return out;
}
}  // namespace dctrain
