// The report's Markdown: one table per experiment with the lines under it
// (prediction, MFU, the reading), the statistics tables, the notes, and the
// real-against-simulated twin table.
#pragma once

#include <string>
#include <vector>

#include "tools/report/report.h"

namespace dctrain {

// The statistics table of an experiment: per case, mean and 95% interval
// over seeds of time to target, accuracy at equal wall time and steady
// samples/s, each with p against the baseline (paired by seed or Welch's).
std::string statistics_table(const Experiment& e);

// One Markdown table per experiment, with a heading each, then the notes.
std::string markdown_tables(const Report& report);
// One experiment's section: `heading` ("##", "###") and its title, the
// table, then the reading, statistics, prediction and MFU lines it has.
std::string experiment_markdown(const Experiment& e, const std::string& heading);
std::string markdown_table(const Experiment& e);
std::string experiment_title(const Experiment& e);
// What the columns mean (time to target, speedup basis, spread).
std::string table_notes(const Report& report);

// The table's cells, as printed (tests compare them with the summaries):
// time to target and its speedup first, then samples/s and its own.
std::vector<std::string> table_header();
std::vector<std::string> table_cells(const Experiment& e, const CaseRow& row);

// The lines right under an experiment's table: how far apart the
// evaluations time to target is interpolated between were, and each row's
// warnings (its verdict changes near the target; its host was busier or its
// step times spread wider than the baseline's); "" without either.
std::string caution_lines(const Experiment& e);

// The line under an experiment's table: the model's best tau at the
// reported worker counts other than the experiment's (4, 16, 64), each with
// its tau and drop rate, and the best within the runs' drop-rate bound
// beside it; "" without a prediction.
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
// each side's seeds. The speedup is each side's row's on samples/s (a
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

}  // namespace dctrain
