// Live metrics of a run in the Prometheus text exposition format (0.0.4):
// what the step loop knows after each step and evaluation, as a snapshot
// that the metrics server (coordinator/program/metrics_server.h) renders on every
// scrape. The step loop builds a fresh immutable snapshot and swaps a
// pointer; the server thread never sees a half-updated one and never holds
// a lock while the step loop works.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "proto/metrics.pb.h"

namespace dctrain {

// A Prometheus histogram: counts per upper bound (le), cumulative when
// rendered, plus the sum and the count of observations.
struct Histogram {
  // Seconds, from 1 ms to 30 s: micro-batches of the small models take a few
  // milliseconds, a straggler's step tens of seconds. Prometheus' default
  // buckets start at 5 ms.
  static const std::vector<double>& second_bounds();

  std::vector<uint64_t> counts = std::vector<uint64_t>(second_bounds().size() + 1, 0);
  double sum = 0.0;
  uint64_t count = 0;
  void observe(double seconds);
};

struct WorkerLiveMetrics {
  std::string name;
  uint32_t rank = 0;
  bool alive = false;
  uint64_t steps_contributed = 0, steps_missed = 0;
  Histogram step_compute;         // its step compute time, per contributed step
  Histogram micro_batch_compute;  // each completed micro-batch's compute time
  std::string slow_cause;         // "compute", "communication", both joined by '+', or ""
};

struct LiveSnapshot {
  uint64_t steps = 0;   // done
  uint64_t epoch = 0;   // the epoch in progress
  double epochs = 0.0;  // fractional, done
  double wall_seconds = 0.0;
  uint64_t samples = 0;             // completed
  double samples_per_second = 0.0;  // over the last steps (up to 20)
  uint64_t microbatches_completed = 0, microbatches_dropped = 0, microbatches_orphaned = 0;
  double drop_rate = 0.0;  // (dropped + orphaned) / planned, since the start
  double tau = 0.0;        // seconds; infinity: no threshold
  double last_step_seconds = 0.0;
  uint32_t workers_expected = 0, workers_alive = 0;
  bool has_loss = false;
  double loss = 0.0;  // the last step's mean training loss
  bool has_eval = false;
  uint64_t eval_step = 0;
  double eval_accuracy = 0.0, eval_loss = 0.0;
  uint64_t evaluations = 0, evaluations_waited = 0;
  bool reached_target = false;
  uint64_t target_step = 0;
  bool finished = false;
  std::vector<WorkerLiveMetrics> workers;  // by name
};

// What the step loop accumulates between snapshots: the histograms and the
// recent throughput, fed with each step record as it is written.
class LiveMetrics {
 public:
  void step_recorded(const v1::StepRecord& record);
  // The per-worker histograms and counts so far, by worker name.
  const std::map<std::string, WorkerLiveMetrics>& workers() const { return workers_; }
  // Samples per second over the last (up to 20) steps' wall time.
  double samples_per_second() const;
  double last_step_seconds() const { return last_step_seconds_; }
  bool has_loss() const { return has_loss_; }
  double loss() const { return loss_; }

 private:
  std::map<std::string, WorkerLiveMetrics> workers_;
  std::deque<std::pair<double, uint64_t>> recent_;  // (wall seconds, samples so far)
  uint64_t samples_ = 0;
  double last_step_seconds_ = 0.0;
  bool has_loss_ = false;
  double loss_ = 0.0;
};

// The snapshot as Prometheus text (format 0.0.4): every metric named
// dctrain_*, with HELP and TYPE lines and its unit in the name.
std::string prometheus_text(const LiveSnapshot& snapshot);

}  // namespace dctrain
