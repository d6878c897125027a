// The step policy (step.policy): how a step is planned and when it closes.
// Defaults and checks live here so that run_config.cc only calls them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proto/config.pb.h"

namespace dctrain {

// Fills the policy's defaults: an unset policy is "sync"; backup_workers 1
// and the rebalance settings. The older spellings that named the threshold
// too ("dropcompute", "rebalance+dropcompute") become the policy of their
// shares when the step has a threshold (without one, policy_problems()
// names them).
void finalize_policy(v1::StepConfig& step);

// Whether the step has a compute threshold: a finite tau, or tau_policy
// "auto".
bool has_threshold(const v1::StepConfig& step);

// The policy of `policy`'s shares: "sync" for "dropcompute", "rebalance"
// for "rebalance+dropcompute", any other as it is.
v1::Policy shares_of(v1::Policy policy);

// What is wrong with the policy's settings against tau and the worker count
// (finalized `step`); empty when nothing is.
std::vector<std::string> policy_problems(const v1::StepConfig& step, uint32_t workers);

// The policy a word names ("rebalance+dropcompute"); nothing for another word.
std::optional<v1::Policy> parse_policy(const std::string& text);

// Whether the policy deals shares by measured speed.
bool speed_aware(v1::Policy policy);

}  // namespace dctrain
