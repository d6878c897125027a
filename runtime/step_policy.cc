#include "runtime/step_policy.h"

#include <fmt/format.h>

#include <cmath>

#include "runtime/text_format.h"

namespace dctrain {

std::optional<v1::Policy> parse_policy(const std::string& text) {
  const google::protobuf::EnumDescriptor& type = *v1::Policy_descriptor();
  for (int i = 0; i < type.value_count(); ++i) {
    const int number = type.value(i)->number();
    if (number != 0 && enum_word(type, number) == text) return static_cast<v1::Policy>(number);
  }
  return std::nullopt;
}

bool speed_aware(v1::Policy policy) {
  return shares_of(policy) == v1::POLICY_REBALANCE;
}

bool has_threshold(const v1::StepConfig& step) {
  return step.tau_policy() == v1::TAU_POLICY_AUTO || !std::isinf(step.tau());
}

v1::Policy shares_of(v1::Policy policy) {
  if (policy == v1::POLICY_DROPCOMPUTE) return v1::POLICY_SYNC;
  if (policy == v1::POLICY_REBALANCE_DROPCOMPUTE) return v1::POLICY_REBALANCE;
  return policy;
}

void finalize_policy(v1::StepConfig& step) {
  if (step.policy() == v1::POLICY_UNSET) step.set_policy(v1::POLICY_SYNC);
  if (has_threshold(step)) step.set_policy(shares_of(step.policy()));
  if (step.policy() == v1::POLICY_BACKUP && step.backup_workers() == 0) step.set_backup_workers(1);
  if (step.policy() == v1::POLICY_ASYNC && !step.has_max_staleness()) step.set_max_staleness(4);
  if (step.policy() == v1::POLICY_LOCAL_SGD) {
    if (step.local_steps() == 0) step.set_local_steps(4);
    v1::OptimizerConfig& outer = *step.mutable_outer_optimizer();
    if (outer.kind() == v1::OPTIMIZER_UNSET) outer.set_kind(v1::OPTIMIZER_SGD);
    if (outer.lr() == 0.0) outer.set_lr(1.0);
    // A constant rate, counted in syncs (local_sgd_problems refuses another).
    v1::LrSchedule& schedule = *outer.mutable_schedule();
    if (schedule.kind() == v1::SCHEDULE_UNSET) schedule.set_kind(v1::SCHEDULE_CONSTANT);
    if (schedule.clock() == v1::CLOCK_UNSET) schedule.set_clock(v1::CLOCK_UPDATES);
  }
  if (speed_aware(step.policy())) {
    v1::RebalanceConfig& r = *step.mutable_rebalance();
    if (r.window_steps() == 0) r.set_window_steps(8);
    if (!r.has_min_gain()) r.set_min_gain(0.1);
    if (r.probe_every_steps() == 0) r.set_probe_every_steps(20);
  }
}

namespace {

std::vector<std::string> local_sgd_problems(const v1::StepConfig& step) {
  std::vector<std::string> problems;
  const v1::OptimizerConfig& outer = step.outer_optimizer();
  if (!(outer.lr() > 0.0)) {
    problems.push_back(fmt::format(
        "step.outer_optimizer.lr is {}; use > 0 (1: plain model averaging, 0.7: DiLoCo)",
        outer.lr()));
  }
  if (outer.clip_norm() != 0.0 || outer.schedule().kind() != v1::SCHEDULE_CONSTANT) {
    problems.push_back(
        "step.outer_optimizer takes no clip_norm or schedule: clip and schedule the inner "
        "steps in `optimizer`");
  }
  if (outer.nesterov() && !(outer.momentum() > 0.0)) {
    problems.push_back("step.outer_optimizer.nesterov needs momentum > 0 (DiLoCo: 0.9)");
  }
  return problems;
}

}  // namespace

std::vector<std::string> policy_problems(const v1::StepConfig& step, uint32_t workers) {
  std::vector<std::string> problems;
  const v1::Policy policy = step.policy();
  const bool threshold = has_threshold(step);
  switch (policy) {
    case v1::POLICY_BACKUP:
      if (threshold) {
        problems.push_back(fmt::format(
            "step.policy 'backup' runs at tau = inf (the step closes without its slowest "
            "workers instead), but step.tau is {} (tau_policy '{}'): remove tau, or use policy "
            "'sync' or 'rebalance' with it",
            step.tau(), word(step.tau_policy())));
      }
      break;
    case v1::POLICY_DROPCOMPUTE:
    case v1::POLICY_REBALANCE_DROPCOMPUTE:
      // Left by finalize_policy() only without a threshold.
      problems.push_back(fmt::format(
          "step.policy '{}' needs a threshold: set step.tau (seconds) or tau_policy 'auto' "
          "(--tau auto), or use policy '{}' (the policy names the shares; tau the threshold)",
          word(policy), word(shares_of(policy))));
      break;
    case v1::POLICY_ASYNC:
      if (step.tau_policy() == v1::TAU_POLICY_AUTO) {
        problems.push_back(
            "step.policy 'async' has no step for the automatic threshold to time (each "
            "contribution is an update of its own): give a fixed step.tau, or none");
      }
      break;
    case v1::POLICY_LOCAL_SGD: {
      const std::vector<std::string> local = local_sgd_problems(step);
      problems.insert(problems.end(), local.begin(), local.end());
      break;
    }
    case v1::POLICY_SYNC:
    case v1::POLICY_REBALANCE:
    case v1::POLICY_UNSET:
    case v1::Policy_INT_MIN_SENTINEL_DO_NOT_USE_:
    case v1::Policy_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;  // the enum check names an unknown one
  }
  if (policy == v1::POLICY_BACKUP) {
    if (step.backup_workers() >= workers) {
      problems.push_back(fmt::format(
          "step.backup_workers is {} with {} workers: the step must wait for at least one "
          "contribution; use 1 to {}",
          step.backup_workers(), workers, workers > 1 ? workers - 1 : 1));
    }
  } else if (step.backup_workers() != 0) {
    problems.push_back(fmt::format(
        "step.backup_workers is set but step.policy is '{}': use policy 'backup'", word(policy)));
  }
  if (policy != v1::POLICY_ASYNC && step.has_max_staleness()) {
    problems.push_back(fmt::format(
        "step.max_staleness is set but step.policy is '{}': use policy 'async'", word(policy)));
  }
  if (policy != v1::POLICY_LOCAL_SGD && (step.local_steps() != 0 || step.has_outer_optimizer())) {
    problems.push_back(fmt::format(
        "step.local_steps and step.outer_optimizer are set but step.policy is '{}': use policy "
        "'local-sgd'",
        word(policy)));
  }
  if (speed_aware(policy)) {
    const v1::RebalanceConfig& r = step.rebalance();
    if (!(r.min_gain() >= 0.0))
      problems.push_back(fmt::format("step.rebalance.min_gain is {}; use >= 0", r.min_gain()));
  } else if (step.has_rebalance()) {
    problems.push_back(fmt::format("step.rebalance is set but step.policy is '{}': use 'rebalance'",
                                   word(policy)));
  }
  if (step.tau_policy() == v1::TAU_POLICY_AUTO) {
    const double m = step.auto_tau().max_drop_rate();
    if (!(m > 0.0 && m <= 1.0)) {
      problems.push_back(fmt::format(
          "step.auto_tau.max_drop_rate is {}; use a fraction in (0, 1] (e.g. 0.1; 1: no bound)",
          m));
    }
  }
  return problems;
}

}  // namespace dctrain
