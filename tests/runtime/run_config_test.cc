// The run config: text format with positioned parse errors, defaults, and a
// validator that names every problem and how to fix it.
#include "runtime/run_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

namespace dctrain {
namespace {

const char* kGood = R"(
name: "t"
seed: 7
workers: 3
model { name: "mlp" }
dataset { kind: "synthetic" }
optimizer { kind: "sgd" lr: 0.1 momentum: 0.9 }
step { global_batch: 48 micro_batch: 8 tau: inf }
stop { max_steps: 10 }
)";

bool mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(RunConfig, ParsesAndFillsDefaults) {
  v1::RunConfig c = parse_run_config(kGood, "good.cfg");
  finalize_run_config(c);
  EXPECT_EQ(c.workers(), 3u);
  EXPECT_TRUE(std::isinf(c.step().tau()));
  EXPECT_TRUE(requeue_enabled(c.step()));
  EXPECT_EQ(c.step().normalize(), "completed");
  EXPECT_EQ(c.delay().kind(), "none");
  EXPECT_DOUBLE_EQ(c.liveness().heartbeat_seconds(), 0.5);
  EXPECT_EQ(c.delay().seed(), 7u);
  // The printed config parses back to the same message.
  const v1::RunConfig again = parse_run_config(to_text(c), "printed");
  EXPECT_EQ(again.SerializeAsString(), c.SerializeAsString());
}

TEST(RunConfig, ParseErrorNamesFileLineAndField) {
  try {
    parse_run_config("workers: 2\nmodle { name: \"mlp\" }\n", "typo.cfg");
    FAIL() << "a misspelt field must not parse";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(mentions(e.what(), "typo.cfg:2:")) << e.what();
    EXPECT_TRUE(mentions(e.what(), "modle")) << e.what();
    EXPECT_TRUE(mentions(e.what(), "proto/config.proto")) << e.what();
  }
}

TEST(RunConfig, MissingFileIsAClearError) {
  try {
    load_run_config("/nonexistent/run.cfg");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(mentions(e.what(), "/nonexistent/run.cfg")) << e.what();
  }
}

TEST(RunConfig, ValidatorListsEveryProblem) {
  v1::RunConfig c = parse_run_config(kGood, "x");
  c.mutable_model()->set_name("resnet21");
  c.mutable_step()->set_micro_batch(7);
  c.mutable_step()->set_tau(-1.0);
  c.mutable_optimizer()->set_lr(0.0);
  c.mutable_delay()->set_kind("lognormal");
  c.mutable_delay()->add_slow_workers(5);
  try {
    finalize_run_config(c);
    FAIL() << "the config is invalid";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_TRUE(mentions(what, "6 problems")) << what;
    EXPECT_TRUE(mentions(what, "'resnet21'")) << what;
    EXPECT_TRUE(mentions(what, "micro_batch 7 does not divide step.global_batch 48")) << what;
    EXPECT_TRUE(mentions(what, "step.tau is -1")) << what;
    EXPECT_TRUE(mentions(what, "optimizer.lr")) << what;
    EXPECT_TRUE(mentions(what, "'lognormal'")) << what;
    EXPECT_TRUE(mentions(what, "rank 5")) << what;
  }
}

TEST(RunConfig, NeedsAStopCriterionAndARelativeDataPath) {
  v1::RunConfig c = parse_run_config(kGood, "x");
  c.mutable_stop()->Clear();
  c.mutable_dataset()->set_kind("mnist");
  c.mutable_dataset()->add_train_files("/abs/mnist/train-images-idx3-ubyte.gz");
  c.mutable_dataset()->add_train_files("mnist/train-labels-idx1-ubyte.gz");
  const auto problems = [&] { apply_defaults(c); return validate(c); }();
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_TRUE(mentions(problems[0] + problems[1], "relative to the worker's --data-dir"));
  EXPECT_TRUE(mentions(problems[0] + problems[1], "no stop criterion"));
}

TEST(RunConfig, TauParsesSecondsOrInfinity) {
  EXPECT_DOUBLE_EQ(parse_tau("0.25"), 0.25);
  EXPECT_TRUE(std::isinf(parse_tau("inf")));
  EXPECT_TRUE(std::isinf(parse_tau("infinity")));
  EXPECT_THROW(parse_tau("0"), std::invalid_argument);
  EXPECT_THROW(parse_tau("fast"), std::invalid_argument);
  EXPECT_THROW(parse_tau("1.5s"), std::invalid_argument);
}

TEST(RunConfig, ShippedExperimentsAreValid) {
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(DCTRAIN_SOURCE_DIR "/experiments")) {
    if (entry.path().extension() != ".cfg") continue;
    v1::RunConfig c = load_run_config(entry.path().string());
    EXPECT_NO_THROW(finalize_run_config(c)) << entry.path();
    ++seen;
  }
  EXPECT_GE(seen, 3);
}

}  // namespace
}  // namespace dctrain
