// The policies users would pick instead of synchronous SGD, through the real
// programs: asynchronous SGD (the coordinator as parameter server) and
// local SGD / DiLoCo. Each is held to an independent reference: async at
// max_staleness 0 with one worker is sync, bit for bit; local SGD with one
// local step and plain averaging is sync to float rounding; DiLoCo with
// four local steps is its own algorithm written out in one process. Kills
// lose no sample under either.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <limits>
#include <regex>

#include "coordinator/ledger.h"
#include "coordinator/planner.h"
#include "runtime/checkpoint.h"
#include "runtime/replica.h"
#include "runtime/run_config.h"
#include "runtime/setup.h"
#include "tests/testing/cluster.h"
#include "worker/local_steps.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;
using testing::Cluster;
using testing::eventually;
using testing::small_config;

// The run's final parameters, from its checkpoint.
std::vector<float> final_parameters(const Cluster& cluster, const std::string& text) {
  v1::RunConfig config = parse_run_config(text, "policies");
  finalize_run_config(config);
  auto train = open_dataset(config, Split::kTrain, "");
  Replica replica(make_model(model_spec(config, train->shape(), 1)), replicated_optimizer(config));
  load_checkpoint_state(checkpoint_path(cluster.run_dir()), replica);
  const auto p = replica.model().parameters().flat();
  return {p.begin(), p.end()};
}

std::vector<float> run_to_end(const std::string& label, const std::string& text, int workers) {
  Cluster cluster(label, text, workers);
  cluster.start_coordinator();
  cluster.start_workers();
  cluster.expect_clean_finish();
  EXPECT_EQ(cluster.summary().audits_failed(), 0u);
  return final_parameters(cluster, text);
}

// max |a - b| over max(1, max |a|).
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0.0, largest = 1.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - b[i]);
    if (!std::isfinite(d)) return std::numeric_limits<double>::infinity();
    diff = std::max(diff, d);
    largest = std::max(largest, std::abs(static_cast<double>(a[i])));
  }
  return diff / largest;
}

std::string stop_and_checkpoint(int steps) {
  return fmt::format("stop {{ max_steps: {} }}\ncheckpoint {{ every_steps: {} }}", steps, steps);
}

TEST(Policies, AsyncAtStalenessZeroWithOneWorkerIsSyncBitForBit) {
  const std::string sync = small_config(1, stop_and_checkpoint(12));
  const std::string async = small_config(
      1, stop_and_checkpoint(12),
      "step { global_batch: 48 micro_batch: 8 tau: inf policy: \"async\" max_staleness: 0 }");
  const std::vector<float> a = run_to_end("async-sync", sync, 1);
  const std::vector<float> b = run_to_end("async-async", async, 1);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(a, b) << "relative difference " << relative_difference(a, b);
}

TEST(Policies, LocalSgdWithOneLocalStepAndPlainAveragingIsSyncToRounding) {
  // Inner momentum too: the mean of the workers' momentum buffers is the
  // sync buffer while their shares stay equal (8 steps, 2 micro-batches
  // each). Rounding: the delta is lr * g per worker, summed, divided.
  const std::string sync = small_config(3, stop_and_checkpoint(8));
  const std::string local = small_config(
      3, stop_and_checkpoint(8),
      "step { global_batch: 48 micro_batch: 8 tau: inf policy: \"local-sgd\" local_steps: 1 }");
  const std::vector<float> a = run_to_end("local-sync", sync, 3);
  const std::vector<float> b = run_to_end("local-h1", local, 3);
  const double diff = relative_difference(a, b);
  EXPECT_LT(diff, 1e-5);
  EXPECT_GT(diff, 0.0) << "two orders of float operations rarely give the same bits";
  std::printf("local-sgd H=1 against sync: max relative difference %g\n", diff);
}

// DiLoCo written out in one process: each worker's inner optimizer (its
// state kept across syncs) over its share of each local step, the deltas
// averaged by loss terms, the outer Nesterov step.
std::vector<float> diloco_reference(const std::string& text, int syncs) {
  v1::RunConfig config = parse_run_config(text, "diloco");
  finalize_run_config(config);
  auto train = open_dataset(config, Split::kTrain, "");
  Replica reference(make_model(model_spec(config, train->shape(), 1)),
                    config.step().outer_optimizer());
  Model& model = reference.model();
  const std::vector<uint32_t> ranks = {0, 1};
  std::map<uint32_t, LocalSteps> inner;
  for (uint32_t r : ranks) inner.try_emplace(r, config.optimizer(), model.table(), nullptr);
  Ledger ledger(train_samples(config, *train), config.seed(), true);
  const uint32_t h = config.step().local_steps();
  std::vector<float> sum(reference.parameter_count());
  Batch batch;
  for (int sync = 0; sync < syncs; ++sync) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    uint64_t terms = 0;
    const std::vector<float> start(model.parameters().flat().begin(),
                                   model.parameters().flat().end());
    std::vector<WorkerPlan> plans = plan_step(ledger, ranks, sync, 48 * h, 8);
    if (plans[0].micro_batches.empty() && plans[1].micro_batches.empty()) {
      ledger.start_next_epoch();  // as the coordinator's planning does
      plans = plan_step(ledger, ranks, sync, 48 * h, 8);
    }
    for (const WorkerPlan& plan : plans) {
      std::copy(start.begin(), start.end(), model.parameters().flat().begin());
      LocalSteps& worker = inner.at(plan.rank);
      worker.begin(model.parameters().flat());
      model.gradients().zero();
      const std::vector<size_t> ends = local_step_ends(plan.micro_batches.size(), h);
      uint64_t worker_terms = 0, step_terms = 0;
      size_t next_end = 0;
      for (size_t i = 0; i < plan.micro_batches.size(); ++i) {
        const PlannedMicroBatch& mb = plan.micro_batches[i];
        train->fill(mb.samples, SampleContext{config.seed(), mb.epoch, true}, batch);
        step_terms += static_cast<uint64_t>(model.train_micro_batch(batch).loss_terms);
        ledger.complete(mb.id);
        if (i == ends[next_end]) {
          worker.step(model.parameters().flat(), model.gradients().flat(), step_terms,
                      config.optimizer().lr());
          worker_terms += step_terms;
          step_terms = 0;
          ++next_end;
        }
      }
      worker.delta(model.parameters().flat(), model.gradients().flat(), worker_terms);
      const auto g = model.gradients().flat();
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += g[i];
      terms += worker_terms;
    }
    std::copy(start.begin(), start.end(), model.parameters().flat().begin());
    for (float& v : sum) v /= static_cast<float>(terms);
    reference.apply_update(sum, {}, config.step().outer_optimizer().lr());
  }
  const auto p = model.parameters().flat();
  return {p.begin(), p.end()};
}

TEST(Policies, DiLoCoWithFourLocalStepsMatchesItsOneProcessReference) {
  const std::string text = small_config(
      2, stop_and_checkpoint(4),
      "step { global_batch: 48 micro_batch: 8 tau: inf policy: \"local-sgd\" local_steps: 4 "
      "outer_optimizer { kind: \"sgd\" lr: 0.7 momentum: 0.9 nesterov: true } }");
  Cluster cluster("diloco", text, 2);
  cluster.start_coordinator();
  cluster.start_workers();
  cluster.expect_clean_finish();
  // Every worker ended on the coordinator's parameters (exit 0 checks the
  // final checksum); every sync's records say so too.
  // A sync covers 4 local steps of 48 samples; the epoch of 480 ends
  // with a short one.
  std::vector<uint32_t> samples;
  for (const v1::StepRecord& r : cluster.records().steps) {
    samples.push_back(r.samples());
    EXPECT_DOUBLE_EQ(r.lr(), 0.7);
    EXPECT_DOUBLE_EQ(r.inner_lr(), 0.05);
    for (const v1::WorkerStep& w : r.workers()) EXPECT_TRUE(w.checksum_ok());
  }
  EXPECT_EQ(samples, (std::vector<uint32_t>{192, 192, 96, 192}));
  const std::vector<float> distributed = final_parameters(cluster, text);
  const std::vector<float> reference = diloco_reference(text, 4);
  const double diff = relative_difference(reference, distributed);
  EXPECT_LT(diff, 1e-5);
  std::printf("DiLoCo H=4 against its one-process reference: max relative difference %g\n", diff);
}

// A worker killed mid-run, restarted: every sample done once, none lost.
void expect_exactly_once_under_a_kill(const std::string& label, const std::string& step) {
  Cluster cluster(label,
                  small_config(3,
                               "delay { kind: \"constant\" seconds: 0.02 }\n"
                               "stop { max_epochs: 2 }",
                               step),
                  3);
  cluster.start_coordinator();
  cluster.start_workers();
  ASSERT_TRUE(eventually([&] { return cluster.records().steps.size() >= 3; }, 40s))
      << cluster.log();
  cluster.worker("w2").kill(SIGKILL);
  const std::regex dead("worker 'w2' \\(rank \\d\\): its connection closed; declared dead now");
  ASSERT_TRUE(eventually([&] { return std::regex_search(cluster.log(), dead); }, 20s))
      << cluster.log();
  cluster.start_worker("w2");
  cluster.expect_clean_finish(120s);
  const v1::RunSummary summary = cluster.summary();
  EXPECT_EQ(summary.samples_lost(), 0u);
  EXPECT_EQ(summary.samples(), 960u) << "2 epochs of 480, each sample exactly once";
  EXPECT_EQ(summary.audits_failed(), 0u);
  EXPECT_EQ(summary.epochs_audited(), 2u);
}

TEST(Policies, AsyncLosesNoSampleWhenAWorkerIsKilledAndRestarted) {
  expect_exactly_once_under_a_kill(
      "async-kill", "step { global_batch: 48 micro_batch: 8 tau: inf policy: \"async\" }");
}

TEST(Policies, LocalSgdLosesNoSampleWhenAWorkerIsKilledAndRestarted) {
  expect_exactly_once_under_a_kill(
      "local-kill",
      "step { global_batch: 48 micro_batch: 8 tau: inf policy: \"local-sgd\" local_steps: 2 }");
}

}  // namespace
}  // namespace dctrain

namespace dctrain {
namespace {

// The coordinator killed between checkpoints, resumed with fresh workers:
// the run completes with every sample of its epochs done once.
// `steps`: the run's steps over its 2 epochs.
void expect_resume_after_a_crash_loses_nothing(const std::string& label, const std::string& step,
                                               size_t steps) {
  const std::string run =
      "stop { max_epochs: 2 }\ncheckpoint { every_steps: 5 }\n"
      "delay { kind: \"constant\" seconds: 0.03 }";
  Cluster broken(label, small_config(2, run, step), 2);
  broken.start_coordinator();
  broken.start_workers();
  ASSERT_TRUE(eventually([&] { return broken.records().steps.size() >= 8; }, 60s))
      << broken.coordinator().output();
  broken.coordinator().kill(SIGKILL);
  ASSERT_TRUE(broken.coordinator().wait_for(10s).has_value());
  broken.worker("w0").kill(SIGKILL);
  broken.worker("w1").kill(SIGKILL);
  ASSERT_TRUE(std::filesystem::exists(checkpoint_path(broken.run_dir())));
  ASSERT_LT(broken.records().steps.size(), steps) << "killed mid-run";

  testing::resume_run(broken.run_dir());
  EXPECT_NE(broken.log().find("resuming at step "), std::string::npos) << broken.log();
  const v1::RunSummary summary = broken.summary();
  EXPECT_EQ(summary.samples(), 960u) << "2 epochs of 480, each sample exactly once";
  EXPECT_EQ(summary.samples_lost(), 0u);
  EXPECT_EQ(summary.audits_failed(), 0u);
  EXPECT_EQ(summary.epochs_audited(), 2u);
}

TEST(Policies, AsyncResumesFromItsCheckpointAndLosesNothing) {
  expect_resume_after_a_crash_loses_nothing(
      "async-resume", "step { global_batch: 48 micro_batch: 8 tau: inf policy: \"async\" }", 40);
}

TEST(Policies, LocalSgdResumesFromItsCheckpointAndLosesNothing) {
  expect_resume_after_a_crash_loses_nothing(
      "local-resume",
      "step { global_batch: 16 micro_batch: 8 tau: inf policy: \"local-sgd\" local_steps: 2 }", 30);
}

TEST(Policies, LocalSgdUnderATimeBudgetSyncsWithTheStepsItHasAndRequeuesTheRest) {
  // Each worker's sync period plans 6 micro-batches of 30 ms against a
  // budget of 100 ms: it syncs with what it completed, the rest requeued.
  Cluster cluster("local-budget",
                  small_config(2,
                               "delay { kind: \"constant\" seconds: 0.03 }\n"
                               "stop { max_epochs: 1 }",
                               "step { global_batch: 48 micro_batch: 8 tau: 0.1 "
                               "policy: \"local-sgd\" local_steps: 2 }"),
                  2);
  cluster.start_coordinator();
  cluster.start_workers();
  cluster.expect_clean_finish();
  uint32_t dropped = 0;
  for (const v1::StepRecord& r : cluster.records().steps) {
    dropped += r.dropped();
    EXPECT_TRUE(r.applied()) << r.ShortDebugString();
    for (const v1::WorkerStep& w : r.workers()) {
      EXPECT_LE(w.samples(), 48u) << "never more than its 6 planned micro-batches";
    }
  }
  EXPECT_GT(dropped, 0u) << "the budget cut the periods";
  const v1::RunSummary summary = cluster.summary();
  EXPECT_EQ(summary.samples(), 480u) << "what a budget cut is done later, once";
  EXPECT_EQ(summary.audits_failed(), 0u);
}

}  // namespace
}  // namespace dctrain
