// trace.json of real runs over tcp://127.0.0.1: three workers with injected
// delays past tau. The file parses; the coordinator and every worker have a
// track; every traced step holds each worker's completed micro-batches
// (with their injected delay nested) and its dropped ones, exactly as
// metrics.jsonl counts them; after alignment each worker's events of a step
// lie inside that step on the coordinator's track, within the error bound
// the file states for that step (half the round trip the offset came from);
// untraced steps are absent; the workers, which share one clock, get
// offsets that agree within their bounds. A run stopped by SIGTERM leaves a file that
// parses too.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "metrics/metrics_json.h"
#include "tests/testing/paths.h"
#include "tests/testing/process.h"
#include "tests/trace/trace_json.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;
using testing::eventually;
using testing::ParsedEvent;
using testing::ParsedTrace;
using testing::Process;
using testing::read_text;

// Times in the file are printed to the nanosecond: a time is off by at most
// 0.5 ns, a difference of two by 1 ns (double arithmetic on clock values of
// about 1e5 s adds far less).
constexpr double kRoundingUs = 2e-3;

ParsedTrace read_trace(const std::filesystem::path& path) {
  std::string problem;
  const auto trace = testing::parse_trace(read_text(path), &problem);
  EXPECT_TRUE(trace.has_value()) << path << ": " << problem;
  return trace.value_or(ParsedTrace{});
}

uint64_t step_of(const ParsedEvent& e) {
  return static_cast<uint64_t>(e.number("step"));
}

TEST(TraceProcess, ThreeWorkersWithDelaysGiveAlignedTracksForTracedStepsOnly) {
  const auto dir = testing::fresh_dir("trace-run");
  // Each worker gets 4 micro-batches of 8; each sleeps 30 ms after its
  // compute, so with tau 40 ms a worker completes 2 and drops 2. The grace
  // is wide so that no worker misses a deadline on a loaded machine. On the
  // star, whose coordinator track has a reduce and an update to send (the
  // exchange's track is tested in exchange_process_test).
  std::ofstream(dir / "run.cfg") << R"(
name: "trace"
seed: 3
workers: 3
model { name: "mlp" }
dataset { kind: "synthetic" synthetic_samples: 2000 train_limit: 960 test_limit: 200 }
optimizer { kind: "sgd" lr: 0.05 momentum: 0.9 }
step { global_batch: 96 micro_batch: 8 tau: 0.04 }
delay { kind: "constant" seconds: 0.03 }
liveness { heartbeat_seconds: 0.2 silence_seconds: 30 grace_seconds: 30 join_timeout_seconds: 60 }
eval { every_steps: 7 batch: 100 }
checkpoint { every_steps: 7 }
trace { window_steps: 4 every_steps: 7 }
stop { max_steps: 16 }
data_plane { kind: "star" }
)";
  const auto run = dir / "run";
  Process launch(testing::program("dctrain-launch"),
                 {"--workers", "3", "--config", (dir / "run.cfg").string(), "--out", run.string()},
                 dir / "launch.out");
  ASSERT_EQ(launch.wait_for(120s), std::optional<int>(0)) << launch.output();
  const MetricsRecords records =
      parse_metrics(read_text(run / "metrics.jsonl"), (run / "metrics.jsonl").string());
  ASSERT_EQ(records.steps.size(), 16u);
  const ParsedTrace t = read_trace(run / "trace.json");
  ASSERT_FALSE(t.events.empty());

  const std::set<uint64_t> traced = {0, 1, 2, 3, 6, 13};  // the window, and steps 7 and 14
  std::map<int, std::string> process_names;
  // Per step: the coordinator's step slice and update send; per (pid, step):
  // the worker's stated error bound and its events.
  std::map<uint64_t, const ParsedEvent*> step_slice, send_update;
  std::map<std::pair<int, uint64_t>, double> bound_us;
  std::map<std::pair<int, uint64_t>, std::vector<const ParsedEvent*>> worker_events;
  std::set<std::string> coordinator_names;
  for (const ParsedEvent& e : t.events) {
    if (e.ph == "M") {
      if (e.name == "process_name") process_names[e.pid] = e.strings.at("name");
      continue;
    }
    ASSERT_TRUE(e.numbers.contains("step")) << e.name;
    const uint64_t step = step_of(e);
    EXPECT_TRUE(traced.contains(step)) << e.name << " of untraced step " << step;
    if (e.pid == 0) {
      coordinator_names.insert(e.name);
      if (e.name == "step") step_slice[step] = &e;
      if (e.name == "send update") send_update[step] = &e;
      continue;
    }
    if (e.name == "plan received") bound_us[{e.pid, step}] = e.number("alignment_error_us");
    worker_events[{e.pid, step}].push_back(&e);
  }
  EXPECT_EQ(process_names.size(), 4u);
  EXPECT_EQ(process_names[0], "coordinator");
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(process_names[rank + 1].starts_with(fmt::format("worker {} (", rank)))
        << process_names[rank + 1];
  }
  for (const char* name :
       {"step", "plan", "reduce", "send update", "apply", "evaluation", "checkpoint"}) {
    EXPECT_TRUE(coordinator_names.contains(name)) << name;
  }

  uint64_t dropped_total = 0;
  for (const v1::StepRecord& record : records.steps) {
    const uint64_t step = record.step();
    if (!traced.contains(step)) continue;
    ASSERT_TRUE(step_slice.contains(step)) << step;
    ASSERT_TRUE(send_update.contains(step)) << step;
    const ParsedEvent& slice = *step_slice[step];
    for (const v1::WorkerStep& w : record.workers()) {
      ASSERT_TRUE(w.contributed()) << "step " << step << " rank " << w.rank();
      const int pid = static_cast<int>(w.rank()) + 1;
      ASSERT_TRUE(bound_us.contains({pid, step})) << "step " << step << " rank " << w.rank();
      const double tol = bound_us[{pid, step}] + kRoundingUs;
      EXPECT_GE(tol, 0.0);
      std::map<std::string, int> counts;
      std::vector<const ParsedEvent*> micro_batches, delays;
      const ParsedEvent* compute = nullptr;
      const ParsedEvent* tau = nullptr;
      const ParsedEvent* wait = nullptr;
      const ParsedEvent* apply = nullptr;
      for (const ParsedEvent* e : worker_events[{pid, step}]) {
        ++counts[e->name];
        if (e->name == "micro-batch") micro_batches.push_back(e);
        if (e->name == "injected delay") delays.push_back(e);
        if (e->name == "compute") compute = e;
        if (e->name == "tau") tau = e;
        if (e->name == "wait for update") wait = e;
        if (e->name == "apply") apply = e;
        if (e->name == "tau" || e->name == "wait for update" || e->name == "apply") continue;
        // Everything up to the contribution leaving: inside the step.
        EXPECT_GE(e->ts, slice.ts - tol) << e->name << " step " << step << " rank " << w.rank();
        EXPECT_LE(e->ts + e->dur, slice.ts + slice.dur + tol)
            << e->name << " step " << step << " rank " << w.rank();
      }
      EXPECT_EQ(counts["micro-batch"], static_cast<int>(w.completed())) << step;
      EXPECT_EQ(counts["dropped micro-batch"], static_cast<int>(w.dropped())) << step;
      EXPECT_EQ(counts["plan received"], 1);
      EXPECT_EQ(counts["send"], 1);
      dropped_total += w.dropped();
      // Each micro-batch holds its injected delay (at least the 30 ms slept).
      ASSERT_EQ(delays.size(), micro_batches.size());
      for (size_t i = 0; i < micro_batches.size(); ++i) {
        const ParsedEvent& mb = *micro_batches[i];
        const ParsedEvent& d = *delays[i];
        EXPECT_DOUBLE_EQ(mb.number("delay_seconds"), 0.03);
        EXPECT_GE(d.dur, 30000.0 - kRoundingUs);
        EXPECT_GE(d.ts, mb.ts - kRoundingUs);
        EXPECT_LE(d.ts + d.dur, mb.ts + mb.dur + kRoundingUs);
      }
      // The tau line: 40 ms after the compute began.
      ASSERT_NE(compute, nullptr);
      ASSERT_NE(tau, nullptr);
      EXPECT_NEAR(tau->ts - compute->ts, 40000.0, kRoundingUs);
      // The update: applied after the coordinator sent it, right after the wait.
      ASSERT_NE(apply, nullptr) << "step " << step << " rank " << w.rank();
      ASSERT_NE(wait, nullptr) << "step " << step << " rank " << w.rank();
      EXPECT_GE(apply->ts, send_update[step]->ts - tol);
      EXPECT_NEAR(wait->ts + wait->dur, apply->ts, kRoundingUs);
      EXPECT_LE(wait->ts, slice.ts + slice.dur + tol);
    }
  }
  EXPECT_GT(dropped_total, 0u);

  // The workers share this host's steady clock (the coordinator counts from
  // its own start), so they all have the same true offset: their estimates
  // must agree pairwise within the sum of their bounds.
  const auto& workers = t.other_data.fields().at("workers").list_value();
  ASSERT_EQ(workers.values_size(), 3);
  std::vector<std::pair<double, double>> offsets;  // offset, bound (µs)
  for (const auto& w : workers.values()) {
    const auto& f = w.struct_value().fields();
    EXPECT_GE(f.at("round_trips").number_value(), 16.0);
    offsets.emplace_back(f.at("clock_offset_us").number_value(),
                         f.at("alignment_error_us").number_value());
  }
  for (size_t i = 0; i < offsets.size(); ++i) {
    for (size_t j = i + 1; j < offsets.size(); ++j) {
      EXPECT_LE(std::abs(offsets[i].first - offsets[j].first),
                offsets[i].second + offsets[j].second + kRoundingUs)
          << "workers " << i << " and " << j;
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(TraceProcess, ARunStoppedBySigtermLeavesAFileThatParses) {
  const auto dir = testing::fresh_dir("trace-signal");
  std::ofstream(dir / "run.cfg") << R"(
name: "trace-signal"
seed: 5
workers: 2
model { name: "mlp" }
dataset { kind: "synthetic" synthetic_samples: 2000 }
optimizer { kind: "sgd" lr: 0.05 }
step { global_batch: 32 micro_batch: 8 tau: inf }
liveness { heartbeat_seconds: 0.2 silence_seconds: 30 join_timeout_seconds: 60 }
eval { every_steps: 1000 batch: 100 }
trace { window_steps: 3 every_steps: 5 }
stop { max_steps: 1000000 }
)";
  const auto run = dir / "run";
  Process coordinator(testing::program("dctrain-coordinator"),
                      {"--config", (dir / "run.cfg").string(), "--bind", "tcp://127.0.0.1:*",
                       "--out", run.string()},
                      dir / "coordinator.out");
  const std::string endpoint = testing::wait_for_endpoint(run, coordinator, 30s);
  ASSERT_FALSE(endpoint.empty()) << coordinator.output();
  Process a(testing::program("dctrain-worker"), {"--connect", endpoint, "--name", "a"},
            dir / "a.out");
  Process b(testing::program("dctrain-worker"), {"--connect", endpoint, "--name", "b"},
            dir / "b.out");
  const auto steps = [&] {
    return parse_metrics(read_text(run / "metrics.jsonl"), "metrics.jsonl").steps.size();
  };
  ASSERT_TRUE(eventually([&] { return steps() >= 12; }, 60s)) << coordinator.output();
  coordinator.kill(SIGTERM);
  ASSERT_EQ(coordinator.wait_for(20s), std::optional<int>(130)) << coordinator.output();
  const ParsedTrace t = read_trace(run / "trace.json");
  std::set<uint64_t> micro_batch_steps;
  for (const ParsedEvent& e : t.events) {
    if (e.name == "micro-batch") micro_batch_steps.insert(step_of(e));
  }
  // Steps 0-2 and every 5th (indices 4, 9, ...): at least the first five.
  for (uint64_t step : {0, 1, 2, 4, 9}) EXPECT_TRUE(micro_batch_steps.contains(step)) << step;
  for (uint64_t step : micro_batch_steps) {
    EXPECT_TRUE(step < 3 || (step + 1) % 5 == 0) << step;
  }
  a.wait_for(15s);
  b.wait_for(15s);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dctrain
