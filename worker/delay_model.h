// Injected delay after each micro-batch, counted as compute time. Seeded per
// worker (delay seed, rank), so a run's delays are reproducible.
//
//   none         0
//   constant     seconds
//   exponential  exponential with mean `seconds`
//   dropcompute  X * t * 0.5 * factor after a micro-batch of time t, X drawn
//                from the log-normal (mu 4, sigma 1) discretised on 1..999
//                and rescaled to mean 1 (the DropCompute paper's model);
//                with `seconds` > 0, that much compute stand-in is slept
//                first and counts in t: s + X * (t + s) * 0.5 * factor (so
//                that workers sharing cores behave as devices of their own)
//   bimodal      stall_seconds with probability `probability`, else 0
// and, whatever the kind, the ranks in slow_workers take `slowdown` times as
// long for the whole micro-batch: (slowdown - 1) * (t + delay) more.
//
// With cap_at_tau (the DropCompute authors' form) the compute loop cuts each
// delay at the time left before tau on the step compute clock, so the
// micro-batch that crosses tau overshoots by its own compute only; without
// it (the default) the whole delay is slept, and that micro-batch may
// overshoot tau by its delay too (up to ~5x its compute for dropcompute).
#pragma once

#include <cstdint>
#include <vector>

#include "common/random.h"
#include "proto/config.pb.h"

namespace dctrain {

class DelayModel {
 public:
  DelayModel(const v1::DelayConfig& config, uint32_t rank);

  // Seconds to add after a micro-batch that computed for `compute_seconds`.
  double delay_after(double compute_seconds);
  // Whether a delay stops at tau (DelayConfig.cap_at_tau).
  bool caps_at_tau() const { return config_.cap_at_tau(); }

  // The DropCompute multiplier X (mean 1), for tests and the benchmark.
  double draw_dropcompute_factor();

 private:
  v1::DelayConfig config_;
  bool slow_ = false;
  Rng rng_;
  std::vector<double> cdf_;  // dropcompute: P(K <= k) for k = 1..999
  double mean_k_ = 1.0;
};

}  // namespace dctrain
