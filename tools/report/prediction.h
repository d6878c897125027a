// Predicted speedup of a threshold from a tau = inf baseline, with the
// coordinator's threshold model (coordinator/threshold.h): the baseline's
// recorded steps replayed under tau (each worker keeps its rank and its
// measured micro-batch times, injected delay included, and starts none once
// its compute clock has reached tau); a step takes its slowest worker plus
// the baseline's mean time outside compute. So a persistent straggler stays
// one.
#pragma once

#include <optional>

#include "tools/runs/run_folder.h"

namespace dctrain {

struct Prediction {
  double step_seconds_inf = 0.0;    // mean predicted step time at tau = inf
  double step_seconds_tau = 0.0;    // mean predicted step time under tau
  double completed_fraction = 1.0;  // micro-batches started / planned under tau
  double speedup = 1.0;             // completed micro-batches per second, over tau = inf's
  size_t steps = 0;                 // baseline steps replayed
};

// Nothing when the baseline has no step with micro-batch times.
std::optional<Prediction> predict_speedup(const RunFolder& baseline, double tau);

}  // namespace dctrain
