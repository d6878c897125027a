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
#include "tools/report/comparison.h"

namespace dctrain {

namespace {

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
