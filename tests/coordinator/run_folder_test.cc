// The run folder when the disk says no: each write the coordinator makes
// (a metrics record, a checkpoint, the summary, the trace) fails in turn
// with ENOSPC, injected in the file layer (common/files.h, set_fault), as a
// test cannot mount a small filesystem. Each time the run stops with
// kCoordinatorRunFolderFailed, says which file and why, sends its byes and
// leaves no temporary file.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/files.h"
#include "coordinator/exit_codes.h"
#include "runtime/checkpoint.h"
#include "tests/coordinator/coordinator_fixture.h"

namespace dctrain {
namespace {

const char* kConfig = R"(
name: "folder"
seed: 5
workers: 2
model { name: "mlp" image_channels: 1 image_height: 8 image_width: 8 }
dataset { kind: "synthetic" synthetic_samples: 600 train_limit: 240 }
optimizer { kind: "sgd" lr: 0.1 momentum: 0.9 }
step { global_batch: 16 micro_batch: 4 tau: inf }
liveness { heartbeat_seconds: 0.5 silence_seconds: 10 grace_seconds: 0.5 join_timeout_seconds: 120 }
checkpoint { every_steps: 2 }
trace { every_steps: 1 }
stop { max_steps: 6 }
)";

class RunFolderTest : public testing::CoordinatorFixture {
 protected:
  RunFolderTest() : CoordinatorFixture(kConfig, "run-folder") { order = {"a", "b"}; }
  void TearDown() override {
    clear_faults();
    CoordinatorFixture::TearDown();
  }

  // Runs until the coordinator stops.
  void run() {
    start();
    for (const std::string& name : order) hello(name);
    coordinator->tick(now);
    pump();
    ASSERT_TRUE(coordinator->finished()) << log.text.str();
  }

  std::vector<std::string> temporary_files() const {
    std::vector<std::string> out;
    for (const auto& entry : std::filesystem::directory_iterator(run_dir)) {
      if (entry.path().extension() == ".tmp") out.push_back(entry.path().filename().string());
    }
    return out;
  }

  // The run stopped for `file`: the status, the message, byes, no .tmp.
  void expect_stopped_for(const std::string& file) {
    EXPECT_EQ(coordinator->exit_code(), kCoordinatorRunFolderFailed) << log.text.str();
    const std::string text = log.text.str();
    EXPECT_NE(text.find(file + "' failed: No space left on device (it needs "), std::string::npos)
        << text;
    EXPECT_NE(text.find("'" + run_dir.string() + "' has "), std::string::npos)
        << "the folder and its free space are named: " << text;
    EXPECT_EQ(byes.size(), 2u) << "every worker got its bye";
    EXPECT_TRUE(temporary_files().empty()) << temporary_files().front();
  }
};

TEST_F(RunFolderTest, AFailedMetricsRecordStopsTheRunAndLeavesNoTornLine) {
  set_fault("enospc:write:metrics.jsonl:3");
  run();
  expect_stopped_for("metrics.jsonl");
  EXPECT_NE(coordinator->stop_reason().find("--resume " + run_dir.string()), std::string::npos)
      << coordinator->stop_reason();
  // Steps 0 and 1 recorded, then the failed write: no part of step 2's line.
  const auto records = metrics();
  ASSERT_EQ(records.steps.size(), 2u);
  EXPECT_EQ(run_file("metrics.jsonl").back(), '\n');
  // Summary written (the disk had room again), saying why the run stopped.
  EXPECT_NE(run_file("summary.json").find("the run folder cannot be written"), std::string::npos);
}

TEST_F(RunFolderTest, AFailedCheckpointStopsTheRunAndKeepsTheEarlierOne) {
  set_fault("enospc:write:checkpoint.bin:2");  // the checkpoint after step 3
  run();
  expect_stopped_for("checkpoint.bin.tmp");
  EXPECT_EQ(load_checkpoint_header(checkpoint_path(run_dir)).next_step(), 2u)
      << "the checkpoint after step 1 stays in place";
  // Step 3's record waits for its checkpoint, which failed: steps 0 to 2.
  EXPECT_EQ(metrics().steps.size(), 3u);
}

TEST_F(RunFolderTest, ACheckpointThatCannotBePutInPlaceIsRemoved) {
  set_fault("enospc:rename:checkpoint.bin:1");
  run();
  expect_stopped_for("checkpoint.bin.tmp");
  EXPECT_FALSE(std::filesystem::exists(checkpoint_path(run_dir)));
  EXPECT_NE(coordinator->stop_reason().find("there is no checkpoint to resume from yet"),
            std::string::npos)
      << coordinator->stop_reason();
  // Step 1's record went first (the order a crash needs), then the rename
  // failed.
  EXPECT_EQ(metrics().steps.size(), 2u);
}

TEST_F(RunFolderTest, ASummaryThatCannotBeWrittenMakesTheExitStatusNonZero) {
  set_fault("enospc:write:summary.json");
  run();
  EXPECT_EQ(coordinator->exit_code(), kCoordinatorRunFolderFailed) << log.text.str();
  EXPECT_NE(log.text.str().find("summary.json not written"), std::string::npos) << log.text.str();
  EXPECT_FALSE(std::filesystem::exists(run_dir / "summary.json"));
  EXPECT_TRUE(temporary_files().empty());
  EXPECT_EQ(metrics().steps.size(), 6u) << "the run itself finished";
}

TEST_F(RunFolderTest, ATraceThatCannotBeWrittenStopsTheRun) {
  set_fault("enospc:write:trace.json:4");
  run();
  expect_stopped_for("trace.json");
  EXPECT_LT(metrics().steps.size(), 6u);
}

TEST_F(RunFolderTest, EveryRecordAndTheSummaryCarryTheRunsId) {
  config.set_run_id("00112233aabbccdd");
  run();
  EXPECT_EQ(coordinator->exit_code(), kCoordinatorDone);
  const auto records = metrics();
  ASSERT_EQ(records.steps.size(), 6u);
  for (const auto& r : records.steps) EXPECT_EQ(r.run_id(), "00112233aabbccdd");
  EXPECT_EQ(load_checkpoint_header(checkpoint_path(run_dir)).config().run_id(), "00112233aabbccdd");
  EXPECT_NE(run_file("summary.json").find("\"run_id\": \"00112233aabbccdd\""), std::string::npos);
}

}  // namespace
}  // namespace dctrain
