// The run's flags (common/run_flags.h), declared once for dctrain-coordinator
// and dctrain-launch: what one command line sets comes back as the arguments
// the launcher passes on, and nothing left at its default is passed.
#include "common/run_flags.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <vector>

#include "tests/testing/paths.h"

namespace dctrain {
namespace {

RunFlags parse(std::vector<std::string> args) {
  CLI::App app;
  RunFlags flags;
  add_run_flags(app, flags);
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  app.parse(args);
  return flags;
}

TEST(RunFlags, WhatACommandLineSetsComesBackAsTheSameArguments) {
  const testing::ScratchDir dir("run-flags");
  const std::string config = (dir / "run.cfg").string();
  std::ofstream(config) << "name: \"x\"\n";
  const std::vector<std::string> given = {"--config",    config,
                                          "--out",       (dir / "out").string(),
                                          "--overwrite", "--data-dir",
                                          dir.string(),  "--tau",
                                          "auto",        "--steps",
                                          "7",           "--metrics-port",
                                          "0",           "--metrics-address",
                                          "0.0.0.0"};
  EXPECT_EQ(run_flag_arguments(parse(given)), given);
}

TEST(RunFlags, NothingLeftAtItsDefaultIsPassedOn) {
  EXPECT_TRUE(run_flag_arguments(parse({})).empty());
  const testing::ScratchDir dir("run-flags-resume");
  EXPECT_EQ(run_flag_arguments(parse({"--resume", dir.string()})),
            (std::vector<std::string>{"--resume", dir.string()}));
}

TEST(RunFlags, TheirChecksRefuseWhatCannotBeARun) {
  EXPECT_THROW(parse({"--config", "/nonexistent/run.cfg"}), CLI::ValidationError);
  EXPECT_THROW(parse({"--steps", "-1"}), CLI::ValidationError);
  EXPECT_THROW(parse({"--metrics-port", "70000"}), CLI::ValidationError);
}

}  // namespace
}  // namespace dctrain
