// The sweep's expansion into cases and the report's arithmetic, in one
// process: tau policies, case names and order, percentiles, aggregation over
// seeds, the speedup's two bases, the replay prediction and the predicted
// speedup against worker count.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "common/files.h"
#include "dropcompute/threshold_model.h"
#include "metrics/metrics_json.h"
#include "proto/report.pb.h"
#include "runtime/run_config.h"
#include "tests/testing/paths.h"
#include "tools/experiment/sweep.h"
#include "tools/report/document.h"
#include "tools/report/markdown.h"
#include "tools/report/plots.h"
#include "tools/report/prediction.h"
#include "tools/report/report_json.h"
#include "tools/runs/run_folder.h"

namespace dctrain {
namespace {

namespace fs = std::filesystem;
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(TauPolicy, ParsesEveryForm) {
  EXPECT_EQ(parse_tau_policy("inf").kind, TauPolicy::Kind::kInfinity);
  EXPECT_EQ(parse_tau_policy("auto").kind, TauPolicy::Kind::kAuto);
  const TauPolicy p = parse_tau_policy("p90");
  EXPECT_EQ(p.kind, TauPolicy::Kind::kPercentile);
  EXPECT_EQ(p.value, 90);
  EXPECT_EQ(p.text, "p90");
  const TauPolicy s = parse_tau_policy("0.05");
  EXPECT_EQ(s.kind, TauPolicy::Kind::kSeconds);
  EXPECT_EQ(s.value, 0.05);
  for (const char* bad : {"", "p", "p0", "p101", "p9x", "-1", "0", "fast", "autox"}) {
    EXPECT_THROW(parse_tau_policy(bad), std::invalid_argument) << bad;
  }
}

TEST(Sweep, CrossesTheAxesOncePerRequeueAxisAndRotatesEachSeedsOrder) {
  const testing::ScratchDir dir("sweep-unit");
  std::ofstream(dir / "m.cfg") << R"(name: "m" seed: 1 workers: 2 model { name: "mlp" }
dataset { kind: "synthetic" synthetic_samples: 1000 }
optimizer { lr: 0.1 } step { global_batch: 64 micro_batch: 8 } stop { max_epochs: 2 })";
  const v1::Sweep sweep = parse_sweep(R"(
configs: "m.cfg"
workers: [2, 4]
delays { name: "dc" delay { kind: "dropcompute" } }
delays { name: "slow" delay { kind: "none" slow_workers: [0] slowdown: 3 } }
taus: ["p90", "0.05", "auto"]
requeue: [true, false]
seeds: [1, 2]
step_seconds { key: "m" value: 0.5 }
startup_seconds: 2
)",
                                      "test.sweep");
  const SweepPlan plan = plan_sweep(sweep, dir, "test");
  // 2 workers x 2 delays x 2 seeds x (1 baseline + 3 policies x 2 requeue).
  ASSERT_EQ(plan.cases.size(), 2u * 2 * 2 * 7);
  const SweepCase& first = plan.cases[0];
  EXPECT_EQ(first.info.case_name(), "m_w2_dc_tau-inf_s1");
  EXPECT_TRUE(std::isinf(first.config.step().tau()));
  EXPECT_EQ(first.expected_steps, 32u);  // 2 epochs x ceil(1000 / 64) = ceil(31.25)
  EXPECT_DOUBLE_EQ(first.expected_seconds, 2 + 32 * 0.5);
  const SweepCase& p90 = plan.cases[1];
  EXPECT_EQ(p90.info.case_name(), "m_w2_dc_tau-p90_requeue_s1");
  ASSERT_TRUE(p90.baseline.has_value());
  EXPECT_EQ(*p90.baseline, 0u);
  EXPECT_EQ(p90.info.baseline(), "m_w2_dc_tau-inf_s1");
  EXPECT_EQ(plan.cases[2].info.case_name(), "m_w2_dc_tau-p90_norequeue_s1");
  EXPECT_FALSE(plan.cases[2].config.step().requeue());
  EXPECT_EQ(plan.cases[2].config.step().normalize(), v1::NORMALIZE_NOMINAL)
      << "the original DropCompute";
  EXPECT_NE(p90.config.step().normalize(), v1::NORMALIZE_NOMINAL);
  EXPECT_EQ(plan.cases[3].info.case_name(), "m_w2_dc_tau-0.05s_requeue_s1");
  EXPECT_EQ(plan.cases[3].config.step().tau(), 0.05);
  EXPECT_EQ(plan.cases[5].info.case_name(), "m_w2_dc_tau-auto_requeue_s1");
  // The second seed's cases start one further on; each percentile case
  // runs just after its baseline, and every case points at it.
  const std::vector<std::string> second_seed = {
      "m_w2_dc_tau-0.05s_requeue_s2", "m_w2_dc_tau-0.05s_norequeue_s2",
      "m_w2_dc_tau-auto_requeue_s2",  "m_w2_dc_tau-auto_norequeue_s2",
      "m_w2_dc_tau-inf_s2",           "m_w2_dc_tau-p90_requeue_s2",
      "m_w2_dc_tau-p90_norequeue_s2"};
  for (size_t k = 0; k < second_seed.size(); ++k) {
    const SweepCase& c = plan.cases[7 + k];
    EXPECT_EQ(c.info.case_name(), second_seed[k]);
    EXPECT_EQ(c.config.seed(), 2u);
    if (k == 4) continue;
    ASSERT_TRUE(c.baseline.has_value()) << c.info.case_name();
    EXPECT_EQ(*c.baseline, 11u) << c.info.case_name();
    EXPECT_EQ(c.info.baseline(), "m_w2_dc_tau-inf_s2");
  }
  const SweepCase& slow = plan.cases[14];
  EXPECT_EQ(slow.info.case_name(), "m_w2_slow_tau-inf_s1");
  EXPECT_EQ(slow.config.delay().slowdown(), 3);
  EXPECT_EQ(plan.cases[28].config.workers(), 4u);
}

TEST(Sweep, ASimulatedSweepTakesThousandsOfWorkersAndPassesItsModelToTheSimulator) {
  const testing::ScratchDir dir("sweep-sim");
  std::ofstream(dir / "m.cfg") << R"(name: "m" seed: 1 workers: 2 model { name: "mlp" }
dataset { kind: "synthetic" synthetic_samples: 1000 }
optimizer { lr: 0.1 } step { global_batch: 64 micro_batch: 8 } stop { max_steps: 100 })";
  std::ofstream(dir / "trace.jsonl") << "";
  const std::string axes = R"(
configs: "m.cfg"
workers: [4, 1024]
policies: ["sync", "rebalance"]
)";
  // Real runs are one process each: 1,024 is refused, and a simulation
  // model without `simulate` is a mistake.
  try {
    plan_sweep(parse_sweep(axes + "simulation { sample_seconds: 0.001 }", "t.sweep"), dir, "t");
    ADD_FAILURE() << "a real sweep of 1,024 workers was planned";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("workers: 1024 is not in 1..256"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("simulation: set, but simulate is not"), std::string::npos)
        << e.what();
  }
  const SweepPlan plan = plan_sweep(parse_sweep(axes + R"(simulate: true
simulation { sample_seconds: 0.001 latency_seconds: 0 mttf_seconds: 600 trace: "trace.jsonl" }
worker_batch: 32)",
                                                "t.sweep"),
                                    dir, "t");
  ASSERT_EQ(plan.cases.size(), 4u);
  for (const SweepCase& c : plan.cases) EXPECT_TRUE(c.info.simulated()) << c.info.case_name();
  EXPECT_EQ(plan.cases[2].config.workers(), 1024u);
  EXPECT_EQ(plan.cases[0].config.step().global_batch(), 4u * 32) << "worker_batch x workers";
  EXPECT_EQ(plan.cases[2].config.step().global_batch(), 1024u * 32);
  // 100 steps x 1,024 workers at the simulator's measured pace.
  EXPECT_NEAR(plan.cases[2].expected_seconds, 0.5 + 100 * 1024 * 9e-5, 1e-9);
  ASSERT_TRUE(plan.simulation.has_value());
  const std::vector<std::string> args = simulation_arguments(*plan.simulation);
  const std::vector<std::string> expected = {
      "--sample-seconds", "0.001",
      "--latency",        "0",
      "--mttf",           "600",
      "--trace",          std::filesystem::absolute(dir / "trace.jsonl").string()};
  EXPECT_EQ(args, expected) << "an unset field is left to the simulator's default; a 0 is passed";
}

TEST(Sweep, NamedArmsMergeTheirConfigAndNameTheirCases) {
  const testing::ScratchDir dir("sweep-arms");
  std::ofstream(dir / "m.cfg") << R"(name: "m" seed: 1 workers: 4 model { name: "mlp" }
dataset { kind: "synthetic" synthetic_samples: 1000 }
optimizer { lr: 0.1 } step { global_batch: 64 micro_batch: 8 } stop { max_steps: 10 })";
  const std::string axes = R"(
configs: "m.cfg"
policies: ["sync", "async", "local-sgd", "diloco"]
arms { name: "diloco" config { step { policy: "local-sgd" local_steps: 8
  outer_optimizer { kind: "sgd" lr: 0.7 momentum: 0.9 nesterov: true } } } }
arms { name: "async" config { step { policy: "async" max_staleness: 2 } optimizer { lr: 0.025 } } }
)";
  const SweepPlan plan = plan_sweep(parse_sweep(axes, "t.sweep"), dir, "t");
  ASSERT_EQ(plan.cases.size(), 4u);
  EXPECT_EQ(plan.cases[0].info.case_name(), "m_w4_none_tau-inf_s1");
  // An arm named as a policy is the arm; an unnamed policy its defaults.
  const v1::RunConfig& async = plan.cases[1].config;
  EXPECT_EQ(plan.cases[1].info.policy(), "async");
  EXPECT_EQ(async.step().policy(), v1::POLICY_ASYNC);
  EXPECT_EQ(async.step().max_staleness(), 2u);
  EXPECT_DOUBLE_EQ(async.optimizer().lr(), 0.025);
  EXPECT_EQ(plan.cases[2].config.step().policy(), v1::POLICY_LOCAL_SGD);
  v1::RunConfig local = plan.cases[2].config;
  finalize_run_config(local);
  EXPECT_EQ(local.step().local_steps(), 4u) << "the policy's default";
  const SweepCase& diloco = plan.cases[3];
  EXPECT_EQ(diloco.info.case_name(), "m_w4_none_diloco_tau-inf_s1");
  EXPECT_EQ(diloco.info.policy(), "diloco");
  EXPECT_EQ(diloco.config.step().local_steps(), 8u);
  EXPECT_TRUE(diloco.config.step().outer_optimizer().nesterov());
  EXPECT_DOUBLE_EQ(diloco.config.optimizer().lr(), 0.1) << "the config's, not the arm's";
  try {
    plan_sweep(parse_sweep(axes + "policies: [\"mystery\"]\n", "u.sweep"), dir, "u");
    ADD_FAILURE() << "an unknown arm was planned";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'mystery' is neither a step policy"), std::string::npos)
        << e.what();
  }
}

TEST(Sweep, ClearSetsAFieldToZeroWhereAnOverrideCannot) {
  // An override of 0 merges as nothing (proto3); `clear` resets the field
  // first, and the overrides then set what they set.
  const testing::ScratchDir dir("sweep-clear");
  std::ofstream(dir / "m.cfg") << R"(name: "m" seed: 1 workers: 2 model { name: "mlp" }
dataset { kind: "synthetic" synthetic_samples: 1000 }
optimizer { lr: 0.1 } step { global_batch: 64 micro_batch: 8 } stop { max_epochs: 2 })";
  const std::string overrides = R"(
configs: "m.cfg"
overrides { stop { max_epochs: 0 max_steps: 7 } }
)";
  const SweepPlan merged = plan_sweep(parse_sweep(overrides, "a.sweep"), dir, "a");
  EXPECT_EQ(merged.cases.front().config.stop().max_epochs(), 2.0) << "a merged 0 changes nothing";
  const SweepPlan cleared =
      plan_sweep(parse_sweep(overrides + "clear: [\"stop.max_epochs\"]\n", "b.sweep"), dir, "b");
  EXPECT_EQ(cleared.cases.front().config.stop().max_epochs(), 0.0);
  EXPECT_EQ(cleared.cases.front().config.stop().max_steps(), 7u);
  EXPECT_EQ(cleared.cases.front().expected_steps, 7u);
  try {
    plan_sweep(parse_sweep(overrides + "clear: [\"stop.nope\", \"seed.x\"]\n", "c.sweep"), dir,
               "c");
    ADD_FAILURE() << "a path that names no field was taken";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("clear: 'stop.nope': StopConfig has no field 'nope'"), std::string::npos)
        << what;
    EXPECT_NE(what.find("'seed' is not a message field"), std::string::npos) << what;
  }
}

TEST(RunFolder, PercentileInterpolatesBetweenOrderStatistics) {
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 0), 1);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 100), 4);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({10, 20}, 90), 19);
  EXPECT_THROW(percentile({}, 50), std::invalid_argument);
}

TEST(RunFolder, ParsesSummaryAndMetrics) {
  const v1::RunSummary s = parse_summary(
      R"({"name": "x", "final_eval_accuracy": 0.5, "time_to_target_seconds": null, "tau": "inf",
          "samples_per_second": 12.5, "samples_lost": 3, "requeue": false, "delay": "dropcompute"})",
      "summary.json");
  EXPECT_EQ(optional_number(s.final_eval_accuracy()), 0.5);
  EXPECT_FALSE(optional_number(s.time_to_target_seconds()).has_value());
  EXPECT_TRUE(std::isinf(tau_seconds(s.tau())));
  EXPECT_EQ(s.samples_lost(), 3u);
  EXPECT_FALSE(s.requeue());
  const MetricsRecords m = parse_metrics(
      "{\"type\":\"step\",\"step\":0,\"wall_seconds\":1,\"step_seconds\":0.5,\"tau\":0.2,"
      "\"workers\":["
      "{\"rank\":0,\"contributed\":true,\"compute_seconds\":0.3,\"micro_batch_seconds\":[0.1,0.2]}]"
      "}\n"
      "{\"type\":\"eval\",\"step\":1,\"wall_seconds\":2,\"eval_accuracy\":0.75,\"eval_loss\":1}\n"
      "{\"type\":\"step\",\"step\":1,\"wal",  // cut short by a kill: ignored
      "metrics.jsonl");
  const auto& steps = m.steps;
  const auto& evals = m.evals;
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(tau_seconds(steps[0].tau()), 0.2);
  ASSERT_EQ(steps[0].workers_size(), 1);
  EXPECT_EQ(std::vector<double>(steps[0].workers(0).micro_batch_seconds().begin(),
                                steps[0].workers(0).micro_batch_seconds().end()),
            (std::vector<double>{0.1, 0.2}));
  ASSERT_EQ(evals.size(), 1u);
  EXPECT_EQ(evals[0].eval_accuracy(), 0.75);
  EXPECT_THROW(parse_metrics("{\"type\":\n{}\n", "m"), std::runtime_error);
}

// A finished run folder in memory.
RunFolder fake_run(const std::string& policy, bool requeue, uint64_t seed, double accuracy,
                   double sps, std::optional<double> ttt, double tau = kInf) {
  RunFolder r;
  r.dir = fmt::format("{}_{}_{}", policy, requeue, seed);
  r.info.set_model("m");
  r.info.set_workers(4);
  r.info.set_delay("dc");
  r.info.set_tau_policy(policy);
  r.info.set_requeue(requeue);
  r.info.set_seed(seed);
  r.config.mutable_step()->set_tau(tau);
  *r.summary.mutable_final_eval_accuracy() = number_or_null(accuracy);
  r.summary.set_samples_per_second(sps);
  *r.summary.mutable_time_to_target_seconds() = number_or_null(ttt);
  return r;
}

TEST(Tables, AggregatesSeedsAndPicksTheSpeedupBasis) {
  std::vector<RunFolder> runs;
  runs.push_back(fake_run("p90", true, 1, 0.8, 120, 10.0, 0.2));
  runs.push_back(fake_run("inf", true, 1, 0.8, 100, 12.0));
  runs.push_back(fake_run("inf", true, 2, 0.9, 100, 12.0));
  runs.push_back(fake_run("p90", true, 2, 0.9, 120, 14.0, 0.2));
  runs.push_back(fake_run("p90", false, 1, 0.7, 150, std::nullopt, 0.2));
  const Report report = build_report(std::move(runs), std::nullopt);
  ASSERT_EQ(report.experiments.size(), 1u);
  const Experiment& e = report.experiments[0];
  ASSERT_EQ(e.rows.size(), 3u);
  EXPECT_EQ(e.rows[0].label, "tau = inf (baseline)");
  EXPECT_EQ(e.rows[1].label, "tau = p90 (0.2 s), requeue");
  EXPECT_EQ(e.rows[2].label, "tau = p90 (0.2 s), no requeue");
  const CaseRow& requeue = e.rows[1];
  ASSERT_TRUE(requeue.accuracy.has_value());
  EXPECT_DOUBLE_EQ(requeue.accuracy->mean, 0.85);
  EXPECT_NEAR(requeue.accuracy->spread, std::sqrt(0.005), 1e-12);  // sample standard deviation
  // Both seeds of both rows reached the target, and the row ran the
  // baseline's seeds: paired by seed, the geometric mean of 12 / 10 and
  // 12 / 14 (the ratio of the means, 12 / 12, before pairing).
  ASSERT_TRUE(requeue.time_to_target_speedup.has_value());
  const Speedup& on_time = *requeue.time_to_target_speedup;
  EXPECT_NEAR(on_time.ratio, std::sqrt(1.2 * 12.0 / 14.0), 1e-12);
  EXPECT_EQ(on_time.basis, "time to target");
  EXPECT_TRUE(on_time.paired);
  ASSERT_TRUE(on_time.test.has_value());
  EXPECT_EQ(on_time.test->df, 1.0);
  EXPECT_EQ(&*requeue.speedup(), &*requeue.time_to_target_speedup) << "the row's one speedup";
  // Its samples/s beside it, paired too: 120 / 100 in both seeds.
  ASSERT_TRUE(requeue.samples_speedup.has_value());
  EXPECT_NEAR(requeue.samples_speedup->ratio, 1.2, 1e-12);
  // Without requeue only seed 1 ran, no seed reached the target: the
  // samples/s ratio of the means, unpaired, no interval with one seed.
  EXPECT_FALSE(e.rows[2].time_to_target_speedup.has_value());
  ASSERT_TRUE(e.rows[2].speedup().has_value());
  EXPECT_DOUBLE_EQ(e.rows[2].speedup()->ratio, 1.5);
  EXPECT_EQ(e.rows[2].speedup()->basis, "samples/s");
  EXPECT_FALSE(e.rows[2].speedup()->paired);
  EXPECT_FALSE(e.rows[2].speedup()->interval.has_value());
  // Time to target and its speedup first, samples/s and its own second.
  const auto header = table_header();
  ASSERT_EQ(header.size(), 12u);
  EXPECT_EQ(header[4], "speedup on time to target [95% CI]");
  EXPECT_EQ(header[7], "speedup on samples/s [95% CI]");
  const auto cells = table_cells(e, requeue);
  ASSERT_EQ(cells.size(), 12u);
  EXPECT_EQ(cells[2], "0.8500 ± 0.0707");
  EXPECT_EQ(cells[3], "12.00 ± 2.83 s");
  EXPECT_EQ(cells[4],
            fmt::format("1.014x [{:.3f}, {:.3f}]", on_time.interval->low, on_time.interval->high));
  EXPECT_LT(on_time.interval->low, 1.0);
  EXPECT_GT(on_time.interval->high, 1.0);
  EXPECT_EQ(cells[5], fmt::format("{:.2g}", on_time.test->p));
  EXPECT_EQ(cells[6], "120.0 ± 0.0");
  EXPECT_EQ(cells[7], "1.200x [1.200, 1.200]");
  // The replay column: the fake runs record no steps, so nothing to replay.
  EXPECT_EQ(cells[9], "-");
  EXPECT_EQ(table_cells(e, e.rows[0])[9], "1.000x (0.0% dropped)");
  EXPECT_EQ(table_cells(e, e.rows[0])[4], "1.000x");
  const auto no_requeue = table_cells(e, e.rows[2]);
  // No target: the summaries' figures where they have one.
  EXPECT_EQ(no_requeue[3], "no target");
  EXPECT_EQ(no_requeue[4], "no target");
  EXPECT_EQ(no_requeue[5], "-");
  EXPECT_EQ(no_requeue[7], "1.500x");
  EXPECT_EQ(no_requeue[8], "-");
  // Under the table: the 1.5x of one seed cannot be told from noise.
  const std::string reading = reading_line(e);
  EXPECT_NE(reading.find("tau = p90 (0.2 s), requeue (1.01x on time to target) cannot be told "
                         "from the baseline"),
            std::string::npos)
      << reading;
  EXPECT_NE(reading.find("whether tau = p90 (0.2 s), no requeue differ from the baseline at all "
                         "(one seed: no interval"),
            std::string::npos)
      << reading;
}

// A run that evaluated at these (wall seconds, accuracy) points.
RunFolder evaluated_run(const std::string& policy, uint64_t seed,
                        const std::vector<std::pair<double, double>>& evals, double tau = kInf) {
  RunFolder r = fake_run(policy, true, seed, evals.back().second, 100, std::nullopt, tau);
  for (const auto& [wall, accuracy] : evals) {
    v1::EvalRecord& e = r.evals.emplace_back();
    e.set_wall_seconds(wall);
    e.set_eval_accuracy(accuracy);
  }
  return r;
}

TEST(TimeToTarget, IsInterpolatedBetweenTheEvaluationsAroundTheCrossing) {
  RunFolder run = evaluated_run("inf", 1, {{10, 0.3}, {20, 0.5}});
  run.summary.set_startup_seconds(2);
  // The evaluations decide, not the summary's figure at the evaluation.
  *run.summary.mutable_time_to_target_seconds() = number_or_null(20.0);
  *run.summary.mutable_target_accuracy() = number_or_null(0.4);
  const std::optional<TargetCrossing> at = run_time_to_target(run, 0.4);
  ASSERT_TRUE(at.has_value());
  EXPECT_DOUBLE_EQ(at->seconds, 15.0 + 2.0);
  EXPECT_EQ(at->resolution, 10.0);
  // Reached at the first evaluation: somewhere since the training started.
  const std::optional<TargetCrossing> first = run_time_to_target(run, 0.3);
  EXPECT_DOUBLE_EQ(first->seconds, 12.0);
  EXPECT_EQ(first->resolution, 10.0);
  EXPECT_FALSE(run_time_to_target(run, 0.6).has_value());
  // No evaluations: the summary's figure, at its own target only.
  RunFolder bare = run;
  bare.evals.clear();
  EXPECT_DOUBLE_EQ(run_time_to_target(bare, 0.4)->seconds, 22.0);
  EXPECT_FALSE(run_time_to_target(bare, 0.4)->resolution.has_value());
  EXPECT_FALSE(run_time_to_target(bare, 0.42).has_value());

  // The row carries its mean resolution; the text says it.
  std::vector<RunFolder> runs;
  runs.push_back(run);
  runs.push_back(evaluated_run("p90", 1, {{5, 0.3}, {10, 0.5}}, 0.2));
  const Report report = build_report(std::move(runs), 0.4);
  const Experiment& e = report.experiments[0];
  EXPECT_EQ(e.rows[0].target_resolution, 10.0);
  EXPECT_EQ(e.rows[1].target_resolution, 5.0);
  EXPECT_NE(caution_lines(e).find("Time to target is interpolated between evaluations 7.5 s "
                                  "apart on average (5 s to 10 s by case)."),
            std::string::npos)
      << caution_lines(e);
  const std::string json = report_json(report);
  v1::ReportFile file;
  parse_json(json, file, "report.json");
  EXPECT_EQ(file.experiments(0).rows(1).time_to_target_resolution_seconds().number_value(), 5.0);
}

// Seeds 1 and 2 of a case, the second's evaluations 0.1 s later.
void add_seeds(std::vector<RunFolder>& runs, const std::string& policy, double tau,
               const std::vector<std::pair<double, double>>& evals) {
  for (uint64_t seed : {1, 2}) {
    std::vector<std::pair<double, double>> shifted = evals;
    for (auto& [wall, accuracy] : shifted) wall += 0.1 * static_cast<double>(seed - 1);
    runs.push_back(evaluated_run(policy, seed, shifted, tau));
  }
}

TEST(Verdict, AWarningWhenItChangesWithinTwoPointsOfTheTarget) {
  // The baseline crosses 0.38 ... 0.42 at 13 ... 17 s.
  const std::vector<std::pair<double, double>> base = {{10, 0.35}, {20, 0.45}, {30, 0.5}};
  // Fast to 0.40 (7.5 s: 2x), then a plateau: 0.41 at 25 s (0.64x).
  std::vector<RunFolder> runs;
  add_seeds(runs, "inf", kInf, base);
  add_seeds(runs, "p90", 0.2, {{5, 0.395}, {10, 0.405}, {40, 0.415}, {50, 0.45}});
  const Report flipping = build_report(std::move(runs), 0.4);
  const CaseRow& row = flipping.experiments[0].rows[1];
  ASSERT_TRUE(row.time_to_target_speedup.has_value());
  EXPECT_NEAR(row.time_to_target_speedup->ratio, 2.0, 0.02);
  EXPECT_EQ(verdict(*row.time_to_target_speedup), "faster");
  ASSERT_EQ(row.near_target.size(), 4u);
  EXPECT_DOUBLE_EQ(row.near_target[2].target, 0.41);
  EXPECT_NEAR(row.near_target[2].speedup.ratio, 16.0 / 25.0, 0.01);
  EXPECT_EQ(verdict(row.near_target[2].speedup), "slower");
  EXPECT_EQ(verdict(row.near_target[0].speedup), "faster");
  EXPECT_EQ(row.verdict_warning,
            fmt::format("tau = p90 (0.2 s), requeue: the verdict changes within 2 points of the "
                        "target: {:.2f}x at 0.4 (faster), {:.2f}x at 0.41 (slower), {:.2f}x at "
                        "0.42 (slower); read it as unsettled",
                        row.time_to_target_speedup->ratio, row.near_target[2].speedup.ratio,
                        row.near_target[3].speedup.ratio));
  // Under the table and in report.json.
  const std::string markdown = markdown_tables(flipping);
  EXPECT_NE(markdown.find("\nWarning: " + row.verdict_warning + ".\n"), std::string::npos)
      << markdown;
  v1::ReportFile file;
  parse_json(report_json(flipping), file, "report.json");
  const v1::ReportRow& json_row = file.experiments(0).rows(1);
  EXPECT_EQ(json_row.verdict_warning(), row.verdict_warning);
  EXPECT_EQ(json_row.verdict(), "faster");
  ASSERT_EQ(json_row.near_target_size(), 4);
  EXPECT_EQ(json_row.near_target(2).speedup().verdict(), "slower");
  EXPECT_EQ(json_row.near_target(2).speedup().ratio().number_value(),
            row.near_target[2].speedup.ratio);

  // Twice as fast all the way: the same verdict at every target, no warning.
  std::vector<RunFolder> steady;
  add_seeds(steady, "inf", kInf, base);
  add_seeds(steady, "p90", 0.2, {{5, 0.35}, {10, 0.45}, {15, 0.5}});
  const Report stable = build_report(std::move(steady), 0.4);
  const CaseRow& fast = stable.experiments[0].rows[1];
  ASSERT_EQ(fast.near_target.size(), 4u);
  for (const CaseRow::NearTarget& n : fast.near_target)
    EXPECT_EQ(verdict(n.speedup), "faster") << n.target;
  EXPECT_EQ(fast.verdict_warning, "");
  EXPECT_EQ(markdown_tables(stable).find("Warning:"), std::string::npos);
}

// `times` step records (seconds each) that read this host load.
void add_steps(RunFolder& run, const std::vector<double>& times, double host_load) {
  for (size_t i = 0; i < times.size(); ++i) {
    v1::StepRecord& s = run.steps.emplace_back();
    s.set_step(static_cast<uint32_t>(i));
    s.set_step_seconds(times[i]);
    s.set_samples(100);
    s.set_host_load(host_load);
  }
}

TEST(Host, ARowMeasuredOnABusierHostThanItsBaselineIsFlagged) {
  // 12 steps: the first 3 (a quarter) left out of the spread.
  const std::vector<double> even(12, 1.0);
  const std::vector<double> spread = {1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3};  // p90 3, median 1
  const auto runs_with = [&](std::optional<v1::SlownessKind> slowness) {
    std::vector<RunFolder> runs;
    runs.push_back(fake_run("inf", true, 1, 0.8, 100, std::nullopt));
    add_steps(runs.back(), even, 1.2);
    runs.push_back(fake_run("p90", true, 1, 0.8, 120, std::nullopt, 0.2));
    add_steps(runs.back(), spread, 3.1);
    if (slowness) runs.back().config.add_slowness()->set_kind(*slowness);
    // An older run: no host load read, step times as even as the baseline's.
    runs.push_back(fake_run("p80", true, 1, 0.8, 110, std::nullopt, 0.1));
    add_steps(runs.back(), even, 0.0);
    return runs;
  };
  const Report report = build_report(runs_with(std::nullopt), std::nullopt);
  const Experiment& e = report.experiments[0];
  ASSERT_EQ(e.rows.size(), 3u);
  const CaseRow& busy = e.rows[2];
  ASSERT_EQ(busy.label, "tau = p90 (0.2 s), requeue");
  EXPECT_DOUBLE_EQ(busy.host_load->mean, 3.1);
  EXPECT_DOUBLE_EQ(busy.step_spread->mean, 3.0);
  EXPECT_EQ(busy.host_warning,
            "tau = p90 (0.2 s), requeue: host busier than the baseline's: load 3.1 against 1.2 "
            "(seed 1); step times spread 3.0x against 1.0x (p90 / median, seed 1): read this "
            "row's speed with care");
  const CaseRow& older = e.rows[1];
  EXPECT_FALSE(older.host_load.has_value());
  EXPECT_EQ(older.host_warning, "");
  EXPECT_EQ(e.rows[0].host_warning, "");
  // Under the table, in the statistics table and in report.json.
  const std::string markdown = markdown_tables(report);
  EXPECT_NE(markdown.find("\nWarning: " + busy.host_warning + ".\n"), std::string::npos)
      << markdown;
  EXPECT_NE(statistics_table(e).find("| 3.10 | 3.00x |"), std::string::npos) << statistics_table(e);
  EXPECT_NE(statistics_table(e).find("| - | 1.00x |"), std::string::npos) << statistics_table(e);
  v1::ReportFile file;
  parse_json(report_json(report), file, "report.json");
  EXPECT_EQ(file.experiments(0).rows(2).host_warning(), busy.host_warning);
  EXPECT_DOUBLE_EQ(file.experiments(0).rows(2).host_load().number_value(), 3.1);
  EXPECT_DOUBLE_EQ(file.experiments(0).rows(2).step_time_spread().number_value(), 3.0);

  // The case injected the load itself: said so, not a measurement problem.
  const Report injected = build_report(runs_with(v1::SLOWNESS_CO_LOCATED_LOAD), std::nullopt);
  const std::string own = injected.experiments[0].rows[2].host_warning;
  EXPECT_NE(own.find("load 3.1 against 1.2 (seed 1)"), std::string::npos) << own;
  EXPECT_NE(own.find("the case's own injected load (its config's co-located-load slowness), not "
                     "a measurement problem"),
            std::string::npos)
      << own;
  EXPECT_EQ(own.find("with care"), std::string::npos) << own;
}

// The numbers of the data line after `marker` in a plot's .dat.
std::vector<double> data_after(const std::string& dat, const std::string& marker) {
  const size_t at = dat.find(marker);
  if (at == std::string::npos) return {};
  std::istringstream line(
      dat.substr(at + marker.size(), dat.find('\n', at + marker.size()) - at - marker.size()));
  std::vector<double> out;
  for (double v; line >> v;) out.push_back(v);
  return out;
}

TEST(Report, TheTablePlotAndReportJsonGiveEachRowOneSpeedup) {
  std::string gnuplot;
  try {
    gnuplot = find_gnuplot();
  } catch (const std::exception& e) {
    GTEST_SKIP() << e.what();
  }
  std::vector<RunFolder> runs;
  add_seeds(runs, "inf", kInf, {{10, 0.35}, {20, 0.45}, {30, 0.5}});
  add_seeds(runs, "p90", 0.2, {{8, 0.35}, {16, 0.45}, {24, 0.5}});
  // Never reaches 0.4: its speedup is on samples/s.
  add_seeds(runs, "p80", 0.1, {{10, 0.3}, {20, 0.35}});
  runs[4].summary.set_samples_per_second(130);
  runs[5].summary.set_samples_per_second(125);
  const Report report = build_report(std::move(runs), 0.4);
  const Experiment& e = report.experiments[0];
  const testing::ScratchDir dir("report-one-speedup");
  draw_plots(report, dir.path(), gnuplot);
  const std::string dat = read_text_file(dir.path() / "plots" / "speedup_m_dc.dat");
  const std::string gp = read_text_file(dir.path() / "plots" / "speedup_m_dc.gp");
  v1::ReportFile file;
  parse_json(report_json(report), file, "report.json");
  struct Expected {
    size_t row;
    std::string key, basis;
    size_t cell;  // the table's cell of that basis
  };
  for (const Expected& x : {Expected{1, "tau = p80, requeue", "samples/s", 7},
                            Expected{2, "tau = p90, requeue", "time to target", 4}}) {
    const CaseRow& row = e.rows[x.row];
    ASSERT_TRUE(row.speedup().has_value()) << row.label;
    const Speedup& s = *row.speedup();
    EXPECT_EQ(s.basis, x.basis) << row.label;
    ASSERT_TRUE(s.interval.has_value());
    EXPECT_EQ(table_cells(e, row)[x.cell],
              fmt::format("{:.3f}x [{:.3f}, {:.3f}]", s.ratio, s.interval->low, s.interval->high));
    const v1::ReportRow& json_row = file.experiments(0).rows(static_cast<int>(x.row));
    EXPECT_EQ(json_row.speedup().number_value(), s.ratio) << row.label;
    EXPECT_EQ(json_row.speedup_low().number_value(), s.interval->low);
    EXPECT_EQ(json_row.speedup_high().number_value(), s.interval->high);
    EXPECT_EQ(json_row.speedup_basis(), x.basis + ", paired by seed");
    const std::vector<double> point =
        data_after(dat.substr(dat.find("# " + x.key + ":")), "# 4 workers: on " + x.basis + "\n");
    EXPECT_EQ(point, (std::vector<double>{4, s.ratio, s.interval->low, s.interval->high}))
        << x.key << " in\n"
        << dat;
    EXPECT_NE(gp.find(x.key + ": measured on " + x.basis + ", 95% interval"), std::string::npos)
        << gp;
  }
}

TEST(Prediction, ReplaysTheBaselineUnderTau) {
  RunFolder base;
  for (uint32_t s = 0; s < 6; ++s) {
    v1::StepRecord step;
    step.set_step(s);
    step.set_step_seconds(1.1);  // 0.1 s outside the slowest worker's 1.0 s
    for (uint32_t w = 0; w < 2; ++w) {
      v1::WorkerStep& wp = *step.add_workers();
      wp.set_rank(w);
      wp.set_contributed(true);
      // Worker 1 is a straggler: 4 micro-batches of 0.25 s; worker 0 of 0.1 s.
      for (int i = 0; i < 4; ++i) wp.add_micro_batch_seconds(w == 1 ? 0.25 : 0.1);
      wp.set_compute_seconds(w == 1 ? 1.0 : 0.4);
    }
    base.steps.push_back(step);
  }
  const auto none = predict_speedup(base, kInf);
  ASSERT_TRUE(none.has_value());
  EXPECT_DOUBLE_EQ(none->speedup, 1.0);
  EXPECT_EQ(none->steps, 5u);  // the first step is warm-up
  // tau = 0.3: worker 1 starts micro-batches at 0 and 0.25, not at 0.5: 0.5 s, 2 of 4;
  // worker 0 at 0, 0.1 and 0.2, not at 0.1 + 0.1 + 0.1 (> 0.3 in double): 3 of 4.
  const auto p = predict_speedup(base, 0.3);
  ASSERT_TRUE(p.has_value());
  EXPECT_DOUBLE_EQ(p->step_seconds_inf, 1.1);
  EXPECT_NEAR(p->step_seconds_tau, 0.6, 1e-12);
  EXPECT_NEAR(p->completed_fraction, 5.0 / 8.0, 1e-12);
  EXPECT_NEAR(p->speedup, 5.0 / 8.0 * 1.1 / 0.6, 1e-12);
}

// A worker's record in a step: contributing, with its micro-batch times.
v1::WorkerStep worker(uint32_t rank, std::vector<double> times, bool contributed = true) {
  v1::WorkerStep w;
  w.set_rank(rank);
  w.set_contributed(contributed);
  for (double t : times) {
    w.add_micro_batch_seconds(t);
    w.set_compute_seconds(w.compute_seconds() + t);
  }
  return w;
}

// A step record with these workers.
v1::StepRecord step_of(uint32_t step, double step_seconds, std::vector<v1::WorkerStep> workers) {
  v1::StepRecord s;
  s.set_step(step);
  s.set_step_seconds(step_seconds);
  for (v1::WorkerStep& w : workers) *s.add_workers() = std::move(w);
  return s;
}

// Three worker steps, A = (1, 1), B = (1, 3), C = (2, 2), and 0.5 s outside
// compute per step (step wall + update - slowest), in three recorded steps
// (fewer than 5: no warm-up step is left out): the last has no contributing
// worker and counts for nothing.
RunFolder tiny_baseline() {
  RunFolder run;
  // 4.25 + 0.25 update - slowest 4 = 0.5
  v1::StepRecord a = step_of(0, 4.25, {worker(0, {1, 1}), worker(1, {1, 3})});
  a.set_apply_seconds(0.25);
  // 4.5 - slowest 4 = 0.5; rank 1 missed the deadline
  const v1::StepRecord c = step_of(1, 4.5, {worker(0, {2, 2}), worker(1, {9}, false)});
  const v1::StepRecord none = step_of(2, 100, {worker(0, {7}, false)});
  run.steps = {a, c, none};
  return run;
}

TEST(PredictedCurve, PoolsTheBaselinesWorkerStepsAndOverhead) {
  const RunFolder tiny = tiny_baseline();
  const PooledSteps pooled = pool_baseline_steps({&tiny});
  EXPECT_EQ(pooled.worker_steps, (std::vector<std::vector<double>>{{1, 1}, {1, 3}, {2, 2}}));
  EXPECT_EQ(pooled.steps, 2u);
  EXPECT_EQ(pooled.runs, 1u);
  EXPECT_DOUBLE_EQ(pooled.overhead_seconds, 0.5);

  // Two seeds pooled; in runs of 5 steps or more the first (warm-up) is left out.
  RunFolder longer;
  for (uint32_t s = 0; s < 5; ++s) {
    // 1.5 - slowest 1.0 = 0.5 after warm-up
    longer.steps.push_back(step_of(
        s, s == 0 ? 50.0 : 1.5, {worker(0, {s == 0 ? 40.0 : 0.5, 0.5}), worker(1, {0.25, 0.25})}));
  }
  const PooledSteps both = pool_baseline_steps({&tiny, &longer});
  EXPECT_EQ(both.worker_steps.size(), 3u + 4 * 2);
  EXPECT_EQ(both.steps, 2u + 4);
  EXPECT_EQ(both.runs, 2u);
  EXPECT_DOUBLE_EQ(both.overhead_seconds, 0.5);
  for (const auto& w : both.worker_steps) EXPECT_LT(w.front(), 40.0) << "warm-up step pooled";
}

TEST(PredictedCurve, IsPredictStepTimeAtEveryWorkerCount) {
  const RunFolder tiny = tiny_baseline();
  const PooledSteps pooled = pool_baseline_steps({&tiny});
  const std::vector<uint32_t> counts = curve_worker_counts();
  EXPECT_EQ(counts, (std::vector<uint32_t>{1, 2, 4, 8, 16, 32, 64, 128, 256}));
  for (const double tau : {0.5, 1.0, 1.5, 2.5, kInf}) {
    const std::vector<CurvePoint> curve = predicted_curve(pooled, tau, counts);
    ASSERT_EQ(curve.size(), counts.size());
    for (size_t i = 0; i < counts.size(); ++i) {
      const StepTimePrediction p = predict_step_time(pooled.worker_steps, counts[i], tau, 0.5);
      EXPECT_EQ(curve[i].workers, counts[i]);
      EXPECT_EQ(curve[i].tau, tau);
      EXPECT_EQ(curve[i].speedup, 1.0 + p.speedup) << "tau " << tau << ", N " << counts[i];
      EXPECT_EQ(curve[i].drop_rate, p.drop_rate);
      EXPECT_EQ(curve[i].step_seconds, p.step_seconds);
      EXPECT_EQ(curve[i].baseline_step_seconds, p.baseline_step_seconds);
    }
  }
}

// By hand. Full worker steps {2, 4, 4}. tau = 1: each worker starts one
// micro-batch (1, 1, 2), 3 of 6 dropped; tau = 1.5: A and B start both
// (2, 4), C one (2), 1 of 6 dropped. E[max of N] over k sorted values v_i:
// sum v_i ((i/k)^N - ((i-1)/k)^N).
//   N = 1: T_inf = 10/3, T_1 = 4/3, T_1.5 = 8/3
//     tau = 1:   (1 - 1/2) (10/3 + 1/2) / (4/3 + 1/2) = 23/22
//     tau = 1.5: (1 - 1/6) (10/3 + 1/2) / (8/3 + 1/2) = 115/114
//   N = 2: T_inf = 2/9 + 4 (3/9) + 4 (5/9) = 34/9; T_1 = 1/9 + 3/9 + 2 (5/9) = 14/9;
//          T_1.5 = 2/9 + 2 (3/9) + 4 (5/9) = 28/9
//     tau = 1:   (1/2) (34/9 + 1/2) / (14/9 + 1/2) = 77/74
//     tau = 1.5: (5/6) (34/9 + 1/2) / (28/9 + 1/2) = 77/78
//   N = 4, tau = 1: T_inf = 2/81 + 4 (80/81) = 322/81, T_1 = 16/81 + 2 (65/81) = 146/81:
//     (1/2) (322/81 + 1/2) / (146/81 + 1/2) = 725/746 < 1
TEST(PredictedCurve, MatchesHandComputedValuesForTinyTraces) {
  const RunFolder tiny = tiny_baseline();
  const PooledSteps pooled = pool_baseline_steps({&tiny});
  const std::vector<CurvePoint> at_1 = predicted_curve(pooled, 1.0, {1, 2, 4});
  EXPECT_NEAR(at_1[0].speedup, 23.0 / 22.0, 1e-14);
  EXPECT_NEAR(at_1[0].baseline_step_seconds, 10.0 / 3.0 + 0.5, 1e-14);
  EXPECT_NEAR(at_1[0].step_seconds, 4.0 / 3.0 + 0.5, 1e-14);
  EXPECT_DOUBLE_EQ(at_1[0].drop_rate, 0.5);
  EXPECT_NEAR(at_1[1].speedup, 77.0 / 74.0, 1e-14);
  EXPECT_NEAR(at_1[1].baseline_step_seconds, 34.0 / 9.0 + 0.5, 1e-14);
  EXPECT_NEAR(at_1[1].step_seconds, 14.0 / 9.0 + 0.5, 1e-14);
  EXPECT_NEAR(at_1[2].speedup, 725.0 / 746.0, 1e-14);
  const std::vector<CurvePoint> at_15 = predicted_curve(pooled, 1.5, {1, 2});
  EXPECT_NEAR(at_15[0].speedup, 115.0 / 114.0, 1e-14);
  EXPECT_NEAR(at_15[1].speedup, 77.0 / 78.0, 1e-14);
  EXPECT_NEAR(at_15[1].drop_rate, 1.0 / 6.0, 1e-15);
  // No threshold: the baseline itself.
  EXPECT_EQ(predicted_curve(pooled, kInf, {2})[0].speedup, 1.0);

  // The best tau over the grid from 1 (the smallest first micro-batch) to
  // 4 (the largest worker step): the prediction has three pieces, tau in
  // [1, 1] (the first grid point only), (1, 2] and (2, 4] (nothing dropped,
  // speedup 1). At N = 1 and 2 the first pays most; at N = 4 none pays.
  const CurvePoint best_1 = best_tau_point(pooled, 1);
  EXPECT_EQ(best_1.tau, 1.0);
  EXPECT_NEAR(best_1.speedup, 23.0 / 22.0, 1e-14);
  const CurvePoint best_2 = best_tau_point(pooled, 2);
  EXPECT_EQ(best_2.tau, 1.0);
  EXPECT_NEAR(best_2.speedup, 77.0 / 74.0, 1e-14);
  const CurvePoint best_4 = best_tau_point(pooled, 4);
  EXPECT_TRUE(std::isinf(best_4.tau));
  EXPECT_EQ(best_4.speedup, 1.0);
  EXPECT_EQ(best_4.drop_rate, 0.0);
}

// Worker steps whose best tau is inside the grid, not at its edge: the
// best-tau point is the grid's argmax, no grid candidate beats it, and its
// figures are predict_step_time's at its tau.
TEST(PredictedCurve, BestTauIsTheGridArgmaxOfPredictStepTime) {
  RunFolder run;
  for (uint32_t s = 0; s < 4; ++s) {
    v1::StepRecord step = step_of(s, 0, {});  // no overhead
    for (uint32_t w = 0; w < 3; ++w) {
      // Mostly 4 x 0.1 s; now and then one micro-batch stalls for 0.6 s.
      std::vector<double> times(4, 0.1);
      if ((s + w) % 5 == 0) times[1 + w % 3] = 0.6;
      *step.add_workers() = worker(w, times);
      step.set_step_seconds(
          std::max(step.step_seconds(), step.workers().rbegin()->compute_seconds()));
    }
    run.steps.push_back(step);
  }
  const PooledSteps pooled = pool_baseline_steps({&run});
  ASSERT_EQ(pooled.worker_steps.size(), 12u);
  double lo = kInf, hi = 0.0;
  for (const auto& w : pooled.worker_steps) {
    lo = std::min(lo, w.front());
    hi = std::max(hi, truncate_at(w, kInf).seconds);
  }
  EXPECT_DOUBLE_EQ(lo, 0.1);
  EXPECT_DOUBLE_EQ(hi, 0.9);
  for (uint32_t n : {1u, 4u, 64u}) {
    const CurvePoint best = best_tau_point(pooled, n, 40);
    const StepTimePrediction at = predict_step_time(pooled.worker_steps, n, best.tau, 0.0);
    EXPECT_EQ(best.speedup, 1.0 + at.speedup) << n;
    EXPECT_EQ(best.drop_rate, at.drop_rate) << n;
    for (int i = 0; i < 40; ++i) {
      const double tau = lo + (hi - lo) * i / 39.0;
      EXPECT_LE(predict_step_time(pooled.worker_steps, n, tau, 0.0).speedup, at.speedup)
          << "N " << n << ", tau " << tau;
    }
  }
  // With 64 workers almost every step has a stall: dropping it pays.
  const CurvePoint best_64 = best_tau_point(pooled, 64, 40);
  EXPECT_TRUE(std::isfinite(best_64.tau));
  EXPECT_GT(best_64.speedup, 1.0);
}

TEST(PredictedCurve, ReportHasOneCurvePerTauAndTheBestTauFigures) {
  std::vector<RunFolder> runs;
  runs.push_back(fake_run("inf", true, 1, 0.8, 100, std::nullopt));
  runs.back().steps = tiny_baseline().steps;
  runs.push_back(fake_run("p90", true, 1, 0.8, 110, std::nullopt, 1.5));
  runs.push_back(fake_run("p90", false, 1, 0.8, 120, std::nullopt, 1.5));
  runs.push_back(fake_run("1", true, 1, 0.8, 120, std::nullopt, 1.0));
  const Report report = build_report(std::move(runs), std::nullopt);
  ASSERT_EQ(report.experiments.size(), 1u);
  const Experiment& e = report.experiments[0];
  ASSERT_TRUE(e.predicted.has_value());
  EXPECT_EQ(e.predicted->worker_steps, 3u);
  EXPECT_EQ(e.predicted->recorded_workers, 4u);
  EXPECT_DOUBLE_EQ(e.predicted->overhead_seconds, 0.5);
  // The best tau, the best within the automatic threshold's default
  // drop-rate bound (no run here set one), then the cases: p90 with and
  // without requeue share a tau, so a curve.
  ASSERT_EQ(e.predicted->curves.size(), 4u);
  EXPECT_EQ(e.predicted->curves[0].label, "best tau");
  EXPECT_EQ(e.predicted->curves[1].label, "best tau, drop rate <= 10%");
  EXPECT_EQ(e.predicted->curves[1].tau_policy, "bounded");
  EXPECT_EQ(e.predicted->curves[2].label, "tau = 1 s");
  EXPECT_EQ(e.predicted->curves[3].label, "tau = p90 (1.5 s)");
  const PooledSteps pooled = pool_baseline_steps({&e.runs[*e.rows[0].runs.begin()]});
  for (const SpeedupCurve& c : e.predicted->curves) {
    ASSERT_EQ(c.points.size(), 9u) << c.label;
    EXPECT_EQ(c.points.back().workers, 256u);
  }
  EXPECT_NEAR(curve_point(e.predicted->curves[3], 2)->speedup, 77.0 / 78.0, 1e-14);
  EXPECT_NEAR(curve_point(e.predicted->curves[2], 1)->speedup, 23.0 / 22.0, 1e-14);
  const double best_16 = best_tau_point(pooled, 16).speedup;
  const double best_64 = best_tau_point(pooled, 64).speedup;
  EXPECT_EQ(best_16, 1.0);  // none pays beyond 2 workers (above)
  // The best tau at the reported counts other than the runs' 4 workers.
  EXPECT_EQ(predicted_line(e),
            "The best tau at other worker counts, a model and not a measurement (workers drawn "
            "i.i.d. from this baseline's 3 worker steps, overhead 0.5 s per step; see Predicted in "
            "the notes): 1.00x at 16 workers (tau inf), 1.00x at 64 (tau inf); within the runs' "
            "drop-rate bound of 10% (the automatic threshold's max_drop_rate): 1.00x at 16 "
            "workers (tau inf), 1.00x at 64 (tau inf).\n");
  // At the runs' 4 workers a case's curve is its row's predicted column:
  // the baseline's own steps replayed under its tau (1.5 s drops nothing).
  const CaseRow& p90 = e.rows[2];
  ASSERT_EQ(p90.label, "tau = p90 (1.5 s), requeue");
  ASSERT_TRUE(p90.predicted.has_value());
  EXPECT_EQ(p90.predicted->speedup, predict_speedup(e.runs[e.rows[0].runs[0]], 1.5)->speedup);
  EXPECT_EQ(curve_point(e.predicted->curves[3], 4)->speedup, p90.predicted->speedup);
  EXPECT_EQ(curve_point(e.predicted->curves[3], 4)->drop_rate, p90.predicted->drop_rate);
  EXPECT_EQ(table_cells(e, p90)[9], fmt::format("{:.3f}x ({:.1f}% dropped)", p90.predicted->speedup,
                                                100 * p90.predicted->drop_rate));
  EXPECT_EQ(best_64, 1.0);
  // report.json, read back through its schema (proto/report.proto).
  const std::string json = report_json(report);
  v1::ReportFile file;
  parse_json(json, file, "report.json");
  ASSERT_EQ(file.experiments_size(), 1) << json;
  const v1::PredictedSpeedups& predicted = file.experiments(0).predicted();
  EXPECT_EQ(predicted.model(),
            "i.i.d. workers drawn from the tau = inf baseline's pooled worker steps");
  EXPECT_EQ(predicted.speedup_basis(), "samples/s");
  EXPECT_EQ(predicted.recorded_workers(), 4u);
  EXPECT_EQ(predicted.worker_steps(), 3u);
  EXPECT_EQ(predicted.steps(), 2u);
  EXPECT_EQ(predicted.runs(), 1u);
  EXPECT_EQ(predicted.overhead_seconds().number_value(), 0.5);
  EXPECT_EQ(predicted.max_drop_rate().number_value(), 0.1);
  ASSERT_GE(predicted.curves_size(), 4) << json;
  const v1::PredictedCurve& best = predicted.curves(0);
  EXPECT_EQ(best.label(), "best tau");
  EXPECT_EQ(best.tau_policy(), "best");
  ASSERT_GE(best.points_size(), 1);
  EXPECT_EQ(best.points(0).workers(), 4u);
  EXPECT_TRUE(best.points(0).tau_seconds().has_null_value()) << "tau inf is null";
  EXPECT_EQ(best.points(0).speedup().number_value(), 1.0);
  const CurvePoint* p90_16 = curve_point(e.predicted->curves[3], 16);
  bool found = false;
  for (const v1::PredictedPoint& point : predicted.curves(3).points()) {
    EXPECT_TRUE(point.workers() == 4 || point.workers() == 16 || point.workers() == 64)
        << "only 4, 16 and 64 workers: " << point.workers();
    // At the runs' 4 workers, the row's predicted column, as the row gives it.
    if (point.workers() == 4) {
      EXPECT_EQ(point.speedup().number_value(), p90.predicted->speedup);
      EXPECT_EQ(point.speedup().number_value(),
                file.experiments(0).rows(2).predicted_speedup().number_value());
    }
    if (point.workers() != 16) continue;
    found = true;
    EXPECT_EQ(point.tau_seconds().number_value(), 1.5);
    EXPECT_EQ(point.speedup().number_value(), p90_16->speedup) << "the number, to the bit";
  }
  EXPECT_TRUE(found) << json;
  // Compact JSON, keys as in the schema.
  EXPECT_NE(json.find("\"recorded_workers\":4,"), std::string::npos) << json;
  // The markdown tables carry the line under the table.
  EXPECT_NE(markdown_tables(report).find("| tau = 1 s, requeue |"), std::string::npos);
  EXPECT_NE(markdown_tables(report).find("\n\nThe best tau at other worker counts"),
            std::string::npos);
  EXPECT_EQ(markdown_tables(report).find("Predicted speedup with the best tau"), std::string::npos);
}

// A run folder with a trace.json gets a link to it in both documents; one
// without gets none.
TEST(Document, LinksTheTimelineOfEachRunThatHasOne) {
  const testing::ScratchDir dir("report-trace");
  std::vector<RunFolder> runs;
  runs.push_back(fake_run("inf", true, 1, 0.8, 100, std::nullopt));
  runs.push_back(fake_run("p90", true, 1, 0.8, 120, std::nullopt, 0.2));
  runs[0].dir = dir / "traced run";
  runs[1].dir = dir / "untraced";
  fs::create_directories(runs[0].dir);
  fs::create_directories(runs[1].dir);
  std::ofstream(runs[0].dir / "trace.json") << "{\"traceEvents\":[]}";
  const Report report = build_report(std::move(runs), std::nullopt);
  const std::string md = report_markdown(report, {});
  const std::string trace = fs::absolute(dir / "traced run" / "trace.json").string();
  EXPECT_NE(md.find("[traced run](<" + trace + ">)"), std::string::npos) << md;
  EXPECT_EQ(md.find("untraced/trace.json"), std::string::npos) << md;
  const std::string html = report_html(report, {}, dir);
  EXPECT_NE(html.find(">traced run</a>"), std::string::npos) << html;
  EXPECT_NE(html.find("traced%20run/trace.json\">"), std::string::npos) << html;
  EXPECT_EQ(html.find("untraced/trace.json"), std::string::npos) << html;
}

}  // namespace
}  // namespace dctrain

namespace dctrain {
namespace {

// Every shipped sweep plans, and every case's config is one the programs
// take (the arms' merged configs included).
TEST(Sweep, EveryShippedSweepPlansCasesThatValidate) {
  int sweeps = 0;
  for (const auto& entry : fs::directory_iterator(DCTRAIN_SOURCE_DIR "/experiments")) {
    if (entry.path().extension() != ".sweep") continue;
    std::ifstream in(entry.path());
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const SweepPlan plan = plan_sweep(parse_sweep(text, entry.path().string()),
                                      entry.path().parent_path(), entry.path().stem().string());
    EXPECT_FALSE(plan.cases.empty()) << entry.path();
    for (const SweepCase& c : plan.cases) {
      v1::RunConfig config = c.config;
      EXPECT_NO_THROW(finalize_run_config(config)) << entry.path() << " " << c.info.case_name();
    }
    ++sweeps;
  }
  EXPECT_GE(sweeps, 5);
}

TEST(Tables, AnExperimentOfRealSlownessSaysSoInItsTitle) {
  Experiment e;
  e.model = "mlp";
  e.workers = 4;
  e.delay = "cpu-quota";
  e.runs.emplace_back();
  EXPECT_EQ(slowness_label(e), "cpu-quota delays");
  e.runs.front().config.add_slowness()->set_kind(v1::SLOWNESS_CPU_QUOTA);
  EXPECT_EQ(slowness_label(e), "cpu-quota (real slowness)");
  EXPECT_EQ(experiment_title(e), "mlp: 4 workers, cpu-quota (real slowness)");
}

}  // namespace
}  // namespace dctrain
