// The run config: text format with positioned parse errors, defaults, and a
// validator that names every problem and how to fix it.
#include "runtime/run_config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "runtime/setup.h"
#include "runtime/text_format.h"

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
  EXPECT_EQ(c.step().normalize(), v1::NORMALIZE_COMPLETED);
  EXPECT_EQ(c.delay().kind(), v1::DELAY_NONE);
  EXPECT_DOUBLE_EQ(c.liveness().heartbeat_seconds(), 0.5);
  EXPECT_EQ(c.delay().seed(), 7u);
  // The printed config parses back to the same message.
  const v1::RunConfig again = parse_run_config(to_text(c), "printed");
  EXPECT_EQ(again.SerializeAsString(), c.SerializeAsString());
}

TEST(RunConfig, EveryDefaultIsInTheFinalizedConfig) {
  // One convention: a field left at 0 or unset takes its default when the
  // config is finalized, and the code reads the finalized config (no
  // fallbacks where a value is used). Those the schema names, here and in
  // the printed config.cfg.
  v1::RunConfig c = parse_run_config(kGood, "good.cfg");
  c.mutable_step()->set_policy(v1::POLICY_REBALANCE);
  finalize_run_config(c);
  EXPECT_DOUBLE_EQ(c.guard().peer_log_seconds(), 10.0);
  EXPECT_EQ(c.guard().max_refused_peers(), 64u);
  EXPECT_EQ(c.guard().max_bad_steps_in_a_row(), 3u);
  EXPECT_EQ(c.step().rebalance().window_steps(), 8u);
  EXPECT_DOUBLE_EQ(c.step().rebalance().min_gain(), 0.1);
  EXPECT_EQ(c.step().rebalance().probe_every_steps(), 20u);
  EXPECT_DOUBLE_EQ(c.data_plane().timeout_seconds(), 10.0);
  EXPECT_EQ(c.data_plane().rounds_per_step(), 2u);
  EXPECT_DOUBLE_EQ(c.liveness().silence_seconds(), 10.0);
  EXPECT_EQ(c.liveness().release_after_missed_steps(), 10u);
  const std::string printed = to_text(c);
  EXPECT_TRUE(mentions(printed, "peer_log_seconds: 10")) << printed;
  EXPECT_TRUE(mentions(printed, "probe_every_steps: 20")) << printed;

  v1::RunConfig backup = parse_run_config(kGood, "good.cfg");
  backup.mutable_step()->set_policy(v1::POLICY_BACKUP);
  backup.mutable_data_plane()->set_kind(v1::DATA_PLANE_STAR);  // backup's plane
  finalize_run_config(backup);
  EXPECT_EQ(backup.step().backup_workers(), 1u);
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

// Found by fuzz/text_format_fuzz.cc: a byte that is not UTF-8 inside a
// string was taken by the text parser, then failed the binary round trip
// with a std::logic_error blaming the word schema. It is a parse error at
// its line and column, and a UTF-8 name still reads.
TEST(RunConfig, TextThatIsNotUtf8IsAParseErrorAtItsPosition) {
  for (const std::string& bad :
       {std::string("workers: 2\nname: \"m\xff\"\n"), std::string("workers: 2\nname: \"m\xc3\"\n"),
        std::string("workers: 2\nname: \"m\xed\xa0\x80\"\n")}) {
    try {
      parse_run_config(bad, "latin1.cfg");
      FAIL() << "a config that is not UTF-8 must not parse";
    } catch (const std::runtime_error& e) {
      EXPECT_TRUE(mentions(e.what(), "latin1.cfg:2:9: not UTF-8 text")) << e.what();
    }
  }
  EXPECT_EQ(parse_run_config("name: \"r\xc3\xa9sum\xc3\xa9 \xf0\x9f\x9a\x80\"", "utf8.cfg").name(),
            "r\xc3\xa9sum\xc3\xa9 \xf0\x9f\x9a\x80");
}

TEST(RunConfig, KindsReadAndPrintTheWordsUsersWrite) {
  v1::RunConfig c = parse_run_config(R"(
model { name: "bert-tiny" }
dataset { kind: "text-mlm" }
optimizer { kind: "adamw" lr: 0.001 schedule { kind: "cosine" clock: "samples" } }
step { global_batch: 32 micro_batch: 8 normalize: "nominal" tau_policy: "auto" }
delay { kind: "dropcompute" }
stop { max_epochs: 1 }
)",
                                     "words.cfg");
  EXPECT_EQ(c.model().name(), v1::MODEL_BERT_TINY);
  EXPECT_EQ(c.dataset().kind(), v1::DATASET_TEXT_MLM);
  EXPECT_EQ(c.optimizer().kind(), v1::OPTIMIZER_ADAMW);
  EXPECT_EQ(c.optimizer().schedule().kind(), v1::SCHEDULE_COSINE);
  EXPECT_EQ(c.optimizer().schedule().clock(), v1::CLOCK_SAMPLES);
  EXPECT_EQ(c.step().normalize(), v1::NORMALIZE_NOMINAL);
  EXPECT_EQ(c.step().tau_policy(), v1::TAU_POLICY_AUTO);
  EXPECT_EQ(c.delay().kind(), v1::DELAY_DROPCOMPUTE);
  EXPECT_EQ(word(c.dataset().kind()), "text-mlm");
  finalize_run_config(c);
  const std::string text = to_text(c);
  for (const char* line : {"name: \"bert-tiny\"", "kind: \"text-mlm\"", "kind: \"adamw\"",
                           "kind: \"cosine\"", "clock: \"samples\"", "normalize: \"nominal\"",
                           "tau_policy: \"auto\"", "kind: \"dropcompute\""}) {
    EXPECT_TRUE(mentions(text, line)) << line << " in\n" << text;
  }
  EXPECT_FALSE(mentions(text, "DELAY_")) << text;
  // Defaults are printed as words too; "" leaves a kind unset (its default).
  v1::RunConfig d = parse_run_config("model { name: \"mlp\" } delay { kind: \"\" }", "empty.cfg");
  EXPECT_EQ(d.delay().kind(), v1::DELAY_UNSET);
  apply_defaults(d);
  const std::string defaults = to_text(d);
  for (const char* line :
       {"kind: \"synthetic\"", "kind: \"sgd\"", "kind: \"constant\"", "clock: \"updates\"",
        "normalize: \"completed\"", "tau_policy: \"fixed\"", "kind: \"none\""}) {
    EXPECT_TRUE(mentions(defaults, line)) << line << " in\n" << defaults;
  }
}

TEST(RunConfig, UnknownWordNamesTheFieldTheWordAndTheAllowedWords) {
  try {
    parse_run_config(
        "workers: 2\nmodel { name: \"resnet21\" }\ndelay {\n  kind: \"lognormal\"\n}\n",
        "words.cfg");
    FAIL() << "unknown words must not parse";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(mentions(what,
                         "words.cfg:2:9: model.name 'resnet21' is not known; use 'resnet20', "
                         "'bert-tiny', 'mnist-cnn', 'mlp', 'resnet' or 'bert'"))
        << what;
    EXPECT_TRUE(mentions(what,
                         "words.cfg:4:3: delay.kind 'lognormal' is not known; use 'none', "
                         "'constant', 'exponential', 'dropcompute' or 'bimodal'"))
        << what;
    EXPECT_TRUE(mentions(what, "proto/config.proto")) << what;
  }
  // A bare word is still a syntax error, with its position, as before.
  EXPECT_THROW(parse_run_config("delay { kind: dropcompute }", "bare.cfg"), std::runtime_error);
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
  c.mutable_model()->clear_name();
  c.mutable_step()->set_micro_batch(7);
  c.mutable_step()->set_tau(-1.0);
  c.mutable_optimizer()->set_lr(0.0);
  c.mutable_delay()->set_kind(static_cast<v1::DelayKind>(42));  // e.g. from another version
  c.mutable_delay()->add_slow_workers(5);
  c.mutable_liveness()->set_min_workers(c.workers() + 1);
  try {
    finalize_run_config(c);
    FAIL() << "the config is invalid";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_TRUE(mentions(what, "7 problems")) << what;
    EXPECT_TRUE(mentions(what,
                         "model.name is not set; use 'resnet20', 'bert-tiny', 'mnist-cnn', 'mlp', "
                         "'resnet' or 'bert'"))
        << what;
    EXPECT_TRUE(mentions(what, "micro_batch 7 does not divide step.global_batch 48")) << what;
    EXPECT_TRUE(mentions(what, "step.tau is -1")) << what;
    EXPECT_TRUE(mentions(what, "optimizer.lr")) << what;
    EXPECT_TRUE(mentions(what, "delay.kind is 42, which is not a known value")) << what;
    EXPECT_TRUE(mentions(what, "rank 5")) << what;
    EXPECT_TRUE(mentions(what, fmt::format("liveness.min_workers ({}) exceeds workers ({})",
                                           c.workers() + 1, c.workers())))
        << what;
  }
}

TEST(RunConfig, ModelSizesBelongToTheFamiliesAndFollowTheirRules) {
  const auto with_model = [](const std::string& model) {
    v1::RunConfig c = parse_run_config(kGood, "x");
    c.mutable_model()->Clear();
    parse_text_format(model, "model", *c.mutable_model(), "");
    return c;
  };
  const auto problems_of = [&](const std::string& model) {
    v1::RunConfig c = with_model(model);
    apply_defaults(c);
    std::string all;
    for (const std::string& p : validate(c)) all += p + "\n";
    return all;
  };
  EXPECT_EQ(problems_of("name: \"resnet\" depth: 56 width: 32"), "");
  EXPECT_EQ(problems_of("name: \"bert\" layers: 4 hidden: 256 heads: 4"), "");
  EXPECT_TRUE(mentions(problems_of("name: \"resnet\" depth: 21"),
                       "model.depth is 21; a CIFAR ResNet has 6n+2 layers"));
  EXPECT_TRUE(mentions(problems_of("name: \"bert\" hidden: 100 heads: 3"),
                       "the hidden size must be a multiple of the heads"));
  EXPECT_TRUE(mentions(problems_of("name: \"resnet20\" depth: 56"),
                       "model 'resnet20' is fixed (use name: \"resnet\" with depth: 56)"));
  EXPECT_TRUE(mentions(problems_of("name: \"mlp\" layers: 3"), "size the \"bert\" family"));
  // The defaults: resnet20's and bert-tiny's sizes, 4 x hidden feed-forward.
  v1::RunConfig c = with_model("name: \"bert\" hidden: 64");
  apply_defaults(c);
  EXPECT_EQ(c.model().layers(), 2u);
  EXPECT_EQ(c.model().heads(), 2u);
  EXPECT_EQ(c.model().intermediate(), 256u);
}

TEST(RunConfig, NeedsAStopCriterionAndARelativeDataPath) {
  v1::RunConfig c = parse_run_config(kGood, "x");
  c.mutable_stop()->Clear();
  c.mutable_dataset()->set_kind(v1::DATASET_MNIST);
  c.mutable_dataset()->add_train_files("/abs/mnist/train-images-idx3-ubyte.gz");
  c.mutable_dataset()->add_train_files("mnist/train-labels-idx1-ubyte.gz");
  const auto problems = [&] {
    apply_defaults(c);
    return validate(c);
  }();
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

TEST(RunConfig, DataPlaneIsAWordWithExchangeAsDefaultAndAPositiveTimeout) {
  v1::RunConfig c = parse_run_config(kGood, "x");
  finalize_run_config(c);
  EXPECT_EQ(c.data_plane().kind(), v1::DATA_PLANE_EXCHANGE);
  EXPECT_DOUBLE_EQ(c.data_plane().timeout_seconds(), 10.0);
  EXPECT_TRUE(validate(c).empty());

  v1::RunConfig star =
      parse_run_config(std::string(kGood) + "data_plane { kind: \"star\" }", "star.cfg");
  finalize_run_config(star);
  EXPECT_EQ(star.data_plane().kind(), v1::DATA_PLANE_STAR);
  EXPECT_TRUE(mentions(to_text(star), "kind: \"star\"")) << to_text(star);
  EXPECT_TRUE(validate(star).empty());

  v1::RunConfig x =
      parse_run_config(std::string(kGood) + "data_plane { kind: \"exchange\" }", "exchange.cfg");
  finalize_run_config(x);
  EXPECT_EQ(x.data_plane().kind(), v1::DATA_PLANE_EXCHANGE);
  EXPECT_TRUE(mentions(to_text(x), "kind: \"exchange\"")) << to_text(x);
  EXPECT_TRUE(validate(x).empty());

  x.mutable_data_plane()->set_timeout_seconds(-1.0);
  const std::vector<std::string> problems = validate(x);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_TRUE(mentions(problems[0], "data_plane.timeout_seconds")) << problems[0];

  // The round deadline: 4 x the recent rounds' p95, at least 0.5 s, unless
  // said otherwise; a multiple below 1 or a floor above the timeout is no
  // deadline.
  EXPECT_DOUBLE_EQ(c.data_plane().round_deadline_multiple(), 4.0);
  EXPECT_DOUBLE_EQ(c.data_plane().round_deadline_floor_seconds(), 0.5);
  EXPECT_EQ(c.liveness().release_after_failed_rounds(), 3u);
  x.mutable_data_plane()->set_timeout_seconds(10.0);
  x.mutable_data_plane()->set_round_deadline_multiple(0.5);
  x.mutable_data_plane()->set_round_deadline_floor_seconds(11.0);
  const std::vector<std::string> deadline = validate(x);
  ASSERT_EQ(deadline.size(), 2u);
  EXPECT_TRUE(mentions(deadline[0], "data_plane.round_deadline_multiple")) << deadline[0];
  EXPECT_TRUE(mentions(deadline[1], "data_plane.round_deadline_floor_seconds")) << deadline[1];
  x.mutable_data_plane()->set_round_deadline_multiple(4.0);
  x.mutable_data_plane()->set_round_deadline_floor_seconds(0.5);

  // A failed round is redone once unless said otherwise; 0 rounds is no run.
  EXPECT_EQ(c.data_plane().rounds_per_step(), 2u);
  x.mutable_data_plane()->set_timeout_seconds(10.0);
  x.mutable_data_plane()->set_rounds_per_step(1);
  EXPECT_TRUE(validate(x).empty());
  x.mutable_data_plane()->set_rounds_per_step(0);
  const std::vector<std::string> zero = validate(x);
  ASSERT_EQ(zero.size(), 1u);
  EXPECT_TRUE(mentions(zero[0], "data_plane.rounds_per_step")) << zero[0];
  x.mutable_data_plane()->set_rounds_per_step(2);

  // The exchange's norm guard checks the members' parts against the sum
  // they agree on (coordinator/planes/round_check.h): it needs the digests. The
  // round waits for every member: 'backup' needs the star. Both say so
  // rather than being ignored.
  v1::RunConfig guarded = x;
  guarded.mutable_guard()->set_norm_multiple(10.0);
  EXPECT_TRUE(validate(guarded).empty());
  guarded.mutable_data_plane()->set_check_sums(false);
  const std::vector<std::string> norm = validate(guarded);
  ASSERT_EQ(norm.size(), 1u);
  EXPECT_TRUE(mentions(norm[0], "guard.norm_multiple")) << norm[0];
  EXPECT_TRUE(mentions(norm[0], "check_sums")) << norm[0];
  v1::RunConfig backup = x;
  backup.mutable_step()->set_policy(v1::POLICY_BACKUP);
  backup.mutable_step()->set_backup_workers(1);
  bool refused = false;
  for (const std::string& p : validate(backup)) refused |= mentions(p, "'backup'");
  EXPECT_TRUE(refused);
  backup.mutable_data_plane()->set_kind(v1::DATA_PLANE_STAR);
  for (const std::string& p : validate(backup)) EXPECT_FALSE(mentions(p, "exchange")) << p;

  try {
    parse_run_config(std::string(kGood) + "data_plane { kind: \"ring\" }", "ring.cfg");
    FAIL() << "an unknown data plane must not parse";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(mentions(e.what(), "exchange")) << e.what();
  }
}

}  // namespace
}  // namespace dctrain

namespace dctrain {
namespace {

TEST(ModelFit, AClassifierTakesItsDatasShapeAndSaysWhatDiffersFromTheConfig) {
  v1::RunConfig config = parse_run_config(
      "model { name: \"resnet20\" image_channels: 3 image_height: 32 image_width: 32 "
      "num_classes: 10 }",
      "fit");
  SampleShape mnist;
  mnist.channels = 1;
  mnist.height = 28;
  mnist.width = 28;
  mnist.classes = 10;
  EXPECT_EQ(fit_model_to_data(config, mnist), "input 1x28x28 (the config said 3x32x32)");
  EXPECT_EQ(config.model().image_channels(), 1);  // what config.cfg and the export record
  EXPECT_EQ(config.model().image_height(), 28);
  EXPECT_EQ(config.model().image_width(), 28);
  EXPECT_EQ(fit_model_to_data(config, mnist), std::nullopt) << "it fits now";

  SampleShape hundred = mnist;
  hundred.classes = 100;
  EXPECT_EQ(fit_model_to_data(config, hundred), "100 classes (the config said 10)");
  EXPECT_EQ(config.model().num_classes(), 100);

  v1::RunConfig unset = parse_run_config("model { name: \"mnist-cnn\" }", "fit");
  EXPECT_EQ(fit_model_to_data(unset, mnist), std::nullopt) << "nothing said, nothing differs";
  EXPECT_EQ(unset.model().image_channels(), 1);

  SampleShape tokens;
  tokens.kind = BatchKind::kTokens;
  tokens.seq_len = 128;
  tokens.vocab_size = 30522;
  EXPECT_EQ(fit_model_to_data(unset, tokens), std::nullopt);
  EXPECT_EQ(unset.model().image_channels(), 1) << "tokens leave the image fields alone";
}

}  // namespace
}  // namespace dctrain
