#include "runtime/run_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "model/model.h"
#include "runtime/step_policy.h"
#include "runtime/text_format.h"

namespace dctrain {

bool takes_text(v1::ModelKind model) {
  switch (model) {
    case v1::MODEL_BERT_TINY:
    case v1::MODEL_BERT:
      return true;
    case v1::MODEL_RESNET20:
    case v1::MODEL_RESNET:
    case v1::MODEL_MNIST_CNN:
    case v1::MODEL_MLP:
    case v1::MODEL_UNSET:
    case v1::ModelKind_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::ModelKind_INT_MAX_SENTINEL_DO_NOT_USE_:
      return false;
  }
  return false;
}

bool mnist_shaped_model(v1::ModelKind model) {
  switch (model) {
    case v1::MODEL_MNIST_CNN:
    case v1::MODEL_MLP:
      return true;
    case v1::MODEL_RESNET20:
    case v1::MODEL_RESNET:
    case v1::MODEL_BERT_TINY:
    case v1::MODEL_BERT:
    case v1::MODEL_UNSET:
    case v1::ModelKind_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::ModelKind_INT_MAX_SENTINEL_DO_NOT_USE_:
      return false;
  }
  return false;
}

std::optional<bool> holds_text(v1::DatasetKind dataset) {
  switch (dataset) {
    case v1::DATASET_TEXT_MLM:
      return true;
    case v1::DATASET_MNIST:
    case v1::DATASET_FASHION_MNIST:
    case v1::DATASET_CIFAR10:
      return false;
    case v1::DATASET_SYNTHETIC:  // the generator makes what the model takes
    case v1::DATASET_UNSET:
    case v1::DatasetKind_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::DatasetKind_INT_MAX_SENTINEL_DO_NOT_USE_:
      return std::nullopt;
  }
  return std::nullopt;
}

bool reads_files(v1::DatasetKind dataset) {
  switch (dataset) {
    case v1::DATASET_MNIST:
    case v1::DATASET_FASHION_MNIST:
    case v1::DATASET_CIFAR10:
    case v1::DATASET_TEXT_MLM:
      return true;
    case v1::DATASET_SYNTHETIC:
    case v1::DATASET_UNSET:
    case v1::DatasetKind_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::DatasetKind_INT_MAX_SENTINEL_DO_NOT_USE_:
      return false;
  }
  return false;
}

bool reads_idx_files(v1::DatasetKind dataset) {
  switch (dataset) {
    case v1::DATASET_MNIST:
    case v1::DATASET_FASHION_MNIST:
      return true;
    case v1::DATASET_CIFAR10:
    case v1::DATASET_TEXT_MLM:
    case v1::DATASET_SYNTHETIC:
    case v1::DATASET_UNSET:
    case v1::DatasetKind_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::DatasetKind_INT_MAX_SENTINEL_DO_NOT_USE_:
      return false;
  }
  return false;
}

v1::RunConfig parse_run_config(const std::string& text, const std::string& origin) {
  v1::RunConfig config;
  parse_text_format(text, origin, config,
                    "the run config is a dctrain.v1.RunConfig in Protobuf text format; see "
                    "proto/config.proto for every field");
  return config;
}

v1::RunConfig load_run_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw std::runtime_error(
        fmt::format("run config '{}' cannot be opened: does the file exist?", path));
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse_run_config(text.str(), path);
}

#define DCTRAIN_DEFAULT(message, field, value) \
  if ((message).field() == decltype((message).field()){}) (message).set_##field(value)

namespace {

void apply_model_defaults(v1::RunConfig& c) {
  v1::ModelConfig& m = *c.mutable_model();
  DCTRAIN_DEFAULT(m, num_classes, 10);
  DCTRAIN_DEFAULT(m, vocab_size, 30522);
  DCTRAIN_DEFAULT(m, max_seq_len, 128);
  if (!m.has_dropout()) m.set_dropout(0.1f);
  // The families' sizes default to resnet20's and bert-tiny's (ModelSpec's),
  // the feed-forward size to 4 x hidden.
  const ModelSpec sizes;
  const auto size = [](int value) { return static_cast<uint32_t>(value); };
  if (m.name() == v1::MODEL_RESNET) {
    DCTRAIN_DEFAULT(m, depth, size(sizes.depth));
    DCTRAIN_DEFAULT(m, width, size(sizes.width));
  }
  if (m.name() == v1::MODEL_BERT) {
    DCTRAIN_DEFAULT(m, layers, size(sizes.layers));
    DCTRAIN_DEFAULT(m, hidden, size(sizes.hidden));
    DCTRAIN_DEFAULT(m, heads, size(sizes.heads));
    DCTRAIN_DEFAULT(m, intermediate, 4 * m.hidden());
  }
}

void apply_dataset_defaults(v1::RunConfig& c) {
  v1::DatasetConfig& d = *c.mutable_dataset();
  v1::ModelConfig& m = *c.mutable_model();
  DCTRAIN_DEFAULT(d, kind, v1::DATASET_SYNTHETIC);
  if (d.corpus().empty()) d.set_corpus("tinyshakespeare");
  if (d.vocab().empty()) d.set_vocab("bert-base-uncased/vocab.txt");
  if (!d.has_augment()) d.set_augment(true);
  DCTRAIN_DEFAULT(d, masked_per_sequence, 19u);
  DCTRAIN_DEFAULT(d, seed, c.seed());
  if (d.kind() == v1::DATASET_SYNTHETIC && m.image_channels() == 0) {
    // The generator draws images of the shape the model was made for.
    const bool mnist_shaped = mnist_shaped_model(m.name());
    m.set_image_channels(mnist_shaped ? 1 : 3);
    m.set_image_height(mnist_shaped ? 28 : 32);
    m.set_image_width(mnist_shaped ? 28 : 32);
  }
}

void apply_optimizer_defaults(v1::RunConfig& c) {
  v1::OptimizerConfig& o = *c.mutable_optimizer();
  DCTRAIN_DEFAULT(o, kind, v1::OPTIMIZER_SGD);
  DCTRAIN_DEFAULT(o, beta1, 0.9);
  DCTRAIN_DEFAULT(o, beta2, 0.999);
  DCTRAIN_DEFAULT(o, eps, 1e-8);
  v1::LrSchedule& schedule = *o.mutable_schedule();
  DCTRAIN_DEFAULT(schedule, kind, v1::SCHEDULE_CONSTANT);
  if (schedule.clock() == v1::CLOCK_UNSET) {
    const bool budget_in_epochs = c.stop().max_steps() == 0 && c.stop().max_epochs() > 0.0;
    schedule.set_clock(budget_in_epochs ? v1::CLOCK_SAMPLES : v1::CLOCK_UPDATES);
  }
}

void apply_step_defaults(v1::StepConfig& s) {
  if (s.tau() == 0.0) s.set_tau(std::numeric_limits<double>::infinity());
  if (!s.has_requeue()) s.set_requeue(true);
  DCTRAIN_DEFAULT(s, normalize, v1::NORMALIZE_COMPLETED);
  DCTRAIN_DEFAULT(s, tau_policy, v1::TAU_POLICY_FIXED);
  if (s.tau_policy() == v1::TAU_POLICY_AUTO) {
    v1::AutoTauConfig& a = *s.mutable_auto_tau();
    DCTRAIN_DEFAULT(a, warmup_steps, 5u);
    DCTRAIN_DEFAULT(a, window_steps, 50u);
    DCTRAIN_DEFAULT(a, grid_points, 200u);
    if (!a.has_reestimate_every_steps()) a.set_reestimate_every_steps(10);
    if (!a.has_min_change()) a.set_min_change(0.05);
    if (!a.has_min_gain()) a.set_min_gain(0.01);
    if (!a.has_skip_steps()) a.set_skip_steps(2);
    if (!a.has_max_drop_rate()) a.set_max_drop_rate(0.1);
    if (!a.has_sure_gain()) a.set_sure_gain(0.15);
  }
  finalize_policy(s);
}

// The delays, liveness, evaluation, progress and trace.
void apply_run_defaults(v1::RunConfig& c) {
  v1::DelayConfig& delay = *c.mutable_delay();
  DCTRAIN_DEFAULT(delay, kind, v1::DELAY_NONE);
  DCTRAIN_DEFAULT(delay, factor, 1.0);
  DCTRAIN_DEFAULT(delay, slowdown, 1.0);
  DCTRAIN_DEFAULT(delay, seed, c.seed());

  v1::LivenessConfig& l = *c.mutable_liveness();
  DCTRAIN_DEFAULT(l, heartbeat_seconds, 0.5);
  DCTRAIN_DEFAULT(l, silence_seconds, 10.0);
  DCTRAIN_DEFAULT(l, grace_seconds, 5.0);
  DCTRAIN_DEFAULT(l, join_timeout_seconds, 120.0);
  if (!l.has_release_after_missed_steps()) l.set_release_after_missed_steps(10);
  if (!l.has_release_after_failed_rounds()) l.set_release_after_failed_rounds(3);

  DCTRAIN_DEFAULT(*c.mutable_eval(), batch, 256u);
  DCTRAIN_DEFAULT(c, progress_seconds, 5.0);
  if (!c.trace().has_window_steps()) c.mutable_trace()->set_window_steps(20);
}

// The data plane and the guard. The norm guard is on (3) unless set; on
// the exchange it checks the members' parts against the sum they agreed
// on, so a run that turns the digests off has it off.
void apply_data_plane_and_guard_defaults(v1::RunConfig& c) {
  v1::DataPlaneConfig& dp = *c.mutable_data_plane();
  // Policy "async" has no rounds: every contribution goes to the
  // coordinator, the parameter server.
  DCTRAIN_DEFAULT(
      dp, kind,
      c.step().policy() == v1::POLICY_ASYNC ? v1::DATA_PLANE_STAR : v1::DATA_PLANE_EXCHANGE);
  DCTRAIN_DEFAULT(dp, timeout_seconds, 10.0);
  if (!dp.has_rounds_per_step()) dp.set_rounds_per_step(2);
  if (!dp.has_check_sums()) dp.set_check_sums(true);
  DCTRAIN_DEFAULT(dp, round_deadline_multiple, 4.0);
  // Never above the timeout (a run that sets a timeout under 0.5 s).
  DCTRAIN_DEFAULT(dp, round_deadline_floor_seconds, std::min(0.5, dp.timeout_seconds()));

  v1::GuardConfig& g = *c.mutable_guard();
  if (!g.has_max_bad_steps_in_a_row()) g.set_max_bad_steps_in_a_row(3);
  DCTRAIN_DEFAULT(g, max_refused_peers, 64u);
  DCTRAIN_DEFAULT(g, peer_log_seconds, 10.0);
  if (!g.has_norm_multiple()) {
    const bool unchecked = dp.kind() == v1::DATA_PLANE_EXCHANGE && !dp.check_sums();
    g.set_norm_multiple(unchecked ? 0.0 : kDefaultNormMultiple);
  }
}

}  // namespace

void apply_defaults(v1::RunConfig& c) {
  if (c.name().empty()) c.set_name("run");
  DCTRAIN_DEFAULT(c, workers, 1u);
  apply_model_defaults(c);
  apply_dataset_defaults(c);
  apply_optimizer_defaults(c);
  apply_step_defaults(*c.mutable_step());
  apply_run_defaults(c);
  apply_data_plane_and_guard_defaults(c);
}

#undef DCTRAIN_DEFAULT

void finalize_run_config(v1::RunConfig& config) {
  apply_defaults(config);
  const std::vector<std::string> problems = validate(config);
  if (problems.empty()) return;
  std::string text = fmt::format("the run config has {} problem{}:", problems.size(),
                                 problems.size() == 1 ? "" : "s");
  for (const std::string& p : problems) text += "\n  - " + p;
  throw std::invalid_argument(text);
}

double parse_tau(const std::string& text) {
  if (text == "inf" || text == "infinity" || text == "Inf") {
    return std::numeric_limits<double>::infinity();
  }
  size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(value > 0.0)) {
    throw std::invalid_argument(fmt::format(
        "tau '{}' is not a threshold: give seconds > 0 (e.g. 0.25), 'inf' or 'auto'", text));
  }
  return value;
}

void apply_tau_option(const std::string& text, v1::StepConfig& step) {
  if (text == "auto") {
    step.set_tau_policy(v1::TAU_POLICY_AUTO);
    step.set_tau(std::numeric_limits<double>::infinity());
  } else {
    step.set_tau(parse_tau(text));
    step.set_tau_policy(v1::TAU_POLICY_FIXED);
    step.clear_auto_tau();
  }
  // The threshold is --tau's now: an older spelling of the policy that
  // named one too keeps only its shares.
  step.set_policy(shares_of(step.policy()));
}

std::string to_text(const v1::RunConfig& config) {
  return print_text_format(config);
}

bool requeue_enabled(const v1::StepConfig& step) {
  return !step.has_requeue() || step.requeue();
}

}  // namespace dctrain
