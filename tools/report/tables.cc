#include "tools/report/tables.h"

#include <fmt/format.h>
#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <stdexcept>
#include <tuple>

#include "metrics/metrics_json.h"

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

// "10.4 [9.53, 11.3]": mean and 95% interval; the mean alone for one value.
std::string with_interval(const std::vector<double>& values, const std::string& format) {
  if (values.empty()) return "-";
  const MeanInterval ci = mean_interval(values);
  std::string text = fmt::format(fmt::runtime(format), ci.mean);
  if (values.size() > 1) {
    text += fmt::format(" [{}, {}]", fmt::format(fmt::runtime(format), ci.low),
                        fmt::format(fmt::runtime(format), ci.high));
  }
  return text;
}

std::string p_text(const std::optional<TTest>& test) {
  if (!test) return "-";
  return fmt::format("{:.2g}{}", test->p, test->p < 0.05 ? " (significant)" : "");
}

std::string with_spread(const Aggregate& a, const std::string& format, size_t seeds) {
  std::string text = fmt::format(fmt::runtime(format), a.mean);
  if (seeds > 1 && a.count > 1) text += " ± " + fmt::format(fmt::runtime(format), a.spread);
  return text;
}

// The cases' curves: one per tau policy and tau (requeue does not enter the
// model); the requeue setting joins the label only when a policy has several
// taus (auto with and without requeue settles differently).
std::vector<CurveCase> curve_cases(const Experiment& e) {
  std::vector<CurveCase> cases;
  std::vector<const CaseRow*> rows;
  for (const CaseRow& row : e.rows) {
    if (row.tau_policy == "inf" || !std::isfinite(row.tau_seconds.mean)) continue;
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

}  // namespace

std::optional<double> run_time_to_target(const RunFolder& run, std::optional<double> target) {
  // On the clock from the process's start, as MLPerf measures it: the
  // start-up (workers joining, loading data) counts.
  const double startup = run.summary.startup_seconds();
  if (auto t = optional_number(run.summary.time_to_target_seconds())) return *t + startup;
  if (!target) return std::nullopt;
  for (const v1::EvalRecord& e : run.evals) {
    if (e.eval_accuracy() >= *target) return e.wall_seconds() + startup;
  }
  return std::nullopt;
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

// The row's speedup = mean(faster) / mean(slower) per seed, its interval and
// test: paired by seed when both rows ran the same seeds (a seed fixes the
// data order and the injected delays, so what the seeds share cancels),
// else the two means' ratio and Welch's test.
void speedup_of(CaseRow& row, const std::vector<double>& numerator,
                const std::vector<double>& denominator, bool paired, const std::string& basis) {
  row.speedup_basis = basis;
  if (paired) {
    if (const std::optional<PairedRatio> r = paired_ratio(numerator, denominator)) {
      row.speedup = r->ratio.mean;
      row.speedup_interval = r->ratio;
      row.speedup_test = r->test;
      row.speedup_basis += ", paired by seed";
      return;
    }
  }
  row.speedup = mean_interval(numerator).mean / mean_interval(denominator).mean;
  row.speedup_interval = ratio_interval(numerator, denominator);
  row.speedup_test = welch_test(numerator, denominator);
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
  if (&row == &base) {
    row.predicted_speedup = 1.0;
    row.predicted_drop_rate = 0.0;
    return;
  }
  const bool modelled = row.policy.empty() || row.policy == "dropcompute" || row.policy == "sync";
  if (!modelled || !std::isfinite(row.tau_seconds.mean)) return;
  double speedup = 0.0, dropped = 0.0;
  size_t replayed = 0;
  for (size_t i : base.runs) {
    const std::optional<Prediction> p = predict_speedup(e.runs[i], row.tau_seconds.mean);
    if (!p) continue;
    speedup += p->speedup;
    dropped += 1.0 - p->completed_fraction;
    ++replayed;
  }
  if (replayed == 0) return;
  row.predicted_speedup = speedup / static_cast<double>(replayed);
  row.predicted_drop_rate = dropped / static_cast<double>(replayed);
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
      it = index.emplace(key, report.experiments.size()).first;
      report.experiments.push_back(std::move(e));
    }
    report.experiments[it->second].runs.push_back(std::move(run));
  }
  std::sort(report.experiments.begin(), report.experiments.end(),
            [](const Experiment& a, const Experiment& b) {
              return std::tie(a.model, a.delay, a.simulated, a.workers) <
                     std::tie(b.model, b.delay, b.simulated, b.workers);
            });

  for (Experiment& e : report.experiments) {
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
    for (size_t r = 0; r < e.rows.size(); ++r) {
      CaseRow& row = e.rows[r];
      std::sort(row.runs.begin(), row.runs.end(),
                [&](size_t a, size_t b) { return e.runs[a].info.seed() < e.runs[b].info.seed(); });
      std::vector<double> accuracy, ttt, sps, drop, lost, tau, mfu, achieved;
      for (size_t i : row.runs) {
        const RunFolder& run = e.runs[i];
        if (run.summary.mean_mfu() > 0.0) {
          mfu.push_back(run.summary.mean_mfu());
          achieved.push_back(run.summary.mean_achieved_flops_per_second());
          row.training_flops_per_sample = run.summary.training_flops_per_sample();
        }
        if (auto a = optional_number(run.summary.final_eval_accuracy())) accuracy.push_back(*a);
        if (auto t = run_time_to_target(run, report.target)) ttt.push_back(*t);
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
      row.samples_per_second = aggregate(sps);
      row.drop_rate = aggregate(drop);
      row.samples_lost = aggregate(lost);
      row.tau_seconds = aggregate(tau);
      if (!mfu.empty()) {
        row.mfu = aggregate(mfu);
        row.achieved_flops_per_second = aggregate(achieved);
      }
      const std::string policy = row.policy.empty() ? "" : row.policy + ", ";
      if (is_baseline(row)) {
        row.label = row.policy.empty() ? "tau = inf (baseline)" : "sync, tau = inf (baseline)";
        if (!e.baseline_row) e.baseline_row = r;
      } else if (row.tau_policy == "inf") {
        row.label = row.policy == "backup"
                        ? fmt::format("backup workers (b = {}), requeue",
                                      e.runs[row.runs.front()].config.step().backup_workers())
                        : row.policy + ", tau = inf";
      } else {
        std::string tau_label = row.tau_policy + " s";
        if (row.tau_policy == "auto") {
          tau_label = std::isfinite(row.tau_seconds.mean)
                          ? fmt::format("auto (median {:.4g} s)", row.tau_seconds.mean)
                          : std::string("auto (stayed inf)");
        } else if (row.tau_policy[0] == 'p') {
          tau_label = fmt::format("{} ({:.4g} s)", row.tau_policy, row.tau_seconds.mean);
        }
        row.label = fmt::format("{}tau = {}, {}", policy, tau_label,
                                row.requeue ? "requeue" : "no requeue");
      }
    }
    if (e.baseline_row) {
      const CaseRow& base = e.rows[*e.baseline_row];
      for (CaseRow& row : e.rows) {
        const bool all_reached = row.time_to_target && base.time_to_target &&
                                 row.time_to_target->count == row.runs.size() &&
                                 base.time_to_target->count == base.runs.size() &&
                                 row.time_to_target->mean > 0;
        std::vector<double> base_sps, row_sps;
        for (size_t i : base.runs) base_sps.push_back(e.runs[i].summary.samples_per_second());
        for (size_t i : row.runs) row_sps.push_back(e.runs[i].summary.samples_per_second());
        if (all_reached) {
          // Faster is a shorter time: the baseline's over the case's.
          speedup_of(row, base.time_to_target_values, row.time_to_target_values,
                     same_seeds(e, row, base), "time to target");
        } else if (base.samples_per_second.mean > 0) {
          speedup_of(row, row_sps, base_sps, same_seeds(e, row, base), "samples/s");
        }
        if (&row == &base) {
          row.speedup_test.reset();
          row.speedup_interval.reset();
        }
        predict_row(e, base, row);
        const bool paired = same_seeds(e, row, base);
        row.time_to_target_test = seed_test(row.time_to_target_values, base.time_to_target_values,
                                            paired, row.runs.size());
        row.steady_test = seed_test(row.steady_values, base.steady_values, paired, row.runs.size());
        row.accuracy_at_time_test = seed_test(
            row.accuracy_at_time_values, base.accuracy_at_time_values, paired, row.runs.size());
        if (&row == &base) {
          row.time_to_target_test.reset();
          row.steady_test.reset();
          row.accuracy_at_time_test.reset();
        }
      }
      std::vector<const RunFolder*> baselines;
      for (size_t i : base.runs) baselines.push_back(&e.runs[i]);
      e.predicted = predict_curves(pool_baseline_steps(baselines), e.workers, curve_cases(e),
                                   e.max_drop_rate);
    }
  }
  return report;
}

std::vector<std::string> table_header() {
  return {"case",
          "seeds",
          "final accuracy",
          "time to target",
          "samples/s",
          "speedup vs tau = inf [95% CI]",
          "p",
          "predicted",
          "drop rate",
          "samples lost"};
}

std::vector<std::string> table_cells(const CaseRow& row) {
  const size_t seeds = row.runs.size();
  std::string ttt = "not reached";
  if (row.time_to_target) {
    ttt = with_spread(row.time_to_target.value(), "{:.2f}", seeds) + " s";
    if (row.time_to_target->count < seeds)
      ttt += fmt::format(" ({}/{} seeds)", row.time_to_target->count, seeds);
  }
  return {row.label,
          std::to_string(seeds),
          row.accuracy ? with_spread(*row.accuracy, "{:.4f}", seeds) : "none",
          ttt,
          with_spread(row.samples_per_second, "{:.1f}", seeds),
          row.speedup ? fmt::format("{:.3f}x{} ({})", *row.speedup,
                                    row.speedup_interval ? fmt::format(" [{:.3f}, {:.3f}]",
                                                                       row.speedup_interval->low,
                                                                       row.speedup_interval->high)
                                                         : std::string(),
                                    row.speedup_basis)
                      : "no baseline",
          p_text(row.speedup_test),
          row.predicted_speedup ? fmt::format("{:.3f}x ({:.1f}% dropped)", *row.predicted_speedup,
                                              100.0 * row.predicted_drop_rate.value_or(0.0))
                                : "-",
          with_spread(
              Aggregate{100 * row.drop_rate.mean, 100 * row.drop_rate.spread, row.drop_rate.count},
              "{:.2f}", seeds) +
              "%",
          with_spread(row.samples_lost, "{:.0f}", seeds)};
}

std::string markdown_table(const Experiment& e) {
  const auto header = table_header();
  std::string line = "|", rule = "|";
  for (size_t i = 0; i < header.size(); ++i) {
    line += " " + header[i] + " |";
    rule += i == 0 ? "---|" : "---:|";
  }
  std::string out = line + "\n" + rule + "\n";
  for (const CaseRow& row : e.rows) {
    line = "|";
    for (const std::string& cell : table_cells(row)) line += " " + cell + " |";
    out += line + "\n";
  }
  return out;
}

std::string experiment_title(const Experiment& e) {
  return fmt::format("{}: {} workers, {} delays{}", e.model, e.workers, e.delay,
                     e.simulated ? " (simulated)" : "");
}

std::string table_notes(const Report& report) {
  std::string out;
  if (report.target) {
    out += fmt::format("Time to target: wall seconds until an evaluation reached accuracy {:.4g}. ",
                       *report.target);
  } else {
    out +=
        "Time to target: no target accuracy (set stop.target_accuracy in the config or pass "
        "--target). ";
  }
  out +=
      "Speedup: the baseline's time to target over the case's when every seed of both reached the "
      "target, "
      "else the case's samples/s over the baseline's. Drop rate: micro-batches dropped at the "
      "threshold or "
      "orphaned, over those planned. ± is the standard deviation over seeds. When a case ran the "
      "baseline's seeds, its speedup is paired by seed (a seed fixes the data order and the "
      "injected delays): the geometric mean of the per-seed ratios, its 95% interval and p from "
      "the t-test of the log ratios. Otherwise the ratio of the means, its interval on the log "
      "scale (delta method, Welch's degrees of freedom) and Welch's t-test. p < 0.05: "
      "significant; both need two seeds or more. Predicted: the baseline's "
      "recorded micro-batch times replayed under the case's tau, each worker at its rank "
      "(averaged over the baseline's seeds), as a ratio with its predicted drop rate; '-' for "
      "policies the replay does not model (rebalance, backup). Second table (several seeds): mean "
      "and 95% interval (t distribution) over "
      "seeds of the time to target (clock from the process's start), the accuracy of the last "
      "evaluation at the earliest final evaluation among the experiment's runs (equal wall time), "
      "and steady-state samples/s (the steps after the first quarter, evaluations left out), each "
      "with p against the baseline (paired by seed when the case ran the baseline's seeds and "
      "each has the figure, else Welch's).\n";
  return out;
}

std::vector<uint32_t> reported_worker_counts() {
  return {4, 16, 64};
}

namespace {

// "1.32x at 4 workers (tau 0.035 s, 26.6% dropped), 1.37x at 16 (...)".
std::string curve_text(const SpeedupCurve& curve) {
  std::string out;
  for (uint32_t n : reported_worker_counts()) {
    const CurvePoint* p = curve_point(curve, n);
    if (p == nullptr) continue;
    out += fmt::format("{}{:.2f}x at {}{} (tau {}{})", out.empty() ? "" : ", ", p->speedup, n,
                       out.empty() ? " workers" : "",
                       std::isfinite(p->tau) ? fmt::format("{:.4g} s", p->tau) : "inf",
                       std::isfinite(p->tau) ? fmt::format(", {:.1f}% dropped", 100 * p->drop_rate)
                                             : std::string());
  }
  return out;
}

}  // namespace

std::string mfu_line(const Experiment& e) {
  std::string cases;
  double training = 0.0;
  for (const CaseRow& row : e.rows) {
    if (!row.mfu) continue;
    training = row.training_flops_per_sample;
    cases +=
        fmt::format("{}{}: {:.3g} GFLOP/s per worker, {:.1f}%", cases.empty() ? "" : "; ",
                    row.label, row.achieved_flops_per_second->mean / 1e9, 100.0 * row.mfu->mean);
  }
  if (cases.empty()) return "";
  return fmt::format(
      "Model FLOPs utilization ({:.4g} GFLOP per training sample, 3 x the forward pass counted "
      "from the layers; against each worker's sgemm peak x its threads, delays left out): {}.\n",
      training / 1e9, cases);
}

std::string predicted_line(const Experiment& e) {
  if (!e.predicted || e.predicted->curves.empty()) return "";
  const SpeedupCurve* best = find_curve(*e.predicted, "best");
  if (best == nullptr) return "";
  std::string out = fmt::format("Predicted speedup with the best tau: {}", curve_text(*best));
  if (const SpeedupCurve* bounded = find_curve(*e.predicted, "bounded")) {
    out += fmt::format(
        "; within the runs' drop-rate bound of {:.3g}% (the automatic threshold's "
        "max_drop_rate): {}",
        100 * e.max_drop_rate, curve_text(*bounded));
  }
  return out + fmt::format(
                   ". I.i.d. workers drawn from the baseline's {} worker steps, overhead {:.4g} "
                   "s per step.\n",
                   e.predicted->worker_steps, e.predicted->overhead_seconds);
}

std::string reading_line(const Experiment& e) {
  if (!e.baseline_row) return "";
  std::vector<std::string> faster, slower, unclear, single;
  size_t seeds = 0;
  for (const CaseRow& row : e.rows) {
    seeds = std::max(seeds, row.runs.size());
    if (&row == &e.rows[*e.baseline_row] || !row.speedup) continue;
    if (!row.speedup_interval) {
      single.push_back(row.label);
    } else if (row.speedup_interval->low > 1.0) {
      faster.push_back(fmt::format("{} ({:.2f}x)", row.label, *row.speedup));
    } else if (row.speedup_interval->high < 1.0) {
      slower.push_back(fmt::format("{} ({:.2f}x)", row.label, *row.speedup));
    } else {
      unclear.push_back(fmt::format("{} ({:.2f}x)", row.label, *row.speedup));
    }
  }
  const auto list = [](const std::vector<std::string>& items) {
    std::string out;
    for (size_t i = 0; i < items.size(); ++i)
      out += (i == 0 ? "" : i + 1 == items.size() ? " and " : ", ") + items[i];
    return out;
  };
  std::string out = "What this table shows: ";
  std::vector<std::string> parts;
  if (!faster.empty())
    parts.push_back(list(faster) + (faster.size() == 1 ? " is" : " are") +
                    " faster than the baseline beyond the spread between seeds (95% interval "
                    "above 1)");
  if (!slower.empty())
    parts.push_back(list(slower) + (slower.size() == 1 ? " is" : " are") +
                    " slower than the baseline (95% interval below 1)");
  if (!unclear.empty())
    parts.push_back(list(unclear) + " cannot" +
                    " be told from the baseline with these seeds (95% interval holds 1)");
  if (parts.empty()) parts.push_back("no case has the seeds for an interval");
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
  out += ". What it cannot show: ";
  std::vector<std::string> cannot;
  if (!single.empty())
    cannot.push_back("whether " + list(single) +
                     " differ from the baseline at all (one seed: no interval, the speedup can be "
                     "noise)");
  bool accuracy_differs = false;
  for (const CaseRow& row : e.rows)
    accuracy_differs =
        accuracy_differs || (row.accuracy_at_time_test && row.accuracy_at_time_test->p < 0.05);
  cannot.push_back(
      accuracy_differs
          ? "whether the accuracy differences hold beyond these runs' length (the statistics "
            "table's accuracy at equal wall time differs for some case)"
          : "that accuracy is unchanged: no difference beyond the seeds' spread is not equality, "
            "and final accuracy after a short run says little about convergence");
  cannot.push_back(fmt::format(
      "what happens at other worker counts than {} (the predicted line below is a model, not a "
      "measurement){}",
      e.workers,
      seeds > 1 ? "" : "; nor any interval at all: run more seeds (the sweep's seeds axis)"));
  for (size_t i = 0; i < cannot.size(); ++i) out += (i ? "; " : "") + cannot[i];
  return out + ".\n";
}

double steady_samples_per_second(const RunFolder& run) {
  double samples = 0.0, seconds = 0.0;
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

std::string statistics_table(const Experiment& e) {
  bool several = false;
  for (const CaseRow& row : e.rows) several = several || row.runs.size() > 1;
  if (!several || !e.baseline_row) return "";
  const std::string at =
      e.equal_time ? fmt::format("accuracy at {:.1f} s", *e.equal_time) : "accuracy at equal time";
  std::string out = fmt::format(
      "| case | seeds | time to target [95% CI] | p | {} [95% CI] | p | steady samples/s [95% CI] "
      "| p |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
      at);
  for (const CaseRow& row : e.rows) {
    std::string ttt = with_interval(row.time_to_target_values, "{:.2f}");
    if (!row.time_to_target_values.empty()) ttt += " s";
    if (row.time_to_target_values.size() < row.runs.size()) {
      ttt += fmt::format(" ({}/{} reached)", row.time_to_target_values.size(), row.runs.size());
    }
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |\n", row.label, row.runs.size(),
                       ttt, p_text(row.time_to_target_test),
                       with_interval(row.accuracy_at_time_values, "{:.4f}"),
                       p_text(row.accuracy_at_time_test),
                       with_interval(row.steady_values, "{:.1f}"), p_text(row.steady_test));
  }
  return out;
}

std::string markdown_tables(const Report& report) {
  std::string out;
  for (const Experiment& e : report.experiments) {
    out += "### " + experiment_title(e) + "\n\n" + markdown_table(e) + "\n";
    const std::string reading = reading_line(e);
    if (!reading.empty()) out += reading + "\n";
    const std::string stats = statistics_table(e);
    if (!stats.empty()) out += stats + "\n";
    const std::string predicted = predicted_line(e);
    if (!predicted.empty()) out += predicted + "\n";
    const std::string mfu = mfu_line(e);
    if (!mfu.empty()) out += mfu + "\n";
  }
  const std::string twins = twin_table(report);
  if (!twins.empty()) out += twins + "\n";
  return out + table_notes(report);
}

std::vector<TwinRow> twin_rows(const Report& report) {
  // A row's samples/s over its experiment's baseline row's.
  const auto speedup = [](const Experiment& e, const CaseRow& row) {
    const double base = e.rows[*e.baseline_row].samples_per_second.mean;
    return base > 0.0 ? row.samples_per_second.mean / base : 0.0;
  };
  const auto row_key = [](const CaseRow& row) {
    return std::make_tuple(row.policy, row.tau_policy, row.requeue);
  };
  std::vector<TwinRow> out;
  for (const Experiment& real : report.experiments) {
    if (real.simulated || !real.baseline_row) continue;
    for (const Experiment& sim : report.experiments) {
      if (!sim.simulated || !sim.baseline_row || sim.model != real.model ||
          sim.workers != real.workers || sim.delay != real.delay)
        continue;
      for (const CaseRow& r : real.rows) {
        for (const CaseRow& s : sim.rows) {
          if (row_key(r) != row_key(s)) continue;
          TwinRow t;
          t.experiment = experiment_title(real);
          t.label = r.label;
          t.real_speedup = speedup(real, r);
          t.simulated_speedup = speedup(sim, s);
          t.real_drop_rate = r.drop_rate.mean;
          t.simulated_drop_rate = s.drop_rate.mean;
          t.real_samples_per_second = r.samples_per_second.mean;
          t.simulated_samples_per_second = s.samples_per_second.mean;
          t.real_seeds = r.runs.size();
          t.simulated_seeds = s.runs.size();
          out.push_back(std::move(t));
        }
      }
    }
  }
  return out;
}

std::string twin_table(const Report& report) {
  const std::vector<TwinRow> rows = twin_rows(report);
  if (rows.empty()) return "";
  std::string out =
      "### Simulated against real\n\n"
      "Each case that ran both for real and through dctrain-simulate (same model, workers, "
      "delays, policy and seeds' configs): speedup over each side's own tau = inf baseline on "
      "the samples/s basis (whole runs), drop rate and samples/s, means over each side's "
      "seeds.\n\n"
      "| experiment | case | seeds (real / sim) | speedup real | speedup sim | sim / real | "
      "drop real | drop sim | difference | samples/s real | samples/s sim |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const TwinRow& t : rows) {
    out += fmt::format(
        "| {} | {} | {} / {} | {:.3f}x | {:.3f}x | {:.3f} | {:.1f}% | {:.1f}% | {:+.1f} pt | "
        "{:.0f} "
        "| {:.0f} |\n",
        t.experiment, t.label, t.real_seeds, t.simulated_seeds, t.real_speedup, t.simulated_speedup,
        t.real_speedup > 0 ? t.simulated_speedup / t.real_speedup : 0.0, 100 * t.real_drop_rate,
        100 * t.simulated_drop_rate, 100 * (t.simulated_drop_rate - t.real_drop_rate),
        t.real_samples_per_second, t.simulated_samples_per_second);
  }
  return out;
}

namespace {

// A number of report.json: null when missing or not finite (number_or_null).
google::protobuf::Value number(std::optional<double> value) {
  return number_or_null(value);
}
google::protobuf::Value mean(const std::optional<Aggregate>& a) {
  return number_or_null(a ? std::optional<double>(a->mean) : std::nullopt);
}

void fill_predicted(const Experiment& e, const PredictedCurves& p, v1::PredictedSpeedups& out) {
  out.set_model("i.i.d. workers drawn from the tau = inf baseline's pooled worker steps");
  out.set_speedup_basis("samples/s");
  out.set_recorded_workers(p.recorded_workers);
  out.set_worker_steps(static_cast<uint32_t>(p.worker_steps));
  out.set_steps(static_cast<uint32_t>(p.steps));
  out.set_runs(static_cast<uint32_t>(p.runs));
  *out.mutable_overhead_seconds() = number(p.overhead_seconds);
  *out.mutable_max_drop_rate() = number(e.max_drop_rate);
  for (const SpeedupCurve& c : p.curves) {
    v1::PredictedCurve& curve = *out.add_curves();
    curve.set_label(c.label);
    curve.set_tau_policy(c.tau_policy);
    for (uint32_t n : reported_worker_counts()) {
      const CurvePoint* at = curve_point(c, n);
      if (at == nullptr) continue;
      v1::PredictedPoint& point = *curve.add_points();
      point.set_workers(n);
      *point.mutable_tau_seconds() = number(at->tau);
      *point.mutable_speedup() = number(at->speedup);
      *point.mutable_drop_rate() = number(at->drop_rate);
      *point.mutable_step_seconds() = number(at->step_seconds);
      *point.mutable_baseline_step_seconds() = number(at->baseline_step_seconds);
    }
  }
}

}  // namespace

v1::ReportFile report_file(const Report& report) {
  v1::ReportFile file;
  for (const Experiment& e : report.experiments) {
    v1::ReportExperiment& x = *file.add_experiments();
    x.set_model(e.model);
    x.set_workers(e.workers);
    x.set_delay(e.delay);
    for (const CaseRow& row : e.rows) {
      v1::ReportRow& r = *x.add_rows();
      r.set_label(row.label);
      r.set_tau_policy(row.tau_policy);
      r.set_requeue(row.requeue);
      for (size_t i : row.runs) r.add_runs(e.runs[i].dir.string());
      *r.mutable_accuracy() = mean(row.accuracy);
      *r.mutable_time_to_target_seconds() = mean(row.time_to_target);
      *r.mutable_samples_per_second() = number(row.samples_per_second.mean);
      *r.mutable_speedup() = number(row.speedup);
      r.set_speedup_basis(row.speedup_basis);
      *r.mutable_drop_rate() = number(row.drop_rate.mean);
      *r.mutable_samples_lost() = number(row.samples_lost.mean);
      *r.mutable_tau_seconds() = number(row.tau_seconds.mean);
      if (row.speedup_interval) {
        *r.mutable_speedup_low() = number(row.speedup_interval->low);
        *r.mutable_speedup_high() = number(row.speedup_interval->high);
      }
      if (row.speedup_test) *r.mutable_speedup_p() = number(row.speedup_test->p);
      *r.mutable_predicted_speedup() = number(row.predicted_speedup);
      *r.mutable_predicted_drop_rate() = number(row.predicted_drop_rate);
    }
    if (e.predicted) fill_predicted(e, *e.predicted, *x.mutable_predicted());
  }
  return file;
}

std::string report_json(const Report& report) {
  return json_text(report_file(report), false);
}

}  // namespace dctrain
