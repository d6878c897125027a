// Reading a run folder back (README.md, "run folder"): summary.json,
// metrics.jsonl, config.cfg and, for runs made by dctrain-experiment,
// case.txt. JSON is parsed with Protobuf's JSON reader into
// google.protobuf.Struct, so no JSON library is needed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "proto/config.pb.h"
#include "proto/sweep.pb.h"

namespace dctrain {

struct RunSummary {  // summary.json
  std::string name;
  std::optional<double> final_eval_accuracy, final_eval_loss;
  std::optional<double> time_to_target_seconds, target_accuracy;
  double wall_seconds = 0.0, samples_per_second = 0.0, drop_rate = 0.0;
  double mean_step_seconds = 0.0, mean_max_compute_seconds = 0.0, epochs = 0.0;
  uint64_t steps = 0, samples = 0, samples_lost = 0;
  uint64_t microbatches_completed = 0, microbatches_dropped = 0, microbatches_orphaned = 0;
  uint32_t workers = 0;
  double tau = 0.0;  // inf for "inf"
  bool requeue = true;
  std::string delay, stop_reason;
};

struct WorkerStepPoint {
  uint32_t rank = 0;
  bool contributed = false;
  double compute_seconds = 0.0;
  uint64_t completed = 0, dropped = 0;
  std::vector<double> micro_batch_seconds;
};

struct StepPoint {  // a "step" record of metrics.jsonl
  uint64_t step = 0;
  double wall_seconds = 0.0, step_seconds = 0.0, tau = 0.0;
  double apply_seconds = 0.0;  // the coordinator's update, after step_seconds
  uint64_t samples = 0, planned = 0, completed = 0, dropped = 0, orphaned = 0, lost_samples = 0;
  std::vector<WorkerStepPoint> workers;
};

struct EvalPoint {  // an "eval" record of metrics.jsonl
  uint64_t step = 0;
  double wall_seconds = 0.0, accuracy = 0.0, loss = 0.0;
};

struct RunFolder {
  std::filesystem::path dir;
  v1::RunConfig config;  // config.cfg
  v1::CaseInfo info;     // case.txt, or derived from the config
  RunSummary summary;
  std::vector<StepPoint> steps;
  std::vector<EvalPoint> evals;
};

// A run is finished once its summary.json exists (written last, atomically).
bool run_finished(const std::filesystem::path& dir);

// The finished run folders named by `paths`: each a run folder, or a folder
// of run folders (a sweep's --out), searched one level down, in name order.
// Throws when a path holds no finished run, saying what was found.
std::vector<std::filesystem::path> find_run_folders(
    const std::vector<std::filesystem::path>& paths);

// Reads a finished run folder; throws std::runtime_error naming the file and
// the problem.
RunFolder read_run_folder(const std::filesystem::path& dir);

RunSummary parse_summary(const std::string& json, const std::string& origin);

// Appends the step and eval records of metrics.jsonl text to `steps` / `evals`.
void parse_metrics(const std::string& jsonl, const std::string& origin,
                   std::vector<StepPoint>& steps, std::vector<EvalPoint>& evals);

// Case axes of a run folder not made by dctrain-experiment: model = the
// config's name, delay = its kind, tau policy = "inf" or the seconds.
v1::CaseInfo case_info_from_config(const v1::RunConfig& config, const std::string& folder_name);

// Every contributing worker's step compute time (seconds), over the steps
// after the first `skip_steps` (the first steps include warm-up: allocation,
// first touches of the data).
std::vector<double> worker_compute_times(const std::vector<StepPoint>& steps, size_t skip_steps);

// Warm-up steps left out of compute-time statistics: 1, none in runs of
// fewer than 5 steps.
size_t warmup_steps(size_t step_count);

// The p-th percentile (0..100) of `values` by linear interpolation between
// order statistics; throws std::invalid_argument when `values` is empty.
double percentile(std::vector<double> values, double p);

// "0.0421" for finite seconds, "inf" otherwise.
std::string tau_text(double tau);

}  // namespace dctrain
