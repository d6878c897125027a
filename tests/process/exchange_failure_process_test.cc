// The exchange's failure path with the real programs over tcp://127.0.0.1,
// four members, the default data plane and liveness settings (timeout
// 10 s): a member SIGKILLed while the others wait in the round, one
// SIGSTOPped for longer than the round deadline, one whose exchange port
// nobody can reach, and a lowest member that promises the round's sum and
// never sends it; and a member killed in a round of 32 on the halving
// schedule. Each costs the run a step of a few round deadlines, not
// the timeout: the test holds the longest step against the run's own median
// step plus a small multiple of the round deadline the steps recorded; and
// nothing is lost (every sample done exactly once per epoch) and every
// replica stays the coordinator's (no checksum mismatch; each worker checks
// its replica against the coordinator's final bye).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <thread>
#include <vector>

#include "tests/testing/guard_run.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::GuardRun;

constexpr uint64_t kTrain = 960;  // samples a epoch
constexpr int kEpochs = 3;

// Four members, the MLP on generated images, 15 steps an epoch, compute of
// about 40 ms a step; rank 3 three times slower when `slow_rank3` (so the
// others wait in the round for it). Liveness and data plane: the defaults.
std::string failure_config(const std::string& name, bool slow_rank3) {
  return fmt::format(R"(
name: "{}"
seed: 17
workers: 4
model {{ name: "mlp" }}
dataset {{ kind: "synthetic" synthetic_samples: 2000 train_limit: {} test_limit: 200 }}
optimizer {{ kind: "sgd" lr: 0.05 momentum: 0.9 }}
step {{ global_batch: 64 micro_batch: 8 tau: inf }}
delay {{ kind: "constant" seconds: 0.02 {} }}
eval {{ every_steps: 15 batch: 100 }}
stop {{ max_epochs: {} }}
)",
                     name, kTrain, slow_rank3 ? "slow_workers: [3] slowdown: 3" : "", kEpochs);
}

void start_four(GuardRun& run, const std::vector<std::string>& last_flags = {}) {
  run.start_coordinator();
  for (int i = 0; i < 4; ++i) {
    const std::string name = fmt::format("w{}", i);
    run.start_worker(name, i == 3 ? last_flags : std::vector<std::string>{});
    // One at a time, so that w<i> is rank i.
    ASSERT_TRUE(eventually(
        [&] {
          return run.log().find(fmt::format("worker '{}' joined as rank {}", name, i)) !=
                 std::string::npos;
        },
        60s))
        << run.log();
  }
}

// Starts the four and waits for `steps` steps: past the round deadline's
// warm-up (5 rounds).
void start_four_past_warm_up(GuardRun& run, size_t steps) {
  start_four(run);
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_TRUE(eventually([&] { return run.records().steps.size() >= steps; }, 120s)) << run.log();
}

// Waits for `line` in the coordinator's log.
void wait_for_line(GuardRun& run, const std::string& line) {
  ASSERT_TRUE(eventually([&] { return run.log().find(line) != std::string::npos; }, 120s))
      << "no '" << line << "' in:\n"
      << run.log();
}

struct StepTimes {
  double median = 0.0;
  double longest = 0.0;
  uint64_t longest_step = 0;
  double round_deadline = 0.0;  // the longest step's
};

// Over the steps after the warm-up (the first 6): the median step and the
// longest, with the round deadline it had.
StepTimes step_times(const std::vector<v1::StepRecord>& steps) {
  std::vector<double> seconds;
  StepTimes t;
  for (size_t i = 6; i < steps.size(); ++i) {
    seconds.push_back(steps[i].step_seconds());
    if (steps[i].step_seconds() > t.longest) {
      t.longest = steps[i].step_seconds();
      t.longest_step = steps[i].step();
      t.round_deadline = steps[i].round_deadline_seconds();
    }
  }
  if (seconds.empty()) return t;
  std::nth_element(seconds.begin(), seconds.begin() + static_cast<long>(seconds.size() / 2),
                   seconds.end());
  t.median = seconds[seconds.size() / 2];
  return t;
}

// `honest`: every member is a dctrain-worker (the hostile peer does not
// keep a replica: its checksum is the plan's, wrong while an update is
// pending, so its reports can count as mismatches).
void expect_exactly_once(GuardRun& run, bool honest = true) {
  const v1::RunSummary summary = run.summary();
  EXPECT_EQ(summary.samples_lost(), 0u);
  EXPECT_EQ(summary.samples(), kEpochs * kTrain) << "each sample exactly once per epoch";
  EXPECT_EQ(summary.audits_failed(), 0u);
  if (honest) {
    EXPECT_EQ(summary.checksum_mismatches(), 0u) << "every replica stays the coordinator's";
  }
}

// The longest step against the run's own median: at most `deadlines` round
// deadlines plus `extra` seconds more. Prints both, for the reader.
void expect_longest_step(GuardRun& run, double deadlines, double extra, const char* what) {
  const StepTimes t = step_times(run.records().steps);
  std::printf("%s: longest step %.3f s (step %llu, round deadline %.3f s), median %.3f s\n", what,
              t.longest, static_cast<unsigned long long>(t.longest_step), t.round_deadline,
              t.median);
  ASSERT_GT(t.round_deadline, 0.0);
  EXPECT_LT(t.round_deadline, 10.0) << "measured, not the timeout";
  EXPECT_LE(t.longest, t.median + deadlines * t.round_deadline + extra) << run.log();
}

TEST(ExchangeFailures, AMemberKilledWhileTheOthersWaitInTheRoundCostsOneRound) {
  GuardRun run("x-fail-kill", failure_config("x-fail-kill", true));
  start_four_past_warm_up(run, 12);
  if (HasFatalFailure()) return;
  run.process("w3").kill(SIGKILL);
  wait_for_line(run, "ranks 3 left the round in flight; the round is redone");
  if (HasFatalFailure()) return;
  run.start_worker("w3");
  run.expect_finish({{"w3", 0}}, 300s);
  // The kill is seen at once (the connection closed) and the round redone:
  // a round deadline is more than enough.
  expect_longest_step(run, 1.0, 0.0, "SIGKILL");
  expect_exactly_once(run);
}

TEST(ExchangeFailures, AMemberKilledInAHalvingRoundOf32CostsOneRoundAndTheRedoRunsAmong31) {
  // 32 members: rounds on the halving schedule (data_plane.halving_from_members
  // is 16), each member a micro-batch of 8 a step, the last rank three times
  // slower so the others wait in the round for it. It is killed there; the
  // others' round is redone among the 31 left (halving again) within a round
  // deadline of the run's own median step, and nothing is lost.
  constexpr uint64_t kTrain32 = 1024;  // 4 steps an epoch
  GuardRun run("x-fail-kill32", fmt::format(R"(
name: "x-fail-kill32"
seed: 17
workers: 32
model {{ name: "mlp" }}
dataset {{ kind: "synthetic" synthetic_samples: 2000 train_limit: {} test_limit: 200 }}
optimizer {{ kind: "sgd" lr: 0.05 momentum: 0.9 }}
step {{ global_batch: 256 micro_batch: 8 tau: inf }}
delay {{ kind: "constant" seconds: 0.02 slow_workers: [31] slowdown: 3 }}
eval {{ every_steps: 100 batch: 100 }}
stop {{ max_epochs: 6 }}
)",
                                            kTrain32));
  run.start_coordinator();
  for (int i = 0; i < 32; ++i) run.start_worker(fmt::format("w{}", i));
  const std::regex last("worker '(w\\d+)' joined as rank 31");
  std::smatch joined;
  ASSERT_TRUE(eventually(
      [&] {
        const std::string log = run.log();
        return std::regex_search(log, joined, last) && run.records().steps.size() >= 12;
      },
      240s))
      << run.log();
  const std::string slow = joined[1].str();
  run.process(slow).kill(SIGKILL);
  wait_for_line(run, "ranks 31 left the round in flight; the round is redone");
  if (HasFatalFailure()) return;
  EXPECT_NE(run.log().find("among the 31 members left"), std::string::npos) << run.log();
  run.expect_finish({{slow, 128 + SIGKILL}}, 300s);
  expect_longest_step(run, 1.0, 0.0, "SIGKILL among 32");
  const v1::RunSummary summary = run.summary();
  EXPECT_EQ(summary.samples_lost(), 0u);
  EXPECT_EQ(summary.samples(), 6 * kTrain32) << "each sample exactly once per epoch";
  EXPECT_EQ(summary.audits_failed(), 0u);
  EXPECT_EQ(summary.checksum_mismatches(), 0u) << "every replica stays the coordinator's";
  EXPECT_GE(summary.exchange_rounds_redone(), 1u);
}

TEST(ExchangeFailures, AMemberStoppedLongerThanTheRoundDeadlineIsCutWithinThreeHeartbeats) {
  GuardRun run("x-fail-stop", failure_config("x-fail-stop", false));
  start_four_past_warm_up(run, 12);
  if (HasFatalFailure()) return;
  run.process("w3").kill(SIGSTOP);
  std::this_thread::sleep_for(3s);  // six heartbeats, six round deadlines
  run.process("w3").kill(SIGCONT);
  run.expect_finish({}, 300s);
  EXPECT_NE(run.log().find("worker 'w3' (rank 3) silent for"), std::string::npos) << run.log();
  // Found by its silence (3 heartbeats of 0.5 s) or by the round deadline
  // (the others' limit, then the coordinator's cut-off: a few deadlines).
  expect_longest_step(run, 2.0, 3 * 0.5, "SIGSTOP 3 s");
  expect_exactly_once(run);
}

TEST(ExchangeFailures, AMemberWhoseExchangePortNobodyReachesIsReleasedAfterThreeFailedRounds) {
  GuardRun run("x-fail-port", failure_config("x-fail-port", false));
  start_four_past_warm_up(run, 9);
  if (HasFatalFailure()) return;
  // w3 is replaced by a worker whose advertised exchange port nothing
  // listens on (a published port that was never forwarded): it reaches
  // the others, they never reach it.
  run.process("w3").kill(SIGKILL);
  run.start_worker("w3x", {"--exchange-advertise", "tcp://127.0.0.1:1"});
  wait_for_line(run, "worker 'w3x' (rank 3) released from the run");
  if (HasFatalFailure()) return;
  run.expect_finish({{"w3", 128 + SIGKILL}, {"w3x", 5}}, 300s);
  const std::string log = run.log();
  EXPECT_NE(log.find("worker 'w3x' (rank 3) failed its exchange round"), std::string::npos) << log;
  EXPECT_NE(log.find("3 in a row"), std::string::npos) << log;
  EXPECT_GE(run.summary().workers_released(), 1u);
  // Each of its rounds: the others' limit after hearing from it, the
  // coordinator's cut-off after their reports, the redo.
  expect_longest_step(run, 3.0, 0.0, "unreachable port");
  expect_exactly_once(run);
}

TEST(ExchangeFailures, ALowestMemberWithholdingTheSumIsStoodInForAndReleasedAfterThree) {
  // The norm guard off, so that a member is asked to stand in (with it on,
  // the sketch check strikes the withholder and redoes the round without it).
  GuardRun run("x-fail-withhold",
               failure_config("x-fail-withhold", false) + "guard { norm_multiple: 0 }\n");
  start_four_past_warm_up(run, 9);
  if (HasFatalFailure()) return;
  // The lowest slot is freed and taken by a peer that reports every round
  // ok, says its sum follows, and never sends it.
  run.process("w0").kill(SIGKILL);
  wait_for_line(run, "worker 'w0' (rank 0): its connection closed");
  if (HasFatalFailure()) return;
  run.start_peer("peer",
                 {"--name", "peer", "--exchange-bind", "tcp://127.0.0.1:*", "--withhold-sum", "1"});
  wait_for_line(run, "worker 'peer' (rank 0) released from the run");
  if (HasFatalFailure()) return;
  run.expect_finish({{"w0", 128 + SIGKILL}}, 300s);
  const std::string log = run.log();
  EXPECT_NE(log.find("failed its exchange round (it withheld the committed round's sum)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("asked worker 'w1' (rank 1) for the round's sum"), std::string::npos) << log;
  EXPECT_GE(run.summary().workers_released(), 1u);
  // Each withheld sum costs the round deadline, then the next member sends it.
  expect_longest_step(run, 2.0, 0.0, "withheld sum");
  // The workers' replicas: each checked against the coordinator's final bye
  // (expect_finish: exit 0, not kWorkerDiverged).
  expect_exactly_once(run, false);
}

}  // namespace
}  // namespace dctrain
