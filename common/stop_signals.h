// SIGINT and SIGTERM as a file descriptor the main loop polls, delivered
// whichever thread the kernel picks.
#pragma once

#include <signal.h>

namespace dctrain {

// Blocks SIGINT and SIGTERM in the calling thread (threads it starts later
// inherit the mask) and opens a signalfd for them. Blocking is not enough on
// its own: threads that exist before main() (OpenBLAS starts its pool from a
// library constructor) have them unblocked, and the kernel hands a
// process-directed signal to such a thread. With the default action that
// kills the process at once (no bye, no summary); where the program is PID 1
// of a container the signal is discarded instead, so `docker stop` waits
// and then kills it. So, when constructed on the main thread, it also
// installs a handler that sends the signal on to the main thread, where it
// stays pending until read from fd(). The previous handlers come back on
// destruction; the mask stays, unless constructed with MaskAfter::kRestore.
//
// The programs that start children (dctrain-launch, dctrain-experiment)
// read their Ctrl-C here too and forward it; ChildProcess starts children
// with an empty mask, so they do not inherit the block.
class StopSignals {
 public:
  // The signal mask after destruction. kKeep suits a program's main (a
  // signal that comes while it shuts down stays pending, harmless); kRestore
  // suits a library call that blocks them only while it runs (a signal
  // still pending then is delivered as the restored mask allows).
  enum class MaskAfter { kKeep, kRestore };

  explicit StopSignals(MaskAfter after = MaskAfter::kKeep);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Readable when a signal is pending; -1 if the signalfd could not be made.
  int fd() const { return fd_; }
  // The pending signal's number (SIGINT or SIGTERM), or 0 when none is.
  // 0 also after fd() polled readable: a process-directed signal makes the
  // fd readable, and may then be handed to another thread, whose handler
  // sends it on to the main thread a moment later. So a caller treats 0 as
  // "nothing yet" and polls again, never as a signal.
  int take();
  // Takes every pending signal: the number of the last, or 0 when none was
  // pending (with take()'s "nothing yet" meaning).
  int take_all();

 private:
  int fd_ = -1;
  bool forwarding_ = false;
  bool restore_mask_ = false;
  sigset_t previous_mask_{};
  struct sigaction previous_int_ {};  // restored on destruction when forwarding
  struct sigaction previous_term_ {};
};

}  // namespace dctrain
