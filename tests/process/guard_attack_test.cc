// The guard with the real programs over tcp://127.0.0.1 (CURVE off), on a
// slice of real MNIST (label "slow": two runs of mnist-cnn, about 1.5
// minutes on two cores):
// - a peer speaking the protocol joins as a worker and sends one
//   contribution whose gradient holds 1e30: the norm guard (on by default)
//   refuses it and its micro-batches are requeued, and the run ends with the
//   final accuracy of the same run where that peer never poisons; nothing
//   is lost (with the norm guard off, the update guard discards the step:
//   GuardTest.PoisonedContributionDiscardsTheStep...);
// - a second connection with the name of a running worker is never heard:
//   it can neither take the worker's place nor stop it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "tests/testing/guard_run.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::GuardRun;

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
data_plane { kind: "star" }
)";

// Runs the mnist slice with the peer; `poison_step` < 0: it never poisons.
// With `impersonate`, a second connection says hello as w3 mid-run.
v1::RunSummary run_with_peer(GuardRun& run, const std::filesystem::path& data, int poison_step,
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
  run.expect_finish(impersonate ? std::map<std::string, int>{{"impostor", 4}}
                                : std::map<std::string, int>{});
  return run.summary();
}

TEST(GuardProcesses, PoisonedContributionChangesNothingAndAWorkersNameCannotBeTaken) {
  const std::filesystem::path data = DCTRAIN_SHARED_DATA;
  if (!std::filesystem::exists(data / "mnist")) GTEST_SKIP() << "no MNIST under " << data;

  GuardRun clean("clean", kMnist);
  const v1::RunSummary baseline = run_with_peer(clean, data, -1, false);
  ASSERT_FALSE(::testing::Test::HasFailure());

  GuardRun attacked("attacked", kMnist);
  const v1::RunSummary summary = run_with_peer(attacked, data, 5, true);
  const std::string log = attacked.log();
  const MetricsRecords records = attacked.records();

  // The poisoned contribution was refused, its sender named; nothing was
  // lost, no step discarded.
  EXPECT_EQ(summary.steps_discarded(), 0u) << log;
  EXPECT_EQ(summary.contributions_refused_norm(), 1u) << log;
  EXPECT_NE(log.find("refused worker 'peer' (rank 4)'s contribution for step 5: its per-sample "
                     "gradient norm"),
            std::string::npos)
      << log;
  EXPECT_EQ(summary.samples_lost(), 0u);
  EXPECT_EQ(summary.samples(), 1536u) << "the epoch, each sample exactly once";
  EXPECT_EQ(summary.audits_failed(), 0u);
  EXPECT_EQ(summary.epochs_audited(), 1u);
  EXPECT_EQ(summary.checksum_mismatches(), 0u);
  size_t refused = 0;
  for (const v1::StepRecord& s : records.steps) {
    for (const v1::WorkerStep& w : s.workers()) {
      if (w.refused().empty()) continue;
      ++refused;
      EXPECT_EQ(s.step(), 5u);
      EXPECT_EQ(w.name(), "peer");
      EXPECT_EQ(w.refused(), "norm") << s.ShortDebugString();
    }
  }
  EXPECT_EQ(refused, 1u);

  // The final accuracy is the clean run's: the refused micro-batches
  // were planned again at the head of the queue, on other ranks (the planner
  // deals each step from the next rank), so only the order of the float sums
  // differs, and which samples share a step. Poisoned and taken, the run
  // would end at chance (10%).
  const auto accuracy = optional_number(summary.final_eval_accuracy());
  const auto clean_accuracy = optional_number(baseline.final_eval_accuracy());
  const auto loss = optional_number(summary.final_eval_loss());
  const auto clean_loss = optional_number(baseline.final_eval_loss());
  ASSERT_TRUE(accuracy && clean_accuracy && loss && clean_loss);
  std::printf("final accuracy %.4f (loss %.4f) attacked, %.4f (loss %.4f) clean\n", *accuracy,
              *loss, *clean_accuracy, *clean_loss);
  EXPECT_NEAR(*accuracy, *clean_accuracy, 0.02);
  EXPECT_GT(*accuracy, 0.5) << "far above chance (0.1)";
  EXPECT_EQ(baseline.steps_discarded(), 0u);

  // The impostor was never heard: w3 kept its place to the end.
  EXPECT_EQ(log.find("said hello again"), std::string::npos) << log;
  bool w3_last = false;
  for (const v1::WorkerStep& w : records.steps.back().workers()) {
    w3_last |= w.name() == "w3" && w.contributed();
  }
  EXPECT_TRUE(w3_last);
}

}  // namespace
}  // namespace dctrain
