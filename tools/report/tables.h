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

// The statistics table of an experiment: per case, mean and 95% interval
// over seeds of time to target, accuracy at equal wall time and steady
// samples/s, each with p against the baseline (paired by seed or Welch's).
std::string statistics_table(const Experiment& e);

// One Markdown table per experiment, with a heading each, then the notes.
std::string markdown_tables(const Report& report);
std::string markdown_table(const Experiment& e);
std::string experiment_title(const Experiment& e);
// What the columns mean (time to target, speedup basis, spread).
std::string table_notes(const Report& report);

// The table's cells, as printed (tests compare them with the summaries).
std::vector<std::string> table_header();
std::vector<std::string> table_cells(const CaseRow& row);

// The line under an experiment's table: the predicted speedup with the best
// tau at 4, 16 and 64 workers, each with its tau and drop rate, and the
// best within the runs' drop-rate bound beside it; "" without a prediction.
std::string predicted_line(const Experiment& e);

// The line under an experiment's table on how close to the machine its
// workers computed: the model's training FLOPs per sample (counted from
// its layers), and per case the achieved FLOP/s per worker and the MFU
// (against each worker's sgemm peak x its threads); "" when no run has it.
std::string mfu_line(const Experiment& e);

// The sentence under an experiment's table: which cases are faster or
// slower than the baseline beyond the spread between seeds (the speedup's
// interval excludes 1), which cannot be told from it, and what the table
// cannot say (one-seed rows, accuracy, the prediction's reach).
std::string reading_line(const Experiment& e);

// A case that ran for real and simulated (the same model, workers, delay,
// policy, tau policy and requeue): its figures side by side, means over
// each side's seeds. The speedup is on the samples/s basis for both (a
// simulation has no accuracy), against each side's own baseline.
struct TwinRow {
  std::string experiment;  // the real experiment's title
  std::string label;       // the real row's label
  double real_speedup = 0.0, simulated_speedup = 0.0;
  double real_drop_rate = 0.0, simulated_drop_rate = 0.0;
  double real_samples_per_second = 0.0, simulated_samples_per_second = 0.0;
  size_t real_seeds = 0, simulated_seeds = 0;
};
std::vector<TwinRow> twin_rows(const Report& report);
// twin_rows as a Markdown table under a heading; "" when no case has a twin.
std::string twin_table(const Report& report);

// The worker counts predicted_line and report.json give.
std::vector<uint32_t> reported_worker_counts();

// report.json (proto/report.proto): every row's figures as numbers, and
// each experiment's predicted curves at reported_worker_counts(); its text.
v1::ReportFile report_file(const Report& report);
std::string report_json(const Report& report);

}  // namespace dctrain
