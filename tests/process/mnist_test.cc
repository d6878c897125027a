// The ready mnist-cnn config with 4 workers on real MNIST: one epoch reaches
// at least 98% test accuracy. Takes about two minutes on two cores (label
// "slow").
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "metrics/metrics_json.h"
#include "tests/testing/paths.h"
#include "tests/testing/process.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;

TEST(MnistCnn, FourWorkersReachNinetyEightPercentInOneEpoch) {
  const std::filesystem::path data = DCTRAIN_SHARED_DATA;
  if (!std::filesystem::exists(data / "mnist")) GTEST_SKIP() << "no MNIST under " << data;
  const testing::ScratchDir dir("mnist");
  const std::filesystem::path run = dir / "run";
  testing::Process launch(
      testing::program("dctrain-launch"),
      {"--workers", "4", "--config", DCTRAIN_SOURCE_DIR "/experiments/mnist-cnn.cfg", "--out",
       run.string(), "--data-dir", data.string()},
      dir / "launch.out");
  const auto code = launch.wait_for(600s);
  ASSERT_TRUE(code.has_value()) << "still running after 10 minutes";
  ASSERT_EQ(*code, 0) << launch.output();
  const std::string text = testing::read_text(run / "summary.json");
  const v1::RunSummary summary = parse_summary(text, "summary.json");
  const std::optional<double> accuracy = optional_number(summary.final_eval_accuracy());
  ASSERT_TRUE(accuracy.has_value()) << text;
  std::printf("mnist-cnn, 4 workers, one epoch: test accuracy %.4f\n", *accuracy);
  EXPECT_GE(*accuracy, 0.98) << text;
  EXPECT_EQ(summary.checksum_mismatches(), 0u) << text;
  EXPECT_EQ(summary.audits_failed(), 0u) << text;
}

}  // namespace
}  // namespace dctrain
