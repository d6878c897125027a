// Predicted speedup of a threshold from a tau = inf baseline, by replaying
// the baseline's recorded steps: each worker's micro-batch times (compute
// plus injected delay, as measured) are run again under the rule of a step
// (start no micro-batch once the compute clock has passed tau); a step takes
// its slowest worker's compute plus the baseline's mean time outside compute
// (communication, reduce, update). Workers keep their rank, so a persistent
// straggler stays one.
#pragma once

#include <optional>

#include "tools/runs/run_folder.h"

namespace dctrain {

struct Prediction {
  double step_seconds_inf = 0.0;   // mean predicted step time at tau = inf
  double step_seconds_tau = 0.0;   // mean predicted step time under tau
  double completed_fraction = 1.0; // micro-batches completed / planned under tau
  double speedup = 1.0;            // samples/s under tau over samples/s at tau = inf
  size_t steps = 0;                // baseline steps replayed
};

// Nothing when the baseline has no step with micro-batch times.
std::optional<Prediction> predict_speedup(const RunFolder& baseline, double tau);

}  // namespace dctrain
