// Exit codes of dctrain-coordinator: its names for the common table
// (common/exit_codes.h).
#pragma once

#include "common/exit_codes.h"

namespace dctrain {

inline constexpr int kCoordinatorDone = kExitDone;      // a stop criterion; summary.json written
inline constexpr int kCoordinatorFailed = kExitFailed;  // bad steps, no workers...
inline constexpr int kCoordinatorUsage = kExitUsage;    // a bad flag, config, key or run folder
inline constexpr int kCoordinatorRunFolderFailed = kExitRunFolderFailed;
inline constexpr int kCoordinatorInterrupted = kExitInterrupted;

}  // namespace dctrain
