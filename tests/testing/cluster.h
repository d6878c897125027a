// A run of the real programs for process tests: a small config (mlp on
// generated images) and a Cluster that starts the coordinator and workers
// (or any program) over tcp://127.0.0.1 with ephemeral ports, reads the run
// folder and checks how each process finished.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "metrics/metrics_json.h"
#include "runtime/run_config.h"
#include "tests/testing/paths.h"
#include "tests/testing/process.h"

namespace dctrain::testing {

using namespace std::chrono_literals;

// A small run: mlp on generated 1x28x28 images.
inline std::string small_config(
    int workers, const std::string& extra,
    const std::string& step = "step { global_batch: 48 micro_batch: 8 tau: inf }") {
  return fmt::format(R"(
name: "e2e"
seed: 11
workers: {}
model {{ name: "mlp" }}
dataset {{ kind: "synthetic" synthetic_samples: 2000 train_limit: 480 test_limit: 200 }}
optimizer {{ kind: "sgd" lr: 0.05 momentum: 0.9 }}
{}
liveness {{ heartbeat_seconds: 0.2 silence_seconds: 3 grace_seconds: 1 join_timeout_seconds: 40 }}
eval {{ every_steps: 5 batch: 100 }}
progress_seconds: 1
{}
)",
                     workers, step, extra);
}

// A run folder of its own (removed with the object unless the test failed),
// the coordinator on an ephemeral port, and the processes that join it
// (workers, or any program given), each with its output in a file, all
// killed and reaped when the run goes.
class Cluster {
 public:
  // `workers`: how many start_workers() starts (w0, w1, ...).
  Cluster(const std::string& label, const std::string& config_text, int workers = 0)
      : dir_("e2e-" + label), workers_(workers) {
    run_dir_ = dir_ / "run";
    std::ofstream(dir_ / "run.cfg") << config_text;
  }
  ~Cluster() {
    processes_.clear();
    coordinator_.reset();
  }

  void start_coordinator(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--config", (dir_ / "run.cfg").string(),
                                     "--bind",   "tcp://127.0.0.1:*",
                                     "--out",    run_dir_.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    coordinator_ = std::make_unique<Process>(testing::program("dctrain-coordinator"), args,
                                             dir_ / "coordinator.out");
    endpoint_ = wait_for_endpoint(run_dir_, *coordinator_, 60s);
    ASSERT_TRUE(endpoint_.starts_with("tcp://127.0.0.1:")) << endpoint_ << coordinator_->output();
  }

  // `program` with `args` under `key` (its output in KEY.N.out, N counting
  // the starts of that key).
  Process& start(const std::string& key, const std::string& program,
                 const std::vector<std::string>& args) {
    auto p = std::make_unique<Process>(program, args,
                                       dir_ / fmt::format("{}.{}.out", key, starts_[key]++));
    Process& ref = *p;
    processes_[key] = std::move(p);
    return ref;
  }
  Process& start_worker(const std::string& name, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--connect", endpoint_, "--name", name};
    args.insert(args.end(), extra.begin(), extra.end());
    return start(name, testing::program("dctrain-worker"), args);
  }
  void start_workers() {
    for (int i = 0; i < workers_; ++i) start_worker(fmt::format("w{}", i));
  }

  // Waits for the coordinator (0 expected) and then every process; each
  // must exit with the code given for its key (0 by default).
  void expect_finish(const std::map<std::string, int>& codes = {},
                     std::chrono::seconds timeout = 300s) {
    const auto code = coordinator_->wait_for(timeout);
    ASSERT_TRUE(code.has_value()) << "coordinator still running:\n" << coordinator_->output();
    EXPECT_EQ(*code, 0) << coordinator_->output() << log();
    for (auto& [key, p] : processes_) {
      const auto c = p->wait_for(30s);
      ASSERT_TRUE(c.has_value()) << key << " still running:\n" << p->output();
      const int expected = codes.contains(key) ? codes.at(key) : 0;
      EXPECT_EQ(*c, expected) << key << ":\n" << p->output();
    }
  }
  // The same, every process expected to exit 0.
  void expect_clean_finish(std::chrono::seconds timeout = 60s) { expect_finish({}, timeout); }

  size_t joined() const { return testing::count(log(), " joined as rank "); }
  MetricsRecords records() const {
    return parse_metrics(read_text(run_dir_ / "metrics.jsonl"),
                         (run_dir_ / "metrics.jsonl").string());
  }
  v1::RunSummary summary() const {
    return parse_summary(read_text(run_dir_ / "summary.json"),
                         (run_dir_ / "summary.json").string());
  }
  std::string log() const { return read_text(run_dir_ / "coordinator.log"); }
  const std::filesystem::path& run_dir() const { return run_dir_; }
  const std::string& endpoint() const { return endpoint_; }
  Process& coordinator() { return *coordinator_; }
  Process& process(const std::string& key) { return *processes_.at(key); }
  Process& worker(const std::string& name) { return process(name); }

 private:
  const ScratchDir dir_;  // first: removed after the processes are gone
  int workers_;
  std::filesystem::path run_dir_;
  std::string endpoint_;
  std::unique_ptr<Process> coordinator_;
  std::map<std::string, std::unique_ptr<Process>> processes_;
  std::map<std::string, int> starts_;
};

// Resumes the run in `run_dir` from its checkpoint (dctrain-coordinator
// --resume) with two fresh workers, w0 and w1; expects all three to exit 0.
inline void resume_run(const std::filesystem::path& run_dir) {
  using namespace std::chrono_literals;
  std::filesystem::remove(run_dir / "endpoint");
  Process resumed(testing::program("dctrain-coordinator"),
                  {"--resume", run_dir.string(), "--bind", "tcp://127.0.0.1:*"},
                  run_dir / "resumed.out");
  ASSERT_TRUE(eventually([&] { return std::filesystem::exists(run_dir / "endpoint"); }, 30s))
      << resumed.output();
  std::string endpoint = read_text(run_dir / "endpoint");
  endpoint.erase(endpoint.find_last_not_of('\n') + 1);
  Process w0(testing::program("dctrain-worker"), {"--connect", endpoint, "--name", "w0"},
             run_dir / "w0.resumed.out");
  Process w1(testing::program("dctrain-worker"), {"--connect", endpoint, "--name", "w1"},
             run_dir / "w1.resumed.out");
  ASSERT_EQ(resumed.wait_for(60s), std::optional<int>(0)) << resumed.output();
  EXPECT_EQ(w0.wait_for(15s), std::optional<int>(0)) << w0.output();
  EXPECT_EQ(w1.wait_for(15s), std::optional<int>(0)) << w1.output();
}

}  // namespace dctrain::testing
