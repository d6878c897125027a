// dctrain-experiment SWEEP_FILE --out DIR: runs every case of a sweep
// (experiments/*.sweep), one run folder per case, skipping finished ones.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <string>

#include "common/cli.h"
#include "common/exit_codes.h"
#include "tools/experiment/runner.h"
#include "tools/experiment/sweep.h"

int main(int argc, char** argv) {
  CLI::App app{
      "dctrain-experiment: runs a sweep of training runs (models x workers x delays x tau policies "
      "x "
      "requeue x seeds), one run folder per case; finished cases are skipped when rerun"};
  std::string sweep_file, log_level = "info";
  dctrain::RunnerOptions options;
  std::string out_dir;
  dctrain::add_common_options(app, "dctrain-experiment", log_level);
  app.add_option("sweep", sweep_file, "Sweep file (Protobuf text format, proto/sweep.proto)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--out", out_dir, "Folder for the run folders, one per case")->required();
  app.add_option("--data-dir", options.data_dir,
                 "Data root passed to every process (empty: synthetic data only)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--threads", options.threads, "Compute threads per worker")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--only", options.only,
                 "Run only the cases whose name contains this text (and their baselines)");
  app.add_flag("--dry-run", options.dry_run,
               "List the cases and the expected run time; run nothing");
  dctrain::add_examples(app, {"dctrain-experiment experiments/demo.sweep --out runs/demo",
                              "dctrain-experiment experiments/mnist-cnn.sweep --out runs/mnist "
                              "--data-dir ../shared/data --dry-run"});
  if (const std::optional<int> status = dctrain::parse_command_line(app, argc, argv))
    return *status;

  options.out_dir = out_dir;
  options.bin_dir = std::filesystem::canonical("/proc/self/exe").parent_path();
  try {
    const dctrain::SweepPlan plan = dctrain::load_sweep(sweep_file);
    const char* program = plan.simulation ? "dctrain-simulate" : "dctrain-launch";
    if (!options.dry_run && !std::filesystem::exists(options.bin_dir / program)) {
      std::fprintf(stderr,
                   "dctrain-experiment: %s/%s not found: build it (tools/setup.sh) beside this "
                   "program\n",
                   options.bin_dir.c_str(), program);
      return dctrain::kExitUsage;
    }
    return dctrain::run_sweep(plan, options, stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dctrain-experiment: %s\n", e.what());
    return dctrain::kExitUsage;
  }
}
