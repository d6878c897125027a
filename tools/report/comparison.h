// Each case of an experiment against its baseline row (tau = inf, sync):
// speedups on time to target and samples/s with their intervals and seed
// tests, the checks near the target and of the host, and the replay's
// predicted speedups and curves.
#pragma once

#include "tools/report/report.h"

namespace dctrain {

// Fills the comparison fields of every row of `e` (e.baseline_row set) and
// e.predicted.
void compare_with_baseline(Experiment& e);

}  // namespace dctrain
