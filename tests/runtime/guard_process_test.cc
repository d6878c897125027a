// The guard with the real programs over tcp://127.0.0.1 (CURVE off):
// - a peer speaking the protocol joins as a worker and sends one
//   contribution whose gradient holds 1e30: the step is discarded and
//   requeued, and the run ends with the same final accuracy, bit for bit, as
//   the same run where that peer never poisons; nothing is lost;
// - a second connection with the name of a running worker is never heard:
//   it can neither take the worker's place nor stop it;
// - a worker killed with SIGKILL is declared dead as soon as its connection
//   closes, far sooner than liveness.silence_seconds, and a replacement
//   joins; nothing is lost.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>

#include "metrics/metrics_json.h"
#include "tests/runtime/process.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::Process;
using testing::read_text;

const std::string kBin = DCTRAIN_BIN_DIR;
const std::string kPeer = DCTRAIN_HOSTILE_PEER;

class Run {
 public:
  Run(const std::string& name, const std::string& config_text) {
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("dctrain-guard-{}-{}", ::getpid(), name);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "run.cfg") << config_text;
  }
  ~Run() {
    processes_.clear();
    if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir_);
  }

  void start_coordinator(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--config", (dir_ / "run.cfg").string(),
                                     "--bind",   "tcp://127.0.0.1:*",
                                     "--out",    run_dir().string()};
    args.insert(args.end(), extra.begin(), extra.end());
    coordinator_ =
        std::make_unique<Process>(kBin + "/dctrain-coordinator", args, dir_ / "coordinator.out");
    ASSERT_TRUE(eventually(
        [&] {
          return std::filesystem::exists(run_dir() / "endpoint") ||
                 coordinator_->wait_for(0ms).has_value();
        },
        60s))
        << coordinator_->output();
    endpoint_ = read_text(run_dir() / "endpoint");
    endpoint_.erase(endpoint_.find_last_not_of("\n") + 1);
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
    return start(name, kBin + "/dctrain-worker", args);
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
  std::filesystem::path dir_;
  std::string endpoint_;
  std::unique_ptr<Process> coordinator_;
  std::map<std::string, std::unique_ptr<Process>> processes_;
  std::map<std::string, int> starts_;
};

// mnist-cnn on a slice of real MNIST: 4 real workers and one slot for the
// peer, which always joins last (rank 4).
const char* kMnist = R"(
name: "attack"
seed: 1
workers: 5
model { name: "mnist-cnn" num_classes: 10 image_channels: 1 image_height: 28 image_width: 28 }
dataset { kind: "mnist" train_limit: 1536 test_limit: 1000 }
optimizer { kind: "sgd" lr: 0.05 momentum: 0.9 }
step { global_batch: 64 micro_batch: 8 tau: inf }
liveness { heartbeat_seconds: 0.5 silence_seconds: 20 grace_seconds: 5 join_timeout_seconds: 120 }
eval { every_steps: 0 batch: 500 }
stop { max_epochs: 1 }
)";

// Runs the mnist slice with the peer; `poison_step` < 0: it never poisons.
// With `impersonate`, a second connection says hello as w3 mid-run.
v1::RunSummary run_with_peer(Run& run, const std::filesystem::path& data, int poison_step,
                             bool impersonate) {
  run.start_coordinator({"--data-dir", data.string()});
  for (int i = 0; i < 4; ++i) {
    run.start_worker(fmt::format("w{}", i), {"--data-dir", data.string(), "--threads", "1"});
  }
  EXPECT_TRUE(eventually([&] { return run.joined() == 4; }, 120s)) << run.log();
  run.start_peer("peer", {"--name", "peer", "--poison-step", std::to_string(poison_step)});
  if (impersonate) {
    EXPECT_TRUE(eventually([&] { return run.records().steps.size() >= 2; }, 120s)) << run.log();
    // Exit 4: no answer at all within 5 s while w3 is connected.
    run.start_peer("impostor", {"--name", "w3", "--answer-seconds", "5"});
    const auto code = run.process("impostor").wait_for(60s);
    EXPECT_EQ(code.value_or(-1), 4) << run.process("impostor").output();
  }
  run.expect_finish();
  return run.summary();
}

TEST(GuardProcesses, PoisonedContributionChangesNothingAndAWorkersNameCannotBeTaken) {
  const std::filesystem::path data = DCTRAIN_SHARED_DATA;
  if (!std::filesystem::exists(data / "mnist")) GTEST_SKIP() << "no MNIST under " << data;

  Run clean("clean", kMnist);
  const v1::RunSummary baseline = run_with_peer(clean, data, -1, false);
  ASSERT_FALSE(::testing::Test::HasFailure());

  Run attacked("attacked", kMnist);
  const v1::RunSummary summary = run_with_peer(attacked, data, 5, true);
  const std::string log = attacked.log();

  // The poisoned step was discarded, its cause named; nothing was lost.
  EXPECT_EQ(summary.steps_discarded(), 1u) << log;
  EXPECT_NE(log.find("step 5 discarded: the reduced gradient holds NaN, infinite or overflowing "
                     "values"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("caused by worker 'peer' (rank 4)"), std::string::npos) << log;
  EXPECT_EQ(summary.samples_lost(), 0u);
  EXPECT_EQ(summary.samples(), 1536u) << "the epoch, each sample exactly once";
  EXPECT_EQ(summary.audits_failed(), 0u);
  EXPECT_EQ(summary.epochs_audited(), 1u);
  EXPECT_EQ(summary.checksum_mismatches(), 0u);
  size_t discarded = 0;
  for (const v1::StepRecord& s : attacked.records().steps) {
    if (!s.discarded()) continue;
    ++discarded;
    EXPECT_EQ(s.step(), 5u);
    for (const v1::WorkerStep& w : s.workers()) {
      EXPECT_EQ(w.refused(), w.name() == "peer" ? "update" : "") << s.ShortDebugString();
    }
  }
  EXPECT_EQ(discarded, 1u);

  // The final accuracy is the clean run's, bit for bit: the discarded step's
  // micro-batches were planned again in the same order.
  const auto accuracy = optional_number(summary.final_eval_accuracy());
  const auto clean_accuracy = optional_number(baseline.final_eval_accuracy());
  ASSERT_TRUE(accuracy && clean_accuracy);
  std::printf("final accuracy: %.4f attacked, %.4f clean\n", *accuracy, *clean_accuracy);
  EXPECT_EQ(*accuracy, *clean_accuracy);
  EXPECT_EQ(optional_number(summary.final_eval_loss()),
            optional_number(baseline.final_eval_loss()));
  EXPECT_GT(*accuracy, 0.5) << "far above chance (0.1)";
  EXPECT_EQ(baseline.steps_discarded(), 0u);

  // The impostor was never heard: w3 kept its place to the end.
  EXPECT_EQ(log.find("said hello again"), std::string::npos) << log;
  bool w3_last = false;
  for (const v1::WorkerStep& w : attacked.records().steps.back().workers()) {
    w3_last |= w.name() == "w3" && w.contributed();
  }
  EXPECT_TRUE(w3_last);
}

std::string small_config(double silence_seconds) {
  return fmt::format(R"(
name: "liveness"
seed: 11
workers: 3
model {{ name: "mlp" }}
dataset {{ kind: "synthetic" synthetic_samples: 2000 train_limit: 480 test_limit: 200 }}
optimizer {{ kind: "sgd" lr: 0.05 momentum: 0.9 }}
step {{ global_batch: 48 micro_batch: 8 tau: inf }}
delay {{ kind: "constant" seconds: 0.03 }}
liveness {{ heartbeat_seconds: 0.2 silence_seconds: {} grace_seconds: 1 join_timeout_seconds: 60 }}
eval {{ every_steps: 5 batch: 100 }}
stop {{ max_epochs: 3 }}
)",
                     silence_seconds);
}

TEST(GuardProcesses, KilledWorkerIsDeclaredDeadWhenItsConnectionClosesAndAReplacementJoins) {
  // Silence alone would take 30 s to notice the killed worker.
  constexpr double kSilence = 30.0;
  Run run("sigkill", small_config(kSilence));
  run.start_coordinator();
  for (const char* name : {"w0", "w1", "w2"}) run.start_worker(name);
  ASSERT_TRUE(eventually([&] { return run.records().steps.size() >= 3; }, 60s)) << run.log();

  const auto killed = std::chrono::steady_clock::now();
  run.process("w2").kill(SIGKILL);
  const std::regex dead("worker 'w2' \\(rank \\d\\): its connection closed; declared dead now");
  ASSERT_TRUE(eventually([&] { return std::regex_search(run.log(), dead); }, 20s)) << run.log();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  std::printf("w2 declared dead %.2f s after SIGKILL (silence_seconds %.0f)\n", seconds, kSilence);
  EXPECT_LT(seconds, kSilence / 2);
  EXPECT_TRUE(std::regex_search(run.log(), std::regex("worker 'w2' \\(rank \\d\\) is out of step "
                                                      "\\d+ because it died \\(its connection "
                                                      "closed\\); its \\d+ micro-batches")))
      << run.log();

  // A replacement under a new name takes the free slot at once.
  const size_t steps_before = run.records().steps.size();
  run.start_worker("w9");
  ASSERT_TRUE(eventually(
      [&] { return run.log().find("worker 'w9' joined as rank") != std::string::npos; }, 30s))
      << run.log();
  run.expect_finish({{"w2", 128 + SIGKILL}});

  const v1::RunSummary summary = run.summary();
  const std::string log = run.log();
  EXPECT_EQ(log.find("silent for"), std::string::npos) << log;
  EXPECT_EQ(log.find("the run already has its"), std::string::npos) << "w9 was not refused";
  EXPECT_GE(summary.workers_disconnected(), 1u);
  EXPECT_EQ(summary.samples_lost(), 0u);
  EXPECT_EQ(summary.samples(), 1440u) << "3 epochs of 480, each sample exactly once";
  EXPECT_EQ(summary.audits_failed(), 0u);
  EXPECT_EQ(summary.checksum_mismatches(), 0u);
  const auto steps = run.records().steps;
  ASSERT_GT(steps.size(), steps_before);
  bool w9_contributed = false;
  for (const v1::WorkerStep& w : steps.back().workers()) {
    w9_contributed |= w.name() == "w9" && w.contributed();
  }
  EXPECT_TRUE(w9_contributed) << steps.back().ShortDebugString();
}

}  // namespace
}  // namespace dctrain
