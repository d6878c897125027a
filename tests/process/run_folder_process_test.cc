// The run folder over real processes: a coordinator killed at each point of
// the window between a step's record and the checkpoint that covers it
// resumes to every step recorded once, as an unbroken run; a new run is not
// started over another run's files; a checkpoint is not resumed into a
// folder that holds another run's records. The kills are injected in the
// file layer (DCTRAIN_FAULT, common/files.h), so each lands exactly where
// it is meant to, whatever the machine's speed.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <csignal>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/exit_codes.h"
#include "metrics/metrics_json.h"
#include "tests/testing/cluster.h"
#include "tests/testing/paths.h"
#include "tests/testing/process.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;
using testing::Cluster;
using testing::eventually;
using testing::Process;
using testing::read_text;
using testing::resume_run;
using testing::small_config;

const std::string kRun = "stop { max_steps: 10 }\ncheckpoint { every_steps: 4 }";

// (step, loss) of every step record, in file order.
std::vector<std::pair<uint32_t, double>> losses(const MetricsRecords& records) {
  std::vector<std::pair<uint32_t, double>> out;
  for (const v1::StepRecord& r : records.steps) out.emplace_back(r.step(), r.loss());
  return out;
}

TEST(RunFolderProcesses, AKillAtEachPointOfTheCheckpointWindowLeavesEveryStepOnce) {
  Cluster unbroken("window-unbroken", small_config(2, kRun), 2);
  unbroken.start_coordinator();
  unbroken.start_workers();
  unbroken.expect_clean_finish();
  const auto expected = losses(unbroken.records());
  ASSERT_EQ(expected.size(), 10u);

  // The second checkpoint (after step 7; the first, after step 3, is what
  // the run resumes from): before its temporary is written, once it is
  // (the step's record not yet), once the record is durable (the
  // checkpoint not yet renamed), and once it is in place (the next step
  // not begun).
  // And a full disk there, or at a record in between: the run stops with
  // status 3 and resumes the same way once there is space.
  const std::pair<const char*, int> faults[] = {
      {"kill:write:checkpoint.bin:2", 128 + SIGKILL},
      {"kill:written:checkpoint.bin:2", 128 + SIGKILL},
      {"kill:synced:metrics.jsonl:2", 128 + SIGKILL},
      {"kill:renamed:checkpoint.bin:2", 128 + SIGKILL},
      {"enospc:written:checkpoint.bin:2", kCoordinatorRunFolderFailed},
      {"enospc:write:metrics.jsonl:6", kCoordinatorRunFolderFailed}};
  int n = 0;
  for (const auto& [point, status] : faults) {
    SCOPED_TRACE(point);
    Cluster broken(fmt::format("window-{}", n++), small_config(2, kRun), 2);
    ::setenv("DCTRAIN_FAULT", point, 1);
    broken.start_coordinator();
    ::unsetenv("DCTRAIN_FAULT");
    broken.start_workers();
    ASSERT_EQ(broken.coordinator().wait_for(60s), std::optional<int>(status))
        << broken.coordinator().output();
    if (status != kCoordinatorRunFolderFailed) {
      broken.worker("w0").kill(SIGKILL);
      broken.worker("w1").kill(SIGKILL);
    } else {
      // Stopped, not killed: the workers got their byes.
      EXPECT_TRUE(broken.worker("w0").wait_for(15s).has_value());
      EXPECT_TRUE(broken.worker("w1").wait_for(15s).has_value());
      EXPECT_NE(broken.log().find("No space left on device"), std::string::npos) << broken.log();
    }
    resume_run(broken.run_dir());
    EXPECT_EQ(losses(broken.records()), expected) << read_text(broken.run_dir() / "metrics.jsonl");
    for (const auto& entry : std::filesystem::directory_iterator(broken.run_dir())) {
      EXPECT_NE(entry.path().extension(), ".tmp") << entry.path();
    }
  }
}

TEST(RunFolderProcesses, ANewRunIntoAUsedFolderIsRefusedAndTheFirstRunsFilesStayAsTheyWere) {
  Cluster first("used-folder", small_config(2, "stop { max_steps: 3 }"), 2);
  first.start_coordinator();
  first.start_workers();
  first.expect_clean_finish();
  const std::filesystem::path run = first.run_dir();
  std::map<std::string, std::string> before;
  for (const auto& entry : std::filesystem::directory_iterator(run)) {
    before[entry.path().filename()] = read_text(entry.path());
  }
  const std::string run_id = first.summary().run_id();
  ASSERT_EQ(run_id.size(), 16u);

  const std::filesystem::path config = run.parent_path() / "run.cfg";
  Process again(testing::program("dctrain-coordinator"),
                {"--config", config.string(), "--bind", "tcp://127.0.0.1:*", "--out", run.string()},
                run.parent_path() / "again.out");
  ASSERT_EQ(again.wait_for(30s), std::optional<int>(kCoordinatorUsage)) << again.output();
  EXPECT_NE(again.output().find("holds a run already (run " + run_id), std::string::npos)
      << again.output();
  // This config writes no checkpoint, so --resume cannot continue it and is
  // not offered.
  EXPECT_EQ(again.output().find("--resume"), std::string::npos) << again.output();
  EXPECT_NE(again.output().find("it has no checkpoint to continue from"), std::string::npos)
      << again.output();
  EXPECT_NE(again.output().find("--overwrite"), std::string::npos);
  std::map<std::string, std::string> after;
  for (const auto& entry : std::filesystem::directory_iterator(run)) {
    after[entry.path().filename()] = read_text(entry.path());
  }
  EXPECT_EQ(after, before) << "not a byte of the first run changed";

  // With --overwrite the new run starts there, with a new id.
  Process replaced(testing::program("dctrain-coordinator"),
                   {"--config", config.string(), "--bind", "tcp://127.0.0.1:*", "--out",
                    run.string(), "--overwrite"},
                   run.parent_path() / "replaced.out");
  // (The first run's endpoint file is there until the new run replaces it.)
  ASSERT_TRUE(eventually(
      [&] {
        return std::filesystem::exists(run / "endpoint") &&
               read_text(run / "endpoint") != before["endpoint"];
      },
      30s))
      << replaced.output();
  EXPECT_FALSE(std::filesystem::exists(run / "summary.json"));
  EXPECT_FALSE(std::filesystem::exists(run / "metrics.jsonl") &&
               read_text(run / "metrics.jsonl").find(run_id) != std::string::npos);
  EXPECT_EQ(read_text(run / "config.cfg").find(run_id), std::string::npos);
  replaced.kill(SIGTERM);
  EXPECT_EQ(replaced.wait_for(30s), std::optional<int>(kCoordinatorInterrupted))
      << replaced.output();
}

TEST(RunFolderProcesses, AnotherRunsCheckpointIsNotResumedIntoAFolder) {
  Cluster a("other-a", small_config(2, "stop { max_steps: 4 }\ncheckpoint { every_steps: 2 }"), 2);
  a.start_coordinator();
  a.start_workers();
  a.expect_clean_finish();
  Cluster b("other-b", small_config(2, "stop { max_steps: 4 }\ncheckpoint { every_steps: 2 }"), 2);
  b.start_coordinator();
  b.start_workers();
  b.expect_clean_finish();
  std::filesystem::copy_file(a.run_dir() / "checkpoint.bin", b.run_dir() / "checkpoint.bin",
                             std::filesystem::copy_options::overwrite_existing);
  const std::string records = read_text(b.run_dir() / "metrics.jsonl");
  Process resumed(testing::program("dctrain-coordinator"),
                  {"--resume", b.run_dir().string(), "--bind", "tcp://127.0.0.1:*"},
                  b.run_dir() / "resumed.out");
  ASSERT_EQ(resumed.wait_for(30s), std::optional<int>(kCoordinatorUsage)) << resumed.output();
  EXPECT_NE(resumed.output().find("is run " + a.summary().run_id() +
                                  "'s, but the folder's metrics.jsonl holds records of run " +
                                  b.summary().run_id()),
            std::string::npos)
      << resumed.output();
  EXPECT_EQ(read_text(b.run_dir() / "metrics.jsonl"), records) << "nothing removed or added";
}

}  // namespace
}  // namespace dctrain
