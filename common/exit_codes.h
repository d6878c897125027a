// The exit statuses of every dctrain program: one table, one meaning per
// number, whichever program exits with it (docs/failure-handling.md, "Exit
// statuses"; a test runs each program into each class it can meet).
#pragma once

#include <stdexcept>

namespace dctrain {

inline constexpr int kExitDone = 0;    // did what it was asked (a run: a stop criterion)
inline constexpr int kExitFailed = 1;  // failed after it started (the log says why)
// Refused before anything started: a bad flag or value (command-line errors
// included), a config that does not parse or validate, a key, an input or
// a run folder; a worker the coordinator refused.
inline constexpr int kExitUsage = 2;
// A write to the run folder failed (a full disk): the run stopped cleanly
// and --resume continues it once there is space.
inline constexpr int kExitRunFolderFailed = 3;
inline constexpr int kExitNoCoordinator = 4;  // worker: no answer within --connect-timeout
inline constexpr int kExitReleased = 5;       // worker: released (missed too many steps in a row)
inline constexpr int kExitDiverged = 6;  // worker: its final replica differs from the coordinator's
inline constexpr int kExitInterrupted = 130;  // SIGINT or SIGTERM (the run ended cleanly)

// Thrown where a program finds out late that what it was given cannot work
// (a --connect host that does not resolve): its main exits kExitUsage.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace dctrain
