// A sweep file (proto/sweep.proto) expanded into its cases: each a base run
// config with the sweep's overrides and one value of every axis, named by its
// axes, validated before anything runs, with an expected run time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "proto/config.pb.h"
#include "proto/sweep.pb.h"

namespace dctrain {

// A tau policy of the sweep's `taus` axis.
struct TauPolicy {
  enum class Kind { kInfinity, kSeconds, kPercentile, kAuto };
  Kind kind = Kind::kInfinity;
  double value = 0.0;  // seconds, or the percentile (0, 100]
  std::string text;    // canonical: "inf", "0.05", "p90", "auto"
};

// "inf" / "infinity", "auto", "pNN" (0 < NN <= 100) or seconds > 0; throws
// std::invalid_argument saying what is accepted.
TauPolicy parse_tau_policy(const std::string& text);

struct SweepCase {
  v1::CaseInfo info;     // axes; tau_seconds is resolved when the case runs
  v1::RunConfig config;  // ready to run, but for a percentile tau
  TauPolicy tau;
  std::optional<size_t> baseline;  // index of the tau = inf case it compares with
  uint64_t expected_steps = 0;     // 0: unknown
  double expected_seconds = 0.0;
};

struct SweepPlan {
  std::string name;
  std::vector<SweepCase> cases;  // every baseline before the cases that need it
  std::string estimate_basis;    // how expected_seconds was made, in words
  // The sweep's `simulate`: every case runs through dctrain-simulate with
  // this model (its trace made absolute).
  std::optional<v1::SimulationModel> simulation;
};

// The dctrain-simulate options of `model` ("--sample-seconds", "0.002", ...):
// the fields it sets.
std::vector<std::string> simulation_arguments(const v1::SimulationModel& model);

// Parses sweep text (Protobuf text format); throws std::runtime_error with
// `origin`, line and column.
v1::Sweep parse_sweep(const std::string& text, const std::string& origin);

// Expands `sweep`, whose config paths are relative to `sweep_dir`, into its
// cases. Throws std::runtime_error listing every problem (unreadable or
// invalid configs, bad axis values, duplicate case names).
SweepPlan plan_sweep(const v1::Sweep& sweep, const std::filesystem::path& sweep_dir,
                     const std::string& default_name);

// parse_sweep + plan_sweep for the file at `path`.
SweepPlan load_sweep(const std::filesystem::path& path);

// "mnist-cnn_w4_dropcompute_tau-p90_requeue_s1"; the tau = inf baseline has
// no requeue part ("mnist-cnn_w4_dropcompute_tau-inf_s1"). A step policy of
// the sweep's policies axis goes before the tau part, '+' written '-'
// ("mnist-cnn_w4_straggler_rebalance-dropcompute_tau-auto_requeue_s1").
std::string case_name(const std::string& model, uint32_t workers, const std::string& delay,
                      const TauPolicy& tau, bool requeue, uint64_t seed,
                      const std::string& policy = "");

// "1h 02m", "4m 05s", "12 s".
std::string format_duration(double seconds);

}  // namespace dctrain
