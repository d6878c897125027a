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
          "speedup on time to target [95% CI]",
          "p",
          "samples/s",
          "speedup on samples/s [95% CI]",
          "p",
          "predicted",
          "drop rate",
          "samples lost"};
}

namespace {

// "1.162x [1.05, 1.29]", " (unpaired)" when the seeds were not paired.
std::string speedup_text(const Speedup& s) {
  std::string text = fmt::format("{:.3f}x", s.ratio);
  if (s.interval) text += fmt::format(" [{:.3f}, {:.3f}]", s.interval->low, s.interval->high);
  if (s.interval && !s.paired) text += " (unpaired)";
  return text;
}

// The time-to-target speedup's cell when the row has none: why.
std::string no_time_to_target_speedup(const Experiment& e, const CaseRow& row) {
  const auto reached = [](const CaseRow& r) {
    return r.time_to_target ? r.time_to_target->count : size_t{0};
  };
  if (!e.target) return "no target";
  if (!e.baseline_row) return "no baseline";
  if (reached(row) < row.runs.size())
    return fmt::format("not reached ({}/{} seeds)", reached(row), row.runs.size());
  const CaseRow& base = e.rows[*e.baseline_row];
  return fmt::format("baseline not reached ({}/{} seeds)", reached(base), base.runs.size());
}

}  // namespace

std::vector<std::string> table_cells(const Experiment& e, const CaseRow& row) {
  const size_t seeds = row.runs.size();
  std::string ttt = e.target ? "not reached" : "no target";
  if (row.time_to_target) {
    ttt = with_spread(row.time_to_target.value(), "{:.2f}", seeds) + " s";
    if (row.time_to_target->count < seeds)
      ttt += fmt::format(" ({}/{} seeds)", row.time_to_target->count, seeds);
  }
  const std::optional<Speedup>& on_time = row.time_to_target_speedup;
  const std::optional<Speedup>& on_samples = row.samples_speedup;
  return {row.label,
          std::to_string(seeds),
          row.accuracy ? with_spread(*row.accuracy, "{:.4f}", seeds) : "none",
          ttt,
          on_time ? speedup_text(*on_time) : no_time_to_target_speedup(e, row),
          on_time ? p_text(on_time->test) : "-",
          with_spread(row.samples_per_second, "{:.1f}", seeds),
          on_samples ? speedup_text(*on_samples) : "no baseline",
          on_samples ? p_text(on_samples->test) : "-",
          row.predicted ? fmt::format("{:.3f}x ({:.1f}% dropped)", row.predicted->speedup,
                                      100.0 * row.predicted->drop_rate)
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
    for (const std::string& cell : table_cells(e, row)) out += " " + cell + " |";
    out += "\n";
  }
  return out;
}

std::string experiment_title(const Experiment& e) {
  return fmt::format("{}: {} workers, {}{}", e.model, e.workers, slowness_label(e),
                     e.simulated ? " (simulated)" : "");
}

std::string table_notes(const Report& report) {
  std::string out;
  if (report.target) {
    out += fmt::format(
        "Time to target: wall seconds from the process's start until accuracy {:.4g}, "
        "interpolated between the first evaluation at or above it and the one before (how far "
        "apart they were is said under each table; a run without evaluations: its summary's "
        "figure). ",
        *report.target);
  } else {
    out +=
        "Time to target: no target accuracy (set stop.target_accuracy in the config or pass "
        "--target). ";
  }
  out +=
      "Speedup on time to target: the baseline's over the case's, when every seed of both reached "
      "the target (else the cell says how many did); on samples/s: the case's over the "
      "baseline's, whole runs. A case's one speedup, which the sentence under the table, the "
      "speedup plot and report.json give, is on time to target when it has one, else on "
      "samples/s. When a case ran the baseline's seeds, its speedups are paired by seed (a seed "
      "fixes the data order and the injected delays): the geometric mean of the per-seed ratios, "
      "its 95% interval and p from the t-test of the log ratios. Otherwise (unpaired) the ratio "
      "of the means, its interval on the log scale (delta method, Welch's degrees of freedom) and "
      "Welch's t-test. p < 0.05: significant; both need two seeds or more. A verdict is faster "
      "(interval above 1), slower (below 1) or cannot be told (it holds 1); with one seed, the "
      "ratio alone. Each case on time to target is computed again at the target -0.02, -0.01, "
      "+0.01 and +0.02 (where every seed reached it), with a warning when the verdict changes. "
      "Predicted: a model of the samples/s speedup, not a measurement: the baseline's recorded "
      "micro-batch times replayed under the case's tau at the run's worker count, each worker at "
      "its rank (averaged over the baseline's seeds), with its predicted drop rate; '-' for "
      "policies the replay does not model (rebalance, backup, the arms). A case's curve in the "
      "speedup plot is this figure at the run's worker count, and at other worker counts the "
      "same tau with workers drawn i.i.d. from the baseline's worker steps; the best tau of that "
      "model is the only other predicted figure. Drop rate: micro-batches dropped at the "
      "threshold or orphaned, over those planned. ± is the standard deviation over seeds. "
      "Second table: mean and 95% interval (t distribution) over seeds of the time to target, "
      "the accuracy of the last evaluation at the earliest final evaluation among the "
      "experiment's runs (equal wall time), and steady-state samples/s (the steps after the "
      "first quarter, evaluations left out), each with p against the baseline (paired by seed "
      "when the case ran the baseline's seeds and each has the figure, else Welch's); and how "
      "the host measured: the mean host load (the coordinator host's 1-minute load average at "
      "each step's end, '-' where not read) and the step-time spread (p90 / median step time "
      "after the first quarter). A case is flagged when a seed's host load is more than 1 above "
      "its baseline seed's or its spread more than 1.5 times the baseline seed's, unless the case "
      "injects that load itself (co-located-load slowness).\n";
  return out;
}

namespace {

// "1.32x at 16 workers (tau 0.035 s, 26.6% dropped), 1.37x at 64 (...)",
// the worker count `left_out` left out.
std::string curve_text(const SpeedupCurve& curve, uint32_t left_out) {
  std::string out;
  for (uint32_t n : reported_worker_counts()) {
    const CurvePoint* p = curve_point(curve, n);
    if (p == nullptr || n == left_out) continue;
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
  const std::string at_best = curve_text(*best, e.workers);
  if (at_best.empty()) return "";
  std::string out = fmt::format(
      "The best tau at other worker counts, a model and not a measurement (workers drawn i.i.d. "
      "from this baseline's {} worker steps, overhead {:.4g} s per step; see Predicted in the "
      "notes): {}",
      e.predicted->worker_steps, e.predicted->overhead_seconds, at_best);
  if (const SpeedupCurve* bounded = find_curve(*e.predicted, "bounded")) {
    out += fmt::format(
        "; within the runs' drop-rate bound of {:.3g}% (the automatic threshold's "
        "max_drop_rate): {}",
        100 * e.max_drop_rate, curve_text(*bounded, e.workers));
  }
  return out + ".\n";
}

std::string caution_lines(const Experiment& e) {
  std::string out;
  double sum = 0.0, lo = 0.0, hi = 0.0;
  size_t rows = 0;
  for (const CaseRow& row : e.rows) {
    if (!row.target_resolution) continue;
    const double r = *row.target_resolution;
    lo = rows == 0 ? r : std::min(lo, r);
    hi = rows == 0 ? r : std::max(hi, r);
    sum += r;
    ++rows;
  }
  if (rows > 0) {
    out +=
        fmt::format("Time to target is interpolated between evaluations {:.3g} s apart on average",
                    sum / static_cast<double>(rows));
    if (hi > 1.2 * lo) out += fmt::format(" ({:.3g} s to {:.3g} s by case)", lo, hi);
    out += ".\n";
  }
  for (const CaseRow& row : e.rows) {
    for (const std::string* warning : {&row.verdict_warning, &row.host_warning}) {
      if (!warning->empty()) out += "Warning: " + *warning + ".\n";
    }
  }
  return out;
}

std::string reading_line(const Experiment& e) {
  if (!e.baseline_row) return "";
  std::vector<std::string> faster, slower, unclear, single;
  size_t seeds = 0;
  for (const CaseRow& row : e.rows) {
    seeds = std::max(seeds, row.runs.size());
    const std::optional<Speedup>& speedup = row.speedup();
    if (&row == &e.rows[*e.baseline_row] || !speedup) continue;
    // On time to target when every seed reached it, else said.
    const std::string item =
        fmt::format("{} ({:.2f}x on {}{})", row.label, speedup->ratio, speedup->basis,
                    row.time_to_target_speedup ? ""
                    : e.target                 ? ": the target not reached in every seed"
                                               : ": no target set");
    const std::string word = verdict(*speedup);
    if (!speedup->interval) {
      single.push_back(row.label);
    } else if (word == "faster") {
      faster.push_back(item);
    } else if (word == "slower") {
      slower.push_back(item);
    } else {
      unclear.push_back(item);
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
      "what happens at other worker counts than {} (the best-tau line below is a model, not a "
      "measurement){}",
      e.workers,
      seeds > 1 ? "" : "; nor any interval at all: run more seeds (the sweep's seeds axis)"));
  for (size_t i = 0; i < cannot.size(); ++i) out += (i ? "; " : "") + cannot[i];
  return out + ".\n";
}

std::string statistics_table(const Experiment& e) {
  bool shown = false;
  for (const CaseRow& row : e.rows)
    shown = shown || row.runs.size() > 1 || row.host_load || row.step_spread;
  if (!shown || !e.baseline_row) return "";
  const std::string at =
      e.equal_time ? fmt::format("accuracy at {:.1f} s", *e.equal_time) : "accuracy at equal time";
  std::string out = fmt::format(
      "| case | seeds | time to target [95% CI] | p | {} [95% CI] | p | steady samples/s [95% CI] "
      "| p | host load | step-time spread |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
      at);
  const auto mean_of = [](const std::optional<Aggregate>& a, const char* format) {
    return a ? fmt::format(fmt::runtime(format), a->mean) : std::string("-");
  };
  for (const CaseRow& row : e.rows) {
    std::string ttt = with_interval(row.time_to_target_values, "{:.2f}");
    if (!row.time_to_target_values.empty()) ttt += " s";
    if (row.time_to_target_values.size() < row.runs.size()) {
      ttt += fmt::format(" ({}/{} reached)", row.time_to_target_values.size(), row.runs.size());
    }
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", row.label,
                       row.runs.size(), ttt, p_text(row.time_to_target_test),
                       with_interval(row.accuracy_at_time_values, "{:.4f}"),
                       p_text(row.accuracy_at_time_test),
                       with_interval(row.steady_values, "{:.1f}"), p_text(row.steady_test),
                       mean_of(row.host_load, "{:.2f}"), mean_of(row.step_spread, "{:.2f}x"));
  }
  return out;
}

std::string experiment_markdown(const Experiment& e, const std::string& heading) {
  std::string out = heading + " " + experiment_title(e) + "\n\n" + markdown_table(e) + "\n";
  for (const std::string& line :
       {caution_lines(e), reading_line(e), statistics_table(e), predicted_line(e), mfu_line(e)}) {
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
  // The row's speedup on samples/s, as its table gives it.
  const auto speedup = [](const CaseRow& row) {
    return row.samples_speedup ? row.samples_speedup->ratio : 0.0;
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
          t.real_speedup = speedup(r);
          t.simulated_speedup = speedup(s);
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
      "the samples/s basis (each side's table figure: whole runs, paired by seed where the "
      "seeds match), drop rate and samples/s, means over each side's seeds.\n\n"
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
