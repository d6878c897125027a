// One exit-code table for every program (common/exit_codes.h): each program
// run into each class of error it can meet before it starts, and the
// messages that name the cause (a mistyped flag or config field with its
// nearest names, a coordinator host that does not resolve).
#include "common/exit_codes.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/child_process.h"
#include "tests/testing/paths.h"

namespace dctrain {
namespace {

namespace fs = std::filesystem;

class ExitCodes : public ::testing::Test {
 protected:
  // The program's exit status (124 if it ran past 60 s); its stdout and
  // stderr together in output_.
  int run(const std::string& program, const std::vector<std::string>& args) {
    ChildOptions options;
    options.argv = {testing::program(program)};
    options.argv.insert(options.argv.end(), args.begin(), args.end());
    options.working_directory = dir_;
    const CommandResult r = run_command(std::move(options), std::chrono::seconds(60));
    output_ = r.output;
    return r.timed_out ? 124 : r.status.shell_code();
  }
  const testing::ScratchDir dir_{"exit"};
  std::string output_;
};

const std::vector<std::string> kPrograms = {
    "dctrain-coordinator", "dctrain-worker", "dctrain-launch", "dctrain-keygen",
    "dctrain-experiment",  "dctrain-report", "dctrain-export"};

TEST_F(ExitCodes, HelpAndVersionAreDoneAndEveryCommandLineErrorIsUsage) {
  for (const std::string& program : kPrograms) {
    EXPECT_EQ(run(program, {"--help"}), kExitDone) << program << "\n" << output_;
    EXPECT_EQ(run(program, {"--version"}), kExitDone) << program << "\n" << output_;
    EXPECT_NE(output_.find("(protocol "), std::string::npos) << program << "\n" << output_;
    // An unknown flag: CLI11 exits 109 by itself; the table says 2.
    EXPECT_EQ(run(program, {"--no-such-flag"}), kExitUsage) << program << "\n" << output_;
    // A bad value (CLI11's 105).
    EXPECT_EQ(run(program, {"--log-level", "loud"}), kExitUsage) << program << "\n" << output_;
  }
  // Required flags missing.
  EXPECT_EQ(run("dctrain-report", {}), kExitUsage) << output_;
  EXPECT_EQ(run("dctrain-export", {"runs/x"}), kExitUsage) << output_;  // no --out
  EXPECT_EQ(run("dctrain-coordinator", {"--config", (dir_ / "missing.cfg").string()}), kExitUsage)
      << output_;
  EXPECT_EQ(run("dctrain-launch", {"--workers", "0"}), kExitUsage) << output_;
  EXPECT_EQ(run("dctrain-launch", {}), kExitUsage) << output_;
  EXPECT_NE(output_.find("pass --config FILE"), std::string::npos) << output_;
}

TEST_F(ExitCodes, AMistypedFlagIsNamedWithTheNearestOnes) {
  EXPECT_EQ(run("dctrain-launch", {"--worker", "2"}), kExitUsage);
  EXPECT_NE(output_.find("--worker: no such flag (did you mean --workers?)"), std::string::npos)
      << output_;
  EXPECT_EQ(run("dctrain-worker", {"--conect", "tcp://127.0.0.1:1"}), kExitUsage);
  EXPECT_NE(output_.find("--conect: no such flag (did you mean --connect?)"), std::string::npos)
      << output_;
  // Nothing near: no suggestion, the error alone.
  EXPECT_EQ(run("dctrain-report", {"--zzzzzzzzzz"}), kExitUsage);
  EXPECT_EQ(output_.find("did you mean"), std::string::npos) << output_;
}

TEST_F(ExitCodes, AMistypedConfigFieldIsNamedWithTheNearestAndNoRunFolderIsMade) {
  std::ofstream(dir_ / "typo.cfg") << "name: \"typo\"\nworkers: 2\nmodel { name: \"mlp\" }\n"
                                      "dataset { kind: \"synthetic\" }\n"
                                      "step { globel_batch: 64 micro_batch: 8 }\n";
  const fs::path out = dir_ / "run";
  EXPECT_EQ(
      run("dctrain-launch", {"--config", (dir_ / "typo.cfg").string(), "--out", out.string()}),
      kExitUsage);
  EXPECT_NE(output_.find("typo.cfg:5:20: Message type \"dctrain.v1.StepConfig\" has no field named "
                         "\"globel_batch\". (did you mean 'global_batch'?)"),
            std::string::npos)
      << output_;
  EXPECT_FALSE(fs::exists(out)) << "a config that does not parse makes no run folder";
  EXPECT_EQ(run("dctrain-coordinator", {"--config", (dir_ / "typo.cfg").string(), "--out",
                                        out.string(), "--bind", "tcp://127.0.0.1:*"}),
            kExitUsage);
  EXPECT_NE(output_.find("(did you mean 'global_batch'?)"), std::string::npos) << output_;
  EXPECT_FALSE(fs::exists(out)) << "a config that does not parse makes no run folder";
}

TEST_F(ExitCodes, TheLauncherSendsItsChildrensErrorsToStderrAndTheRestToStdout) {
  // A run whose data is missing: the coordinator logs an error and exits.
  std::ofstream(dir_ / "m.cfg")
      << "name: \"m\"\nworkers: 1\nmodel { name: \"mnist-cnn\" }\n"
         "dataset { kind: \"mnist\" }\n"
         "optimizer { kind: \"sgd\" lr: 0.05 }\n"
         "step { global_batch: 8 micro_batch: 8 }\nstop { max_steps: 1 }\n";
  fs::create_directories(dir_ / "empty");
  const std::string launch = fmt::format(
      "'{}' --config '{}' --data-dir '{}' --out '{}'", testing::program("dctrain-launch"),
      (dir_ / "m.cfg").string(), (dir_ / "empty").string(), (dir_ / "run").string());
  const auto shell = [&](const std::string& command) {
    ChildOptions options;
    options.argv = {"/bin/sh", "-c", command};
    return run_command(std::move(options), std::chrono::seconds(60));
  };
  const CommandResult only_stdout = shell(launch + " 2>/dev/null");
  const CommandResult only_stderr = shell(launch + " 1>/dev/null");
  EXPECT_EQ(only_stdout.status.shell_code(), kExitFailed) << only_stdout.output;
  EXPECT_NE(only_stdout.output.find("[coordinator] "), std::string::npos) << only_stdout.output;
  EXPECT_EQ(only_stdout.output.find("[error]"), std::string::npos) << only_stdout.output;
  EXPECT_NE(only_stderr.output.find("[coordinator] "), std::string::npos) << only_stderr.output;
  EXPECT_NE(only_stderr.output.find("] [error] "), std::string::npos) << only_stderr.output;
  EXPECT_NE(only_stderr.output.find("file not found"), std::string::npos) << only_stderr.output;
  EXPECT_EQ(only_stderr.output.find("] [info] "), std::string::npos) << only_stderr.output;
}

TEST_F(ExitCodes, ACoordinatorHostThatDoesNotResolveIsNamedAsTheCause) {
  // ".invalid" never resolves (RFC 2606); without a network the lookup
  // fails as well, only perhaps more slowly.
  EXPECT_EQ(run("dctrain-worker",
                {"--connect", "tcp://no-such-host.invalid:5555", "--connect-timeout", "5"}),
            kExitUsage);
  EXPECT_NE(output_.find("the coordinator's host 'no-such-host.invalid' (--connect "
                         "tcp://no-such-host.invalid:5555) does not resolve"),
            std::string::npos)
      << output_;
  EXPECT_EQ(output_.find("--exchange-bind"), std::string::npos)
      << "the cause is the coordinator's name, not the exchange address\n"
      << output_;
}

}  // namespace
}  // namespace dctrain
