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
// destruction; the mask stays.
class StopSignals {
 public:
  StopSignals();
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

 private:
  int fd_ = -1;
  bool forwarding_ = false;
  struct sigaction previous_int_ {};  // restored on destruction when forwarding
  struct sigaction previous_term_ {};
};

}  // namespace dctrain
