// Reading a run folder back (docs/running.md, docs/failure-handling.md): summary.json and
// metrics.jsonl (proto/metrics.proto, through metrics/metrics_json.h),
// config.cfg and, for runs made by dctrain-experiment, case.txt.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "metrics/metrics_json.h"
#include "metrics/warmup.h"
#include "proto/config.pb.h"
#include "proto/metrics.pb.h"
#include "proto/sweep.pb.h"

namespace dctrain {

struct RunFolder {
  std::filesystem::path dir;
  v1::RunConfig config;  // config.cfg
  v1::CaseInfo info;     // case.txt, or derived from the config
  v1::RunSummary summary;
  std::vector<v1::StepRecord> steps;  // metrics.jsonl's, in order
  std::vector<v1::EvalRecord> evals;
};

// A run is finished once its summary.json exists (written last, atomically)
// and says the run ended by its own stop criterion (`completed`; a summary
// without it, from builds before it, counts as finished). An interrupted or
// failed run writes a summary too, and is not finished.
bool run_finished(const std::filesystem::path& dir);

// The finished run folders named by `paths`: each a run folder, or a folder
// of run folders (a sweep's --out), searched one level down, in name order.
// Throws when a path holds no finished run, saying what was found. Run
// folders found but not finished (interrupted, failed, still running) are
// left out; `left_out`, when given, gets each as "DIR (why)".
std::vector<std::filesystem::path> find_run_folders(const std::vector<std::filesystem::path>& paths,
                                                    std::vector<std::string>* left_out = nullptr);

// Why the run in `dir` is not finished: its summary's stop reason, or that
// it has no summary.json.
std::string unfinished_reason(const std::filesystem::path& dir);

// Reads a finished run folder; throws std::runtime_error naming the file and
// the problem.
RunFolder read_run_folder(const std::filesystem::path& dir);

// Case axes of a run folder not made by dctrain-experiment: model = the
// config's name, delay = its kind, tau policy = "inf" or the seconds.
v1::CaseInfo case_info_from_config(const v1::RunConfig& config, const std::string& folder_name);

// Every contributing worker's step compute time (seconds), over the steps
// after the first `skip_steps` (the first steps include warm-up: allocation,
// first touches of the data).
std::vector<double> worker_compute_times(const std::vector<v1::StepRecord>& steps,
                                         size_t skip_steps);

// The p-th percentile (0..100) of `values` by linear interpolation between
// order statistics; throws std::invalid_argument when `values` is empty.
double percentile(std::vector<double> values, double p);

// "0.0421" for finite seconds, "inf" otherwise.
std::string tau_text(double tau);

}  // namespace dctrain
