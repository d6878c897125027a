// Compute times measured in a real run, for simulated workers to resample
// (dctrain-simulate --trace): each completed micro-batch of its
// metrics.jsonl, as seconds per sample (its time, injected delays
// included, over its samples), pooled per worker rank.
//
// Simulated worker i draws from the trace's rank i mod R (R ranks in the
// trace), so a persistent straggler of the trace stays one in every R
// simulated workers; each draw is independent (an i.i.d. resample of that
// rank's micro-batches, the order of the run not kept). The first steps
// (warm-up) are left out, as in the report's compute-time statistics.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/random.h"

namespace dctrain {

class ComputeTrace {
 public:
  // Reads `metrics_jsonl`; throws std::runtime_error naming the file when it
  // does not parse or records no completed micro-batch.
  static ComputeTrace load(const std::filesystem::path& metrics_jsonl);
  // From per-rank pools of seconds per sample (tests); none may be empty.
  explicit ComputeTrace(std::vector<std::vector<double>> per_rank, std::string origin = "");

  size_t ranks() const { return per_rank_.size(); }
  size_t micro_batches() const;
  // Seconds per sample of one micro-batch of the trace's rank `worker % ranks()`.
  double draw(uint32_t worker, Rng& rng) const;
  // Mean seconds per sample of that rank.
  double mean(uint32_t worker) const;
  // The network's time per message in the traced run: the median over its
  // worker steps of the time from a plan's sending to its contribution's
  // arrival, less the worker's compute and its own overhead, split evenly
  // between the two messages (plan and contribution); nothing when the
  // trace records no arrival.
  std::optional<double> message_seconds() const { return message_seconds_; }
  // "metrics.jsonl of run X: 4 ranks, 3,200 micro-batches, 0.45-0.91 ms per sample".
  std::string describe() const;

 private:
  std::vector<std::vector<double>> per_rank_;
  std::string origin_;
  std::optional<double> message_seconds_;
};

}  // namespace dctrain
