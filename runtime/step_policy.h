// The step policy (step.policy): how a step is planned and when it closes.
// Defaults and checks live here so that run_config.cc only calls them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proto/config.pb.h"

namespace dctrain {

// Fills the policy's defaults: an unset policy is "dropcompute" when the
// step has a finite or automatic tau, else "sync" (what configs written
// before the field meant); backup_workers 1 and the rebalance settings.
void finalize_policy(v1::StepConfig& step);

// What is wrong with the policy's settings against tau and the worker count
// (finalized `step`); empty when nothing is.
std::vector<std::string> policy_problems(const v1::StepConfig& step, uint32_t workers);

// The policy a word names ("rebalance+dropcompute"); nothing for another word.
std::optional<v1::Policy> parse_policy(const std::string& text);

// Whether the policy deals shares by measured speed.
bool speed_aware(v1::Policy policy);
// Whether the policy uses a compute threshold tau.
bool uses_tau(v1::Policy policy);

}  // namespace dctrain
