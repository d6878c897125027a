// Exit codes of dctrain-coordinator (docs/failure-handling.md lists them).
#pragma once

namespace dctrain {

inline constexpr int kCoordinatorDone = 0;    // a stop criterion was reached; summary.json written
inline constexpr int kCoordinatorFailed = 1;  // the run failed (logged: bad steps, no workers...)
inline constexpr int kCoordinatorUsage = 2;   // a bad flag, config, key or run folder
// A write to the run folder failed (a full disk): the run stopped, its
// temporary files removed; --resume continues it once there is space.
inline constexpr int kCoordinatorRunFolderFailed = 3;
inline constexpr int kCoordinatorInterrupted = 130;  // SIGINT / SIGTERM

}  // namespace dctrain
