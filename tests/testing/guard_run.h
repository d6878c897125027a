// The guard's process tests' run: a coordinator, workers and hostile peers
// (tests/process/hostile_peer.cc) over tcp://127.0.0.1, each a real process
// with its output in a file, all killed and reaped when the run goes.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "metrics/metrics_json.h"
#include "tests/testing/paths.h"
#include "tests/testing/process.h"

namespace dctrain::testing {

using namespace std::chrono_literals;

inline const std::string kPeer = DCTRAIN_HOSTILE_PEER;

class GuardRun {
 public:
  GuardRun(const std::string& name, const std::string& config_text) : dir_("guard-" + name) {
    std::ofstream(dir_ / "run.cfg") << config_text;
  }
  ~GuardRun() { processes_.clear(); }

  void start_coordinator(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--config", (dir_ / "run.cfg").string(),
                                     "--bind",   "tcp://127.0.0.1:*",
                                     "--out",    run_dir().string()};
    args.insert(args.end(), extra.begin(), extra.end());
    coordinator_ = std::make_unique<Process>(testing::program("dctrain-coordinator"), args,
                                             dir_ / "coordinator.out");
    endpoint_ = wait_for_endpoint(run_dir(), *coordinator_, 60s);
    ASSERT_FALSE(endpoint_.empty()) << coordinator_->output();
  }

  Process& start(const std::string& key, const std::string& program,
                 std::vector<std::string> args) {
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
  Process& start_peer(const std::string& key, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"--connect", endpoint_};
    args.insert(args.end(), extra.begin(), extra.end());
    return start(key, kPeer, args);
  }

  size_t joined() const { return testing::count(log(), " joined as rank "); }
  std::string log() const { return read_text(run_dir() / "coordinator.log"); }
  MetricsRecords records() const {
    return parse_metrics(read_text(run_dir() / "metrics.jsonl"), "metrics.jsonl");
  }
  v1::RunSummary summary() const {
    return parse_summary(read_text(run_dir() / "summary.json"), "summary.json");
  }
  std::filesystem::path run_dir() const { return dir_ / "run"; }
  Process& coordinator() { return *coordinator_; }
  Process& process(const std::string& key) { return *processes_.at(key); }

  // Waits for the coordinator and then every process; each must exit with
  // the code given for it (0 by default).
  void expect_finish(const std::map<std::string, int>& codes = {},
                     std::chrono::seconds timeout = 300s) {
    const auto code = coordinator_->wait_for(timeout);
    ASSERT_TRUE(code.has_value()) << "coordinator still running:\n" << log();
    EXPECT_EQ(*code, 0) << log();
    for (auto& [key, p] : processes_) {
      const auto c = p->wait_for(30s);
      ASSERT_TRUE(c.has_value()) << key << " still running:\n" << p->output();
      const int expected = codes.contains(key) ? codes.at(key) : 0;
      EXPECT_EQ(*c, expected) << key << ":\n" << p->output();
    }
  }

 private:
  const ScratchDir dir_;  // first: removed after the processes are gone
  std::string endpoint_;
  std::unique_ptr<Process> coordinator_;
  std::map<std::string, std::unique_ptr<Process>> processes_;
  std::map<std::string, int> starts_;
};

}  // namespace dctrain::testing
