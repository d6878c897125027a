// StopSignals in one process: a SIGINT or SIGTERM sent to the process is
// read from its fd once (take() then says 0, "nothing yet"), also when the
// kernel hands it to a thread that has it unblocked (the forwarding
// handler sends it on to the main thread); the mask is kept or restored as
// asked.
#include "common/stop_signals.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace dctrain {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool blocked(int signal_number) {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, signal_number) == 1;
}

// Polls the fd and takes, as a main loop does, until a signal comes or
// `timeout` passes; 0 when none came.
int next_signal(StopSignals& signals, std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  while (Clock::now() < until) {
    pollfd fd{signals.fd(), POLLIN, 0};
    ::poll(&fd, 1, 50);
    if (const int s = signals.take(); s != 0) return s;
  }
  return 0;
}

TEST(StopSignals, ASignalToTheProcessIsTakenOnce) {
  ASSERT_FALSE(blocked(SIGTERM));
  StopSignals signals(StopSignals::MaskAfter::kRestore);
  ASSERT_GE(signals.fd(), 0);
  EXPECT_TRUE(blocked(SIGINT));
  EXPECT_TRUE(blocked(SIGTERM));
  EXPECT_EQ(signals.take(), 0) << "nothing sent yet";
  ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);
  EXPECT_EQ(next_signal(signals, 5s), SIGTERM);
  EXPECT_EQ(signals.take(), 0) << "taken once";
  ASSERT_EQ(::kill(::getpid(), SIGINT), 0);
  EXPECT_EQ(next_signal(signals, 5s), SIGINT);
}

TEST(StopSignals, TakeAllDrainsEveryPendingSignal) {
  StopSignals signals(StopSignals::MaskAfter::kRestore);
  EXPECT_EQ(signals.take_all(), 0);
  ASSERT_EQ(::kill(::getpid(), SIGINT), 0);
  ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);
  // Both are pending on the blocked main thread before kill() returns;
  // signalfd hands the lower number first, so the last is SIGTERM.
  EXPECT_EQ(signals.take_all(), SIGTERM);
  EXPECT_EQ(signals.take(), 0);
  EXPECT_EQ(signals.take_all(), 0);
}

TEST(StopSignals, ASignalHandedToAnotherThreadIsForwardedToTheMainThread) {
  // A thread started before the block keeps SIGTERM unblocked, as
  // OpenBLAS's pool does; the kernel hands a process-directed SIGTERM to it
  // (the main thread blocks it). Without forwarding the default action
  // would end this test program.
  std::atomic<bool> stop{false};
  std::thread unblocked([&] {
    while (!stop) std::this_thread::sleep_for(1ms);
  });
  {
    StopSignals signals(StopSignals::MaskAfter::kRestore);
    for (int i = 0; i < 20; ++i) {
      ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);
      ASSERT_EQ(next_signal(signals, 5s), SIGTERM) << "signal " << i << " was lost";
    }
    EXPECT_EQ(signals.take_all(), 0);
  }
  stop = true;
  unblocked.join();
}

TEST(StopSignals, TheMaskIsKeptOrRestoredAsAsked) {
  ASSERT_FALSE(blocked(SIGINT));
  { StopSignals signals(StopSignals::MaskAfter::kRestore); }
  EXPECT_FALSE(blocked(SIGINT));
  EXPECT_FALSE(blocked(SIGTERM));
  { StopSignals signals; }  // a program's main: the mask stays
  EXPECT_TRUE(blocked(SIGINT));
  EXPECT_TRUE(blocked(SIGTERM));
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

}  // namespace
}  // namespace dctrain
