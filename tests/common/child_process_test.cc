// ChildProcess and run_command against real programs (/bin/sh, /bin/sleep,
// /usr/bin/env, /bin/pwd): exit codes, deaths by signal, the time limit,
// captured output, the environment and folder given, a parent's blocked
// signals not passed on, and nothing left running or unreaped.
#include "common/child_process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/files.h"
#include "common/stop_signals.h"
#include "tests/testing/paths.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kShell = "/bin/sh";

ChildOptions shell(const std::string& script) {
  ChildOptions o;
  o.argv = {kShell, "-c", script};
  return o;
}

// Whether `pid` is gone (or a zombie nobody here can reap: its parent died
// and whoever adopted it has not reaped it yet; it runs no more).
bool ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

template <typename Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  while (Clock::now() < until) {
    if (predicate()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return predicate();
}

TEST(ChildProcess, ReportsTheExitCode) {
  ChildProcess child(shell("exit 3"));
  const ExitStatus s = child.wait();
  EXPECT_TRUE(s.exited());
  EXPECT_FALSE(s.success());
  EXPECT_EQ(s.code, 3);
  EXPECT_EQ(s.signal, 0);
  EXPECT_EQ(s.shell_code(), 3);
  EXPECT_EQ(s.describe(), "exit code 3");
  ASSERT_TRUE(child.status().has_value());
  EXPECT_EQ(child.status()->code, 3);
  // Reaped once: asking again gives the same answer, not an error.
  EXPECT_EQ(child.wait().code, 3);
  EXPECT_EQ(child.poll()->code, 3);
}

TEST(ChildProcess, ReportsADeathBySignal) {
  ChildProcess child(shell("kill -TERM $$; sleep 5"));
  const ExitStatus s = child.wait();
  EXPECT_FALSE(s.exited());
  EXPECT_EQ(s.signal, SIGTERM);
  EXPECT_EQ(s.shell_code(), 128 + SIGTERM);
  EXPECT_NE(s.describe().find("killed by signal 15"), std::string::npos) << s.describe();
}

TEST(ChildProcess, SignalReachesTheChild) {
  ChildOptions o;
  o.argv = {"/bin/sleep", "30"};
  ChildProcess child(std::move(o));
  EXPECT_FALSE(child.poll().has_value());
  child.signal(SIGINT);
  const auto s = child.wait_for(10s);
  ASSERT_TRUE(s.has_value()) << "sleep did not end on SIGINT";
  EXPECT_EQ(s->signal, SIGINT);
}

TEST(ChildProcess, WaitForGivesUpAfterItsTimeoutAndKillEndsIt) {
  ChildOptions o;
  o.argv = {"/bin/sleep", "30"};
  ChildProcess child(std::move(o));
  const auto t0 = Clock::now();
  EXPECT_FALSE(child.wait_for(150ms).has_value());
  const auto waited = Clock::now() - t0;
  EXPECT_GE(waited, 150ms);
  EXPECT_LT(waited, 5s);
  EXPECT_FALSE(child.poll().has_value()) << "still running";
  const ExitStatus s = child.kill();
  EXPECT_EQ(s.signal, SIGKILL);
}

TEST(RunCommand, CapturesStdoutAndStderrTogether) {
  const CommandResult r = run_command(shell("echo out; echo err >&2; exit 4"));
  EXPECT_FALSE(r.timed_out);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status.code, 4);
  EXPECT_EQ(r.output, "out\nerr\n");
  const CommandResult fine = run_command(shell("printf 'no newline'"));
  EXPECT_TRUE(fine.ok());
  EXPECT_EQ(fine.output, "no newline");
}

TEST(RunCommand, KillsTheWholeGroupWhenTheTimeRunsOut) {
  // The shell starts a grandchild, prints its pid and waits: both must go.
  const auto t0 = Clock::now();
  const CommandResult r = run_command(shell("sleep 30 & echo $!; wait"), 300ms);
  const auto took = Clock::now() - t0;
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status.signal, SIGKILL);
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 10s);
  const pid_t grandchild = static_cast<pid_t>(std::atoi(r.output.c_str()));
  ASSERT_GT(grandchild, 0) << r.output;
  EXPECT_TRUE(eventually([&] { return ended(grandchild); }, 5s))
      << "sleep " << grandchild << " outlived the time limit";
}

TEST(ChildProcess, OutputFileIsTruncatedAndGetsBothStreams) {
  const testing::ScratchDir dir("child-file");
  std::ofstream(dir / "out.log") << "an older and much longer content that must not survive\n";
  ChildOptions o = shell("echo one; echo two >&2");
  o.output = ChildOutput::kFile;
  o.output_file = dir / "out.log";
  EXPECT_TRUE(ChildProcess(std::move(o)).wait().success());
  EXPECT_EQ(read_text_file(dir / "out.log"), "one\ntwo\n");
  std::filesystem::remove_all(dir);
}

TEST(ChildProcess, PipeIsReadWithoutBlockingUntilItsEnd) {
  // The child prints a line, then waits for the test to make a file: the
  // first line can only be read while it is still running.
  const testing::ScratchDir dir("child-pipe");
  ChildOptions o = shell("echo first; while [ ! -e '" + (dir / "go").string() +
                         "' ]; do sleep 0.01; done; "
                         "echo second");
  o.output = ChildOutput::kPipe;
  ChildProcess child(std::move(o));
  ASSERT_GE(child.output_fd(), 0);
  std::string text;
  EXPECT_TRUE(eventually(
      [&] {
        EXPECT_TRUE(child.read_output(text)) << "the pipe ended early";
        return text == "first\n";
      },
      10s))
      << text;
  EXPECT_FALSE(child.poll().has_value());
  std::ofstream(dir / "go") << "";
  EXPECT_TRUE(child.read_output_until_end(text, Clock::now() + 10s));
  EXPECT_EQ(text, "first\nsecond\n");
  EXPECT_EQ(child.output_fd(), -1);
  EXPECT_FALSE(child.read_output(text));
  EXPECT_TRUE(child.wait().success());
  std::filesystem::remove_all(dir);
}

TEST(ChildProcess, EnvironmentChangesApplyToTheChildOnly) {
  ::setenv("DCTRAIN_CHILD_TEST_KEPT", "kept", 1);
  ::setenv("DCTRAIN_CHILD_TEST_GONE", "gone", 1);
  ::setenv("DCTRAIN_CHILD_TEST_SET", "parent", 1);
  ChildOptions o;
  o.argv = {"/usr/bin/env"};
  o.set_environment = {{"DCTRAIN_CHILD_TEST_SET", "child"}, {"DCTRAIN_CHILD_TEST_NEW", "new"}};
  o.unset_environment = {"DCTRAIN_CHILD_TEST_GONE"};
  const CommandResult r = run_command(std::move(o));
  ASSERT_TRUE(r.ok()) << r.output;
  auto lines_starting = [&](const std::string& prefix) {
    size_t n = 0;
    for (size_t at = 0; at < r.output.size();) {
      const size_t end = r.output.find('\n', at);
      if (r.output.compare(at, prefix.size(), prefix) == 0) ++n;
      if (end == std::string::npos) break;
      at = end + 1;
    }
    return n;
  };
  EXPECT_EQ(lines_starting("DCTRAIN_CHILD_TEST_KEPT=kept\n"), 1u) << r.output;
  EXPECT_EQ(lines_starting("DCTRAIN_CHILD_TEST_SET="), 1u) << "set once, not twice:\n" << r.output;
  EXPECT_EQ(lines_starting("DCTRAIN_CHILD_TEST_SET=child\n"), 1u) << r.output;
  EXPECT_EQ(lines_starting("DCTRAIN_CHILD_TEST_NEW=new\n"), 1u) << r.output;
  EXPECT_EQ(lines_starting("DCTRAIN_CHILD_TEST_GONE="), 0u) << r.output;
  EXPECT_STREQ(std::getenv("DCTRAIN_CHILD_TEST_SET"), "parent");
  EXPECT_STREQ(std::getenv("DCTRAIN_CHILD_TEST_GONE"), "gone");
  for (const char* name :
       {"DCTRAIN_CHILD_TEST_KEPT", "DCTRAIN_CHILD_TEST_GONE", "DCTRAIN_CHILD_TEST_SET"})
    ::unsetenv(name);
}

TEST(ChildProcess, RunsInTheWorkingDirectoryGivenWithAnOutputFileOpenedBeforeIt) {
  const testing::ScratchDir dir("child-cwd");
  std::filesystem::create_directories(dir / "inside");
  ChildOptions o;
  o.argv = {"/bin/pwd"};
  o.working_directory = dir / "inside";
  o.output = ChildOutput::kFile;
  o.output_file = dir / "pwd.log";  // not inside/pwd.log
  EXPECT_TRUE(ChildProcess(std::move(o)).wait().success());
  EXPECT_EQ(read_text_file(dir / "pwd.log"),
            std::filesystem::canonical(dir / "inside").string() + "\n");
  EXPECT_FALSE(std::filesystem::exists(dir / "inside" / "pwd.log"));
  std::filesystem::remove_all(dir);
}

TEST(ChildProcess, AProgramThatCannotRunIsAnErrorNamingIt) {
  ChildOptions o;
  o.argv = {"/nonexistent/dctrain-program", "--flag"};
  try {
    ChildProcess child(std::move(o));
    FAIL() << "started a program that does not exist (pid " << child.pid() << ")";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot run /nonexistent/dctrain-program"), std::string::npos) << what;
    EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
  }
  ChildOptions unwritable = shell("true");
  unwritable.output = ChildOutput::kFile;
  unwritable.output_file = "/nonexistent/folder/out.log";
  EXPECT_THROW(ChildProcess(std::move(unwritable)), std::runtime_error);
  EXPECT_THROW(ChildProcess(ChildOptions{}), std::invalid_argument);
}

TEST(ChildProcess, DestructionKillsAndReapsAChildNotWaitedFor) {
  pid_t pid = -1;
  {
    ChildOptions o;
    o.argv = {"/bin/sleep", "30"};
    ChildProcess child(std::move(o));
    pid = child.pid();
    ASSERT_GT(pid, 0);
    EXPECT_FALSE(child.poll().has_value());
  }
  // Reaped: no longer this process's child, and no zombie left.
  int status = 0;
  errno = 0;
  EXPECT_EQ(::waitpid(pid, &status, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  EXPECT_TRUE(ended(pid));
}

TEST(ChildProcess, DestructionKillsItsOwnProcessGroup) {
  pid_t grandchild = -1;
  {
    ChildOptions o = shell("sleep 30 & echo $!; wait");
    o.output = ChildOutput::kPipe;
    o.own_process_group = true;
    ChildProcess child(std::move(o));
    std::string text;
    ASSERT_TRUE(eventually(
        [&] {
          child.read_output(text);
          return text.find('\n') != std::string::npos;
        },
        10s))
        << text;
    grandchild = static_cast<pid_t>(std::atoi(text.c_str()));
    ASSERT_GT(grandchild, 0) << text;
    EXPECT_EQ(::getpgid(grandchild), child.pid());
  }
  EXPECT_TRUE(eventually([&] { return ended(grandchild); }, 5s))
      << "sleep " << grandchild << " outlived its group's handle";
}

TEST(ChildProcess, MovedHandlesOwnTheChildOnce) {
  ChildOptions o;
  o.argv = {"/bin/sleep", "30"};
  std::vector<ChildProcess> children;
  children.emplace_back(std::move(o));
  ChildProcess moved = std::move(children.front());
  children.clear();  // the moved-from handle must not kill it
  EXPECT_FALSE(moved.poll().has_value()) << "the child died with its moved-from handle";
  EXPECT_EQ(moved.kill().signal, SIGKILL);
}

TEST(ChildProcess, TheParentsBlockedStopSignalsAreNotInherited) {
  // dctrain-launch blocks SIGINT and SIGTERM to read them from a signalfd;
  // its children must still die of them.
  StopSignals signals(StopSignals::MaskAfter::kRestore);
  ChildOptions o;
  o.argv = {"/bin/sleep", "30"};
  ChildProcess child(std::move(o));
  child.signal(SIGTERM);
  const auto s = child.wait_for(10s);
  ASSERT_TRUE(s.has_value()) << "the child kept SIGTERM blocked";
  EXPECT_EQ(s->signal, SIGTERM);
}

}  // namespace
}  // namespace dctrain
