// Exit codes of dctrain-worker: what run_worker() returns, and what the
// worker's session and compute side decide.
#pragma once

namespace dctrain {

inline constexpr int kWorkerDone = 0;      // the run ended; replica identical to the coordinator's
inline constexpr int kWorkerFailed = 1;    // a fatal problem (logged)
inline constexpr int kWorkerRefused = 2;   // the coordinator refused this worker
inline constexpr int kWorkerDiverged = 3;  // the final replica differs from the coordinator's
inline constexpr int kWorkerNoCoordinator =
    4;  // no answer from the coordinator within --connect-timeout
inline constexpr int kWorkerReleased =
    5;  // released from the run (missed too many deadlines in a row)
inline constexpr int kWorkerInterrupted = 130;  // SIGINT / SIGTERM

}  // namespace dctrain
