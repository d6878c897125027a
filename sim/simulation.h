// dctrain-simulate's engine: a run of the coordinator's own code (the
// Coordinator: membership, planner, ledger, threshold policy, step
// policies, records, run folder) against simulated workers, on a virtual
// clock driven by an event queue.
//
// Each simulated worker is the real worker session and trainer (the
// compute loop under tau, the injected delays of the run config's delay
// model, drops, requeues, heartbeats). Its compute side runs on a clock of
// its own that moves only when the trainer computes or sleeps a delay; the
// session takes the results at those times, and ticks every heartbeat.
// The model is a stand-in of one parameter whose micro-batch takes
// `sample_seconds` per sample on that clock, or a time resampled from a
// real run's trace: no gradient is computed, everything else runs as in a
// real run.
// Messages cost what the config's data plane would make them cost
// (sim/network.h: the star through the coordinator's link, or the
// exchange's rounds among the workers), the bytes those of the real
// model's gradient. Worker processes may die at a mean time between
// failures and restart under their names. The coordinator runs the star's
// code whatever the plane: the exchange's failed and redone rounds are
// not simulated.
#pragma once

#include <spdlog/logger.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "proto/config.pb.h"

namespace dctrain {

// What one message of an exchange round costs its sender, measured with
// bench/exchange_message_cost.sh on the reference machine (2 processes on
// 2 cores: the slope of the round time against the messages a member
// sends; docs/simulation.md).
inline constexpr double kMessageSecondsMeasured = 4.6e-6;

struct SimulationOptions {
  v1::RunConfig config;             // as read; finalized here (workers, tau already applied)
  std::filesystem::path run_dir;    // written like a real run's, plus simulation.json
  std::filesystem::path data_root;  // for a dataset with files: its size only
  double sample_seconds = 0.002;    // a worker's compute per sample, before delays
  // A real run's metrics.jsonl: micro-batch times resampled from it
  // (sim/compute_trace.h) in place of sample_seconds and the config's delays.
  std::filesystem::path trace;
  // With a trace: every message costs the traced run's time per message
  // (ComputeTrace::message_seconds) in place of latency + bytes / bandwidth.
  bool fit_network = false;
  double latency_seconds = 50e-6;  // per message (per hop of an exchange round)
  // Exchange: what one message of a round costs its sender besides the
  // latency (ZeroMQ's framing, the system calls, the wake-ups).
  double message_seconds = kMessageSecondsMeasured;
  double bandwidth_bytes = 1.25e9;  // per second, per link (10 Gbit/s), each way
  double tick_seconds = 0.005;      // the coordinator's clock work, as its loop's poll
  // Failures: each worker process dies after an exponential time of this
  // mean (its connection closes, as a killed process's does) and a new one
  // under its name says hello `restart_seconds` later. 0: none.
  double mttf_seconds = 0.0;
  double restart_seconds = 5.0;
  double progress_seconds = 2.0;    // wall seconds between progress lines (0: none)
};

struct SimulationResult {
  int exit_code = 0;  // the coordinator's (0: the run completed)
  uint64_t steps = 0;
  double virtual_seconds = 0.0;   // the run's length on the virtual clock
  double wall_seconds = 0.0;      // what simulating it took
  uint64_t events = 0;            // messages delivered
  uint64_t model_parameters = 0;  // of the real model, for message sizes
  uint64_t failures = 0;          // worker deaths (each followed by a restart)
};

// Runs the simulation to its end. Throws std::runtime_error for a config it
// cannot simulate (named in the message).
SimulationResult simulate(SimulationOptions options, std::shared_ptr<spdlog::logger> log);

}  // namespace dctrain
