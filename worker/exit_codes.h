// Exit codes of dctrain-worker: what run_worker() returns, named for the
// worker, from the common table (common/exit_codes.h).
#pragma once

#include "common/exit_codes.h"

namespace dctrain {

inline constexpr int kWorkerDone =
    kExitDone;  // the run ended; replica identical to the coordinator's
inline constexpr int kWorkerFailed = kExitFailed;      // a fatal problem (logged)
inline constexpr int kWorkerRefused = kExitUsage;      // the coordinator refused this worker
inline constexpr int kWorkerDiverged = kExitDiverged;  // the final replica differs
inline constexpr int kWorkerNoCoordinator = kExitNoCoordinator;
inline constexpr int kWorkerReleased = kExitReleased;
inline constexpr int kWorkerInterrupted = kExitInterrupted;

}  // namespace dctrain
