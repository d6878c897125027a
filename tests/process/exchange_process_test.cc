// The real programs over the data plane "exchange" (the workers sum their
// gradients among themselves; the coordinator commits): the same guarantees
// as the star path's process tests (tests/process/process_test.cc) over the
// new path, and a worker killed while the others wait in the exchange; each
// worker's timeline holds its rounds as "exchange" spans and its applies of
// the commits as "apply" spans.
// tcp://127.0.0.1, ephemeral ports.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>

#include "coordinator/planner.h"
#include "exchange/sum_digest.h"
#include "metrics/metrics_json.h"
#include "runtime/checkpoint.h"
#include "runtime/replica.h"
#include "runtime/run_config.h"
#include "runtime/setup.h"
#include "tests/testing/cluster.h"
#include "tests/testing/process.h"
#include "tests/trace/trace_json.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;
using testing::Cluster;
using testing::eventually;
using testing::Process;
using testing::read_text;
using testing::small_config;

// A timeout no load on a shared machine reaches: these runs expect every
// round to succeed.
const std::string kExchange = "data_plane { kind: \"exchange\" timeout_seconds: 30 }\n";
const std::string kStar = "data_plane { kind: \"star\" }\n";

// The parameters of the checkpoint a finished run wrote.
std::vector<float> final_parameters(const Cluster& cluster, const v1::RunConfig& config) {
  auto train = open_dataset(config, Split::kTrain, "");
  Replica replica(make_model(model_spec(config, train->shape(), 1)), config.optimizer());
  load_checkpoint_state(checkpoint_path(cluster.run_dir()), replica);
  const auto p = replica.model().parameters().flat();
  return {p.begin(), p.end()};
}

TEST(ExchangeProcesses, TauInfinityWithThreeWorkersMatchesOneProcessAndTheStarPathBitForBit) {
  const int steps = 8;
  const std::string run =
      fmt::format("stop {{ max_steps: {} }}\ncheckpoint {{ every_steps: {} }}", steps, steps);
  const std::string text = small_config(3, kExchange + run);
  Cluster cluster("x-equivalence", text, 3);
  cluster.start_coordinator();
  cluster.start_workers();
  cluster.expect_clean_finish();  // each worker checked its final replica against the coordinator's

  const auto step_records = cluster.records().steps;
  ASSERT_EQ(step_records.size(), static_cast<size_t>(steps));
  for (const v1::StepRecord& r : step_records) {
    EXPECT_TRUE(r.applied()) << r.ShortDebugString();
    size_t ok = 0;
    for (const v1::WorkerStep& w : r.workers()) ok += w.checksum_ok() && w.contributed();
    EXPECT_EQ(ok, 3u) << r.ShortDebugString();
    EXPECT_EQ(r.orphaned(), 0u) << r.ShortDebugString();
  }
  EXPECT_EQ(cluster.summary().checksum_mismatches(), 0u);
  EXPECT_NE(cluster.log().find("data plane: exchange"), std::string::npos) << cluster.log();
  // The sum check, chosen from what the processes offer: every process
  // runs on this CPU, so GMAC where it has a carry-less multiply, else
  // SHA-256 where it has SHA instructions.
  const std::string digest = cpu_has_carryless_multiply() ? "gmac"
                             : cpu_has_sha_instructions() ? "sha256"
                                                          : "blake2b";
  EXPECT_EQ(cluster.summary().sum_digest(), digest);
  for (const v1::StepRecord& r : step_records) EXPECT_EQ(r.sum_digest(), digest);
  EXPECT_NE(cluster.log().find("check each round's sum with " + digest), std::string::npos)
      << cluster.log();

  // One process on the same global batches, as the star test does.
  v1::RunConfig config = parse_run_config(text, "x-equivalence");
  finalize_run_config(config);
  auto train = open_dataset(config, Split::kTrain, "");
  Replica single(make_model(model_spec(config, train->shape(), 1)), config.optimizer());
  Ledger ledger(train_samples(config, *train), config.seed(), true);
  const std::vector<uint32_t> ranks = {0, 1, 2};
  Batch batch;
  for (int step = 0; step < steps; ++step) {
    Model& model = single.model();
    model.gradients().zero();
    int64_t terms = 0;
    for (const WorkerPlan& plan : plan_step(ledger, ranks, step, 48, 8)) {
      for (const PlannedMicroBatch& mb : plan.micro_batches) {
        train->fill(mb.samples, SampleContext{config.seed(), mb.epoch, true}, batch);
        terms += model.train_micro_batch(batch).loss_terms;
        ledger.complete(mb.id);
      }
    }
    std::span<float> g = model.gradients().flat();
    for (float& v : g) v /= static_cast<float>(terms);
    single.apply_update(g, {});
  }
  const std::vector<float> exchanged = final_parameters(cluster, config);
  const auto a = single.model().parameters().flat();
  ASSERT_EQ(a.size(), exchanged.size());
  double max_diff = 0.0, max_abs = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(a[i]) - exchanged[i]));
    max_abs = std::max(max_abs, std::abs(static_cast<double>(a[i])));
  }
  EXPECT_LT(max_diff, 1e-5 * std::max(1.0, max_abs)) << "max |single - exchange| = " << max_diff;
  std::printf("max |single - exchange| = %g (largest parameter %g)\n", max_diff, max_abs);

  // The star path on the same run: the same bits (rank-order sums on both).
  Cluster star("x-equivalence-star", small_config(3, kStar + run), 3);
  star.start_coordinator();
  star.start_workers();
  star.expect_clean_finish();
  const std::vector<float> starred = final_parameters(star, config);
  ASSERT_EQ(starred.size(), exchanged.size());
  EXPECT_EQ(std::memcmp(starred.data(), exchanged.data(), starred.size() * sizeof(float)), 0)
      << "the exchange and the star path must give the same parameters bit for bit";
  std::vector<double> star_losses, exchange_losses;
  for (const v1::StepRecord& r : star.records().steps) star_losses.push_back(r.loss());
  for (const v1::StepRecord& r : step_records) exchange_losses.push_back(r.loss());
  EXPECT_EQ(star_losses, exchange_losses);
}

TEST(ExchangeProcesses, SameSeedGivesTheSameLossCurveBitForBit) {
  auto run = [](const std::string& name) {
    Cluster cluster(
        name, small_config(2, kExchange + "stop { max_steps: 10 }\ncheckpoint { every_steps: 10 }"),
        2);
    cluster.start_coordinator();
    cluster.start_workers();
    cluster.expect_clean_finish();
    // Every traced step (the default window: all 10) holds each worker's
    // round as its own "exchange" span, after its compute, and its apply of
    // the commit (which travels with the next step's report: the last
    // step's has none), and its zeroing of the gradients for the next step,
    // asked for before that apply (beside the round and the update, on a
    // thread of its own, which may begin later on busy cores) and ended
    // before the next step's compute.
    std::string problem;
    const auto trace = testing::parse_trace(read_text(cluster.run_dir() / "trace.json"), &problem);
    EXPECT_TRUE(trace.has_value()) << problem;
    size_t rounds = 0, applies = 0;
    // (worker, step) -> us
    std::map<std::pair<int, double>, double> zeroing_asked, zeroed_by, applied_from, computing_from;
    for (const testing::ParsedEvent& e :
         trace ? trace->events : std::vector<testing::ParsedEvent>{}) {
      if (e.name == "apply") {
        ++applies;
        EXPECT_EQ(e.number("applied"), 1.0);
        EXPECT_GE(e.number("step"), 0.0);
        EXPECT_LT(e.number("step"), 9.0);
        applied_from[{e.pid, e.number("step")}] = e.ts;
      }
      if (e.name == "zero gradients") {
        EXPECT_GE(e.number("asked_us_before"), 0.0);
        zeroing_asked[{e.pid, e.number("step")}] = e.ts - e.number("asked_us_before");
        zeroed_by[{e.pid, e.number("step")}] = e.ts + e.dur;
      }
      if (e.name == "compute") computing_from[{e.pid, e.number("step")}] = e.ts;
      if (e.name != "exchange") continue;
      ++rounds;
      EXPECT_EQ(e.number("ok"), 1.0);
      EXPECT_EQ(e.number("members"), 2.0);
      EXPECT_GE(e.dur, 0.0);
    }
    EXPECT_EQ(rounds, 20u) << "10 traced steps, 2 workers";
    EXPECT_EQ(applies, 18u) << "9 commits followed by a report, 2 workers";
    EXPECT_EQ(zeroed_by.size(), 18u);
    for (const auto& [worker_step, from] : applied_from) {
      const auto zeroing = zeroing_asked.find(worker_step);
      if (zeroing == zeroing_asked.end()) {
        ADD_FAILURE() << "no zeroing asked for before the apply of step " << worker_step.second;
        continue;
      }
      // One worker's events on one clock, rounded to microseconds (the
      // moment asked for from two of them).
      EXPECT_LE(zeroing->second, from + 2.0) << "step " << worker_step.second;
      const auto next = computing_from.find({worker_step.first, worker_step.second + 1.0});
      if (next == computing_from.end()) {
        ADD_FAILURE() << "no compute of step " << worker_step.second + 1.0;
        continue;
      }
      EXPECT_LE(zeroed_by.at(worker_step), next->second + 1.0) << "step " << worker_step.second;
    }
    std::vector<double> losses;
    const MetricsRecords records = cluster.records();
    for (const v1::StepRecord& r : records.steps) losses.push_back(r.loss());
    for (const v1::EvalRecord& r : records.evals) losses.push_back(r.eval_loss());
    return std::make_pair(losses, read_text(checkpoint_path(cluster.run_dir())));
  };
  const auto first = run("x-repeat-a");
  const auto second = run("x-repeat-b");
  ASSERT_EQ(first.first.size(), 12u);  // 10 steps, 2 evaluations
  EXPECT_EQ(first.first, second.first);
  EXPECT_NE(first.first.front(), first.first[9]) << "the loss should move";
  // The checkpoints' parameters and optimizer state (their last 4 KiB, but
  // for the 8-byte trailer, which covers the header with its wall times).
  const std::string& a = first.second;
  const std::string& b = second.second;
  ASSERT_GE(a.size(), 4096u);
  EXPECT_TRUE(a.compare(a.size() - 4096, 4088, b, b.size() - 4096, 4088) == 0)
      << "the checkpoints' last 4 KiB before the trailer differ";
}

TEST(ExchangeProcesses, DelaysPastTauDropMicroBatchesThatAreRequeuedAndTheLedgerIsExact) {
  Cluster cluster("x-drops",
                  small_config(3,
                               kExchange + "delay { kind: \"constant\" seconds: 0.03 }\n"
                                           "stop { max_epochs: 2 }",
                               "step { global_batch: 96 micro_batch: 8 tau: 0.04 }"),
                  3);
  cluster.start_coordinator();
  cluster.start_workers();
  cluster.expect_clean_finish();
  const v1::RunSummary summary = cluster.summary();
  EXPECT_GT(summary.microbatches_dropped(), 0u) << summary.ShortDebugString();
  EXPECT_EQ(summary.samples_lost(), 0u);
  EXPECT_EQ(summary.samples(), 960u) << "2 epochs of 480 samples, each exactly once";
  EXPECT_EQ(summary.epochs_audited(), 2u);
  EXPECT_EQ(summary.audits_failed(), 0u);
  EXPECT_EQ(summary.checksum_mismatches(), 0u);
  const MetricsRecords records = cluster.records();
  ASSERT_EQ(records.epochs.size(), 2u);
  for (const v1::EpochRecord& e : records.epochs) {
    EXPECT_TRUE(e.audit_ok()) << e.ShortDebugString();
    EXPECT_EQ(e.done(), 480u) << e.ShortDebugString();
    EXPECT_EQ(e.duplicated(), 0u) << e.ShortDebugString();
    EXPECT_EQ(e.missing(), 0u) << e.ShortDebugString();
  }
  bool requeued = false;
  for (const v1::StepRecord& r : records.steps) requeued |= r.requeued() != 0;
  EXPECT_TRUE(requeued);
}

// w2 computes four times slower than the others, so they spend most of
// each step in the exchange, waiting for its pieces. `rounds`: the data
// plane's rounds_per_step.
std::string slow_w2_config(int rounds) {
  return small_config(3, fmt::format("data_plane {{ kind: \"exchange\" timeout_seconds: 1 "
                                     "rounds_per_step: {} }}\n"
                                     "delay {{ kind: \"constant\" seconds: 0.03 slow_workers: [2] "
                                     "slowdown: 4 }}\n"
                                     "stop {{ max_epochs: 3 }}",
                                     rounds));
}

// Starts the run with w0, w1, w2 joined one at a time (so that w2 is rank 2,
// the slow one), lets it take 3 steps and SIGKILLs w2 in the exchange. It
// is out of the step at once: the coordinator sees its connection close,
// or, where a connection outlives its process (a host that vanished), the
// members still in the round name it within the exchange's timeout (1 s),
// and it has not reported within the timeout after them (before the
// liveness check's 3 s of silence). Either way its micro-batches
// are requeued.
void kill_w2_in_the_exchange(Cluster& cluster) {
  cluster.start_coordinator();
  for (int i = 0; i < 3; ++i) {
    cluster.start_worker(fmt::format("w{}", i));
    const std::string joined = fmt::format("worker 'w{}' joined as rank {}", i, i);
    ASSERT_TRUE(eventually([&] { return cluster.log().find(joined) != std::string::npos; }, 30s))
        << cluster.log();
  }
  ASSERT_TRUE(eventually([&] { return cluster.records().steps.size() >= 3; }, 60s))
      << cluster.log();
  cluster.worker("w2").kill(SIGKILL);
  const std::regex blamed(
      "worker 'w2' \\(rank 2\\) is out of step \\d+ because (it died \\(its connection "
      "closed\\)|worker 'w[01]' \\(rank [01]\\) did not get its part of the exchange|it did "
      "not report its exchange round|it went silent during the step)");
  ASSERT_TRUE(eventually([&] { return std::regex_search(cluster.log(), blamed); }, 30s))
      << cluster.log();
}

// Restarts w2, lets the run finish, and checks that every sample was done
// exactly once and that w2 contributes again. Returns the step records.
std::vector<v1::StepRecord> restart_w2_and_finish(Cluster& cluster, v1::RunSummary& summary) {
  const size_t steps_without = cluster.records().steps.size();
  cluster.start_worker("w2");
  EXPECT_TRUE(eventually(
      [&] {
        const std::string log = cluster.log();
        return log.find("worker 'w2' joined as rank") != log.rfind("worker 'w2' joined as rank");
      },
      30s))
      << cluster.log();
  cluster.expect_clean_finish(120s);
  summary = cluster.summary();
  EXPECT_EQ(summary.samples_lost(), 0u);
  EXPECT_EQ(summary.samples(), 1440u) << "3 epochs of 480, each sample exactly once";
  EXPECT_EQ(summary.audits_failed(), 0u);
  EXPECT_EQ(summary.checksum_mismatches(), 0u);
  EXPECT_GT(summary.microbatches_orphaned(), 0u);
  const auto steps = cluster.records().steps;
  EXPECT_GT(steps.size(), steps_without + 1);
  bool w2_contributed = false;
  for (const v1::WorkerStep& w : steps.back().workers()) {
    w2_contributed |= w.name() == "w2" && w.contributed();
  }
  EXPECT_TRUE(w2_contributed) << steps.back().ShortDebugString();
  return steps;
}

TEST(ExchangeProcesses, WorkerKilledWhileTheOthersWaitInTheExchangeIsNamedAndNothingIsLost) {
  Cluster cluster("x-sigkill", slow_w2_config(2), 3);
  kill_w2_in_the_exchange(cluster);
  if (HasFatalFailure()) return;
  // The round is redone between w0 and w1 on what they computed: the step
  // goes on without w2.
  const std::regex redone(
      "step (\\d+): [^;\\n]*; the round is redone among the 2 members left \\(ranks 0, 1\\)");
  std::smatch redo;
  ASSERT_TRUE(eventually(
      [&] {
        const std::string log = cluster.log();
        return std::regex_search(log, redo, redone);
      },
      30s))
      << cluster.log();
  const uint32_t redone_step = static_cast<uint32_t>(std::stoul(redo[1].str()));
  v1::RunSummary summary;
  const std::vector<v1::StepRecord> steps = restart_w2_and_finish(cluster, summary);
  // The redone step was applied with w0's and w1's contributions only.
  EXPECT_GE(summary.exchange_rounds_redone(), 1u);
  bool found = false;
  for (const v1::StepRecord& r : steps) {
    if (r.step() != redone_step) continue;
    found = true;
    EXPECT_EQ(r.exchange_rounds(), 2u) << r.ShortDebugString();
    EXPECT_TRUE(r.applied()) << r.ShortDebugString();
    EXPECT_GT(r.orphaned(), 0u) << r.ShortDebugString();
    for (const v1::WorkerStep& w : r.workers()) {
      EXPECT_EQ(w.contributed(), w.name() != "w2") << r.ShortDebugString();
    }
    EXPECT_GT(r.samples(), 0u) << r.ShortDebugString();
  }
  EXPECT_TRUE(found) << "no step record for the redone step " << redone_step;
}

TEST(ExchangeProcesses, WithOneRoundPerStepAFailedRoundDropsTheStepAndNothingIsLost) {
  Cluster cluster("x-sigkill-drop", slow_w2_config(1), 3);
  kill_w2_in_the_exchange(cluster);
  if (HasFatalFailure()) return;
  ASSERT_TRUE(eventually(
      [&] {
        return cluster.log().find(
                   "the exchange did not succeed on every member; the step is dropped") !=
               std::string::npos;
      },
      30s))
      << cluster.log();
  v1::RunSummary summary;
  const std::vector<v1::StepRecord> steps = restart_w2_and_finish(cluster, summary);
  EXPECT_EQ(summary.exchange_rounds_redone(), 0u);
  EXPECT_EQ(cluster.log().find("redone among"), std::string::npos) << cluster.log();
  bool dropped = false;
  for (const v1::StepRecord& r : steps) {
    EXPECT_EQ(r.exchange_rounds(), 1u) << r.ShortDebugString();
    dropped |= !r.applied() && r.samples() == 0 && r.orphaned() > 0;
  }
  EXPECT_TRUE(dropped) << "no step record of the dropped step";
}

}  // namespace
}  // namespace dctrain
