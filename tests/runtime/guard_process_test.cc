// The guard with the real programs over tcp://127.0.0.1: a worker killed
// with SIGKILL is declared dead as soon as its connection closes, far sooner
// than liveness.silence_seconds, and a replacement joins; nothing is lost.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "tests/runtime/guard_run.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::GuardRun;

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
  GuardRun run("sigkill", small_config(kSilence));
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
