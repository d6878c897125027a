// The refusal to start a new run in a folder that holds one
// (metrics/run_identity.h): it suggests --resume only where a checkpoint
// is there to resume from, and a config.cfg this build does not parse
// costs no line on stderr.
#include "metrics/run_identity.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/run_files.h"

namespace dctrain {
namespace {

class RunIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("run-identity-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    write(run_files::kConfig, "model { name: mlp oddity: [1, 2] }\n");  // not this build's text
    write(run_files::kMetrics, "");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  std::filesystem::path dir_;
};

TEST_F(RunIdentityTest, ARunWithoutACheckpointIsNotOfferedToResumeAndItsConfigIsReadQuietly) {
  ::testing::internal::CaptureStderr();
  const std::optional<std::string> refusal = new_run_refusal(dir_);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->find("--resume"), std::string::npos) << *refusal;
  EXPECT_NE(refusal->find("it has no checkpoint to continue from (checkpoint.every_steps); pass "
                          "another --out folder, or pass --overwrite to replace it"),
            std::string::npos)
      << *refusal;
  EXPECT_EQ(err, "") << "the unreadable config.cfg";
}

TEST_F(RunIdentityTest, ARunWithACheckpointIsOfferedToResume) {
  write(run_files::kCheckpoint, "x");
  const std::optional<std::string> refusal = new_run_refusal(dir_);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_NE(refusal->find("continue it with --resume " + dir_.string()), std::string::npos)
      << *refusal;
}

TEST_F(RunIdentityTest, AnEmptyFolderHoldsNoRun) {
  std::filesystem::remove(dir_ / run_files::kConfig);
  std::filesystem::remove(dir_ / run_files::kMetrics);
  EXPECT_EQ(new_run_refusal(dir_), std::nullopt);
}

}  // namespace
}  // namespace dctrain
