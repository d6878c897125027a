// The dctrain-coordinator program: config, run folder, logs, the ROUTER, and
// the loop that feeds the Coordinator its messages and the clock.
#pragma once

#include "common/blas_core.h"
#include "coordinator/program/options.h"

namespace dctrain {

// Runs a whole job; returns the process exit code (0: the run finished).
// `blas` (what this process settled on, common/blas_runtime.h) is logged and
// recorded in summary.json.
int run_coordinator(CoordinatorOptions options, const BlasReport& blas);

}  // namespace dctrain
