// Run folders grouped into experiments (same model, workers and delay; the
// cases vary the tau policy and requeue) and aggregated over seeds into the
// rows of the report's tables.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proto/report.pb.h"
#include "tools/report/prediction.h"
#include "tools/report/statistics.h"
#include "tools/runs/run_folder.h"

namespace dctrain {

struct Aggregate {  // a figure over the seeds of a case
  double mean = 0.0;
  double spread = 0.0;  // sample standard deviation; 0 with one seed
  size_t count = 0;     // seeds that have the figure
};
Aggregate aggregate(const std::vector<double>& values);

// A row's speedup against the baseline row on one basis, faster above 1:
// paired by seed when the row ran the baseline's seeds (paired_ratio: the
// geometric mean of the seeds' ratios), else the ratio of the means with
// ratio_interval and Welch's test; no interval nor test with one seed.
struct Speedup {
  double ratio = 0.0;
  std::string basis;  // "time to target" or "samples/s"
  bool paired = false;
  std::optional<MeanInterval> interval;  // 95%
  std::optional<TTest> test;
};

// "faster" (the interval above 1), "slower" (below 1), "cannot be told"
// (it holds 1); with one seed (no interval) the ratio alone decides.
std::string verdict(const Speedup& speedup);

// Where time to target was crossed: on the clock from the process's start,
// and the wall time between the two evaluations bracketing the crossing
// (none for the summary's figure).
struct TargetCrossing {
  double seconds = 0.0;
  std::optional<double> resolution;
};

struct CaseRow {
  std::string label;       // "tau = p90 (0.0421 s), requeue"
  std::string tau_policy;  // "inf", "0.05", "p90", "auto"
  std::string policy;      // step.policy's word from the sweep's policies axis; "": the config's
  bool requeue = true;
  std::vector<size_t> runs;                 // indices into Experiment::runs, one per seed
  std::optional<Aggregate> accuracy;        // final eval accuracy
  std::optional<Aggregate> time_to_target;  // over the seeds that reached it
  // The mean over those seeds of the crossing's resolution (TargetCrossing).
  std::optional<double> target_resolution;
  Aggregate samples_per_second, drop_rate, samples_lost, tau_seconds;
  // Against the tau = inf row: the baseline's time to target over this
  // row's, when every seed of both reached the target; this row's samples/s
  // over the baseline's (whole runs).
  std::optional<Speedup> time_to_target_speedup, samples_speedup;
  // The row's one speedup, the same in the table, the plots and
  // report.json: on time to target when it has one, else on samples/s.
  const std::optional<Speedup>& speedup() const {
    return time_to_target_speedup ? time_to_target_speedup : samples_speedup;
  }
  // The speedup on time to target again at the targets within 2 points of
  // the report's (target -0.02, -0.01, +0.01, +0.02) that every seed of the
  // row and of the baseline reached; the warning when a verdict there
  // differs from the row's, else "".
  struct NearTarget {
    double target = 0.0;
    Speedup speedup;
  };
  std::vector<NearTarget> near_target;
  std::string verdict_warning;
  // Predicted for this row at the run's worker count: the baseline seeds'
  // recorded steps replayed under the row's tau (predict_speedup, each
  // worker at its rank, averaged over the baseline's seeds); speedup 1 for
  // the baseline; nothing for the policies the replay does not model
  // (rebalance, backup). The row's predicted curve passes through it.
  std::optional<CurvePoint> predicted;
  // Per seed, for the statistics table: time to target (the seeds that
  // reached it), steady-state samples/s (completed samples over the step
  // cycles after the first quarter of the steps: evaluations and
  // checkpoints left out) and accuracy at the experiment's equal wall time.
  std::vector<double> time_to_target_values, steady_values, accuracy_at_time_values;
  std::optional<TTest> time_to_target_test, steady_test, accuracy_at_time_test;
  // How the host measured, over the seeds that have it (mean_host_load,
  // step_time_spread), and the warning when a seed's host was busier or
  // its step times spread wider than its baseline seed's, else "".
  std::optional<Aggregate> host_load, step_spread;
  std::string host_warning;
  // Model FLOPs utilization over the seeds whose summary has it
  // (RunSummary.mean_mfu, mean_achieved_flops_per_second, training FLOPs
  // per sample): nothing when none has.
  std::optional<Aggregate> mfu, achieved_flops_per_second;
  double training_flops_per_sample = 0.0;
};

struct Experiment {
  std::string model, delay;
  uint32_t workers = 0;
  // Its runs were simulated (dctrain-simulate): an experiment of its own,
  // beside the real one of the same model, workers and delay (its twin).
  bool simulated = false;
  std::string slug;  // "mnist-cnn_w4_dropcompute", "..._sim" when simulated, for file names
  std::optional<double> target;  // the report's target accuracy
  std::vector<RunFolder> runs;
  std::vector<CaseRow> rows;  // tau = inf first
  std::optional<size_t> baseline_row;
  // The equal wall time of "accuracy at equal wall time": the earliest of
  // the runs' last evaluations, so that every run has an evaluation by then.
  std::optional<double> equal_time;
  // Speedup against worker count, i.i.d. workers drawn from the baseline
  // row's pooled worker steps (tools/report/prediction.h): the best tau, and
  // each modelled case's tau (cases with the same policy and tau share a
  // curve), which at the experiment's worker count is the row's predicted.
  std::optional<PredictedCurves> predicted;
  // The drop-rate bound the automatic threshold of these runs works under
  // (step.auto_tau.max_drop_rate of a tau = auto run; else its default).
  double max_drop_rate = kDefaultMaxDropRate;
};

struct Report {
  std::vector<Experiment> experiments;
  std::optional<double> target;  // --target, else the runs' configured target
};

// Groups and aggregates. `target`: time to target for runs whose summary has
// none is the wall time of the first evaluation reaching it. Throws
// std::runtime_error naming the runs when a case's runs are not seeds of
// one config: two with the same seed, or configs that differ in more than
// the seed (the budget included). Unfinished runs never get here
// (run_finished).
Report build_report(std::vector<RunFolder> runs, std::optional<double> target);

// Time to target of one run on the clock from the process's start (the
// summary's start-up added): the first evaluation at or above `target`,
// interpolated linearly with the evaluation before it (the first
// evaluation: its own time, resolution from the start); the summary's
// figure only for a run without evaluations, at the target it was
// measured at.
std::optional<TargetCrossing> run_time_to_target(const RunFolder& run,
                                                 std::optional<double> target);

// The mean of the run's steps' host_load, the steps that read it; nothing
// when none did (older and simulated runs).
std::optional<double> mean_host_load(const RunFolder& run);

// p90 / median of the step_seconds of the steps after the first quarter.
std::optional<double> step_time_spread(const RunFolder& run);

// The tau a run used: the resolved fixed tau, or for runs whose tau changes
// (auto), the median of its steps' tau.
double run_tau(const RunFolder& run);

// Steady-state samples/s of a run: completed samples over the step cycles
// (plans out to update applied) of the steps after the first quarter.
double steady_samples_per_second(const RunFolder& run);

// The accuracy of the run's last evaluation at or before `wall_seconds`.
std::optional<double> accuracy_at(const RunFolder& run, double wall_seconds);

// What slowed the experiment's runs, for titles: "straggler delays", or
// "cpu-quota (real slowness)" when its runs' configs carry real slowness.
std::string slowness_label(const Experiment& e);

// The worker counts predicted_line and report.json give.
std::vector<uint32_t> reported_worker_counts();

}  // namespace dctrain
