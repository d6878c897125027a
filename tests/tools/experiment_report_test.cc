// dctrain-experiment and dctrain-report as real processes: a sweep of two
// tiny cases (tau = inf and tau = p80 of the baseline, synthetic MLP, 2
// workers) end to end; the report's table against the runs' summary.json;
// the plots; a rerun that skips finished cases; bad sweep files.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

#include "metrics/metrics_json.h"
#include "tests/testing/paths.h"
#include "tests/testing/process.h"

namespace dctrain {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::Process;
using testing::read_text;

constexpr const char* kConfig = R"(
name: "tiny-mlp"
seed: 5
workers: 2
model { name: "mlp" }
dataset { kind: "synthetic" synthetic_samples: 2000 test_limit: 200 }
optimizer { kind: "sgd" lr: 0.05 momentum: 0.9 }
step { global_batch: 64 micro_batch: 8 tau: inf }
delay { kind: "dropcompute" factor: 1 }
liveness { heartbeat_seconds: 0.2 grace_seconds: 2 join_timeout_seconds: 40 }
eval { every_steps: 4 batch: 200 }
stop { max_steps: 12 }
progress_seconds: 1
)";

constexpr const char* kSweep = R"(
name: "tiny"
configs: "tiny.cfg"
taus: ["inf", "p80"]
requeue: [true]
step_seconds { key: "tiny-mlp" value: 0.05 }
)";

class ExperimentReport : public ::testing::Test {
 protected:
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }

  // Runs a program to completion (at most `limit`); returns its exit code.
  int run(const std::string& program, const std::vector<std::string>& args, const std::string& log,
          std::chrono::seconds limit = 60s) {
    Process p(testing::program(program), args, dir_ / log);
    const auto status = p.wait_for(limit);
    last_output_ = p.output();
    return status.value_or(-1);
  }

  const testing::ScratchDir dir_{"tools"};
  std::string last_output_;
};

v1::RunSummary read_summary(const fs::path& run_dir) {
  return parse_summary(read_text(run_dir / "summary.json"), (run_dir / "summary.json").string());
}

// The cells of the Markdown table row whose first cell starts with `label`.
std::vector<std::string> table_row(const std::string& markdown, const std::string& label) {
  std::istringstream in(markdown);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| " + label, 0) != 0) continue;
    std::vector<std::string> cells;
    size_t start = 1;
    for (size_t bar; (bar = line.find('|', start)) != std::string::npos; start = bar + 1) {
      std::string cell = line.substr(start, bar - start);
      cell.erase(0, cell.find_first_not_of(' '));
      cell.erase(cell.find_last_not_of(' ') + 1);
      cells.push_back(cell);
    }
    return cells;
  }
  ADD_FAILURE() << "no row starting with '" << label << "' in\n" << markdown;
  return {};
}

TEST_F(ExperimentReport, TwoCasesEndToEndThenRerunSkips) {
  write("tiny.cfg", kConfig);
  write("tiny.sweep", kSweep);
  const fs::path out = dir_ / "runs";
  ASSERT_EQ(run("dctrain-experiment", {(dir_ / "tiny.sweep").string(), "--out", out.string()},
                "experiment.log"),
            0)
      << last_output_;
  EXPECT_NE(last_output_.find("2 cases, 0 finished before, 2 to run; expected run time"),
            std::string::npos)
      << last_output_;
  EXPECT_NE(last_output_.find("[1/2] tiny-mlp_w2_dropcompute_tau-inf_s5: running"),
            std::string::npos);
  EXPECT_NE(last_output_.find("sweep ETA"), std::string::npos);
  const fs::path base = out / "tiny-mlp_w2_dropcompute_tau-inf_s5";
  const fs::path drop = out / "tiny-mlp_w2_dropcompute_tau-p80_requeue_s5";
  ASSERT_TRUE(fs::exists(base / "summary.json")) << last_output_;
  ASSERT_TRUE(fs::exists(drop / "summary.json")) << last_output_;

  // The p80 case ran with a finite tau taken from the baseline.
  const v1::RunSummary base_summary = read_summary(base);
  const v1::RunSummary drop_summary = read_summary(drop);
  EXPECT_EQ(base_summary.tau().string_value(), "inf") << base_summary.ShortDebugString();
  ASSERT_TRUE(drop_summary.tau().has_number_value()) << drop_summary.ShortDebugString();
  const double tau = drop_summary.tau().number_value();
  EXPECT_TRUE(std::isfinite(tau) && tau > 0) << drop_summary.ShortDebugString();
  EXPECT_EQ(base_summary.steps(), 12u);
  EXPECT_EQ(drop_summary.steps(), 12u);
  EXPECT_NE(read_text(drop / "case.txt").find("baseline: \"tiny-mlp_w2_dropcompute_tau-inf_s5\""),
            std::string::npos);

  // Rerun: both cases are finished, nothing runs, the summaries stay.
  const auto stamp = fs::last_write_time(base / "summary.json");
  ASSERT_EQ(run("dctrain-experiment", {(dir_ / "tiny.sweep").string(), "--out", out.string()},
                "rerun.log"),
            0)
      << last_output_;
  EXPECT_NE(last_output_.find("2 cases, 2 finished before, 0 to run"), std::string::npos)
      << last_output_;
  EXPECT_NE(last_output_.find("[1/2] tiny-mlp_w2_dropcompute_tau-inf_s5: finished before, skipped"),
            std::string::npos);
  EXPECT_NE(last_output_.find(
                "[2/2] tiny-mlp_w2_dropcompute_tau-p80_requeue_s5: finished before, skipped"),
            std::string::npos);
  EXPECT_NE(last_output_.find("0 ran in"), std::string::npos) << last_output_;
  EXPECT_EQ(fs::last_write_time(base / "summary.json"), stamp);

  // The report: the table against the summaries.
  const fs::path report = dir_ / "report";
  ASSERT_EQ(run("dctrain-report", {out.string(), "--out", report.string()}, "report.log"), 0)
      << last_output_;
  const std::string markdown = read_text(report / "report.md");
  EXPECT_NE(last_output_.find("### tiny-mlp: 2 workers, dropcompute delays"), std::string::npos)
      << last_output_;
  EXPECT_NE(markdown.find("## tiny-mlp: 2 workers, dropcompute delays"), std::string::npos)
      << markdown;
  const std::vector<std::string> header = table_row(markdown, "case");
  ASSERT_EQ(header.size(), 12u);
  EXPECT_EQ(header[2], "final accuracy");
  EXPECT_EQ(header[3], "time to target");
  EXPECT_EQ(header[4], "speedup on time to target [95% CI]");
  EXPECT_EQ(header[5], "p");
  EXPECT_EQ(header[6], "samples/s");
  EXPECT_EQ(header[7], "speedup on samples/s [95% CI]");
  EXPECT_EQ(header[8], "p");
  EXPECT_EQ(header[9], "predicted");
  const std::vector<std::string> base_row = table_row(markdown, "tau = inf (baseline)");
  const std::vector<std::string> drop_row =
      table_row(markdown, fmt::format("tau = p80 ({:.4g} s), requeue", tau));
  ASSERT_EQ(base_row.size(), 12u);
  ASSERT_EQ(drop_row.size(), 12u);
  for (const auto& [row, summary] :
       {std::pair{base_row, base_summary}, std::pair{drop_row, drop_summary}}) {
    EXPECT_EQ(row[1], "1");
    ASSERT_TRUE(summary.final_eval_accuracy().has_number_value()) << summary.ShortDebugString();
    EXPECT_EQ(row[2], fmt::format("{:.4f}", summary.final_eval_accuracy().number_value()));
    EXPECT_EQ(row[3], "no target");  // none configured
    EXPECT_EQ(row[4], "no target");
    EXPECT_EQ(row[6], fmt::format("{:.1f}", summary.samples_per_second()));
    EXPECT_EQ(row[8], "-");  // one seed: no test
    EXPECT_EQ(row[10], fmt::format("{:.2f}%", 100 * summary.drop_rate()));
    EXPECT_EQ(row[11], fmt::format("{:.0f}", static_cast<double>(summary.samples_lost())));
  }
  EXPECT_EQ(base_row[7], "1.000x");
  EXPECT_EQ(drop_row[7], fmt::format("{:.3f}x", drop_summary.samples_per_second() /
                                                    base_summary.samples_per_second()));
  // The prediction beside the measurement: the baseline replayed under
  // the case's tau, a ratio with its drop rate; and a sentence on what the
  // one-seed table can and cannot show.
  EXPECT_EQ(base_row[9], "1.000x (0.0% dropped)");
  EXPECT_EQ(drop_row[9].find('x'), 5u) << drop_row[9];
  EXPECT_NE(drop_row[9].find("% dropped)"), std::string::npos) << drop_row[9];
  EXPECT_NE(markdown.find("What this table shows: no case has the seeds for an interval. What it "
                          "cannot show: whether tau = p80"),
            std::string::npos)
      << markdown;
  // The printed table is the file's.
  EXPECT_NE(last_output_.find(fmt::format("| {} |", fmt::join(drop_row, " | "))),
            std::string::npos);
  // How close to the machine each case computed, from its summary: the
  // MLP's training FLOPs per sample (3 x 2 x (784 x 256 + 256 x 10)) and
  // the MFU the coordinator measured.
  EXPECT_DOUBLE_EQ(base_summary.training_flops_per_sample(), 3 * 406'528.0);
  ASSERT_GT(base_summary.mean_mfu(), 0.0) << base_summary.ShortDebugString();
  EXPECT_NE(
      markdown.find(fmt::format(
          "Model FLOPs utilization (0.00122 GFLOP per training sample, 3 x the forward "
          "pass counted from the layers; against each worker's sgemm peak x its threads, "
          "delays left out): tau = inf (baseline): {:.3g} GFLOP/s per worker, {:.1f}%",
          base_summary.mean_achieved_flops_per_second() / 1e9, 100 * base_summary.mean_mfu())),
      std::string::npos)
      << markdown;

  // report.json carries the same numbers.
  const std::string json = read_text(report / "report.json");
  EXPECT_NE(json.find("\"tau_policy\":\"p80\""), std::string::npos) << json;

  // The plots: present, non-empty PNGs, embedded in the HTML.
  const std::vector<std::string> plots = {
      "tiny-mlp_w2_dropcompute_accuracy_wall.png", "tiny-mlp_w2_dropcompute_accuracy_step.png",
      "tiny-mlp_w2_dropcompute_compute.png", "speedup_tiny-mlp_dropcompute.png"};
  for (const std::string& name : plots) {
    const fs::path png = report / "plots" / name;
    ASSERT_TRUE(fs::exists(png)) << name;
    EXPECT_GT(fs::file_size(png), 1000u) << name;
    EXPECT_EQ(read_text(png).substr(1, 3), "PNG") << name;
    EXPECT_TRUE(fs::exists(report / "plots" / (name.substr(0, name.size() - 4) + ".gp"))) << name;
    EXPECT_NE(markdown.find("(plots/" + name + ")"), std::string::npos) << name;
  }
  const std::string html = read_text(report / "report.html");
  size_t embedded = 0;
  for (size_t at = 0;
       (at = html.find("src=\"data:image/png;base64,iVBOR", at)) != std::string::npos; ++at)
    ++embedded;
  EXPECT_EQ(embedded, plots.size());
  // The speedup plot's predicted curves: the best tau and the p80 case at
  // 1..256 workers, from the baseline's pooled worker steps.
  const std::string speedup_dat = read_text(report / "plots" / "speedup_tiny-mlp_dropcompute.dat");
  for (const std::string& curve :
       {std::string("best tau"), fmt::format("tau = p80 ({:.4g} s)", tau)}) {
    const size_t at = speedup_dat.find("# predicted, " + curve +
                                       ": i.i.d. workers drawn from the 2-worker baseline's");
    ASSERT_NE(at, std::string::npos) << curve << " not in\n" << speedup_dat;
    std::istringstream block(speedup_dat.substr(at));
    std::vector<uint32_t> workers;
    for (std::string line; std::getline(block, line) && !line.empty();) {
      if (line[0] == '#') continue;
      std::istringstream fields(line);
      uint32_t n = 0;
      std::string tau_field;
      double speedup = 0.0;
      fields >> n >> tau_field >> speedup;
      EXPECT_TRUE(std::isfinite(speedup) && speedup > 0) << line;
      workers.push_back(n);
    }
    EXPECT_EQ(workers, (std::vector<uint32_t>{1, 2, 4, 8, 16, 32, 64, 128, 256})) << curve;
  }
  // One predicted figure per thing: the case's curve at the run's 2 workers
  // is its predicted column; the best tau only at the other worker counts.
  const size_t p80_at = speedup_dat.find(fmt::format("# predicted, tau = p80 ({:.4g} s)", tau));
  ASSERT_NE(p80_at, std::string::npos);
  const size_t two_at = speedup_dat.find("\n2 ", p80_at);
  ASSERT_NE(two_at, std::string::npos);
  std::istringstream two(speedup_dat.substr(two_at + 1));
  uint32_t two_workers = 0;
  std::string two_tau;
  double two_speedup = 0.0;
  two >> two_workers >> two_tau >> two_speedup;
  EXPECT_EQ(drop_row[9].substr(0, 6), fmt::format("{:.3f}x", two_speedup)) << speedup_dat;
  const std::string best = "The best tau at other worker counts, a model and not a measurement";
  EXPECT_NE(markdown.find(best), std::string::npos) << markdown;
  EXPECT_EQ(markdown.find("Predicted speedup with the best tau"), std::string::npos);
  EXPECT_NE(last_output_.find(best), std::string::npos);
  EXPECT_NE(json.find("\"predicted\":{\"model\":"), std::string::npos) << json;
  EXPECT_NE(html.find(best), std::string::npos);
  // The compute-time histogram marks tau.
  EXPECT_NE(read_text(report / "plots" / "tiny-mlp_w2_dropcompute_compute.dat")
                .find(fmt::format("{} 0", tau)),
            std::string::npos);
}

TEST_F(ExperimentReport, ASimulatedSweepRunsThroughTheSimulatorAndStandsBesideItsRealTwin) {
  write("tiny.cfg", kConfig);
  const std::string axes = R"(
name: "twin"
configs: "tiny.cfg"
taus: ["inf", "0.03"]
requeue: [true]
)";
  write("real.sweep", axes);
  write("sim.sweep",
        axes + "seeds: [5, 6]\nsimulate: true\nsimulation { sample_seconds: 0.0005 }\n");
  const fs::path real = dir_ / "real", sim = dir_ / "sim";
  ASSERT_EQ(run("dctrain-experiment", {(dir_ / "real.sweep").string(), "--out", real.string()},
                "real.log"),
            0)
      << last_output_;
  ASSERT_EQ(
      run("dctrain-experiment", {(dir_ / "sim.sweep").string(), "--out", sim.string()}, "sim.log"),
      0)
      << last_output_;
  EXPECT_NE(last_output_.find("estimate: simulated"), std::string::npos) << last_output_;
  const fs::path sim_case = sim / "tiny-mlp_w2_dropcompute_tau-0.03s_requeue_s6";
  ASSERT_TRUE(fs::exists(sim_case / "summary.json")) << last_output_;
  EXPECT_TRUE(fs::exists(sim_case / "simulation.json")) << "run by dctrain-simulate";
  EXPECT_NE(read_text(sim_case / "simulation.json").find("\"sample_seconds\": 0.0005"),
            std::string::npos)
      << "the sweep's simulation model reached the simulator";
  EXPECT_NE(read_text(sim_case / "case.txt").find("simulated: true"), std::string::npos);
  EXPECT_EQ(read_summary(sim_case).steps(), 12u);

  const fs::path report = dir_ / "twin-report";
  ASSERT_EQ(
      run("dctrain-report", {real.string(), sim.string(), "--out", report.string()}, "report.log"),
      0)
      << last_output_;
  const std::string markdown = read_text(report / "report.md");
  EXPECT_NE(markdown.find("## tiny-mlp: 2 workers, dropcompute delays\n"), std::string::npos);
  EXPECT_NE(markdown.find("## tiny-mlp: 2 workers, dropcompute delays (simulated)"),
            std::string::npos)
      << markdown;
  EXPECT_NE(markdown.find("### Simulated against real"), std::string::npos) << markdown;
  // The tau = 0.03 s row: each side's speedup on samples/s as its table
  // gives it: the real run's samples/s ratio, and the simulated seeds'
  // paired by seed (the geometric mean of the two seeds' ratios).
  const std::vector<std::string> row =
      table_row(markdown, "tiny-mlp: 2 workers, dropcompute delays | tau = 0.03 s, requeue");
  ASSERT_EQ(row.size(), 11u) << markdown;
  EXPECT_EQ(row[2], "1 / 2");
  const v1::RunSummary base = read_summary(real / "tiny-mlp_w2_dropcompute_tau-inf_s5");
  const v1::RunSummary drop = read_summary(real / "tiny-mlp_w2_dropcompute_tau-0.03s_requeue_s5");
  EXPECT_EQ(row[3], fmt::format("{:.3f}x", drop.samples_per_second() / base.samples_per_second()));
  double log_ratios = 0.0;
  for (const char* seed : {"s5", "s6"}) {
    log_ratios +=
        std::log(
            read_summary(sim / fmt::format("tiny-mlp_w2_dropcompute_tau-0.03s_requeue_{}", seed))
                .samples_per_second() /
            read_summary(sim / fmt::format("tiny-mlp_w2_dropcompute_tau-inf_{}", seed))
                .samples_per_second()) /
        2;
  }
  EXPECT_EQ(row[4], fmt::format("{:.3f}x", std::exp(log_ratios)));
  const std::vector<std::string> sim_row = table_row(
      markdown.substr(markdown.find("## tiny-mlp: 2 workers, dropcompute delays (simulated)")),
      "tau = 0.03 s, requeue");
  ASSERT_EQ(sim_row.size(), 12u);
  EXPECT_EQ(sim_row[7].substr(0, row[4].size()), row[4]) << "the table's figure";
  // The simulated family has its own speedup plot, with the seeds' interval.
  const fs::path plot = report / "plots" / "speedup_tiny-mlp_dropcompute_sim.png";
  ASSERT_TRUE(fs::exists(plot)) << last_output_;
  EXPECT_GT(fs::file_size(plot), 1000u);
  EXPECT_NE(read_text(report / "plots" / "speedup_tiny-mlp_dropcompute_sim.dat")
                .find("interval_low interval_high (95%, over seeds)"),
            std::string::npos);
}

TEST_F(ExperimentReport, AnInterruptedCaseIsResumedFromItsCheckpointNotCountedAsFinished) {
  // The first case's coordinator is killed at its second checkpoint (the
  // file layer's fault injection, inherited through the launcher): the
  // sweep fails that case (and the p80 case, which needs it), and the same
  // command then resumes it from its first checkpoint.
  write("tiny.cfg", std::string(kConfig) + "checkpoint { every_steps: 4 }\n");
  write("tiny.sweep", kSweep);
  const fs::path out = dir_ / "runs";
  const fs::path base = out / "tiny-mlp_w2_dropcompute_tau-inf_s5";
  ::setenv("DCTRAIN_FAULT", "kill:synced:metrics.jsonl:2", 1);
  const int broken = run("dctrain-experiment",
                         {(dir_ / "tiny.sweep").string(), "--out", out.string()}, "broken.log");
  ::unsetenv("DCTRAIN_FAULT");
  ASSERT_NE(broken, 0) << last_output_;
  ASSERT_FALSE(fs::exists(base / "summary.json")) << last_output_;
  ASSERT_TRUE(fs::exists(base / "checkpoint.bin")) << last_output_;

  ASSERT_EQ(run("dctrain-experiment",
                {(dir_ / "tiny.sweep").string(), "--out", out.string(), "--dry-run"}, "dry.log"),
            0);
  EXPECT_NE(last_output_.find("tiny-mlp_w2_dropcompute_tau-inf_s5: stopped without a summary "
                              "(killed?): will resume"),
            std::string::npos)
      << last_output_;

  ASSERT_EQ(run("dctrain-experiment", {(dir_ / "tiny.sweep").string(), "--out", out.string()},
                "resumed.log"),
            0)
      << last_output_;
  EXPECT_NE(last_output_.find("[1/2] tiny-mlp_w2_dropcompute_tau-inf_s5: stopped without a "
                              "summary (killed?): resuming from its checkpoint"),
            std::string::npos)
      << last_output_;
  const MetricsRecords records =
      parse_metrics(read_text(base / "metrics.jsonl"), (base / "metrics.jsonl").string());
  std::vector<uint32_t> steps;
  for (const v1::StepRecord& r : records.steps) steps.push_back(r.step());
  std::vector<uint32_t> expected(12);
  std::iota(expected.begin(), expected.end(), 0u);
  EXPECT_EQ(steps, expected) << "every step once, in order";
  const v1::RunSummary summary = read_summary(base);
  EXPECT_TRUE(summary.completed());
  EXPECT_EQ(summary.steps(), 12u);
  EXPECT_TRUE(read_summary(out / "tiny-mlp_w2_dropcompute_tau-p80_requeue_s5").completed());
}

TEST_F(ExperimentReport, TheReportRefusesToPoolADuplicateOrAMismatchedRunAsSeeds) {
  write("tiny.cfg", kConfig);
  write("tiny.sweep", std::string(kSweep) + "seeds: [5, 6]\n");
  const fs::path out = dir_ / "runs";
  ASSERT_EQ(run("dctrain-experiment",
                {(dir_ / "tiny.sweep").string(), "--out", out.string(), "--only", "tau-inf"},
                "experiment.log"),
            0)
      << last_output_;
  // Two seeds of a sweep's case pool (their names, data and delay seeds
  // follow the seed), and each summary names the code that ran it.
  const fs::path report = dir_ / "report";
  ASSERT_EQ(
      run("dctrain-report", {out.string(), "--out", report.string(), "--no-plots"}, "pooled.log"),
      0)
      << last_output_;
  EXPECT_NE(last_output_.find("| tau = inf (baseline) | 2 |"), std::string::npos) << last_output_;
  const fs::path base = out / "tiny-mlp_w2_dropcompute_tau-inf_s5";
  EXPECT_NE(read_text(base / "summary.json").find("\"code_version\": \"0."), std::string::npos);

  // The same seeds run by other code: not seeds of one case.
  const fs::path other = out / "tiny-mlp_w2_dropcompute_tau-inf_s6";
  std::string summary = read_text(other / "summary.json");
  const size_t version = summary.find("\"code_version\": \"") + 17;
  summary.insert(version, "9.9.9+elsewhere-");
  std::ofstream(other / "summary.json") << summary;
  EXPECT_NE(run("dctrain-report", {out.string(), "--out", report.string()}, "code.log"), 0);
  EXPECT_NE(last_output_.find("were run by different code ('"), std::string::npos) << last_output_;
  EXPECT_NE(last_output_.find("9.9.9+elsewhere-"), std::string::npos) << last_output_;
  fs::remove_all(other);

  const fs::path copy = out / "copy";
  fs::copy(base, copy, fs::copy_options::recursive);
  EXPECT_NE(run("dctrain-report", {out.string(), "--out", report.string()}, "duplicate.log"), 0);
  EXPECT_NE(last_output_.find("are the same case with the same seed (5): a duplicate is not a "
                              "second seed"),
            std::string::npos)
      << last_output_;

  // Another seed, but another budget too: not a second seed of the case.
  std::string config = read_text(copy / "config.cfg");
  config.replace(config.find("seed: 5"), 7, "seed: 6");
  config.replace(config.find("max_steps: 12"), 13, "max_steps: 11");
  std::ofstream(copy / "config.cfg") << config;
  std::string info = read_text(copy / "case.txt");
  info.replace(info.find("seed: 5"), 7, "seed: 6");
  std::ofstream(copy / "case.txt") << info;
  EXPECT_NE(run("dctrain-report", {out.string(), "--out", report.string()}, "mismatch.log"), 0);
  EXPECT_NE(last_output_.find("differ in more than the seed"), std::string::npos) << last_output_;
  EXPECT_NE(last_output_.find("max_steps"), std::string::npos) << last_output_;

  fs::remove_all(copy);
  EXPECT_EQ(run("dctrain-report", {out.string(), "--out", report.string()}, "alone.log"), 0)
      << last_output_;
  EXPECT_EQ(last_output_.find("dctrain-report: left out"), std::string::npos) << last_output_;

  // An interrupted run of the same seed is no second seed either: it is
  // left out of the tables, and named.
  const fs::path cut = out / "cut";
  fs::copy(base, cut, fs::copy_options::recursive);
  std::string cut_summary = read_text(cut / "summary.json");
  const size_t completed = cut_summary.find("\"completed\": true");
  ASSERT_NE(completed, std::string::npos) << cut_summary;
  cut_summary.replace(completed, 17, "\"completed\": false");
  std::ofstream(cut / "summary.json") << cut_summary;
  EXPECT_EQ(run("dctrain-report", {out.string(), "--out", report.string()}, "cut.log"), 0)
      << last_output_;
  EXPECT_NE(last_output_.find("dctrain-report: left out, not finished: " + cut.string() + " ("),
            std::string::npos)
      << last_output_;
  EXPECT_NE(last_output_.find("| tau = inf (baseline) | 1 |"), std::string::npos) << last_output_;
}

TEST_F(ExperimentReport, BadSweepFilesAreRefusedBeforeAnythingRuns) {
  write("tiny.cfg", kConfig);
  const fs::path out = dir_ / "runs";
  write("syntax.sweep", "configs: \"tiny.cfg\"\ntau: [\"inf\"]\n");
  EXPECT_EQ(
      run("dctrain-experiment", {(dir_ / "syntax.sweep").string(), "--out", out.string()}, "a.log"),
      2);
  EXPECT_NE(last_output_.find(
                "syntax.sweep:2:4: Message type \"dctrain.v1.Sweep\" has no field named \"tau\""),
            std::string::npos)
      << last_output_;
  EXPECT_NE(last_output_.find("proto/sweep.proto"), std::string::npos) << last_output_;

  write("values.sweep",
        "configs: \"missing.cfg\"\nconfigs: \"tiny.cfg\"\ntaus: [\"fast\", \"p0\"]\n"
        "delays { name: \"bad name\" delay { kind: \"none\" } }\n");
  EXPECT_EQ(
      run("dctrain-experiment", {(dir_ / "values.sweep").string(), "--out", out.string()}, "b.log"),
      2);
  EXPECT_NE(last_output_.find("sweep 'values' cannot run"), std::string::npos) << last_output_;
  EXPECT_NE(last_output_.find("'missing.cfg'"), std::string::npos) << last_output_;
  EXPECT_NE(last_output_.find("tau policy 'fast'"), std::string::npos) << last_output_;
  EXPECT_NE(last_output_.find("tau policy 'p0'"), std::string::npos) << last_output_;
  EXPECT_NE(last_output_.find("name 'bad name'"), std::string::npos) << last_output_;

  write("invalid.sweep", "configs: \"tiny.cfg\"\noverrides { step { micro_batch: 7 } }\n");
  EXPECT_EQ(run("dctrain-experiment", {(dir_ / "invalid.sweep").string(), "--out", out.string()},
                "c.log"),
            2);
  EXPECT_NE(last_output_.find("case tiny-mlp_w2_dropcompute_tau-inf_s5:"), std::string::npos)
      << last_output_;
  EXPECT_FALSE(fs::exists(out)) << "nothing may run for a bad sweep";

  // The report refuses a folder with no finished run: refused input, 2 in
  // the one exit-code table (common/exit_codes.h; it was 1).
  fs::create_directories(dir_ / "empty");
  EXPECT_EQ(
      run("dctrain-report", {(dir_ / "empty").string(), "--out", (dir_ / "r").string()}, "d.log"),
      2);
  EXPECT_NE(last_output_.find("holds no finished run"), std::string::npos) << last_output_;
}

}  // namespace
}  // namespace dctrain
