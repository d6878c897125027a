// The real programs over 127.0.0.1: the coordinator's live metrics, scraped
// over HTTP while it trains, agree with metrics.jsonl, and its evaluations
// run off the step loop (steps close while one runs; each record names the
// step it evaluated and carries that step's time).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <sstream>

#include "metrics/metrics_json.h"
#include "tests/testing/http_get.h"
#include "tests/testing/paths.h"
#include "tests/testing/process.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::http_get;
using testing::Process;
using testing::read_text;

// mnist-cnn on generated 28x28 images: an evaluation of 500 held-out
// images costs about as much as three to six training steps, so steps close
// while it runs whatever the load (both slow down alike).
const char* kConfig = R"(
name: "observe"
seed: 3
workers: 2
model { name: "mnist-cnn" num_classes: 10 image_channels: 1 image_height: 28 image_width: 28 }
dataset { kind: "synthetic" synthetic_samples: 2000 train_limit: 960 test_limit: 500 }
optimizer { kind: "sgd" lr: 0.05 momentum: 0.9 }
step { global_batch: 32 micro_batch: 8 tau: inf }
delay { kind: "constant" seconds: 0.01 }
liveness { heartbeat_seconds: 0.2 silence_seconds: 10 grace_seconds: 2 join_timeout_seconds: 60 }
eval { every_steps: 10 batch: 100 }
checkpoint { every_steps: 20 }
stop { max_steps: 60 }
)";

// The samples of a scrape: "name{labels}" -> value.
std::map<std::string, double> parse_scrape(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

double sum_of(const std::map<std::string, double>& scrape, const std::string& prefix) {
  double total = 0.0;
  for (const auto& [key, v] : scrape) {
    if (key.starts_with(prefix)) total += v;
  }
  return total;
}

TEST(ObserveProcesses, ScrapesDuringARunMatchTheRecordsAndEvaluationsRunOffTheStepLoop) {
  const auto dir = testing::fresh_dir("observe");
  const auto run_dir = dir / "run";
  std::ofstream(dir / "run.cfg") << kConfig;
  Process coordinator(testing::program("dctrain-coordinator"),
                      {"--config", (dir / "run.cfg").string(), "--bind", "tcp://127.0.0.1:*",
                       "--out", run_dir.string(), "--metrics-port", "0"},
                      dir / "coordinator.out");
  ASSERT_TRUE(eventually(
      [&] {
        return std::filesystem::exists(run_dir / "metrics_endpoint") &&
               std::filesystem::exists(run_dir / "endpoint");
      },
      60s))
      << coordinator.output();
  const std::string url = read_text(run_dir / "metrics_endpoint");
  const std::smatch m = [&] {
    std::smatch match;
    std::regex_search(url, match, std::regex(R"(^http://127\.0\.0\.1:(\d+)/metrics\n$)"));
    return match;
  }();
  ASSERT_FALSE(m.empty()) << url;
  const auto port = static_cast<uint16_t>(std::stoi(m[1]));
  std::string endpoint = read_text(run_dir / "endpoint");
  endpoint.erase(endpoint.find_last_not_of('\n') + 1);
  Process w0(testing::program("dctrain-worker"), {"--connect", endpoint, "--name", "w0"},
             dir / "w0.out");
  Process w1(testing::program("dctrain-worker"), {"--connect", endpoint, "--name", "w1"},
             dir / "w1.out");

  // Scrape until the run ends; keep those taken mid-run.
  std::vector<std::map<std::string, double>> scrapes;
  while (!coordinator.wait_for(50ms).has_value()) {
    const auto reply = http_get(port, "/metrics");
    if (!reply || reply->status != 200) continue;  // the run may be closing
    EXPECT_NE(reply->headers.find("text/plain; version=0.0.4"), std::string::npos);
    auto scrape = parse_scrape(reply->body);
    if (scrape["dctrain_steps_total"] > 0 && scrape["dctrain_run_finished"] == 0.0)
      scrapes.push_back(std::move(scrape));
  }
  ASSERT_EQ(coordinator.wait_for(0ms), std::optional<int>(0)) << coordinator.output();
  EXPECT_EQ(w0.wait_for(15s), std::optional<int>(0)) << w0.output();
  EXPECT_EQ(w1.wait_for(15s), std::optional<int>(0)) << w1.output();

  const MetricsRecords records =
      parse_metrics(read_text(run_dir / "metrics.jsonl"), "metrics.jsonl");
  ASSERT_EQ(records.steps.size(), 60u);
  ASSERT_GE(scrapes.size(), 3u) << "scraped while it ran";
  size_t with_eval = 0;
  for (const auto& scrape : scrapes) {
    const auto steps = static_cast<size_t>(scrape.at("dctrain_steps_total"));
    ASSERT_LE(steps, records.steps.size());
    double samples = 0, micro_batches = 0, contributed = 0;
    for (size_t i = 0; i < steps; ++i) {
      samples += records.steps[i].samples();
      micro_batches += records.steps[i].completed();
      for (const auto& w : records.steps[i].workers()) contributed += w.contributed();
    }
    EXPECT_EQ(scrape.at("dctrain_samples_total"), samples) << "at step " << steps;
    EXPECT_EQ(scrape.at("dctrain_microbatches_total{outcome=\"completed\"}"), micro_batches);
    EXPECT_EQ(sum_of(scrape, "dctrain_worker_micro_batch_compute_seconds_count{"), micro_batches);
    EXPECT_EQ(sum_of(scrape, "dctrain_worker_step_compute_seconds_count{"), contributed);
    EXPECT_EQ(scrape.at("dctrain_loss"), records.steps[steps - 1].loss());
    EXPECT_EQ(scrape.at("dctrain_workers_alive"), 2.0);
    EXPECT_EQ(scrape.at("dctrain_tau_seconds"), std::numeric_limits<double>::infinity());
    const double eval_step = scrape.at("dctrain_eval_step");
    if (eval_step < 0) continue;
    ++with_eval;
    bool found = false;
    for (const v1::EvalRecord& r : records.evals) {
      if (r.step() != static_cast<uint32_t>(eval_step)) continue;
      found = true;
      EXPECT_EQ(scrape.at("dctrain_eval_accuracy_ratio"), r.eval_accuracy());
      EXPECT_EQ(scrape.at("dctrain_eval_loss"), r.eval_loss());
    }
    EXPECT_TRUE(found) << "eval of step " << eval_step;
  }
  EXPECT_GE(with_eval, 1u);

  // Every evaluation asked for (each 10 steps; the last is the final one),
  // each with its step's wall time; steps closed while they ran, and the
  // step loop spent next to nothing on them.
  std::vector<uint32_t> evaluated;
  size_t closed_meanwhile = 0;
  for (const v1::EvalRecord& r : records.evals) {
    evaluated.push_back(r.step());
    ASSERT_GE(r.step(), 1u);
    EXPECT_EQ(r.wall_seconds(), records.steps[r.step() - 1].wall_seconds()) << r.step();
    EXPECT_GE(r.finished_wall_seconds(), r.wall_seconds());
    for (const v1::StepRecord& s : records.steps) {
      closed_meanwhile +=
          s.wall_seconds() > r.wall_seconds() && s.wall_seconds() < r.finished_wall_seconds();
    }
  }
  EXPECT_EQ(evaluated, (std::vector<uint32_t>{10, 20, 30, 40, 50, 60}));
  EXPECT_GE(closed_meanwhile, 1u);
  // The step loop copies the replica, and waits only for the remainder of
  // an evaluation still running: always less than the evaluations took.
  double in_step_loop = 0.0, evaluating = 0.0;
  for (const v1::StepRecord& s : records.steps) in_step_loop += s.eval_seconds();
  for (const v1::EvalRecord& r : records.evals) evaluating += r.seconds();
  EXPECT_LT(in_step_loop, evaluating);
  const std::string log = read_text(run_dir / "coordinator.log");
  EXPECT_NE(log.find("more steps done meanwhile"), std::string::npos) << log;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dctrain
