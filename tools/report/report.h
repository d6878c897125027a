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

struct CaseRow {
  std::string label;       // "tau = p90 (0.0421 s), requeue"
  std::string tau_policy;  // "inf", "0.05", "p90", "auto"
  std::string policy;      // step.policy's word from the sweep's policies axis; "": the config's
  bool requeue = true;
  std::vector<size_t> runs;                 // indices into Experiment::runs, one per seed
  std::optional<Aggregate> accuracy;        // final eval accuracy
  std::optional<Aggregate> time_to_target;  // over the seeds that reached it
  Aggregate samples_per_second, drop_rate, samples_lost, tau_seconds;
  // Against the tau = inf row: baseline time to target / this row's when
  // every seed of both reached the target, else samples/s ratio (paired by
  // seed: the geometric mean of the seeds' ratios).
  std::optional<double> speedup;
  std::string speedup_basis;  // "time to target" or "samples/s", ", paired by seed"
  // The speedup's t-test against the baseline row and its 95% interval,
  // on the speedup's basis (time to target or samples/s per seed): paired
  // by seed (paired_ratio) when the row ran the baseline's seeds, else
  // Welch's test and ratio_interval; nothing with fewer than 2 seeds.
  std::optional<TTest> speedup_test;
  std::optional<MeanInterval> speedup_interval;
  // Predicted for this row: the baseline seeds' recorded steps replayed
  // under the row's tau (predict_speedup, each worker at its rank, averaged
  // over the baseline's seeds): 1 for the baseline; nothing for the
  // policies the replay does not model (rebalance, backup).
  std::optional<double> predicted_speedup, predicted_drop_rate;
  // Per seed, for the statistics table: time to target (the seeds that
  // reached it), steady-state samples/s (completed samples over the step
  // cycles after the first quarter of the steps: evaluations and
  // checkpoints left out) and accuracy at the experiment's equal wall time.
  std::vector<double> time_to_target_values, steady_values, accuracy_at_time_values;
  std::optional<TTest> time_to_target_test, steady_test, accuracy_at_time_test;
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
  std::vector<RunFolder> runs;
  std::vector<CaseRow> rows;  // tau = inf first
  std::optional<size_t> baseline_row;
  // The equal wall time of "accuracy at equal wall time": the earliest of
  // the runs' last evaluations, so that every run has an evaluation by then.
  std::optional<double> equal_time;
  // Speedup against worker count, i.i.d. workers drawn from the baseline
  // row's pooled worker steps (tools/report/prediction.h): the best tau, and
  // each case's tau (cases with the same policy and tau share a curve).
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
// summary's start-up added): its summary's, else from its evaluations.
std::optional<double> run_time_to_target(const RunFolder& run, std::optional<double> target);

// The tau a run used: the resolved fixed tau, or for runs whose tau changes
// (auto), the median of its steps' tau.
double run_tau(const RunFolder& run);

// Steady-state samples/s of a run: completed samples over the step cycles
// (plans out to update applied) of the steps after the first quarter.
double steady_samples_per_second(const RunFolder& run);

// The accuracy of the run's last evaluation at or before `wall_seconds`.
std::optional<double> accuracy_at(const RunFolder& run, double wall_seconds);

// The worker counts predicted_line and report.json give.
std::vector<uint32_t> reported_worker_counts();

}  // namespace dctrain
