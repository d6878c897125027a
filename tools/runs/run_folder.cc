#include "tools/runs/run_folder.h"

#include <fmt/format.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "common/files.h"
#include "common/run_files.h"
#include "runtime/run_config.h"

namespace dctrain {

namespace fs = std::filesystem;

bool run_finished(const fs::path& dir) {
  const std::optional<std::string> text = read_file_if_present(dir / run_files::kSummary);
  if (!text) return false;
  try {
    const v1::RunSummary summary = parse_summary(*text, (dir / run_files::kSummary).string());
    return !summary.has_completed() || summary.completed();
  } catch (const std::exception&) {
    return false;  // not a summary this build reads: the run is done again
  }
}

v1::CaseInfo case_info_from_config(const v1::RunConfig& config, const std::string& folder_name) {
  v1::CaseInfo info;
  info.set_case_name(folder_name);
  info.set_model(config.name());
  info.set_workers(config.workers());
  info.set_delay(
      word(config.delay().kind() == v1::DELAY_UNSET ? v1::DELAY_NONE : config.delay().kind()));
  info.set_tau_policy(
      config.step().tau_policy() == v1::TAU_POLICY_AUTO ? "auto" : tau_text(config.step().tau()));
  info.set_tau_seconds(config.step().tau());
  info.set_requeue(requeue_enabled(config.step()));
  info.set_seed(config.seed());
  return info;
}

std::string unfinished_reason(const fs::path& dir) {
  const std::optional<std::string> text = read_file_if_present(dir / run_files::kSummary);
  if (!text) return "no summary.json: it failed, or is still running";
  try {
    const v1::RunSummary summary = parse_summary(*text, (dir / run_files::kSummary).string());
    return fmt::format("{} after {} steps, exit status {}",
                       summary.stop_reason().empty() ? "stopped" : summary.stop_reason(),
                       summary.steps(), summary.exit_status());
  } catch (const std::exception&) {
    return "a summary.json this build does not read";
  }
}

std::vector<fs::path> find_run_folders(const std::vector<fs::path>& paths,
                                       std::vector<std::string>* left_out) {
  std::vector<fs::path> found;
  for (const fs::path& path : paths) {
    if (!fs::is_directory(path)) {
      throw std::runtime_error(fmt::format(
          "'{}' is not a folder: pass run folders or a sweep's --out folder", path.string()));
    }
    if (run_finished(path)) {
      found.push_back(path);
      continue;
    }
    std::vector<fs::path> inside;
    size_t unfinished = 0;
    for (const fs::directory_entry& entry : fs::directory_iterator(path)) {
      if (!entry.is_directory()) continue;
      if (run_finished(entry.path())) {
        inside.push_back(entry.path());
      } else if (fs::exists(entry.path() / run_files::kConfig) ||
                 fs::exists(entry.path() / "case.txt")) {
        ++unfinished;
        if (left_out != nullptr) {
          left_out->push_back(
              fmt::format("{} ({})", entry.path().string(), unfinished_reason(entry.path())));
        }
      }
    }
    if (inside.empty()) {
      throw std::runtime_error(fmt::format(
          "'{}' holds no finished run (no summary.json of a completed run in it or in its "
          "subfolders{}): did the runs fail, or were they interrupted?",
          path.string(), unfinished ? fmt::format("; {} unfinished run folders", unfinished) : ""));
    }
    std::sort(inside.begin(), inside.end());
    found.insert(found.end(), inside.begin(), inside.end());
  }
  return found;
}

RunFolder read_run_folder(const fs::path& dir) {
  if (!run_finished(dir)) {
    throw std::runtime_error(
        fmt::format("'{}' is not a finished run folder: it has no summary.json (did the run fail "
                    "or is it still "
                    "running?)",
                    dir.string()));
  }
  RunFolder run;
  run.dir = dir;
  run.summary = parse_summary(read_text_file(dir / run_files::kSummary),
                              (dir / run_files::kSummary).string());
  run.config = parse_run_config(read_text_file(dir / run_files::kConfig),
                                (dir / run_files::kConfig).string());
  MetricsRecords records = parse_metrics(read_text_file(dir / run_files::kMetrics),
                                         (dir / run_files::kMetrics).string());
  run.steps = std::move(records.steps);
  run.evals = std::move(records.evals);
  const fs::path case_file = dir / "case.txt";
  const std::string folder_name = fs::canonical(dir).filename().string();
  if (fs::is_regular_file(case_file)) {
    if (!google::protobuf::TextFormat::ParseFromString(read_text_file(case_file), &run.info)) {
      throw std::runtime_error(
          fmt::format("'{}' is not a dctrain.v1.CaseInfo in text format (proto/sweep.proto); "
                      "delete it to treat "
                      "the folder as a plain run",
                      case_file.string()));
    }
  } else {
    run.info = case_info_from_config(run.config, folder_name);
  }
  // dctrain-simulate marks its run folders.
  if (fs::exists(dir / "simulation.json")) run.info.set_simulated(true);
  return run;
}

std::vector<double> worker_compute_times(const std::vector<v1::StepRecord>& steps,
                                         size_t skip_steps) {
  std::vector<double> times;
  for (size_t i = skip_steps; i < steps.size(); ++i) {
    for (const v1::WorkerStep& w : steps[i].workers()) {
      if (w.contributed()) times.push_back(w.compute_seconds());
    }
  }
  return times;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) throw std::invalid_argument("percentile of no values");
  std::sort(values.begin(), values.end());
  const double position =
      std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, values.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return values[below] + fraction * (values[above] - values[below]);
}

std::string tau_text(double tau) {
  return std::isfinite(tau) ? fmt::format("{:.4g}", tau) : "inf";
}

}  // namespace dctrain
