// Runs a sweep's cases one after the other, each through dctrain-launch (or,
// for a simulated sweep, dctrain-simulate) into
// OUT/CASE_NAME, skipping cases whose summary.json already exists, resolving
// percentile taus from their baseline's measured compute times, and printing
// the case count and an ETA as it goes.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>

#include "tools/experiment/sweep.h"

namespace dctrain {

struct RunnerOptions {
  std::filesystem::path out_dir;  // one run folder per case below it
  std::filesystem::path bin_dir;  // where dctrain-launch and dctrain-simulate are
  std::string data_dir;           // passed to every process; empty: synthetic data only
  int threads = 1;                // compute threads per worker
  std::string only;               // run only cases whose name contains this (and their baselines)
  bool dry_run = false;           // list the cases and the expected time, run nothing
};

// Runs `plan`; progress goes to `out`. Returns 0 when every case finished,
// 1 when any failed, 130 when interrupted (SIGINT / SIGTERM, forwarded to the
// running case).
int run_sweep(const SweepPlan& plan, const RunnerOptions& options, std::FILE* out);

}  // namespace dctrain
