// The ready mnist-cnn config with 4 workers on real MNIST: one epoch reaches
// at least 98% test accuracy. Takes about two minutes on two cores (label
// "slow").
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include <fmt/format.h>

#include "tests/runtime/process.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;

TEST(MnistCnn, FourWorkersReachNinetyEightPercentInOneEpoch) {
  const std::filesystem::path data = DCTRAIN_SHARED_DATA;
  if (!std::filesystem::exists(data / "mnist")) GTEST_SKIP() << "no MNIST under " << data;
  const auto run = std::filesystem::temp_directory_path() / fmt::format("dctrain-mnist-{}", ::getpid());
  std::filesystem::remove_all(run);
  testing::Process launch(std::string(DCTRAIN_BIN_DIR) + "/dctrain-launch",
                          {"--workers", "4", "--config", DCTRAIN_SOURCE_DIR "/experiments/mnist-cnn.cfg",
                           "--out", run.string(), "--data-dir", data.string()},
                          run.string() + ".out");
  const auto code = launch.wait_for(600s);
  ASSERT_TRUE(code.has_value()) << "still running after 10 minutes";
  ASSERT_EQ(*code, 0) << launch.output();
  const std::string summary = testing::read_text(run / "summary.json");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(summary, m, std::regex("\"final_eval_accuracy\": ([0-9.]+)"))) << summary;
  const double accuracy = std::stod(m[1]);
  std::printf("mnist-cnn, 4 workers, one epoch: test accuracy %.4f\n", accuracy);
  EXPECT_GE(accuracy, 0.98) << summary;
  EXPECT_NE(summary.find("\"checksum_mismatches\": 0"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"audits_failed\": 0"), std::string::npos) << summary;
  std::filesystem::remove_all(run);
  std::filesystem::remove(run.string() + ".out");
}

}  // namespace
}  // namespace dctrain
