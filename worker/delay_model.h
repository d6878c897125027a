// Injected delay after each micro-batch, counted as compute time. Seeded per
// worker (delay seed, rank), so a run's delays are reproducible.
//
//   none         0
//   constant     seconds
//   exponential  exponential with mean `seconds`
//   dropcompute  X * t * 0.5 * factor after a micro-batch of time t, X drawn
//                from the log-normal (mu 4, sigma 1) discretised on 1..999
//                and rescaled to mean 1 (the DropCompute paper's model)
//   bimodal      stall_seconds with probability `probability`, else 0
// and, whatever the kind, (slowdown - 1) * t for the ranks in slow_workers.
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

  // The DropCompute multiplier X (mean 1), for tests and the benchmark.
  double draw_dropcompute_factor();

 private:
  v1::DelayConfig config_;
  bool slow_ = false;
  Rng rng_;
  std::vector<double> cdf_;    // dropcompute: P(K <= k) for k = 1..999
  double mean_k_ = 1.0;
};

}  // namespace dctrain
