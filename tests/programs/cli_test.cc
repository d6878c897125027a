// The two programs answer --help and --version as a user expects.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/child_process.h"
#include "common/version.h"
#include "tests/testing/paths.h"

namespace dctrain {
namespace {

struct Result {
  int status = -1;  // the shell's number
  std::string output;
};

// Runs `argv` (stdout and stderr together), at most 60 s.
Result run(std::vector<std::string> argv) {
  ChildOptions options;
  options.argv = std::move(argv);
  const CommandResult r = run_command(std::move(options), std::chrono::seconds(60));
  return {r.timed_out ? 124 : r.status.shell_code(), r.output};
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "missing '" << part << "' in:\n" << text;
}

TEST(Programs, CoordinatorHelpListsEveryFlagWithDefaults) {
  const Result r = run({testing::program("dctrain-coordinator"), "--help"});
  EXPECT_EQ(r.status, 0);
  for (const char* flag :
       {"--config", "--bind", "--out", "--resume", "--workers", "--tau", "--steps", "--log-level",
        "--version", "--help", "--secret-key", "--allowed-keys", "--insecure", "--overwrite"}) {
    expect_contains(r.output, flag);
  }
  // Loopback by default: reaching other hosts takes keys or --insecure.
  expect_contains(r.output, "tcp://127.0.0.1:5555");
  // A new folder per run by default, so that no run lands on another's.
  expect_contains(r.output, "runs/NAME-YYYYMMDD-HHMMSS");
}

TEST(Programs, WorkerHelpListsEveryFlagWithDefaults) {
  const Result r = run({testing::program("dctrain-worker"), "--help"});
  EXPECT_EQ(r.status, 0);
  for (const char* flag : {"--connect", "--data-dir", "--threads", "--name", "--log-level",
                           "--version", "--help", "--secret-key", "--coordinator-key"}) {
    expect_contains(r.output, flag);
  }
  expect_contains(r.output, "tcp://127.0.0.1:5555");
}

TEST(Programs, VersionNamesReleaseAndProtocol) {
  for (const char* program : {"dctrain-coordinator", "dctrain-worker"}) {
    const Result r = run({testing::program(program), "--version"});
    EXPECT_EQ(r.status, 0);
    expect_contains(r.output, std::string(program) + " " + kVersion);
    expect_contains(r.output, "protocol " + std::to_string(kProtocolVersion));
  }
}

TEST(Programs, BadFlagIsAClearErrorNotACrash) {
  const Result r = run({testing::program("dctrain-worker"), "--threads", "0"});
  EXPECT_NE(r.status, 0);
  expect_contains(r.output, "--threads");
}

}  // namespace
}  // namespace dctrain
