#include "tools/report/markdown.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "metrics/metrics_json.h"

namespace dctrain {

namespace {
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

}  // namespace

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
    out += "|";
    for (const std::string& cell : table_cells(row)) out += " " + cell + " |";
    out += "\n";
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

std::string experiment_markdown(const Experiment& e, const std::string& heading) {
  std::string out = heading + " " + experiment_title(e) + "\n\n" + markdown_table(e) + "\n";
  for (const std::string& line : {reading_line(e), statistics_table(e), predicted_line(e),
                                  mfu_line(e)}) {
    if (!line.empty()) out += line + "\n";
  }
  return out;
}

std::string markdown_tables(const Report& report) {
  std::string out;
  for (const Experiment& e : report.experiments) out += experiment_markdown(e, "###");
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

}  // namespace dctrain
