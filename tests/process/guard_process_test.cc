// The guard with the real programs over tcp://127.0.0.1: a worker killed
// with SIGKILL is declared dead as soon as its connection closes, far sooner
// than liveness.silence_seconds, and a replacement joins; nothing is lost.
// Over the data plane "exchange", a member contributing 1e30 or NaN: every
// honest member refuses the sum, the step is discarded with nothing applied
// on any replica and requeued, the ledger stays exact; a member that keeps
// doing it stops the run (guard.max_bad_steps_in_a_row); a lowest member
// that forwards a forged NaN sum to the coordinator: the coordinator's
// replica does not apply it, the workers resync to it, nothing is lost.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <regex>

#include "tests/testing/guard_run.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::GuardRun;

// Three workers, the MLP on 480 generated images; `plane_and_stop` names
// the delay or data plane and the stop criterion (and anything else).
std::string small_config(const std::string& name, double silence_seconds,
                         const std::string& plane_and_stop, double heartbeat_seconds = 0.2) {
  return fmt::format(R"(
name: "{}"
seed: 11
workers: 3
model {{ name: "mlp" }}
dataset {{ kind: "synthetic" synthetic_samples: 2000 train_limit: 480 test_limit: 200 }}
optimizer {{ kind: "sgd" lr: 0.05 momentum: 0.9 }}
step {{ global_batch: 48 micro_batch: 8 tau: inf }}
liveness {{ heartbeat_seconds: {} silence_seconds: {} grace_seconds: 1 join_timeout_seconds: 60 }}
eval {{ every_steps: 5 batch: 100 }}
{}
)",
                     name, heartbeat_seconds, silence_seconds, plane_and_stop);
}

TEST(GuardProcesses, KilledWorkerIsDeclaredDeadWhenItsConnectionClosesAndAReplacementJoins) {
  // Silence alone would take 30 s to notice the killed worker.
  constexpr double kSilence = 30.0;
  GuardRun run("sigkill", small_config("liveness", kSilence,
                                       "delay { kind: \"constant\" seconds: 0.03 }\n"
                                       "stop { max_epochs: 3 }"));
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

// Heartbeats every 0.5 s: a member its round waits on is presumed dead
// after 3 silent heartbeats, and at 0.2 s a test process descheduled for
// 0.6 s on a loaded machine was (the forged-sum test then lost its forger
// before it forged). These tests are not about silence.
std::string exchange_config(const std::string& extra) {
  return small_config("exchange-guard", 10,
                      "data_plane { kind: \"exchange\" timeout_seconds: 3 }\n" + extra, 0.5);
}

// Two workers, then the peer (rank 2) as the third member of every round.
void start_exchange_run(GuardRun& run, const std::vector<std::string>& peer_flags) {
  run.start_coordinator();
  run.start_worker("w0");
  run.start_worker("w1");
  ASSERT_TRUE(eventually([&] { return run.joined() == 2; }, 60s)) << run.log();
  std::vector<std::string> flags = {"--name", "peer", "--exchange-bind", "tcp://127.0.0.1:*"};
  flags.insert(flags.end(), peer_flags.begin(), peer_flags.end());
  run.start_peer("peer", flags);
}

// The peer first (rank 0: the lowest member of every round, which sends
// the round's sum), then two workers; runs to the end, w0 and w1 checking
// their final replicas against the coordinator's.
void run_with_peer_lowest(GuardRun& run, const std::vector<std::string>& peer_flags) {
  run.start_coordinator();
  std::vector<std::string> flags = {"--name", "peer", "--exchange-bind", "tcp://127.0.0.1:*"};
  flags.insert(flags.end(), peer_flags.begin(), peer_flags.end());
  run.start_peer("peer", flags);
  ASSERT_TRUE(eventually([&] { return run.joined() == 1; }, 60s)) << run.log();
  run.start_worker("w0");
  run.start_worker("w1");
  run.expect_finish();
}

// Two epochs of the guard runs' 480 samples, each exactly once.
void expect_two_epochs_exactly_once(const v1::RunSummary& summary) {
  EXPECT_EQ(summary.samples_lost(), 0u);
  EXPECT_EQ(summary.samples(), 960u) << "2 epochs of 480 samples, each exactly once";
  EXPECT_EQ(summary.audits_failed(), 0u);
}

TEST(GuardProcesses, ExchangeSumHoldingHugeOrNanValuesIsDiscardedOnEveryReplicaAndRequeued) {
  for (const std::string value : {"1e30", "nan"}) {
    SCOPED_TRACE(value);
    GuardRun run("exchange-poison-" + value, exchange_config("stop { max_epochs: 2 }"));
    start_exchange_run(run, {"--poison-step", "0", "--value", value, "--leave-after-poison", "1"});
    run.expect_finish();  // w0 and w1 checked their final replicas against the coordinator's

    const std::string log = run.log();
    EXPECT_NE(log.find("step 0 discarded: the exchanged sum holds NaN, infinite or overflowing "
                       "values (|x| >= 2^64); nothing is applied on any replica"),
              std::string::npos)
        << log;
    for (const char* w : {"w0", "w1"}) {
      EXPECT_NE(run.process(w).output().find(
                    "step 0: the exchanged sum holds NaN, infinite or overflowing values"),
                std::string::npos)
          << run.process(w).output();
    }
    const v1::RunSummary summary = run.summary();
    EXPECT_EQ(summary.steps_discarded(), 1u) << summary.ShortDebugString();
    expect_two_epochs_exactly_once(summary);
    EXPECT_EQ(summary.epochs_audited(), 2u);
    EXPECT_EQ(summary.checksum_mismatches(), 0u);
    const MetricsRecords records = run.records();
    ASSERT_FALSE(records.steps.empty());
    EXPECT_FALSE(records.steps[0].applied()) << records.steps[0].ShortDebugString();
    EXPECT_TRUE(records.steps[0].discarded()) << records.steps[0].ShortDebugString();
    size_t applied = 0;
    for (const v1::StepRecord& r : records.steps) applied += r.applied();
    EXPECT_GT(applied, 0u);
    // Had any replica applied the sum, its loss would be infinite or NaN.
    ASSERT_FALSE(records.evals.empty());
    for (const v1::EvalRecord& e : records.evals) {
      EXPECT_TRUE(std::isfinite(e.eval_loss())) << e.ShortDebugString();
    }
    EXPECT_LT(records.evals.back().eval_loss(), 5.0) << records.evals.back().ShortDebugString();
  }
}

TEST(GuardProcesses, ExchangeLowestMemberForwardingAForgedSumIsRefusedAndTheNextMemberSendsIt) {
  // The forger sums honestly, reports the digests of the sum every member
  // holds, and forwards a finite sum of its own (1e6 everywhere, which the
  // coordinator once applied: evaluation loss 2e12). The coordinator
  // compares the forwarded sum's digests with those the members reported,
  // refuses it, names its sender and asks the next member, whose sum it
  // applies: no replica differs, nothing is lost.
  // The norm guard off: with it on, the forged sum is met at its sketch
  // check and the round redone without the forger, and no stand-in is asked.
  GuardRun run("exchange-forged-sum",
               exchange_config("guard { norm_multiple: 0 }\nstop { max_epochs: 2 }"));
  run_with_peer_lowest(run, {"--poison-step", "0", "--value", "1e6", "--forge-sum", "1",
                             "--leave-after-poison", "1"});

  const std::string log = run.log();
  EXPECT_NE(log.find("step 0: worker 'peer' (rank 0) sent no usable sum of the round: its sum "
                     "differs from the sum the round's members hold"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("(rank 1) for the round's sum"), std::string::npos) << log;
  const v1::RunSummary summary = run.summary();
  EXPECT_EQ(summary.checksum_mismatches(), 0u) << "the stand-in's sum is the members' sum";
  expect_two_epochs_exactly_once(summary);
  const MetricsRecords records = run.records();
  ASSERT_FALSE(records.steps.empty());
  EXPECT_TRUE(records.steps.front().applied()) << records.steps.front().ShortDebugString();
  ASSERT_FALSE(records.evals.empty());
  for (const v1::EvalRecord& e : records.evals) {
    EXPECT_TRUE(std::isfinite(e.eval_loss())) << e.ShortDebugString();
  }
  EXPECT_LT(records.evals.back().eval_loss(), 5.0) << records.evals.back().ShortDebugString();
}

TEST(GuardProcesses, ExchangeShardOwnerForgingItsShardIsRefusedByTheNormGuard) {
  // The peer (rank 2) owns shard 2 of every round and forges it the same
  // way for every member (1e3 added to each value): the digests agree. It
  // reports the sketch of an honest contribution (nothing). The norm guard
  // asks every member for a sketch of its part once the digests agree, sees
  // the part the sum implies for the owner, refuses it, names it, and redoes
  // the round without it: every step is applied from w0's and w1's work
  // alone, each sample exactly once, and no replica differs.
  GuardRun run("exchange-forged-shard",
               exchange_config("guard { norm_multiple: 10 }\nstop { max_epochs: 2 }"));
  start_exchange_run(run, {"--poison-every-step", "1", "--value", "1e3", "--forge-shard", "1"});
  run.expect_finish();  // w0 and w1 checked their final replicas against the coordinator's

  const std::string log = run.log();
  // The peer computes nothing (it reports no sample): a part of it beyond
  // the sum's rounding is refused as such, before any comparison per sample.
  EXPECT_NE(log.find("the contribution of worker 'peer' (rank 2) is refused: it computed no "
                     "samples, yet its part's estimated norm is"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("as the owner of shard 2, the sum it made of it implies a part of norm"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("the contribution of worker 'w"), std::string::npos) << log;
  const v1::RunSummary summary = run.summary();
  EXPECT_GT(summary.contributions_refused_norm(), 0u) << summary.ShortDebugString();
  // The peer reports the plan's checksum whatever it holds (a mismatch of
  // its own now and then); the honest members never differ.
  EXPECT_FALSE(std::regex_search(
      log, std::regex("worker 'w[01]' \\(rank \\d\\) is out of step \\d+ because its replica "
                      "differs")))
      << log;
  expect_two_epochs_exactly_once(summary);
  const MetricsRecords records = run.records();
  ASSERT_FALSE(records.evals.empty());
  for (const v1::EvalRecord& e : records.evals) {
    EXPECT_TRUE(std::isfinite(e.eval_loss())) << e.ShortDebugString();
  }
  // A forged shard applied once moves the loss to about 1e3 x its size.
  EXPECT_LT(records.evals.back().eval_loss(), 5.0) << records.evals.back().ShortDebugString();
}

TEST(GuardProcesses, ExchangeShardOwnerForgingItsShardIsRefusedHoweverItAnswersTheSketch) {
  // The forging owner of the test above, answering the sketch request with
  // its part of the other shards inflated (so that every other owner's
  // implied part, and the median, would be as large), or with 1e300
  // everywhere: refused on its own answer, or its answer is unusable; the
  // forgery is never applied.
  for (const std::string inflation : {"1e3", "1e300"}) {
    GuardRun run("exchange-inflated-sketch-" + inflation,
                 exchange_config("guard { norm_multiple: 10 }\nstop { max_epochs: 1 }"));
    start_exchange_run(run, {"--poison-every-step", "1", "--value", "1e3", "--forge-shard", "1",
                             "--inflate-sketch", inflation});
    run.expect_finish();
    const std::string log = run.log();
    if (inflation == "1e3") {
      EXPECT_NE(log.find("the contribution of worker 'peer' (rank 2) is refused: it computed no "
                         "samples"),
                std::string::npos)
          << log;
      EXPECT_NE(log.find("its own answer, before anything is implied from it"), std::string::npos)
          << log;
    } else {
      EXPECT_NE(log.find("worker 'peer' (rank 2) sent no usable answer to the round's check: its "
                         "sketch holds values beyond 1e+100"),
                std::string::npos)
          << log;
    }
    EXPECT_EQ(log.find("the contribution of worker 'w"), std::string::npos) << log;
    const MetricsRecords records = run.records();
    ASSERT_FALSE(records.evals.empty());
    EXPECT_LT(records.evals.back().eval_loss(), 5.0) << records.evals.back().ShortDebugString();
  }
}

TEST(GuardProcesses, ExchangeMemberEndingEveryRoundAtOnceIsReleasedAndNoHonestWorkerIsStruck) {
  // From step 4 on, the peer (rank 2) reports every round failed the
  // moment its plan arrives, claiming it heard from every member and that
  // rounds take 100 s, while w0 and w1 compute 1.2 s a step. Nobody is
  // asked to end a round on its word alone: w0 and w1 finish their compute,
  // lack its parts, and say so; it is struck each time, and released at the
  // third. Neither honest worker fails a round or leaves the run.
  GuardRun run(
      "exchange-ends-at-once",
      exchange_config("delay { kind: \"constant\" seconds: 0.6 }\nstop { max_steps: 14 }"));
  start_exchange_run(run, {"--end-rounds-at-once-from", "4"});
  run.expect_finish();
  const std::string log = run.log();
  EXPECT_NE(log.find("worker 'peer' (rank 2) failed its exchange round"), std::string::npos) << log;
  EXPECT_NE(log.find("worker 'peer' (rank 2) released from the run"), std::string::npos) << log;
  for (const char* w : {"w0", "w1"}) {
    EXPECT_EQ(
        log.find(fmt::format("worker '{}' (rank {}) failed its exchange round", w, w[1] - '0')),
        std::string::npos)
        << log;
  }
  const v1::RunSummary summary = run.summary();
  EXPECT_EQ(summary.workers_released(), 1u) << summary.ShortDebugString();
  EXPECT_EQ(summary.samples_lost(), 0u);
  // The peer reports the plan's checksum whatever it holds (a mismatch of
  // its own after each return); the honest members never differ.
  EXPECT_FALSE(std::regex_search(
      log, std::regex("worker 'w[01]' \\(rank \\d\\) is out of step \\d+ because its replica "
                      "differs")))
      << log;
}

TEST(GuardProcesses, ExchangeTwoCollidersEndingEveryRoundAtOnceNeverGetAnHonestWorkerStruck) {
  // Two peers (ranks 2 and 3) both report every round failed the moment
  // their plans arrive from step 3 on, each claiming it heard from every
  // member: two words, so w0 and w1, still computing (1.2 s a step), are
  // asked to end the round a round deadline later and cut from the step
  // when they cannot answer in time. They are never counted a failed round,
  // nor a missed step towards a release, and never released: the colluders
  // can stall the run's steps, not evict anyone.
  std::string config = exchange_config(
      "delay { kind: \"constant\" seconds: 0.6 }\nstop { max_steps: 8 }");
  config.replace(config.find("workers: 3"), 10, "workers: 4");
  GuardRun run("exchange-two-colluders", config);
  run.start_coordinator();
  run.start_worker("w0");
  run.start_worker("w1");
  ASSERT_TRUE(eventually([&] { return run.joined() == 2; }, 60s)) << run.log();
  for (const char* peer : {"p2", "p3"}) {
    run.start_peer(peer, {"--name", peer, "--exchange-bind", "tcp://127.0.0.1:*",
                          "--end-rounds-at-once-from", "3"});
    ASSERT_TRUE(eventually([&] { return run.log().find(fmt::format("worker '{}' joined", peer)) !=
                                        std::string::npos; },
                           60s))
        << run.log();
  }
  run.expect_finish({}, 300s);
  const std::string log = run.log();
  for (const char* w : {"w0", "w1"}) {
    EXPECT_EQ(log.find(fmt::format("worker '{}' (rank {}) failed its exchange round", w, w[1] - '0')),
              std::string::npos)
        << log;
  }
  const v1::RunSummary summary = run.summary();
  // Cut (or, on a loaded machine where the measured round deadline is
  // longer than their compute, answering the request in time), their steps
  // show as missed in their totals, but none counts towards a release.
  EXPECT_EQ(summary.workers_released(), 0u) << summary.ShortDebugString();
  EXPECT_EQ(summary.samples_lost(), 0u);
}

TEST(GuardProcesses, ExchangeLowestMemberDyingBeforeItsSumIsStoodInForByTheNextMember) {
  // The coordinator commits step 0 on the reports alone; the member that
  // said its sum would follow dies instead, and the next member is asked for
  // the sum it holds: the same bits, so no replica differs and nothing is
  // lost.
  // The norm guard off, so that the stand-in is asked for the sum (with it
  // on, the sketch check redoes the round without the missing sum's member).
  GuardRun run("exchange-die-before-sum",
               exchange_config("guard { norm_multiple: 0 }\nstop { max_epochs: 2 }"));
  run_with_peer_lowest(run, {"--die-before-sum", "1"});

  const std::string log = run.log();
  EXPECT_NE(log.find("step 0: the sum of the committed round did not come from worker 'peer' "
                     "(rank 0)"),
            std::string::npos)
      << log;
  // Whichever of w0 and w1 joined second holds rank 1, the next member.
  EXPECT_NE(log.find("(rank 1) for the round's sum"), std::string::npos) << log;
  EXPECT_EQ(log.find("no member of the committed round is left"), std::string::npos) << log;
  const v1::RunSummary summary = run.summary();
  EXPECT_EQ(summary.checksum_mismatches(), 0u) << "the stand-in's sum has the same bits";
  expect_two_epochs_exactly_once(summary);
  const MetricsRecords records = run.records();
  ASSERT_FALSE(records.steps.empty());
  EXPECT_TRUE(records.steps.front().applied()) << records.steps.front().ShortDebugString();
}

TEST(GuardProcesses, ExchangeMemberPoisoningEveryStepStopsTheRunWithNothingApplied) {
  GuardRun run("exchange-poison-every",
               exchange_config("stop { max_epochs: 2 }\nguard { max_bad_steps_in_a_row: 2 }"));
  start_exchange_run(run, {"--poison-every-step", "1"});
  const auto code = run.coordinator().wait_for(120s);
  ASSERT_TRUE(code.has_value()) << run.log();
  EXPECT_EQ(*code, 1) << run.log();
  const std::string log = run.log();
  EXPECT_NE(log.find("2 steps in a row had no usable update"), std::string::npos) << log;
  const MetricsRecords records = run.records();
  ASSERT_EQ(records.steps.size(), 2u);
  for (const v1::StepRecord& r : records.steps) {
    EXPECT_FALSE(r.applied()) << r.ShortDebugString();
    EXPECT_TRUE(r.discarded()) << r.ShortDebugString();
  }
  EXPECT_EQ(run.summary().steps_discarded(), 2u);
  EXPECT_EQ(run.summary().samples_lost(), 0u);
}

}  // namespace
}  // namespace dctrain
