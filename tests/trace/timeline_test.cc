// The timeline in one process: a worker's recorder and the coordinator's
// timeline exchange plans and reports on two clocks 1234.5 s apart with
// asymmetric delays; trace.json must hold the traced steps only, every
// worker event on the coordinator's clock within the written error bound,
// the wait for an update carried over to the next report, and nothing from
// reports that do not hold together.
#include "trace/timeline.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "common/files.h"
#include "tests/testing/paths.h"
#include "tests/trace/trace_json.h"
#include "trace/recorder.h"

namespace dctrain {
namespace {

using testing::ParsedEvent;
using testing::ParsedTrace;

constexpr double kOffset = 1234.5;  // worker clock minus coordinator clock

std::shared_ptr<spdlog::logger> quiet() {
  return std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
}

ParsedTrace read_back(const std::filesystem::path& path) {
  std::string problem;
  const auto trace = testing::parse_trace(read_file_if_present(path).value_or(""), &problem);
  EXPECT_TRUE(trace.has_value()) << problem;
  return trace.value_or(ParsedTrace{});
}

v1::TraceConfig selection(uint64_t window_steps, uint64_t every_steps) {
  v1::TraceConfig c;
  c.set_window_steps(window_steps);
  c.set_every_steps(every_steps);
  return c;
}

// One simulated step on both sides; returns the true coordinator times of
// the worker's first micro-batch.
struct Step {
  double t0, d1, d2;
};

TEST(Timeline, WorkerEventsLandOnTheCoordinatorsClockWithinTheirBoundForTracedStepsOnly) {
  const testing::ScratchDir dir("timeline-steps");
  Timeline timeline(dir, selection(2, 5), 10.0, quiet());
  ASSERT_TRUE(timeline.active());
  TraceRecorder recorder;
  // Out-delays and back-delays differ; step 1 has the tightest round trip.
  const std::vector<Step> steps = {
      {10.0, 0.004, 0.0005}, {11.0, 0.0002, 0.0001}, {12.0, 0.003, 0.003}, {13.0, 0.001, 0.002},
      {14.0, 0.002, 0.001},  {15.0, 0.0005, 0.006},  {16.0, 0.001, 0.001}};
  std::map<uint64_t, double> true_micro_batch;  // step -> coordinator time of its micro-batch
  for (uint64_t s = 0; s < steps.size(); ++s) {
    const Step& st = steps[s];
    v1::Envelope envelope;
    envelope.set_step(s);
    v1::Plan& plan = *envelope.mutable_plan();
    plan.set_tau(0.04);
    timeline.plan(s, plan, st.t0);
    EXPECT_EQ(plan.trace().record(), s <= 1 || s == 4) << s;
    // The worker, on its clock.
    const double w1 = st.t0 + st.d1 + kOffset;
    recorder.begin_step(s, plan, w1);
    recorder.span("micro-batch", w1 + 0.001, w1 + 0.011, {{"micro_batch", 100 + s}});
    recorder.instant("dropped micro-batch", w1 + 0.012, {{"micro_batch", 200 + s}});
    true_micro_batch[s] = w1 + 0.001 - kOffset;
    v1::Envelope answer;
    answer.set_step(s);
    recorder.report_into(*answer.mutable_contribution(), w1 + 0.015);
    ASSERT_TRUE(answer.contribution().has_trace());
    const double w2 = w1 + 0.016;
    stamp_trace_sent(answer, w2);
    const double t3 = w2 - kOffset + st.d2;
    timeline.contribution(0, "w0", answer, t3);
    timeline.span("step", st.t0, t3);
    timeline.span("send update", t3 + 0.001, t3 + 0.002);
    // The update reaches the worker and is applied; carried by the next report.
    recorder.span("apply", t3 + 0.002 + st.d1 + kOffset, t3 + 0.003 + st.d1 + kOffset);
  }
  timeline.close();
  const ClockEstimate e = *timeline.clock(0);
  EXPECT_NEAR(e.round_trip, 0.0003, 1e-9) << "the tightest round trip (step 1)";
  EXPECT_LE(std::abs(e.offset - kOffset), e.error_bound() + 1e-9);

  const ParsedTrace t = read_back(dir / "trace.json");
  std::set<uint64_t> coordinator_steps, worker_steps, waits;
  std::map<uint64_t, double> bound_us;
  for (const ParsedEvent& ev : t.events) {
    if (ev.ph == "M") continue;
    const auto step = static_cast<uint64_t>(ev.number("step"));
    (ev.pid == 0 ? coordinator_steps : worker_steps).insert(step);
    if (ev.name == "plan received") bound_us[step] = ev.number("alignment_error_us");
    if (ev.name == "wait for update") waits.insert(step);
  }
  // The window (steps 0 and 1) and every 5th step (index 4).
  EXPECT_EQ(coordinator_steps, (std::set<uint64_t>{0, 1, 4}));
  EXPECT_EQ(worker_steps, (std::set<uint64_t>{0, 1, 4}));
  // Step 0's wait came with step 1's report, step 1's with step 2's
  // (untraced) report; step 4's with step 5's.
  EXPECT_EQ(waits, (std::set<uint64_t>{0, 1, 4}));
  int micro_batches = 0;
  for (const ParsedEvent& ev : t.events) {
    if (ev.name != "micro-batch") continue;
    ++micro_batches;
    const auto step = static_cast<uint64_t>(ev.number("step"));
    EXPECT_EQ(ev.number("micro_batch"), 100.0 + step);
    EXPECT_EQ(ev.pid, 1);
    EXPECT_NEAR(ev.dur, 10000.0, 1e-3);
    const double truth_us = (true_micro_batch[step] - 10.0) * 1e6;
    ASSERT_TRUE(bound_us.contains(step));
    EXPECT_LE(std::abs(ev.ts - truth_us), bound_us[step] + 1e-3) << "step " << step;
  }
  EXPECT_EQ(micro_batches, 3);
  // The written bound of step 0 is its own round trip's (4.5 ms / 2); later
  // steps have the tighter one.
  EXPECT_NEAR(bound_us[0], 2250.0, 1e-3);
  EXPECT_NEAR(bound_us[1], 150.0, 1e-3);
  EXPECT_NEAR(bound_us[4], 150.0, 1e-3);
  std::filesystem::remove_all(dir);
}

TEST(Timeline, ReportsThatDoNotHoldTogetherAreLeftOut) {
  const testing::ScratchDir dir("timeline-bad");
  Timeline timeline(dir, selection(1, 0), 0.0, quiet());
  v1::Envelope answer;
  answer.set_step(0);
  v1::TraceReport& r = *answer.mutable_contribution()->mutable_trace();
  r.set_plan_sent_seconds(1.0);
  r.set_plan_received_seconds(NAN);
  r.set_built_seconds(1.1);
  r.set_sent_seconds(1.2);
  v1::TraceEvent& e = *r.add_events();
  e.set_name("micro-batch");
  e.set_begin_seconds(1.05);
  timeline.contribution(0, "w0", answer, 1.3);
  EXPECT_FALSE(timeline.clock(0).has_value()) << "a NaN round trip is no sample";
  // A whole report, but with an event for a step the coordinator does not
  // trace, and another with a negative duration.
  r.set_plan_received_seconds(1.01);
  v1::TraceEvent& other = *r.add_events();
  other = e;
  other.set_step(7);
  timeline.contribution(0, "w0", answer, 1.3);
  ASSERT_TRUE(timeline.clock(0).has_value());
  v1::TraceEvent& negative = *r.add_events();
  negative = e;
  negative.set_duration_seconds(-1.0);
  timeline.contribution(0, "w0", answer, 1.3);
  timeline.close();
  const ParsedTrace t = read_back(dir / "trace.json");
  int micro_batches = 0;
  for (const ParsedEvent& ev : t.events) {
    if (ev.name != "micro-batch") continue;
    ++micro_batches;
    EXPECT_EQ(ev.number("step"), 0.0);
  }
  EXPECT_EQ(micro_batches, 1) << "only the step-0 event of the one whole report";
  std::filesystem::remove_all(dir);
}

TEST(Timeline, NoStepsTracedMeansNoFileAndPlansWithoutARequest) {
  const testing::ScratchDir dir("timeline-off");
  Timeline timeline(dir, selection(0, 0), 0.0, quiet());
  EXPECT_FALSE(timeline.active());
  v1::Plan plan;
  timeline.plan(0, plan, 1.0);
  EXPECT_FALSE(plan.has_trace());
  timeline.span("step", 1.0, 2.0);
  timeline.close();
  EXPECT_FALSE(std::filesystem::exists(dir / "trace.json"));
  std::filesystem::remove_all(dir);
}

TEST(TraceSelection, AWindowAndEveryKthStep) {
  v1::TraceConfig c;
  c.set_window_begin(10);
  c.set_window_steps(3);
  c.set_every_steps(100);
  const TraceSelection s(c);
  std::vector<uint64_t> traced;
  for (uint64_t step = 0; step < 301; ++step) {
    if (s.traced(step)) traced.push_back(step);
  }
  EXPECT_EQ(traced, (std::vector<uint64_t>{10, 11, 12, 99, 199, 299}));
  EXPECT_EQ(s.describe(), "steps 10-12 and one step in 100 (indices 99, 199, ...)");
}

}  // namespace
}  // namespace dctrain
