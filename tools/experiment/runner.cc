#include "tools/experiment/runner.h"

#include <fmt/format.h>
#include <google/protobuf/text_format.h>
#include <poll.h>
#include <signal.h>

#include <chrono>
#include <deque>
#include <fstream>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

#include "common/child_process.h"
#include "common/files.h"
#include "common/run_files.h"
#include "common/stop_signals.h"
#include "coordinator/exit_codes.h"
#include "runtime/run_config.h"
#include "tools/runs/run_folder.h"

namespace dctrain {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct LaunchResult {
  int status = 0;
  bool interrupted = false;
};

// Runs `argv` with stdout and stderr into `log`, waiting for it; a signal
// on `signals` is forwarded to it as SIGINT.
LaunchResult run_logged(std::vector<std::string> argv, const fs::path& log, StopSignals& signals) {
  ChildOptions options;
  options.argv = std::move(argv);
  options.output = ChildOutput::kFile;
  options.output_file = log;
  LaunchResult result;
  std::optional<ChildProcess> started;
  try {
    started.emplace(std::move(options));
  } catch (const std::exception& e) {
    // As a shell would: the case fails with status 127 and says why in its log.
    std::ofstream(log) << "dctrain-experiment: " << e.what() << "\n";
    result.status = 127;
    return result;
  }
  ChildProcess& child = *started;
  while (true) {
    pollfd fds{signals.fd(), POLLIN, 0};
    ::poll(&fds, 1, 200);
    if (signals.take_all() != 0) {
      result.interrupted = true;
      child.signal(SIGINT);
    }
    if (const std::optional<ExitStatus> status = child.poll()) {
      result.status = status->shell_code();
      return result;
    }
  }
}

std::string last_lines(const fs::path& path, size_t count) {
  std::ifstream in(path);
  std::deque<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
    if (lines.size() > count) lines.pop_front();
  }
  std::string out;
  for (const std::string& l : lines) out += "    " + l + "\n";
  return out;
}

// tau of a percentile case, from its baseline's metrics.jsonl.
double percentile_tau(const fs::path& baseline_dir, double p, std::string& how) {
  const std::vector<v1::StepRecord> steps =
      parse_metrics(read_text_file(baseline_dir / run_files::kMetrics),
                    (baseline_dir / run_files::kMetrics).string())
          .steps;
  const size_t skip = warmup_steps(steps.size());
  const std::vector<double> times = worker_compute_times(steps, skip);
  if (times.empty()) {
    throw std::runtime_error(
        fmt::format("the baseline {} recorded no worker compute times in metrics.jsonl",
                    baseline_dir.string()));
  }
  const double tau = percentile(times, p);
  how = fmt::format("p{} of {} worker step compute times of {} (steps after the first {})", p,
                    times.size(), baseline_dir.filename().string(), skip);
  return tau;
}

// What a case's folder holds when the sweep comes to it.
struct CaseFolder {
  enum State { kNew, kFinished, kResume, kRerun } state = kNew;
  std::string why;  // kResume, kRerun: how its run ended
};

CaseFolder inspect_case(const fs::path& dir) {
  CaseFolder folder;
  if (run_finished(dir)) {
    folder.state = CaseFolder::kFinished;
    return folder;
  }
  // A folder with only the sweep's case.txt and input.cfg never started.
  if (!fs::exists(dir / run_files::kConfig) && !fs::exists(dir / run_files::kMetrics))
    return folder;
  int status = -1;  // no summary: the run was killed
  folder.why = "stopped without a summary (killed?)";
  if (const std::optional<std::string> text = read_file_if_present(dir / run_files::kSummary)) {
    try {
      const v1::RunSummary s = parse_summary(*text, (dir / run_files::kSummary).string());
      status = s.exit_status();
      folder.why = fmt::format("{} (exit status {}: {})",
                               status == kCoordinatorInterrupted ? "interrupted" : "failed", status,
                               s.stop_reason());
    } catch (const std::exception& e) {
      folder.why = fmt::format("its summary.json is unreadable ({})", e.what());
    }
  }
  // Stopped from outside (a signal, a kill) or by a full disk (docs/failure-handling.md, "Exit
  // statuses"): it goes on from its checkpoint. A run that failed by itself
  // would fail again from there: it starts over.
  const bool from_outside =
      status == -1 || status == kCoordinatorInterrupted || status == kCoordinatorRunFolderFailed;
  const bool resumable = fs::exists(dir / run_files::kCheckpoint) &&
                         fs::exists(dir / run_files::kConfig) && from_outside;
  folder.state = resumable ? CaseFolder::kResume : CaseFolder::kRerun;
  return folder;
}

// The cases to run: all, or those matching --only plus their baselines,
// in the plan's order.
std::vector<size_t> selected_cases(const SweepPlan& plan, const RunnerOptions& options) {
  std::set<size_t> chosen;
  for (size_t i = 0; i < plan.cases.size(); ++i) {
    const SweepCase& c = plan.cases[i];
    if (!options.only.empty() && c.info.case_name().find(options.only) == std::string::npos)
      continue;
    chosen.insert(i);
    if (c.baseline) chosen.insert(*c.baseline);
  }
  return {chosen.begin(), chosen.end()};
}

// The selected cases finished before, and the expected seconds of the rest.
struct SweepStart {
  size_t finished_before = 0;
  double expected_seconds = 0.0;
};

SweepStart sweep_start(const SweepPlan& plan, const RunnerOptions& options,
                       const std::vector<size_t>& selected) {
  SweepStart out;
  for (size_t i : selected) {
    if (run_finished(options.out_dir / plan.cases[i].info.case_name())) {
      ++out.finished_before;
    } else {
      out.expected_seconds += plan.cases[i].expected_seconds;
    }
  }
  return out;
}

// --dry-run: each case and what would be done with it.
void print_dry_run(const SweepPlan& plan, const RunnerOptions& options,
                   const std::vector<size_t>& selected, std::FILE* out) {
  const size_t n = selected.size();
  for (size_t k = 0; k < n; ++k) {
    const SweepCase& c = plan.cases[selected[k]];
    const CaseFolder folder = inspect_case(options.out_dir / c.info.case_name());
    std::string what =
        fmt::format("{} steps, ~{}", c.expected_steps, format_duration(c.expected_seconds));
    if (folder.state == CaseFolder::kFinished) what = "finished";
    if (folder.state == CaseFolder::kResume) what = folder.why + ": will resume; " + what;
    if (folder.state == CaseFolder::kRerun) what = folder.why + ": will rerun; " + what;
    std::fprintf(out, "  [%zu/%zu] %s: %s\n", k + 1, n, c.info.case_name().c_str(), what.c_str());
  }
}

// A percentile tau taken from the case's finished baseline into `config`
// and `info`, with a note for the progress line; why not, if it cannot be.
std::optional<std::string> resolve_percentile_tau(const SweepPlan& plan,
                                                  const RunnerOptions& options, const SweepCase& c,
                                                  v1::RunConfig& config, v1::CaseInfo& info,
                                                  std::string& note) {
  const fs::path baseline_dir = options.out_dir / plan.cases[*c.baseline].info.case_name();
  if (!run_finished(baseline_dir)) {
    return fmt::format("its baseline {} did not finish, so there is no p{:g} to take",
                       baseline_dir.filename().string(), c.tau.value);
  }
  try {
    std::string how;
    const double tau = percentile_tau(baseline_dir, c.tau.value, how);
    config.mutable_step()->set_tau(tau);
    info.set_tau_seconds(tau);
    note = fmt::format(", tau = {:.4g} s ({})", tau, how);
  } catch (const std::exception& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

// A case's folder made anew: its axes (case.txt) and its config (input.cfg).
void start_case_folder(const fs::path& dir, const v1::CaseInfo& info,
                       const v1::RunConfig& config) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string info_text;
  google::protobuf::TextFormat::PrintToString(info, &info_text);
  std::ofstream(dir / "case.txt") << info_text;
  std::ofstream(dir / "input.cfg") << to_text(config);
}

// The command that runs a case: dctrain-simulate, or dctrain-launch from
// the start or resuming.
std::vector<std::string> case_command(const SweepPlan& plan, const RunnerOptions& options,
                                      const v1::RunConfig& config, const fs::path& dir,
                                      bool resume) {
  std::vector<std::string> argv = {(options.bin_dir / "dctrain-launch").string()};
  if (plan.simulation) {
    argv = {(options.bin_dir / "dctrain-simulate").string(),
            "--workers",
            std::to_string(config.workers()),
            "--config",
            (dir / "input.cfg").string(),
            "--out",
            dir.string()};
    for (std::string& a : simulation_arguments(*plan.simulation)) argv.push_back(std::move(a));
  } else if (resume) {
    // The launcher takes the workers from the run's config.cfg.
    argv.insert(argv.end(), {"--resume", dir.string()});
  } else {
    argv.insert(argv.end(), {"--workers", std::to_string(config.workers()), "--config",
                             (dir / "input.cfg").string(), "--out", dir.string()});
  }
  if (!plan.simulation) argv.insert(argv.end(), {"--threads", std::to_string(options.threads)});
  if (!options.data_dir.empty()) argv.insert(argv.end(), {"--data-dir", options.data_dir});
  return argv;
}

// The sweep's progress: what ran, what failed, and the expected and actual
// seconds that scale the ETA.
struct SweepProgress {
  size_t n = 0;  // cases selected
  double expected_done = 0.0, actual_done = 0.0, expected_left = 0.0;
  std::vector<std::string> failed;
  size_t ran = 0;

  double scale() const { return expected_done > 0 ? actual_done / expected_done : 1.0; }
};

// The line that ends a case that ran: done with its figures, or failed with
// the last lines of its log.
void print_case_result(SweepProgress& p, size_t k, const std::string& name, const fs::path& dir,
                       const std::vector<std::string>& argv, const LaunchResult& result,
                       double seconds, std::FILE* out) {
  if (result.status != 0 || !run_finished(dir)) {
    std::fprintf(out, "[%zu/%zu] %s: FAILED (%s status %d) after %s; last lines of %s:\n%s",
                 k + 1, p.n, name.c_str(), fs::path(argv.front()).filename().c_str(),
                 result.status, format_duration(seconds).c_str(), (dir / "launch.log").c_str(),
                 last_lines(dir / "launch.log", 15).c_str());
    p.failed.push_back(name);
    return;
  }
  const v1::RunSummary s = parse_summary(read_text_file(dir / run_files::kSummary),
                                         (dir / run_files::kSummary).string());
  const std::optional<double> accuracy = optional_number(s.final_eval_accuracy());
  std::fprintf(
      out, "[%zu/%zu] %s: done in %s: accuracy %s, %.0f samples/s, %.1f%% dropped; sweep ETA %s\n",
      k + 1, p.n, name.c_str(), format_duration(seconds).c_str(),
      accuracy ? fmt::format("{:.4f}", *accuracy).c_str() : "none", s.samples_per_second(),
      100 * s.drop_rate(), format_duration(p.expected_left * p.scale()).c_str());
}

}  // namespace

int run_sweep(const SweepPlan& plan, const RunnerOptions& options, std::FILE* out) {
  const std::vector<size_t> selected = selected_cases(plan, options);
  const SweepStart before = sweep_start(plan, options, selected);
  const double expected_total = before.expected_seconds;
  const size_t finished_before = before.finished_before;
  const size_t n = selected.size();
  std::fprintf(out, "sweep %s: %zu cases, %zu finished before, %zu to run; expected run time %s\n",
               plan.name.c_str(), n, finished_before, n - finished_before,
               format_duration(expected_total).c_str());
  std::fprintf(out, "  estimate: %s\n", plan.estimate_basis.c_str());
  std::fprintf(out, "  run folders: %s\n", options.out_dir.c_str());
  if (options.dry_run) {
    print_dry_run(plan, options, selected, out);
    std::fflush(out);
    return 0;
  }
  std::fflush(out);

  fs::create_directories(options.out_dir);
  // Blocked while the sweep runs and read here, so a Ctrl-C reaches the
  // running case first; the caller's mask comes back afterwards.
  StopSignals signals(StopSignals::MaskAfter::kRestore);
  SweepProgress p;
  p.n = n;
  p.expected_left = expected_total;
  const auto started = Clock::now();
  for (size_t k = 0; k < n; ++k) {
    const SweepCase& c = plan.cases[selected[k]];
    const std::string& name = c.info.case_name();
    const fs::path dir = options.out_dir / name;
    CaseFolder folder = inspect_case(dir);
    // A simulation has no checkpoint to go on from: it runs again (seconds).
    if (plan.simulation && folder.state == CaseFolder::kResume) folder.state = CaseFolder::kRerun;
    if (folder.state == CaseFolder::kFinished) {
      std::fprintf(out, "[%zu/%zu] %s: finished before, skipped\n", k + 1, n, name.c_str());
      continue;
    }
    p.expected_left -= c.expected_seconds;
    v1::RunConfig config = c.config;
    v1::CaseInfo info = c.info;
    std::string tau_note;
    if (c.tau.kind == TauPolicy::Kind::kPercentile) {
      if (const auto why = resolve_percentile_tau(plan, options, c, config, info, tau_note)) {
        std::fprintf(out, "[%zu/%zu] %s: FAILED: %s\n", k + 1, n, name.c_str(), why->c_str());
        p.failed.push_back(name);
        continue;
      }
    }
    // An interrupted run with a checkpoint goes on from it; any other
    // unfinished one starts over.
    const bool resume = folder.state == CaseFolder::kResume;
    if (!resume) {
      if (folder.state == CaseFolder::kRerun) {
        std::fprintf(out, "[%zu/%zu] %s: %s: running it again from the start\n", k + 1, n,
                     name.c_str(), folder.why.c_str());
      }
      start_case_folder(dir, info, config);
    }

    std::fprintf(
        out, "[%zu/%zu] %s: %s, %llu steps, expected %s%s; sweep ETA %s\n", k + 1, n, name.c_str(),
        resume ? fmt::format("{}: resuming from its checkpoint", folder.why).c_str() : "running",
        static_cast<unsigned long long>(c.expected_steps),
        format_duration(c.expected_seconds * p.scale()).c_str(), tau_note.c_str(),
        format_duration((p.expected_left + c.expected_seconds) * p.scale()).c_str());
    std::fflush(out);

    const std::vector<std::string> argv = case_command(plan, options, config, dir, resume);
    const auto start = Clock::now();
    const LaunchResult result = run_logged(argv, dir / "launch.log", signals);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    ++p.ran;
    p.expected_done += c.expected_seconds;
    p.actual_done += seconds;
    if (result.interrupted) {
      std::fprintf(out, "[%zu/%zu] %s: interrupted; rerun the same command to continue the sweep\n",
                   k + 1, n, name.c_str());
      return 130;
    }
    print_case_result(p, k, name, dir, argv, result, seconds, out);
    std::fflush(out);
  }
  const double total = std::chrono::duration<double>(Clock::now() - started).count();
  std::fprintf(out, "sweep %s: %zu ran in %s, %zu finished before, %zu failed\n",
               plan.name.c_str(), p.ran, format_duration(total).c_str(), finished_before,
               p.failed.size());
  for (const std::string& f : p.failed)
    std::fprintf(out, "  failed: %s (see its launch.log)\n", f.c_str());
  if (p.failed.empty()) {
    std::fprintf(out, "report: dctrain-report %s --out %s\n", options.out_dir.c_str(),
                 (options.out_dir / "report").c_str());
  }
  std::fflush(out);
  return p.failed.empty() ? 0 : 1;
}

}  // namespace dctrain
