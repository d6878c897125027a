// The simulator (sim/simulation.h) runs the coordinator's and the worker's
// own code on a virtual clock: step times are the compute the stand-in
// model and the delays say, tau stops micro-batches exactly where the
// compute loop does, the ledger requeues what was dropped and loses
// nothing, and the planner's rebalance policy moves work off a persistent
// straggler, all read from the run folder the coordinator writes.
#include "sim/simulation.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include <fstream>
#include <string>
#include <vector>

#include "metrics/metrics_json.h"
#include "runtime/run_config.h"
#include "sim/compute_trace.h"
#include "tests/testing/paths.h"
#include "tests/testing/process.h"

namespace dctrain {
namespace {

// 4 workers, 4 micro-batches of 4 samples each a step, no delays.
constexpr const char* kConfig = R"(
name: "sim"
seed: 3
workers: 4
model { name: "mlp" image_channels: 1 image_height: 8 image_width: 8 }
dataset { kind: "synthetic" synthetic_samples: 640 }
optimizer { kind: "sgd" lr: 0.1 }
step { global_batch: 64 micro_batch: 4 tau: inf }
stop { max_steps: 20 }
)";

struct SimulatedRun {
  SimulationResult result;
  v1::RunSummary summary;
  MetricsRecords records;
};

SimulatedRun run_simulation(const SimulationOptions& o) {
  auto log =
      std::make_shared<spdlog::logger>("sim", std::make_shared<spdlog::sinks::null_sink_mt>());
  SimulatedRun run;
  run.result = simulate(o, log);
  run.summary = parse_summary(testing::read_text(o.run_dir / "summary.json"), "summary.json");
  run.records = parse_metrics(testing::read_text(o.run_dir / "metrics.jsonl"), "metrics.jsonl");
  return run;
}

// `mttf`: mean seconds between a worker's failures (0: none); restarts
// take 0.5 s.
SimulatedRun simulate_text(const std::string& text, const testing::ScratchDir& dir,
                           double sample_seconds, double mttf = 0.0,
                           const std::filesystem::path& trace = {}, bool fit_network = false) {
  SimulationOptions o;
  o.trace = trace;
  o.fit_network = fit_network;
  o.mttf_seconds = mttf;
  o.restart_seconds = 0.5;
  o.config = parse_run_config(text, "sim.cfg");
  o.run_dir = dir / "run";
  o.sample_seconds = sample_seconds;
  o.latency_seconds = 1e-4;
  o.progress_seconds = 0.0;
  return run_simulation(o);
}

TEST(Simulation, StepTimesAreTheComputeOnTheVirtualClockAndTheRunFolderIsARunsFolder) {
  const testing::ScratchDir dir("sim-plain");
  const SimulatedRun run = simulate_text(kConfig, dir, 0.01);
  EXPECT_EQ(run.result.exit_code, 0);
  EXPECT_EQ(run.summary.steps(), 20u);
  EXPECT_EQ(run.summary.microbatches_completed(), 20u * 16u);
  EXPECT_EQ(run.summary.microbatches_dropped(), 0u);
  // Each worker computes 4 micro-batches of 4 samples at 10 ms a sample.
  EXPECT_NEAR(run.summary.mean_max_compute_seconds(), 0.16, 1e-9);
  EXPECT_GT(run.summary.mean_step_seconds(), 0.16);
  EXPECT_LT(run.summary.mean_step_seconds(), 0.17) << "messages cost latency + bytes/bandwidth";
  ASSERT_EQ(run.records.steps.size(), 20u);
  EXPECT_TRUE(std::filesystem::exists(dir / "run" / "simulation.json"));
  EXPECT_TRUE(std::filesystem::exists(dir / "run" / "config.cfg"));
  EXPECT_FALSE(std::filesystem::exists(dir / "run" / "model.safetensors"))
      << "a stand-in model is not written";
  const std::string sim = testing::read_text(dir / "run" / "simulation.json");
  EXPECT_NE(sim.find("\"simulated\": true"), std::string::npos) << sim;
}

// 16 workers on a slow network (1 MB/s), each computing 0.16 s a step:
// through the star every gradient takes the coordinator's link in turn;
// the exchange costs each member one round whatever the count.
TEST(Simulation, TheStarsLinkGrowsTheStepWithTheWorkersAndTheExchangesRoundDoesNot) {
  std::string text = kConfig;
  text.replace(text.find("workers: 4"), 10, "workers: 16");
  text.replace(text.find("global_batch: 64"), 16, "global_batch: 256");
  text.replace(text.find("synthetic_samples: 640"), 22, "synthetic_samples: 5120");  // 20 steps
  const auto run_plane = [&](const std::string& plane) {
    const testing::ScratchDir dir("sim-" + plane);
    SimulationOptions o;
    o.config = parse_run_config(text + "data_plane { kind: \"" + plane + "\" }\n", "sim.cfg");
    o.run_dir = dir / "run";
    o.sample_seconds = 0.01;
    o.latency_seconds = 1e-4;
    o.bandwidth_bytes = 1e6;
    o.progress_seconds = 0.0;
    SimulatedRun run = run_simulation(o);
    EXPECT_NE(
        testing::read_text(o.run_dir / "simulation.json").find("\"data_plane\": \"" + plane + "\""),
        std::string::npos);
    // The run folder's config is the one given (the coordinator's own copy
    // runs the star's code).
    EXPECT_NE(testing::read_text(o.run_dir / "config.cfg").find("kind: \"" + plane + "\""),
              std::string::npos);
    return run;
  };
  const SimulatedRun star = run_plane("star");
  const SimulatedRun exchange = run_plane("exchange");
  ASSERT_EQ(star.result.exit_code, 0);
  ASSERT_EQ(exchange.result.exit_code, 0);
  EXPECT_NEAR(star.summary.mean_max_compute_seconds(), 0.16, 1e-9);
  EXPECT_NEAR(exchange.summary.mean_max_compute_seconds(), 0.16, 1e-9);
  const double gradient = 4.0 * static_cast<double>(star.result.model_parameters) / 1e6;
  // The star: the 16 updates leave one after another, so the last worker
  // starts its compute 16 gradients after the first.
  EXPECT_GT(star.summary.mean_step_seconds(), 0.16 + 16 * gradient);
  // The exchange: compute, one round (2 latencies + 2 x 15/16 gradients),
  // the report and the commit; a few latencies and the coordinator's
  // 5 ms tick on top at most.
  const double round = 2e-4 + 2.0 * 15.0 / 16.0 * gradient;
  EXPECT_GT(exchange.summary.mean_step_seconds(), 0.16 + round);
  EXPECT_LT(exchange.summary.mean_step_seconds(), 0.16 + round + 0.01);
  EXPECT_EQ(exchange.summary.microbatches_completed(), star.summary.microbatches_completed());
}

TEST(Simulation, TauStopsMicroBatchesWhereTheComputeLoopDoesAndTheLedgerLosesNothing) {
  // 40 ms a micro-batch: the loop starts them at 0, 40 and 80 ms, and not
  // at 120 ms, past tau = 100 ms. One of four dropped, requeued.
  std::string text = kConfig;
  text.replace(text.find("tau: inf"), 8, "tau: 0.1");
  text.replace(text.find("max_steps: 20"), 13, "max_steps: 40");
  const testing::ScratchDir dir("sim-tau");
  const SimulatedRun run = simulate_text(text, dir, 0.01);
  EXPECT_EQ(run.result.exit_code, 0);
  EXPECT_EQ(run.summary.samples_lost(), 0u);
  int full = 0;
  for (const v1::StepRecord& r : run.records.steps) {
    // A step of 4 micro-batches a worker: 3 done, 1 dropped, 120 ms each;
    // the epoch's tail (the dropped ones requeued) fits before tau.
    const bool whole = r.planned() == 16;
    full += whole ? 1 : 0;
    for (const auto& w : r.workers()) {
      EXPECT_EQ(w.dropped(), whole ? 1u : 0u) << "step " << r.step();
      if (whole) {
        EXPECT_NEAR(w.compute_seconds(), 0.12, 1e-9) << "step " << r.step();
      }
    }
  }
  EXPECT_GE(full, 35);
  // Whole epochs (640 samples: 10 steps' worth of planned samples, 13.3
  // of completed ones) pass the ledger's audit: every sample exactly once.
  ASSERT_FALSE(run.records.epochs.empty());
  for (const v1::EpochRecord& e : run.records.epochs) {
    EXPECT_TRUE(e.audit_ok()) << "epoch " << e.epoch();
    EXPECT_EQ(e.lost(), 0u);
    EXPECT_EQ(e.duplicated(), 0u);
  }
}

TEST(Simulation, WorkersHeartbeatWhileTheyComputeStepsLongerThanTheSilenceLimit) {
  // 32 s of compute a step, the coordinator's silence limit 10 s: the
  // workers' sessions keep sending heartbeats beside the compute, as the
  // processes do, and nobody is presumed dead.
  std::string text = kConfig;
  text.replace(text.find("max_steps: 20"), 13, "max_steps: 3");
  text += "liveness { heartbeat_seconds: 1 silence_seconds: 10 }\n";
  const testing::ScratchDir dir("sim-long");
  const SimulatedRun run = simulate_text(text, dir, 2.0);
  EXPECT_EQ(run.result.exit_code, 0);
  EXPECT_EQ(run.summary.steps(), 3u);
  EXPECT_EQ(run.summary.workers_released(), 0u);
  EXPECT_EQ(run.summary.microbatches_dropped(), 0u);
  EXPECT_NEAR(run.summary.mean_max_compute_seconds(), 32.0, 1e-9);
  for (const v1::StepRecord& r : run.records.steps) {
    for (const auto& w : r.workers()) EXPECT_TRUE(w.contributed()) << "step " << r.step();
  }
}

TEST(Simulation, WorkersThatDieAndRestartLoseNoSample) {
  // Each worker process dies every 3 s on average (0.16 s steps), its
  // connection closes, and a new one under its name joins 0.5 s later.
  std::string text = kConfig;
  text.replace(text.find("max_steps: 20"), 13, "max_steps: 60");
  const testing::ScratchDir dir("sim-failures");
  const SimulatedRun run = simulate_text(text, dir, 0.01, 3.0);
  EXPECT_EQ(run.result.exit_code, 0);
  EXPECT_EQ(run.summary.steps(), 60u);
  EXPECT_GE(run.result.failures, 5u);
  EXPECT_EQ(run.summary.samples_lost(), 0u);
  ASSERT_FALSE(run.records.epochs.empty());
  for (const v1::EpochRecord& e : run.records.epochs) {
    EXPECT_TRUE(e.audit_ok()) << "epoch " << e.epoch();
    EXPECT_EQ(e.lost(), 0u);
  }
  // Some steps ran without a worker (it died, or had not rejoined yet).
  int short_handed = 0;
  for (const v1::StepRecord& r : run.records.steps) {
    int contributed = 0;
    for (const auto& w : r.workers()) contributed += w.contributed() ? 1 : 0;
    short_handed += contributed < 4 ? 1 : 0;
  }
  EXPECT_GT(short_handed, 0);
  std::printf("%llu failures; %d of 60 steps short-handed; %.2f s on the virtual clock\n",
              static_cast<unsigned long long>(run.result.failures), short_handed,
              run.result.virtual_seconds);
}

TEST(Simulation, RebalanceMovesWorkOffAPersistentStragglerAsThePlannerDecides) {
  std::string text = kConfig;
  text += "delay { kind: \"none\" slow_workers: 1 slowdown: 2 }\n";
  const testing::ScratchDir sync_dir("sim-sync");
  const SimulatedRun sync = simulate_text(text, sync_dir, 0.01);
  text.replace(text.find("tau: inf"), 8, "tau: inf policy: \"rebalance\"");
  const testing::ScratchDir rebalance_dir("sim-rebalance");
  const SimulatedRun rebalance = simulate_text(text, rebalance_dir, 0.01);
  // Even shares: every step waits for the straggler's 4 micro-batches at
  // twice the time. Rebalanced: it gets fewer samples, the others more.
  EXPECT_NEAR(sync.summary.mean_max_compute_seconds(), 0.32, 1e-9);
  const v1::StepRecord& last = rebalance.records.steps.back();
  uint64_t straggler = 0, other = 0;
  for (const auto& w : last.workers()) (w.rank() == 1 ? straggler : other) += w.samples();
  EXPECT_LT(straggler, other / 3) << "the straggler's share of the last step";
  EXPECT_LT(rebalance.summary.mean_step_seconds(), 0.85 * sync.summary.mean_step_seconds());
  std::printf(
      "mean step: sync %.4f s, rebalance %.4f s; last step's samples: straggler %llu, "
      "the other three %llu\n",
      sync.summary.mean_step_seconds(), rebalance.summary.mean_step_seconds(),
      static_cast<unsigned long long>(straggler), static_cast<unsigned long long>(other));
}

// A step record in which each rank completed micro-batches of `samples`
// samples in the given times.
v1::StepRecord trace_step(const std::vector<std::vector<double>>& times, uint32_t samples) {
  v1::StepRecord step;
  step.set_type("step");
  for (uint32_t rank = 0; rank < times.size(); ++rank) {
    v1::WorkerStep& w = *step.add_workers();
    w.set_rank(rank);
    w.set_contributed(true);
    w.set_completed(static_cast<uint32_t>(times[rank].size()));
    w.set_samples(samples * w.completed());
    for (double t : times[rank]) w.add_micro_batch_seconds(t);
  }
  return step;
}

TEST(ComputeTrace, PoolsEachRanksMicroBatchesPerSampleAfterTheWarmUpStep) {
  const testing::ScratchDir dir("sim-trace-read");
  std::string jsonl = metrics_line(trace_step({{9.0}, {9.0}}, 4));  // warm-up: left out
  for (int s = 0; s < 5; ++s) jsonl += metrics_line(trace_step({{0.04, 0.08}, {0.02}}, 4));
  std::ofstream(dir / "metrics.jsonl") << jsonl;
  const ComputeTrace trace = ComputeTrace::load(dir / "metrics.jsonl");
  EXPECT_EQ(trace.ranks(), 2u);
  EXPECT_EQ(trace.micro_batches(), 15u);
  EXPECT_DOUBLE_EQ(trace.mean(0), 0.015) << "0.04 and 0.08 s over 4 samples";
  EXPECT_DOUBLE_EQ(trace.mean(3), 0.005) << "worker 3 draws from rank 3 mod 2";
  // Draws are the recorded values, both of them, in about equal numbers.
  Rng rng(11);
  int high = 0;
  for (int i = 0; i < 1000; ++i) {
    const double t = trace.draw(2, rng);
    ASSERT_TRUE(t == 0.01 || t == 0.02) << t;
    high += t == 0.02 ? 1 : 0;
  }
  EXPECT_GT(high, 400);
  EXPECT_LT(high, 600);

  std::ofstream(dir / "empty.jsonl") << metrics_line(trace_step({{}}, 4));
  try {
    ComputeTrace::load(dir / "empty.jsonl");
    ADD_FAILURE() << "a trace without a micro-batch was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no completed micro-batch"), std::string::npos)
        << e.what();
  }
}

TEST(Simulation, ATraceSetsEachWorkersComputeInPlaceOfTheDelays) {
  const testing::ScratchDir dir("sim-trace");
  // Rank 0 of the trace takes 80 ms a micro-batch of 4, rank 1 40 ms.
  std::ofstream(dir / "trace.jsonl") << metrics_line(trace_step({{0.08}, {0.04}}, 4));
  std::string text = kConfig;
  text += "delay { kind: \"constant\" seconds: 1 }\n";  // left out: the trace holds the delays
  const SimulatedRun run = simulate_text(text, dir, 0.01, 0.0, dir / "trace.jsonl");
  ASSERT_EQ(run.result.exit_code, 0);
  // Workers 0 and 2 draw rank 0's time: 4 micro-batches of 80 ms.
  EXPECT_NEAR(run.summary.mean_max_compute_seconds(), 0.32, 1e-9);
  for (const v1::WorkerStep& w : run.records.steps.back().workers()) {
    EXPECT_NEAR(w.compute_seconds(), w.rank() % 2 == 0 ? 0.32 : 0.16, 1e-9) << w.rank();
  }
  const std::string sim = testing::read_text(dir / "run" / "simulation.json");
  EXPECT_NE(sim.find("resampled from"), std::string::npos) << sim;
}

TEST(Simulation, TheNetworkFittedFromATraceCostsEachMessageTheTracedTime) {
  const testing::ScratchDir dir("sim-fit");
  // A plan's sending to its contribution's arrival took 100 ms, of which
  // 80 ms compute and 4 ms the worker's own: 8 ms a message each way.
  v1::StepRecord step = trace_step({{0.08}}, 4);
  v1::WorkerStep& w = *step.mutable_workers(0);
  w.set_compute_seconds(0.08);
  w.set_overhead_seconds(0.004);
  w.mutable_arrival_seconds()->set_number_value(0.1);
  std::ofstream(dir / "trace.jsonl") << metrics_line(step);
  const ComputeTrace trace = ComputeTrace::load(dir / "trace.jsonl");
  ASSERT_TRUE(trace.message_seconds().has_value());
  EXPECT_DOUBLE_EQ(*trace.message_seconds(), 0.008);

  const SimulatedRun run = simulate_text(kConfig, dir, 0.01, 0.0, dir / "trace.jsonl", true);
  ASSERT_EQ(run.result.exit_code, 0);
  // Each step: the plan out (8 ms), 4 micro-batches of 80 ms, the
  // contribution back (8 ms).
  EXPECT_NEAR(run.summary.mean_max_compute_seconds(), 0.32, 1e-9);
  EXPECT_NEAR(run.summary.mean_step_seconds(), 0.336, 1e-6);
  const std::string sim = testing::read_text(dir / "run" / "simulation.json");
  EXPECT_NE(sim.find("fitted from the trace: 0.008 s per message"), std::string::npos) << sim;
  EXPECT_NE(sim.find("\"bandwidth_bytes_per_second\": null"), std::string::npos) << sim;
}

}  // namespace
}  // namespace dctrain
