#include "common/stop_signals.h"

#include <errno.h>
#include <sys/signalfd.h>
#include <unistd.h>

namespace dctrain {

namespace {

// Runs on a thread that has the signal unblocked, never on the main thread
// (which blocks it). The main thread's id is the process id; there the
// signal stays pending until the signalfd is read. tgkill and getpid are
// plain system calls, safe in a handler.
extern "C" void forward_to_main_thread(int signal_number) {
  const int saved_errno = errno;
  ::tgkill(::getpid(), ::getpid(), signal_number);
  errno = saved_errno;
}

}  // namespace

StopSignals::StopSignals(MaskAfter after) : restore_mask_(after == MaskAfter::kRestore) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, &previous_mask_);
  fd_ = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  // Forwarding targets the main thread, so only a signalfd read there can
  // see what is forwarded.
  if (fd_ >= 0 && ::gettid() == ::getpid()) {
    struct sigaction forward {};
    forward.sa_handler = forward_to_main_thread;
    sigfillset(&forward.sa_mask);
    forward.sa_flags = SA_RESTART;
    ::sigaction(SIGINT, &forward, &previous_int_);
    ::sigaction(SIGTERM, &forward, &previous_term_);
    forwarding_ = true;
  }
}

StopSignals::~StopSignals() {
  // Handlers first: with the forwarding handler still in place, a pending
  // signal unblocked on the main thread would be sent back to it for ever.
  if (forwarding_) {
    ::sigaction(SIGINT, &previous_int_, nullptr);
    ::sigaction(SIGTERM, &previous_term_, nullptr);
  }
  if (fd_ >= 0) ::close(fd_);
  if (restore_mask_) pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
}

int StopSignals::take() {
  signalfd_siginfo info{};
  if (fd_ < 0 || ::read(fd_, &info, sizeof info) != sizeof info) return 0;
  return static_cast<int>(info.ssi_signo);
}

int StopSignals::take_all() {
  int last = 0;
  for (int s; (s = take()) != 0;) last = s;
  return last;
}

}  // namespace dctrain
