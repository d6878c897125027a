// dctrain-launch's supervision of its children (tools/launch/supervisor.h),
// with small shell children: their lines prefixed and sorted by level, the
// launcher's status from theirs, a worker that outstays the coordinator
// killed, a stop signal forwarded.
#include "tools/launch/supervisor.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "common/exit_codes.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> shell(const std::string& script) { return {"/bin/sh", "-c", script}; }

// A temporary stream and what was written to it.
class Captured {
 public:
  Captured() : file_(std::tmpfile()) {}
  ~Captured() { std::fclose(file_); }
  FILE* file() { return file_; }
  std::string text() {
    std::fflush(file_);
    std::rewind(file_);
    std::string out;
    for (int c; (c = std::fgetc(file_)) != EOF;) out += static_cast<char>(c);
    return out;
  }

 private:
  FILE* file_;
};

class SupervisorTest : public ::testing::Test {
 protected:
  Supervisor make(std::chrono::milliseconds grace = 20000ms) {
    SupervisorOptions options;
    options.out = out.file();
    options.err = err.file();
    options.workers_after_coordinator = grace;
    return Supervisor(options);
  }
  Captured out, err;
  StopSignals signals;
};

TEST_F(SupervisorTest, LinesArePrefixedAndWarningsAndErrorsGoToTheErrorStream) {
  Supervisor s = make();
  s.start("worker 0", shell("printf 'one\\n[t] [error] bad\\n[t] [warning] odd\\nlast'"));
  EXPECT_EQ(s.supervise(false, signals, ""), kExitDone);
  EXPECT_EQ(out.text(), "[worker 0] one\n[worker 0] last\n");
  EXPECT_EQ(err.text(), "[worker 0] [t] [error] bad\n[worker 0] [t] [warning] odd\n");
}

TEST_F(SupervisorTest, TheCoordinatorsStatusSaysTheMostAndAReleasedWorkerIsNoFailure) {
  {
    Supervisor s = make();
    s.start("coordinator", shell("exit 0"));
    s.start("worker 0", shell("exit " + std::to_string(kExitReleased)));
    EXPECT_EQ(s.supervise(true, signals, "runs/x"), kExitDone);
    EXPECT_NE(out.text().find("run folder runs/x"), std::string::npos) << out.text();
    EXPECT_NE(err.text().find("worker 0 was released from the run"), std::string::npos);
  }
  {
    Supervisor s = make();
    s.start("coordinator", shell("exit 3"));
    s.start("worker 0", shell("exit 1"));
    EXPECT_EQ(s.supervise(true, signals, ""), 3);
  }
  {
    Supervisor s = make();
    s.start("coordinator", shell("exit 0"));
    s.start("worker 0", shell("exit 1"));
    EXPECT_EQ(s.supervise(true, signals, ""), kExitFailed);
    EXPECT_NE(err.text().find("worker 0 exited with status 1"), std::string::npos) << err.text();
  }
}

TEST_F(SupervisorTest, AWorkerStillRunningAfterTheCoordinatorsGraceIsKilled) {
  Supervisor s = make(200ms);
  s.start("coordinator", shell("exit 0"));
  s.start("worker 0", {"/bin/sleep", "60"});
  const auto begin = std::chrono::steady_clock::now();
  EXPECT_EQ(s.supervise(true, signals, ""), kExitFailed);
  // Bounded by the grace, not by the worker's 60 s.
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 30s);
  EXPECT_NE(err.text().find("worker 0 still running 0.2 s after the coordinator; killing it"),
            std::string::npos)
      << err.text();
  EXPECT_EQ(s.children()[1].status, 128 + SIGKILL);
}

TEST_F(SupervisorTest, AFailedCoordinatorsWorkersAreStoppedAtOnceAndTheReasonSaid) {
  // No bye will come: the workers get SIGTERM when the coordinator fails,
  // not the 20 s a finished run gives them, and the status line says why.
  Supervisor s = make();
  s.start("coordinator", shell("exit 1"));
  s.start("worker 0", {"/bin/sleep", "60"});
  EXPECT_EQ(s.supervise(true, signals, ""), kExitFailed);
  EXPECT_EQ(s.children()[1].status, 128 + SIGTERM);
  EXPECT_NE(err.text().find("the coordinator exited with status 1; stopping the workers"),
            std::string::npos)
      << err.text();
  EXPECT_NE(err.text().find("worker 0 exited with status 143 (stopped by dctrain-launch after the "
                            "coordinator failed)"),
            std::string::npos)
      << err.text();
  EXPECT_EQ(err.text().find("still running"), std::string::npos) << err.text();
}

TEST_F(SupervisorTest, AStopSignalIsForwardedAndTheStatusSaysInterrupted) {
  Supervisor s = make();
  s.start("worker 0", {"/bin/sleep", "60"});
  // Blocked by StopSignals: it waits on the signal's descriptor.
  ASSERT_EQ(::raise(SIGINT), 0);
  EXPECT_EQ(s.supervise(false, signals, ""), kExitInterrupted);
  EXPECT_NE(err.text().find("signal 2: stopping the run"), std::string::npos) << err.text();
  EXPECT_EQ(s.children()[0].status, 128 + SIGINT);
}

}  // namespace
}  // namespace dctrain
