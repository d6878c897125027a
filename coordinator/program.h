// The dctrain-coordinator program: config, run folder, logs, the ROUTER, and
// the loop that feeds the Coordinator its messages and the clock.
#pragma once

#include "coordinator/options.h"

namespace dctrain {

// Runs a whole job; returns the process exit code (0: the run finished).
int run_coordinator(CoordinatorOptions options);

}  // namespace dctrain
