// The run config's validation (runtime/run_config.h: validate): every
// problem of a defaulted config as a full sentence.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/run_config.h"
#include "runtime/step_policy.h"
#include "runtime/text_format.h"

namespace dctrain {

namespace {

// Whether a kind is set and one the enum has: a config built in code, or
// received from a peer, can hold any number.
template <typename Enum>
bool known(Enum value) {
  const google::protobuf::EnumDescriptor& type = *google::protobuf::GetEnumDescriptor<Enum>();
  return value != Enum{} && type.FindValueByNumber(static_cast<int>(value)) != nullptr;
}

template <typename Enum>
std::optional<std::string> kind_problem(const char* field, Enum value) {
  const google::protobuf::EnumDescriptor& type = *google::protobuf::GetEnumDescriptor<Enum>();
  if (known(value)) return std::nullopt;
  if (value == Enum{}) return fmt::format("{} is not set; use {}", field, allowed_words(type));
  return fmt::format("{} is {}, which is not a known value; use {}", field, static_cast<int>(value),
                     allowed_words(type));
}

// The problems found in a config, as validate() returns them.
class Problems {
 public:
  template <typename... Args>
  void add(fmt::format_string<Args...> format, Args&&... args) {
    list_.push_back(fmt::format(format, std::forward<Args>(args)...));
  }
  // An enum field holding a value this build does not know.
  template <typename Enum>
  void kind(const char* field, Enum value) {
    if (auto p = kind_problem(field, value)) list_.push_back(std::move(*p));
  }
  void add_all(std::vector<std::string> problems) {
    for (std::string& p : problems) list_.push_back(std::move(p));
  }
  std::vector<std::string> take() { return std::move(list_); }

 private:
  std::vector<std::string> list_;
};

void check_model(const v1::RunConfig& c, Problems& p) {
  const v1::ModelConfig& m = c.model();
  p.kind("model.name", m.name());
  if (m.num_classes() < 2)
    p.add("model.num_classes is {}; a classifier needs at least 2", m.num_classes());
  if (m.image_channels() < 0 || m.image_height() < 0 || m.image_width() < 0) {
    p.add("model.image_channels/height/width must be positive (or 0: from the dataset)");
  }
  if (m.dropout() < 0.0f || m.dropout() >= 1.0f)
    p.add("model.dropout is {}; use [0, 1)", m.dropout());
  const bool resnet = m.name() == v1::MODEL_RESNET, bert = m.name() == v1::MODEL_BERT;
  if (!resnet && (m.depth() != 0 || m.width() != 0)) {
    p.add(
        "model.depth and model.width size the \"resnet\" family; model '{}' is fixed (use "
        "name: \"resnet\" with depth: {})",
        word(m.name()), m.depth() != 0 ? m.depth() : 20u);
  }
  if (!bert && (m.layers() != 0 || m.hidden() != 0 || m.heads() != 0 || m.intermediate() != 0)) {
    p.add(
        "model.layers, hidden, heads and intermediate size the \"bert\" family; model '{}' "
        "is fixed (use name: \"bert\")",
        word(m.name()));
  }
  if (resnet && (m.depth() < 8 || (m.depth() - 2) % 6 != 0 || m.depth() > 1202)) {
    p.add(
        "model.depth is {}; a CIFAR ResNet has 6n+2 layers (20, 32, 44, 56, 110, ... up to "
        "1202)",
        m.depth());
  }
  if (resnet && (m.width() < 1 || m.width() > 1024))
    p.add("model.width is {}; use 1 to 1024 (16: the paper's)", m.width());
  if (bert && (m.layers() < 1 || m.layers() > 48))
    p.add("model.layers is {}; use 1 to 48", m.layers());
  if (bert &&
      (m.heads() < 1 || m.hidden() < 1 || m.hidden() % m.heads() != 0 || m.hidden() > 4096)) {
    p.add(
        "model.hidden {} with {} heads: the hidden size must be a multiple of the heads (and "
        "at most 4096)",
        m.hidden(), m.heads());
  }
  if (bert && (m.intermediate() < 1 || m.intermediate() > 16384))
    p.add("model.intermediate is {}; use 1 to 16384", m.intermediate());
}

void check_dataset(const v1::RunConfig& c, Problems& p) {
  const v1::ModelConfig& m = c.model();
  const v1::DatasetConfig& d = c.dataset();
  p.kind("dataset.kind", d.kind());
  auto check_relative = [&](const std::string& field, const std::string& path) {
    if (!path.empty() && (path.front() == '/' || path.find("..") != std::string::npos)) {
      p.add("dataset.{} '{}' must be relative to the worker's --data-dir root, without '..'", field,
            path);
    }
  };
  for (const std::string& f : d.train_files()) check_relative("train_files", f);
  for (const std::string& f : d.test_files()) check_relative("test_files", f);
  check_relative("vocab", d.vocab());
  check_relative("corpus", d.corpus());
  if (reads_idx_files(d.kind()) && ((d.train_files_size() != 0 && d.train_files_size() != 2) ||
                                    (d.test_files_size() != 0 && d.test_files_size() != 2))) {
    p.add("dataset.train_files / test_files for {} name two files each (images, labels)",
          word(d.kind()));
  }
  if (d.masked_per_sequence() == 0 || d.masked_per_sequence() > 126) {
    p.add("dataset.masked_per_sequence is {}; use 1..126", d.masked_per_sequence());
  }
  const std::optional<bool> text = holds_text(d.kind());
  if (text.has_value() && known(m.name()) && *text != takes_text(m.name())) {
    p.add(
        "model '{}' cannot train on dataset kind '{}': bert-tiny takes text-mlm, the "
        "classifiers take images",
        word(m.name()), word(d.kind()));
  }
}

void check_optimizer(const v1::RunConfig& c, Problems& p) {
  const v1::OptimizerConfig& o = c.optimizer();
  p.kind("optimizer.kind", o.kind());
  if (!(o.lr() > 0.0) || !std::isfinite(o.lr()))
    p.add("optimizer.lr is {}; set a positive learning rate", o.lr());
  if (o.momentum() < 0.0 || o.momentum() >= 1.0)
    p.add("optimizer.momentum is {}; use [0, 1)", o.momentum());
  if (o.weight_decay() < 0.0) p.add("optimizer.weight_decay is {}; use >= 0", o.weight_decay());
  if (o.beta1() < 0.0 || o.beta1() >= 1.0 || o.beta2() < 0.0 || o.beta2() >= 1.0) {
    p.add("optimizer.beta1/beta2 are {}/{}; each must lie in [0, 1)", o.beta1(), o.beta2());
  }
  if (o.eps() <= 0.0) p.add("optimizer.eps is {}; use > 0", o.eps());
  if (o.clip_norm() < 0.0)
    p.add("optimizer.clip_norm is {}; use > 0, or 0 for no clipping", o.clip_norm());
  const v1::LrSchedule& lr = o.schedule();
  p.kind("optimizer.schedule.kind", lr.kind());
  p.kind("optimizer.schedule.clock", lr.clock());
  switch (lr.kind()) {
    case v1::SCHEDULE_STEP:
      if (lr.step_every() == 0 || !(lr.gamma() > 0.0)) {
        p.add("optimizer.schedule 'step' needs step_every > 0 and gamma > 0");
      }
      break;
    case v1::SCHEDULE_COSINE:
      if (lr.total_steps() == 0 && c.stop().max_steps() == 0 && c.stop().max_epochs() == 0.0) {
        p.add(
            "optimizer.schedule 'cosine' needs total_steps, or a stop.max_steps / "
            "stop.max_epochs budget to decay over");
      }
      break;
    case v1::SCHEDULE_CONSTANT:
    case v1::SCHEDULE_UNSET:
    case v1::ScheduleKind_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::ScheduleKind_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
}

void check_step(const v1::RunConfig& c, Problems& p) {
  const v1::StepConfig& s = c.step();
  if (s.global_batch() == 0 || s.micro_batch() == 0) {
    p.add("step.global_batch and step.micro_batch must both be set (e.g. 64 and 16)");
  } else if (s.global_batch() % s.micro_batch() != 0) {
    p.add("step.micro_batch {} does not divide step.global_batch {}", s.micro_batch(),
          s.global_batch());
  } else if (s.global_batch() / s.micro_batch() < c.workers()) {
    p.add(
        "step.global_batch {} / micro_batch {} gives {} micro-batches per step, fewer than the "
        "{} workers; raise global_batch (dctrain-simulate: --worker-batch B sets it to B x "
        "workers), or lower micro_batch or workers",
        s.global_batch(), s.micro_batch(), s.global_batch() / s.micro_batch(), c.workers());
  }
  if (std::isnan(s.tau()) || s.tau() <= 0.0)
    p.add("step.tau is {}; use seconds > 0 or inf", s.tau());
  p.kind("step.tau_policy", s.tau_policy());
  if (s.tau_policy() == v1::TAU_POLICY_AUTO) {
    const v1::AutoTauConfig& a = s.auto_tau();
    if (!std::isinf(s.tau())) {
      p.add(
          "step.tau is {} but step.tau_policy is 'auto', which chooses tau itself: remove "
          "step.tau (or use tau_policy 'fixed')",
          s.tau());
    }
    if (a.warmup_steps() == 0) p.add("step.auto_tau.warmup_steps is 0; use >= 1 (e.g. 10)");
    if (a.window_steps() == 0) p.add("step.auto_tau.window_steps is 0; use >= 1 (e.g. 50)");
    if (a.grid_points() < 2)
      p.add("step.auto_tau.grid_points is {}; use >= 2 (e.g. 200)", a.grid_points());
    if (!(a.sure_gain() >= 0.0))
      p.add("step.auto_tau.sure_gain is {}; use >= 0 (e.g. 0.15; 0: no trials)", a.sure_gain());
    if (!(a.min_change() >= 0.0) || !(a.min_gain() >= 0.0)) {
      p.add("step.auto_tau.min_change ({}) and min_gain ({}) must be >= 0", a.min_change(),
            a.min_gain());
    }
  } else if (s.has_auto_tau()) {
    p.add(
        "step.auto_tau is set but step.tau_policy is '{}': set tau_policy: \"auto\" (or "
        "--tau auto) to use it",
        word(s.tau_policy()));
  }
  p.kind("step.normalize", s.normalize());
  p.kind("step.policy", s.policy());
  p.add_all(policy_problems(s, c.workers()));
}

void check_delay(const v1::RunConfig& c, Problems& p) {
  const v1::DelayConfig& delay = c.delay();
  p.kind("delay.kind", delay.kind());
  if (delay.seconds() < 0.0 || delay.stall_seconds() < 0.0 || delay.factor() < 0.0) {
    p.add("delay.seconds, delay.stall_seconds and delay.factor must be >= 0");
  }
  switch (delay.kind()) {
    case v1::DELAY_CONSTANT:
    case v1::DELAY_EXPONENTIAL:
      if (!(delay.seconds() > 0.0)) {
        p.add("delay '{}' needs delay.seconds > 0", word(delay.kind()));
      }
      break;
    case v1::DELAY_NONE:
    case v1::DELAY_DROPCOMPUTE:
    case v1::DELAY_BIMODAL:
    case v1::DELAY_UNSET:
    case v1::DelayKind_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::DelayKind_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  if (delay.probability() < 0.0 || delay.probability() > 1.0) {
    p.add("delay.probability is {}; use [0, 1]", delay.probability());
  }
  if (delay.slowdown() < 1.0)
    p.add("delay.slowdown is {}; use >= 1 (1: no slowdown)", delay.slowdown());
  for (uint32_t w : delay.slow_workers()) {
    if (w >= c.workers())
      p.add("delay.slow_workers names rank {}, but ranks run 0..{}", w, c.workers() - 1);
  }
}

// Real slowness (applied by dctrain-launch): each entry's kind with what
// it needs; workers by their index on the launching host.
void check_slowness(const v1::RunConfig& c, Problems& p) {
  for (const v1::SlownessConfig& s : c.slowness()) {
    p.kind("slowness.kind", s.kind());
    if (s.kind() == v1::SLOWNESS_CPU_QUOTA && !(s.cores() >= 0.05)) {
      p.add("slowness 'cpu-quota' needs cores >= 0.05 (0.5: half of one core); it is {}",
            s.cores());
    }
    if (s.kind() == v1::SLOWNESS_CO_LOCATED_LOAD &&
        (s.quiet_seconds() < 0.0 || (s.quiet_seconds() > 0.0 && !(s.busy_seconds() > 0.0)))) {
      p.add(
          "slowness 'co-located-load' needs quiet_seconds >= 0 and, with quiet_seconds, "
          "busy_seconds > 0 (bursts of busy_seconds every busy + quiet seconds)");
    }
    if (s.kind() == v1::SLOWNESS_SLOW_LINK &&
        (s.delay_seconds() < 0.0 || s.rate_bytes() < 0.0 ||
         !(s.delay_seconds() > 0.0 || s.rate_bytes() > 0.0))) {
      p.add("slowness 'slow-link' needs delay_seconds > 0 or rate_bytes > 0 (neither negative)");
    }
    for (uint32_t w : s.workers()) {
      if (w >= c.workers())
        p.add("slowness names worker {}, but workers run 0..{}", w, c.workers() - 1);
    }
  }
}

void check_liveness_and_guard(const v1::RunConfig& c, Problems& p) {
  const v1::LivenessConfig& l = c.liveness();
  if (l.heartbeat_seconds() <= 0.0 || l.silence_seconds() <= l.heartbeat_seconds()) {
    p.add("liveness.silence_seconds ({}) must exceed liveness.heartbeat_seconds ({}) > 0",
          l.silence_seconds(), l.heartbeat_seconds());
  }
  if (l.grace_seconds() <= 0.0 || l.join_timeout_seconds() <= 0.0) {
    p.add("liveness.grace_seconds and liveness.join_timeout_seconds must be > 0");
  }
  if (l.min_workers() > c.workers()) {
    p.add("liveness.min_workers ({}) exceeds workers ({}); use at most workers, or 0 for all",
          l.min_workers(), c.workers());
  }
  const v1::GuardConfig& guard = c.guard();
  if (guard.norm_multiple() != 0.0 && !(guard.norm_multiple() > 1.0)) {
    p.add("guard.norm_multiple is {}; use a multiple of the median > 1 (e.g. 3), or 0 for off",
          guard.norm_multiple());
  }
  if (guard.peer_log_seconds() < 0.0) {
    p.add("guard.peer_log_seconds is {}; use seconds >= 0 (0: 10)", guard.peer_log_seconds());
  }
}

void check_data_plane(const v1::RunConfig& c, Problems& p) {
  p.kind("data_plane.kind", c.data_plane().kind());
  if (!(c.data_plane().timeout_seconds() > 0.0)) {
    p.add("data_plane.timeout_seconds is {}; use seconds > 0 (e.g. 10)",
          c.data_plane().timeout_seconds());
  }
  if (!(c.data_plane().round_deadline_multiple() >= 1.0)) {
    p.add(
        "data_plane.round_deadline_multiple is {}; use a multiple >= 1 of the recent rounds' "
        "95th percentile (e.g. 4)",
        c.data_plane().round_deadline_multiple());
  }
  if (!(c.data_plane().round_deadline_floor_seconds() > 0.0) ||
      (c.data_plane().timeout_seconds() > 0.0 &&
       c.data_plane().round_deadline_floor_seconds() > c.data_plane().timeout_seconds())) {
    p.add(
        "data_plane.round_deadline_floor_seconds is {}; use seconds > 0 and at most "
        "data_plane.timeout_seconds ({})",
        c.data_plane().round_deadline_floor_seconds(), c.data_plane().timeout_seconds());
  }
  if (c.data_plane().rounds_per_step() < 1) {
    p.add("data_plane.rounds_per_step is 0; use 1 (never redo a failed round) or more");
  }
  if (const std::string& d = c.data_plane().sum_digest();
      !d.empty() && d != "gmac" && d != "sha256" && d != "blake2b") {
    p.add(
        "data_plane.sum_digest is '{}'; use \"gmac\", \"sha256\", \"blake2b\" or leave it unset "
        "(chosen "
        "per round from what the members' CPUs run fastest)",
        d);
  }
  // What the exchange cannot do: its norm guard estimates the members'
  // norms against the sum they agreed on (coordinator/planes/round_check.h), so it
  // needs the digests; and the members' round waits for every member.
  if (c.data_plane().kind() == v1::DATA_PLANE_EXCHANGE) {
    if (c.guard().has_norm_multiple() && c.guard().norm_multiple() != 0.0 &&
        !c.data_plane().check_sums()) {
      p.add(
          "guard.norm_multiple on the data plane 'exchange' checks each member's part against "
          "the sum the members agree on, which needs data_plane.check_sums: leave check_sums on "
          "or set guard.norm_multiple to 0 (off)");
    }
    if (c.step().policy() == v1::POLICY_ASYNC) {
      p.add(
          "step.policy 'async' sends every contribution to the coordinator, the parameter "
          "server; it has no exchange rounds: use data_plane {{ kind: \"star\" }} (the default "
          "under 'async')");
    }
    if (c.step().policy() == v1::POLICY_BACKUP) {
      p.add(
          "step.policy 'backup' closes a step without its slowest workers, but an exchange round "
          "needs every member: use data_plane {{ kind: \"star\" }} with 'backup'");
    }
  }
}

void check_stop(const v1::RunConfig& c, Problems& p) {
  const v1::StopConfig& stop = c.stop();
  if (stop.target_accuracy() < 0.0 || stop.target_accuracy() > 1.0) {
    p.add("stop.target_accuracy is {}; use a fraction in [0, 1] (0: none)", stop.target_accuracy());
  }
  if (stop.max_epochs() < 0.0 || stop.max_wall_seconds() < 0.0) p.add("stop limits must be >= 0");
  if (stop.max_epochs() == 0.0 && stop.max_steps() == 0 && stop.max_wall_seconds() == 0.0 &&
      stop.target_accuracy() == 0.0) {
    p.add(
        "no stop criterion: set stop.max_steps, stop.max_epochs, stop.max_wall_seconds or "
        "stop.target_accuracy");
  }
  if (c.progress_seconds() <= 0.0) p.add("progress_seconds must be > 0");
}

}  // namespace

std::vector<std::string> validate(const v1::RunConfig& c) {
  Problems p;
  if (c.workers() == 0) p.add("workers is 0: set 'workers: N' (N >= 1) or pass --workers N");
  check_model(c, p);
  check_dataset(c, p);
  check_optimizer(c, p);
  check_step(c, p);
  check_delay(c, p);
  check_slowness(c, p);
  check_liveness_and_guard(c, p);
  check_data_plane(c, p);
  check_stop(c, p);
  return p.take();
}

}  // namespace dctrain
