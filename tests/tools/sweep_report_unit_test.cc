// The sweep's expansion into cases and the report's arithmetic, in one
// process: tau policies, case names and order, percentiles, aggregation over
// seeds, the speedup's two bases and the replay prediction.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "tools/experiment/sweep.h"
#include "tools/report/prediction.h"
#include "tools/report/tables.h"
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

TEST(Sweep, CrossesTheAxesBaselineFirstAndOncePerRequeueAxis) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("dctrain-sweep-unit-{}", ::getpid());
  fs::create_directories(dir);
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
  fs::remove_all(dir);
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
  EXPECT_EQ(plan.cases[3].info.case_name(), "m_w2_dc_tau-0.05s_requeue_s1");
  EXPECT_EQ(plan.cases[3].config.step().tau(), 0.05);
  EXPECT_EQ(plan.cases[5].info.case_name(), "m_w2_dc_tau-auto_requeue_s1");
  EXPECT_EQ(plan.cases[7].info.case_name(), "m_w2_dc_tau-inf_s2");
  EXPECT_EQ(plan.cases[7].config.seed(), 2u);
  const SweepCase& slow = plan.cases[14];
  EXPECT_EQ(slow.info.case_name(), "m_w2_slow_tau-inf_s1");
  EXPECT_EQ(slow.config.delay().slowdown(), 3);
  EXPECT_EQ(plan.cases[28].config.workers(), 4u);
}

TEST(RunFolder, PercentileInterpolatesBetweenOrderStatistics) {
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 0), 1);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 100), 4);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({10, 20}, 90), 19);
  EXPECT_THROW(percentile({}, 50), std::invalid_argument);
}

TEST(RunFolder, ParsesSummaryAndMetrics) {
  const RunSummary s = parse_summary(
      R"({"name": "x", "final_eval_accuracy": 0.5, "time_to_target_seconds": null, "tau": "inf",
          "samples_per_second": 12.5, "samples_lost": 3, "requeue": false, "delay": "dropcompute"})",
      "summary.json");
  EXPECT_EQ(s.final_eval_accuracy, 0.5);
  EXPECT_FALSE(s.time_to_target_seconds.has_value());
  EXPECT_TRUE(std::isinf(s.tau));
  EXPECT_EQ(s.samples_lost, 3u);
  EXPECT_FALSE(s.requeue);
  std::vector<StepPoint> steps;
  std::vector<EvalPoint> evals;
  parse_metrics(
      "{\"type\":\"step\",\"step\":0,\"wall_seconds\":1,\"step_seconds\":0.5,\"tau\":0.2,"
      "\"workers\":["
      "{\"rank\":0,\"contributed\":true,\"compute_seconds\":0.3,\"micro_batch_seconds\":[0.1,0.2]}]"
      "}\n"
      "{\"type\":\"eval\",\"step\":1,\"wall_seconds\":2,\"eval_accuracy\":0.75,\"eval_loss\":1}\n"
      "{\"type\":\"step\",\"step\":1,\"wal",  // cut short by a kill: ignored
      "metrics.jsonl", steps, evals);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].tau, 0.2);
  ASSERT_EQ(steps[0].workers.size(), 1u);
  EXPECT_EQ(steps[0].workers[0].micro_batch_seconds, (std::vector<double>{0.1, 0.2}));
  ASSERT_EQ(evals.size(), 1u);
  EXPECT_EQ(evals[0].accuracy, 0.75);
  EXPECT_THROW(parse_metrics("{\"type\":\n{}\n", "m", steps, evals), std::runtime_error);
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
  r.summary.final_eval_accuracy = accuracy;
  r.summary.samples_per_second = sps;
  r.summary.time_to_target_seconds = ttt;
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
  // Both seeds of both rows reached the target: 12 / 12.
  EXPECT_DOUBLE_EQ(*requeue.speedup, 1.0);
  EXPECT_EQ(requeue.speedup_basis, "time to target");
  // Without requeue no seed reached it: samples/s ratio.
  EXPECT_DOUBLE_EQ(*e.rows[2].speedup, 1.5);
  EXPECT_EQ(e.rows[2].speedup_basis, "samples/s");
  const auto cells = table_cells(requeue);
  EXPECT_EQ(cells[2], "0.8500 ± 0.0707");
  EXPECT_EQ(cells[3], "12.00 ± 2.83 s");
  EXPECT_EQ(cells[5], "1.000x (time to target)");
  EXPECT_EQ(table_cells(e.rows[2])[3], "not reached");
}

TEST(Prediction, ReplaysTheBaselineUnderTau) {
  RunFolder base;
  for (uint64_t s = 0; s < 6; ++s) {
    StepPoint step;
    step.step = s;
    step.step_seconds = 1.1;  // 0.1 s outside the slowest worker's 1.0 s
    for (uint32_t w = 0; w < 2; ++w) {
      WorkerStepPoint wp;
      wp.rank = w;
      wp.contributed = true;
      // Worker 1 is a straggler: 4 micro-batches of 0.25 s; worker 0 of 0.1 s.
      wp.micro_batch_seconds.assign(4, w == 1 ? 0.25 : 0.1);
      wp.compute_seconds = w == 1 ? 1.0 : 0.4;
      step.workers.push_back(wp);
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

}  // namespace
}  // namespace dctrain
