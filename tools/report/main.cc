// dctrain-report RUN_DIR... --out DIR: tables and plots of finished runs
// (report.md, report.html, report.json); prints the Markdown tables.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/exit_codes.h"
#include "tools/report/document.h"
#include "tools/report/markdown.h"
#include "tools/report/plots.h"
#include "tools/report/report_json.h"

int main(int argc, char** argv) {
  CLI::App app{
      "dctrain-report: tables and gnuplot plots of finished runs, grouped into experiments (same "
      "model, "
      "workers and delay), seeds aggregated, speedup against the tau = inf baseline"};
  std::vector<std::string> inputs;
  std::string out_dir, gnuplot, log_level = "info";
  double target = 0.0;
  bool no_plots = false;
  dctrain::add_common_options(app, "dctrain-report", log_level);
  app.add_option("runs", inputs, "Run folders, or folders of run folders (a sweep's --out)")
      ->required();
  app.add_option("--out", out_dir, "Report folder: report.md, report.html, report.json, plots/")
      ->required();
  app.add_option(
         "--target", target,
         "Target accuracy for time to target, for runs whose config set none (0: the runs' own)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--gnuplot", gnuplot, "gnuplot program (default: gnuplot on PATH)");
  app.add_flag("--no-plots", no_plots, "Tables only; gnuplot is not needed");
  dctrain::add_examples(
      app,
      {"dctrain-report runs/demo --out runs/demo/report",
       "dctrain-report runs/mnist runs/mnist-more-seeds --out report --target 0.98 --no-plots"});
  if (const std::optional<int> status = dctrain::parse_command_line(app, argc, argv))
    return *status;

  // Reading and pooling the runs: what fails here is the input (no finished
  // run, a file that does not parse, runs that are not seeds of one case).
  std::optional<dctrain::Report> read;
  size_t count = 0;
  try {
    std::vector<std::filesystem::path> paths(inputs.begin(), inputs.end());
    std::vector<dctrain::RunFolder> runs;
    std::vector<std::string> left_out;
    for (const auto& dir : dctrain::find_run_folders(paths, &left_out))
      runs.push_back(dctrain::read_run_folder(dir));
    // An interrupted or failed run is no seed of its case: named, not pooled.
    for (const std::string& run : left_out)
      std::fprintf(stderr, "dctrain-report: left out, not finished: %s\n", run.c_str());
    count = runs.size();
    read = dctrain::build_report(std::move(runs),
                                 target > 0 ? std::optional<double>(target) : std::nullopt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dctrain-report: %s\n", e.what());
    return dctrain::kExitUsage;
  }
  const dctrain::Report& report = *read;
  try {
    std::vector<dctrain::Plot> plots;
    if (!no_plots) {
      if (gnuplot.empty()) gnuplot = dctrain::find_gnuplot();
      plots = dctrain::draw_plots(report, out_dir, gnuplot);
    }
    dctrain::write_report(report, plots, out_dir);
    std::printf("%s\n", dctrain::markdown_tables(report).c_str());
    std::printf("report of %zu runs: %s/report.md, %s/report.html (%zu plots in %s/plots)\n", count,
                out_dir.c_str(), out_dir.c_str(), plots.size(), out_dir.c_str());
    return dctrain::kExitDone;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dctrain-report: %s\n", e.what());
    return dctrain::kExitFailed;
  }
}
