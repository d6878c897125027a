// Per-worker totals and the naming of slow workers, from step records and
// contribution arrivals given by hand.
#include "coordinator/worker_summary.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "metrics/metrics_json.h"

namespace dctrain {
namespace {

using google::protobuf::util::MessageDifferencer;

constexpr uint32_t kMicroBatch = 16;

// A contribution of `n` micro-batches of `each` seconds.
v1::Contribution contribution(int n, double each, double overhead) {
  v1::Contribution c;
  for (int i = 0; i < n; ++i) {
    v1::MicroBatchTime& t = *c.add_completed();
    t.set_id(static_cast<uint64_t>(i));
    t.set_compute_seconds(each);
  }
  c.set_compute_seconds(n * each);
  c.set_overhead_seconds(overhead);
  return c;
}

// A step record of these workers, and the micro-batches each was planned
// (completed + dropped; a worker that did not contribute has none of either).
struct Step {
  v1::StepRecord record;
  std::map<uint32_t, uint64_t> planned;

  Step& worker(uint32_t rank, const std::string& name, bool contributed, uint32_t completed,
               uint32_t dropped, double micro_batch_seconds) {
    v1::WorkerStep& w = *record.add_workers();
    w.set_rank(rank);
    w.set_name(name);
    w.set_contributed(contributed);
    w.set_completed(contributed ? completed : 0);
    w.set_dropped(contributed ? dropped : 0);
    planned[rank] = completed + dropped;
    if (contributed) {
      for (uint32_t i = 0; i < completed; ++i) w.add_micro_batch_seconds(micro_batch_seconds);
    }
    return *this;
  }
};

// Three workers over 10 steps: "fast" computes 4 micro-batches of 10 ms;
// "cpu" computes 2 of 50 ms and drops 2; "link" computes like "fast" but
// its contributions arrive 2 s after the plan, after the step closed.
WorkerSummary three_workers() {
  WorkerSummary summary(kMicroBatch);
  for (uint64_t step = 0; step < 10; ++step) {
    const double t0 = static_cast<double>(step);
    summary.step_started(step, t0);
    summary.contribution_arrived("fast", step, contribution(4, 0.01, 0.001), t0 + 0.045);
    summary.contribution_arrived("cpu", step, contribution(2, 0.05, 0.002), t0 + 0.11);
    if (step >= 2) summary.contribution_arrived("link", step - 2, contribution(4, 0.01, 0.001), t0);
    Step s;
    s.record.set_step(static_cast<uint32_t>(step));
    s.worker(0, "fast", true, 4, 0, 0.01)
        .worker(1, "cpu", true, 2, 2, 0.05)
        .worker(2, "link", false, 4, 0, 0.0);
    summary.step_closed(s.record, s.planned);
    EXPECT_NEAR(optional_number(s.record.workers(0).arrival_seconds()).value_or(-1), 0.045, 1e-9);
    EXPECT_NEAR(optional_number(s.record.workers(1).arrival_seconds()).value_or(-1), 0.11, 1e-9);
    EXPECT_TRUE(s.record.workers(2).arrival_seconds().has_null_value())
        << "nothing arrived in time";
  }
  return summary;
}

TEST(WorkerSummary, CountsPerWorkerAndMeasuresArrivalAndCommunication) {
  const WorkerSummary summary = three_workers();
  const std::vector<WorkerTotals> totals = summary.totals();
  ASSERT_EQ(totals.size(), 3u);
  EXPECT_EQ(totals[0].name, "fast");
  EXPECT_EQ(totals[0].completed, 40u);
  EXPECT_EQ(totals[0].steps_missed, 0u);
  EXPECT_NEAR(totals[0].mean_micro_batch_seconds(), 0.01, 1e-12);
  EXPECT_NEAR(totals[0].mean_communication_seconds(), 0.004, 1e-9);
  EXPECT_EQ(totals[1].dropped, 20u);
  EXPECT_NEAR(totals[1].mean_micro_batch_seconds(), 0.05, 1e-12);
  EXPECT_EQ(totals[2].steps_missed, 10u);
  EXPECT_EQ(totals[2].orphaned, 40u);
  EXPECT_EQ(totals[2].late, 8u);
  EXPECT_NEAR(totals[2].mean_micro_batch_seconds(), 0.01, 1e-12)
      << "its late contributions were timed";
  EXPECT_NEAR(totals[2].late_arrival_seconds / 8.0, 2.0, 1e-9);
  EXPECT_NEAR(totals[2].mean_communication_seconds(), 2.0 - 0.041, 1e-9);
}

TEST(WorkerSummary, NamesTheComputeStragglerAndTheSlowLinkEachWithItsCause) {
  const auto slow = three_workers().slow_workers();
  ASSERT_EQ(slow.size(), 2u);
  EXPECT_EQ(slow[0].first.name, "cpu");
  EXPECT_EQ(slow[0].second, "compute");
  EXPECT_EQ(slow[1].first.name, "link");
  EXPECT_EQ(slow[1].second, "communication");
  v1::RunSummary summary;
  three_workers().add_to(summary, 0.0);
  ASSERT_EQ(summary.slow_workers_size(), 2) << summary.DebugString();
  EXPECT_EQ(summary.slow_workers(1).name(), "link");
  EXPECT_EQ(summary.slow_workers(1).cause(), "communication");
}

// One worker of 2 compute threads and a 100 GFLOP/s sgemm peak; 10 steps
// of 4 micro-batches of 8 samples, each 10 ms of which 2 ms injected delay.
TEST(WorkerSummary, MfuIsTheTrainingFlopsOverTheComputeLessDelaysAgainstThePeakTimesThreads) {
  WorkerSummary summary(kMicroBatch);
  v1::Hello hello;
  hello.set_threads(2);
  hello.mutable_blas()->set_sgemm_gflops(100.0);
  summary.joined("w", 0, hello);
  summary.joined("no-peak", 1, v1::Hello());
  for (uint64_t step = 0; step < 10; ++step) {
    summary.step_started(step, 0.0);
    for (const char* name : {"w", "no-peak"}) {
      v1::Contribution c = contribution(4, 0.01, 0.0);
      for (v1::MicroBatchTime& t : *c.mutable_completed()) t.set_delay_seconds(0.002);
      c.set_samples(32);
      summary.contribution_arrived(name, step, c, 0.05);
    }
    Step s;
    s.worker(0, "w", true, 4, 0, 0.01).worker(1, "no-peak", true, 4, 0, 0.01);
    summary.step_closed(s.record, s.planned);
  }
  const double training = 3.0 * 406'528.0;  // the MLP on 28 x 28: 3 x forward
  const double achieved = training * 320 / (40 * 0.008);
  v1::RunSummary written;
  summary.add_to(written, training);
  ASSERT_EQ(written.per_worker_size(), 2);
  const v1::PerWorkerTotals& w = written.per_worker(0);
  EXPECT_EQ(w.threads(), 2u);
  EXPECT_NEAR(w.achieved_flops_per_second(), achieved, 1e-6 * achieved);
  EXPECT_NEAR(w.mfu(), achieved / 200e9, 1e-9);
  EXPECT_NEAR(w.mfu(), 0.00609792, 1e-9);
  // Without a peak its MFU is unknown, and the mean leaves it out.
  EXPECT_EQ(written.per_worker(1).mfu(), 0.0);
  EXPECT_NEAR(written.per_worker(1).achieved_flops_per_second(), achieved, 1e-6 * achieved);
  EXPECT_NEAR(written.mean_mfu(), w.mfu(), 1e-12);
  EXPECT_NEAR(written.mean_achieved_flops_per_second(), achieved, 1e-6 * achieved);
  // A model whose FLOPs are not counted: nothing is claimed.
  v1::RunSummary uncounted;
  summary.add_to(uncounted, 0.0);
  EXPECT_EQ(uncounted.per_worker(0).mfu(), 0.0);
  EXPECT_EQ(uncounted.mean_mfu(), 0.0);
}

TEST(WorkerSummary, EqualWorkersAndSmallDifferencesNameNobody) {
  WorkerSummary summary(kMicroBatch);
  for (uint64_t step = 0; step < 5; ++step) {
    summary.step_started(step, 0.0);
    // 0.5 ms more per micro-batch is 1.5 times as slow but below the floor.
    summary.contribution_arrived("a", step, contribution(4, 0.001, 0.0), 0.005);
    summary.contribution_arrived("b", step, contribution(4, 0.0016, 0.0), 0.0075);
    Step s;
    s.worker(0, "a", true, 4, 0, 0.001).worker(1, "b", true, 4, 0, 0.0016);
    summary.step_closed(s.record, s.planned);
  }
  EXPECT_TRUE(summary.slow_workers().empty());
  WorkerSummary alone(kMicroBatch);
  alone.step_started(0, 0.0);
  alone.contribution_arrived("a", 0, contribution(4, 1.0, 0.0), 4.0);
  Step s;
  s.worker(0, "a", true, 4, 0, 1.0);
  alone.step_closed(s.record, s.planned);
  EXPECT_TRUE(alone.slow_workers().empty()) << "one worker has nobody to be slower than";
}

TEST(WorkerSummary, EachWorkerCarriesTheBlasItsHelloReported) {
  WorkerSummary summary = three_workers();
  v1::Hello hello;
  v1::BlasInfo& blas = *hello.mutable_blas();
  blas.set_library("OpenBLAS 0.3.21");
  blas.set_core("SkylakeX");
  blas.set_how("chosen");
  blas.set_detected_core("Prescott");
  blas.set_coretype("SkylakeX");
  blas.set_cpu_model("Intel(R) Xeon(R) \"test\" CPU");
  blas.set_cpu_features("AVX-512");
  blas.set_threads(1);
  blas.set_sgemm_size(512);
  blas.set_sgemm_threads(1);
  blas.set_sgemm_gflops(143.5);
  summary.joined("cpu", 1, hello);
  summary.joined("link", 2, v1::Hello());  // a worker from before BlasInfo existed
  v1::RunSummary written;
  summary.add_to(written, 0.0);
  const auto entry = [&](const std::string& name) {
    for (const v1::PerWorkerTotals& w : written.per_worker()) {
      if (w.name() == name) return w;
    }
    ADD_FAILURE() << name << " not in " << written.DebugString();
    return v1::PerWorkerTotals();
  };
  // Its hello's BlasInfo, as it came.
  ASSERT_TRUE(entry("cpu").has_blas()) << written.DebugString();
  EXPECT_TRUE(MessageDifferencer::Equals(entry("cpu").blas(), blas))
      << entry("cpu").blas().DebugString();
  EXPECT_FALSE(entry("link").has_blas()) << written.DebugString();
  EXPECT_FALSE(entry("fast").has_blas()) << written.DebugString();
  // Through summary.json and back unchanged (the quotes in the CPU model too).
  const std::string text = summary_text(written);
  const v1::RunSummary back = parse_summary(text, "summary.json");
  ASSERT_EQ(back.per_worker_size(), written.per_worker_size()) << text;
  for (int i = 0; i < back.per_worker_size(); ++i) {
    EXPECT_TRUE(MessageDifferencer::Equals(back.per_worker(i), written.per_worker(i))) << text;
  }
  EXPECT_EQ(summary.totals().size(), 3u) << "joining adds no worker that was already counted";
}

// Found while hardening the coordinator: the summary counts every
// contribution, late ones too, before (or without) the coordinator's
// checks, so one NaN or negative time made a worker's means NaN or wrong in
// summary.json for the rest of the run. Such a contribution counts nothing.
TEST(WorkerSummary, ContributionWithNegativeOrNonFiniteTimesCountsNothing) {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  for (double bad : {nan, inf, -inf, -0.5}) {
    WorkerSummary summary(kMicroBatch);
    summary.step_started(0, 0.0);
    v1::Contribution micro_batch = contribution(4, 0.01, 0.001);
    micro_batch.mutable_completed(2)->set_compute_seconds(bad);
    v1::Contribution compute = contribution(4, 0.01, 0.001);
    compute.set_compute_seconds(bad);
    v1::Contribution overhead = contribution(4, 0.01, 0.001);
    overhead.set_overhead_seconds(bad);
    for (const v1::Contribution& c : {micro_batch, compute, overhead}) {
      EXPECT_FALSE(summary.contribution_arrived("w", 0, c, 0.5)) << bad;
    }
    // A late one (its step closed) is refused too.
    Step s;
    s.worker(0, "w", false, 4, 0, 0.0);
    summary.step_closed(s.record, s.planned);
    summary.step_started(1, 1.0);
    EXPECT_FALSE(summary.contribution_arrived("w", 0, micro_batch, 1.5)) << bad;
    // Then an honest one: the worker's totals are its alone.
    EXPECT_TRUE(summary.contribution_arrived("w", 1, contribution(4, 0.01, 0.001), 1.05));
    const std::vector<WorkerTotals> totals = summary.totals();
    ASSERT_EQ(totals.size(), 1u) << bad;
    EXPECT_EQ(totals[0].arrivals, 1u) << bad;
    EXPECT_EQ(totals[0].timed, 4u) << bad;
    EXPECT_EQ(totals[0].late, 0u) << bad;
    EXPECT_NEAR(totals[0].mean_micro_batch_seconds(), 0.01, 1e-12) << bad;
    EXPECT_NEAR(totals[0].mean_communication_seconds(), 0.05 - 0.04 - 0.001, 1e-12) << bad;
  }
}

TEST(WorkerSummary, TimesThatWouldMakeATotalInfiniteAreRefused) {
  WorkerSummary summary(kMicroBatch);
  summary.step_started(0, 0.0);
  const double huge = std::numeric_limits<double>::max();
  v1::Contribution c = contribution(2, huge, 0.0);
  c.set_compute_seconds(0.0);
  EXPECT_FALSE(summary.contribution_arrived("w", 0, c, 0.1))
      << "two micro-batches of the largest double sum to infinity";
  EXPECT_TRUE(summary.contribution_arrived("w", 0, contribution(1, huge, 0.0), 0.1));
  summary.step_started(1, 1.0);
  EXPECT_FALSE(summary.contribution_arrived("w", 1, contribution(1, huge, 0.0), 1.1))
      << "the worker's total would become infinite";
  const std::vector<WorkerTotals> totals = summary.totals();
  ASSERT_EQ(totals.size(), 1u);
  EXPECT_EQ(totals[0].arrivals, 1u);
  EXPECT_TRUE(std::isfinite(totals[0].mean_micro_batch_seconds()));
}

// A late contribution is never checked against its plan, and its samples
// feed the worker's FLOP/s: a claim beyond what its micro-batches can hold
// (one that would wrap the count, too) counts nothing.
TEST(WorkerSummary, MoreSamplesThanTheMicroBatchesHoldAreRefused) {
  WorkerSummary summary(kMicroBatch);
  summary.step_started(0, 0.0);
  v1::Contribution full = contribution(2, 0.01, 0.0);
  full.set_samples(2 * kMicroBatch);
  EXPECT_TRUE(summary.contribution_arrived("w", 0, full, 0.05));
  for (uint64_t bad : {uint64_t{2 * kMicroBatch + 1}, std::numeric_limits<uint64_t>::max()}) {
    v1::Contribution c = contribution(2, 0.01, 0.0);
    c.set_samples(bad);
    EXPECT_FALSE(summary.contribution_arrived("w", 0, c, 0.05)) << bad;
  }
  v1::Contribution none = contribution(0, 0.01, 0.0);
  none.set_samples(1);
  EXPECT_FALSE(summary.contribution_arrived("w", 0, none, 0.05)) << "no micro-batch, one sample";
  const std::vector<WorkerTotals> totals = summary.totals();
  ASSERT_EQ(totals.size(), 1u);
  EXPECT_EQ(totals[0].arrivals, 1u);
  EXPECT_EQ(totals[0].timed_samples, 2u * kMicroBatch);
}

}  // namespace
}  // namespace dctrain
